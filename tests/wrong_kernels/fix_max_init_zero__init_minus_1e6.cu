// WRONG (for the grader's tests): the state starts at -1e6 instead of -inf: rows below -1e6 divide by 0.
// fix_max_init_zero — solution: the online softmax with its one bug fixed. The bug's symptom: rows of large negative logits give NaN.
// (see the starter, exercises/starters/). Graded by kernel_exercises.grade("fix_max_init_zero").
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

struct State { float m, l; };

__device__ __forceinline__ State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    const float base = m == NEG_INF ? 0.0f : m;   // all -inf so far: re-base on 0, not -inf (-inf - -inf is NaN);
    return {m, a.l * expf(a.m - base) + b.l * expf(b.m - base)};   // a NaN input still makes l NaN
}

extern "C" __global__ void fix_max_init_zero(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                          long long x_row_stride, long long y_row_stride) {
    __shared__ State scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;
    State s = {-1e6f, 0.0f};
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
