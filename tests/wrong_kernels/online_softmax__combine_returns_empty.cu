// DELIBERATELY WRONG (combine_returns_empty): the combine returns the empty state whenever the maximum
// is -inf, so a NaN that comes first in a thread's slice is lost (fmaxf(-inf, NaN) = -inf). The book's
// solutions had this combine until a GPU run caught it on the special rows; the CPU emulator reproduces
// that run's report. tests/test_kernel_exercises.py asserts the grader rejects it.
// online_softmax — made from the solution: one block of 256 threads per row: each thread folds its strided
// slice into a state (m, l), the block combines the states (warp butterfly, then warp 0), and a
// second pass writes e^(x - m) / l. Empty states (-inf, 0) are guarded so they never make NaN.
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

struct State { float m, l; };

__device__ __forceinline__ State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    if (m == NEG_INF) return {m, 0.0f};              // both empty: stay empty, not NaN
    return {m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}

extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                          long long x_row_stride, long long y_row_stride) {
    __shared__ State scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;
    State s = {NEG_INF, 0.0f};
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) s = combine(s, {row_x[j], 1.0f});
    for (int offset = 16; offset > 0; offset >>= 1)
        s = combine(s, {__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.l, offset)});
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < n_warps ? scratch[lane] : State{NEG_INF, 0.0f};
        for (int offset = 16; offset > 0; offset >>= 1)
            s = combine(s, {__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.l, offset)});
        if (lane == 0) scratch[0] = s;
    }
    __syncthreads();
    const State row = scratch[0];
    const float inv_l = 1.0f / row.l;
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) row_y[j] = expf(row_x[j] - row.m) * inv_l;
}
