// WRONG (for the grader's tests): the three-pass kernel submitted as the online one: right values, but it
// reads the row three times where the exercise asks for two passes.
// three_pass_softmax (solution) — one block of 256 threads per row, three passes over the row:
// the maximum, the sum of e^(x - m), then y = e^(x - m) / sum. It reads the row three times and
// writes it once: 16 bytes per fp32 element against the ideal 8 (a row that stays in L2 between
// passes is read from DRAM once).
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

// The block's maximum (is_max) or sum of one value per thread, returned to every thread: a butterfly
// in each warp, one value per warp through shared memory, then every warp butterflies the warps' values.
__device__ float block_reduce(float v, bool is_max, float* scratch) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : (is_max ? NEG_INF : 0.0f);
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();   // every warp has read scratch before the next reduction writes it
    return v;
}

extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                              long long x_row_stride, long long y_row_stride) {
    __shared__ float scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;
    float m = NEG_INF;                                               // pass 1: the maximum
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) m = fmaxf(m, row_x[j]);
    m = block_reduce(m, true, scratch);
    float sum = 0.0f;                                                // pass 2: the sum, re-based on m
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) sum += expf(row_x[j] - m);
    sum = block_reduce(sum, false, scratch);
    const float inv_sum = 1.0f / sum;                                // pass 3: the output
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) row_y[j] = expf(row_x[j] - m) * inv_sum;
}
