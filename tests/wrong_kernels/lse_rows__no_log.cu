// DELIBERATELY WRONG (no_log): writes m + l instead of m + log l
// tests/test_kernel_exercises.py asserts the grader rejects it.
// lse_rows — made from the solution: one block of 256 threads per row: the online state (m, l) of the row as in
// chapter 03, then lse = m + log l, one float per row. The row is read once and nothing is
// written but the LSE: 4 bytes per fp32 element, the ideal. A row of all -inf gives -inf; a row
// holding NaN or +inf gives NaN (l is NaN there).
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

struct State { float m, l; };

__device__ __forceinline__ State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    const float base = m == NEG_INF ? 0.0f : m;   // all -inf so far: re-base on 0, not -inf (-inf - -inf is NaN);
    return {m, a.l * expf(a.m - base) + b.l * expf(b.m - base)};   // a NaN input still makes l NaN
}

extern "C" __global__ void lse_rows(const float* __restrict__ x, float* __restrict__ lse, int n_cols,
                                    long long x_row_stride) {
    __shared__ State scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
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
        if (lane == 0) lse[blockIdx.x] = s.m == NEG_INF ? NEG_INF : s.m + s.l;   // log 0 would be -inf too
    }
}
