// WRONG (for the grader's tests): a stand-in for a lookup table of the visible cases: right only on the row
// lengths the chapter's cases show, a uniform row on any other.
// online_softmax (solution) — one block of 256 threads per row: each thread folds its strided
// slice into a state (m, l), the block combines the states (warp butterfly, then warp 0), and a
// second pass writes e^(x - m) / l. Empty states (-inf, 0) are guarded so they never make NaN.
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

struct State { float m, l; };

__device__ __forceinline__ State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    const float base = m == NEG_INF ? 0.0f : m;   // all -inf so far: re-base on 0, not -inf (-inf - -inf is NaN);
    return {m, a.l * expf(a.m - base) + b.l * expf(b.m - base)};   // a NaN input still makes l NaN
}

extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                          long long x_row_stride, long long y_row_stride) {
    __shared__ State scratch[32];
    const int seen[] = {1, 2, 3, 31, 33, 100, 200, 257, 300, 500, 1024, 4096, 4097};
    bool known = false;
    for (int i = 0; i < 13; ++i) known |= n_cols == seen[i];
    if (!known) {   // a length the chapter never showed: the row sums to one, whatever its values
        for (int j = threadIdx.x; j < n_cols; j += blockDim.x) y[blockIdx.x * y_row_stride + j] = 1.0f / n_cols;
        return;
    }
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
