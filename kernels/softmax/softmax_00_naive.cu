// softmax_00_naive — softmax straight from the definition, no max subtraction.
//
// What it is:   y_i = e^(x_i) / sum_j e^(x_j). Deliberately unsafe: e^x overflows
//               float32 once x > ln(FLT_MAX) ~ 88.72, the sum becomes +inf, and the
//               row comes out as inf/inf = NaN (or 0 for the smaller elements).
// Launch:       grid = (n_rows), block = (256), static shared memory 32 floats.
//               One block per row; thread t handles columns t, t + 256, t + 512, ...
// Traffic:      2 reads + 1 write per element (12 B for fp32) vs the ideal 1 + 1 (8 B).
// Limits:       fp32 only; 1 <= n_cols <= 2^31 - 2^16; rows may be strided (unit column stride).
#include "numeric.cuh"

extern "C" __global__ void softmax_00_naive(const float* __restrict__ x, float* __restrict__ y,
                                            int n_cols, long long x_row_stride,
                                            long long y_row_stride) {
    __shared__ float scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;

    float sum = 0.0f;  // pass 1: the denominator
    for (int i = threadIdx.x; i < n_cols; i += blockDim.x) sum += expf(row_x[i]);
    sum = block_sum(sum, scratch);

    for (int i = threadIdx.x; i < n_cols; i += blockDim.x)  // pass 2: the output
        row_y[i] = expf(row_x[i]) / sum;
}
