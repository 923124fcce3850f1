// softmax_01_safe — the safe softmax: subtract the row maximum first, in three passes.
//
// Changed from softmax_00_naive: a first pass finds m = max_j x_j, and every
//               exponent becomes e^(x_i - m) <= 1, so nothing overflows.
//               Each thread reads its columns in chunks of 16 (thread_fold.cuh), in both
//               passes that reduce: the maximum (exact in any order) and the sum, where each
//               chunk adds into a fresh partial sum and the chunks' sums merge pairwise: a
//               sum passes through at most 16 + log2(N / 4096) additions before the block's
//               tree, where one running sum would take N / 256 (the book's accuracy rule fails
//               on long peaked rows without it; -DTHREAD_FOLD_SEQUENTIAL=1 builds that schedule).
// Launch:       grid = (n_rows), block = (256), at most 64 registers (__launch_bounds__(256, 4):
//               4 blocks share an SM): a whole chunk's 16 loads are held in registers, so all
//               16 are in flight before its first push (behind 32 registers the compiler put
//               one load before each push, a memory latency per element); static shared memory 32 floats.
// Traffic:      3 reads + 1 write per element (16 B for fp32) vs the ideal 8 B.
// Limits:       fp32 only; 1 <= n_cols <= 2^31 - 2^16; rows may be strided (unit column stride).
//               A row of all -inf gives NaN (e^(-inf - -inf)), as torch.softmax does.
#include "numeric.cuh"
#include "thread_fold.cuh"

extern "C" __global__ void __launch_bounds__(256, 4)
softmax_01_safe(const float* __restrict__ x, float* __restrict__ y,
                int n_cols, long long x_row_stride, long long y_row_stride) {
    __shared__ float scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;

    float m = thread_fold(  // pass 1: the maximum, 16 loads in flight per thread as in pass 2
        n_cols, neg_inf(), [&](int i) { return row_x[i]; }, [](float& top, float v) { top = fmaxf(top, v); },
        [](float a, float b) { return fmaxf(a, b); });
    m = block_max(m, scratch);

    float sum = thread_fold(  // pass 2: the denominator, re-based on m
        n_cols, 0.0f, [&](int i) { return row_x[i]; }, [&](float& partial, float v) { partial += expf(v - m); },
        [](float a, float b) { return a + b; });
    sum = block_sum(sum, scratch);

    for (int i = threadIdx.x; i < n_cols; i += blockDim.x)  // pass 3: the output
        row_y[i] = expf(row_x[i] - m) / sum;
}
