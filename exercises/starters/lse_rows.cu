// lse_rows — your kernel. One block of 256 threads per row of x (row i starts at x + i * x_row_stride);
// write the row's log-sum-exp, log sum_j e^(x_j), to lse[i]: the online state (m, l) of the row,
// as in chapter 03, then m + log l. Nothing else is written: the row is read once.
// A row of all -inf gives -inf; a row holding NaN or +inf gives NaN; logits near +-1000 must
// neither overflow nor underflow.
// Grade it: kernel_exercises.grade("lse_rows").
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
    // TODO: your kernel
}
