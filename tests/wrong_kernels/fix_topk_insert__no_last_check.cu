// DELIBERATELY WRONG (no_last_check): insert() never asks whether the new pair beats the last one
// tests/test_kernel_exercises.py asserts the grader rejects it.
// fix_topk_insert — made from the solution: the warp-per-row softmax + top-k with its one bug fixed. The bug's symptom:
// columns repeated, and some of the row's best missing.
// (see the starter, exercises/starters/). Graded by kernel_exercises.grade("fix_topk_insert").
//
// One warp per row. Each lane reads its strided slice once, folding it into the online state
// (m, l) and into a list of its K_MAX best (value, column) pairs, best first. The warp then merges
// the 32 states (a butterfly) and picks the row's k best pairs in k rounds: every lane offers the
// head of its list, a butterfly finds the best offer, and the lane that made it moves to its next.
// Order, as torch.topk and the book's kernels: NaN first, then the larger value, then the lower column.
// Writes probs[row * k + r] = e^(v_r - m) / l and columns[row * k + r] for r < k <= K_MAX.
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)
#define K_MAX 4
#define NO_COLUMN 0x7fffffff           // an empty slot: loses to every element, even -inf

struct State { float m, l; };
struct Pair { float v; int c; };

__device__ __forceinline__ State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    const float base = m == NEG_INF ? 0.0f : m;   // all -inf so far: re-base on 0, not -inf (-inf - -inf is NaN);
    return {m, a.l * expf(a.m - base) + b.l * expf(b.m - base)};   // a NaN input still makes l NaN
}

// Is a ahead of b? NaN first, then the larger value; equal values (and two NaN): the lower column.
__device__ __forceinline__ bool ahead(Pair a, Pair b) {
    const bool a_nan = isnan(a.v), b_nan = isnan(b.v);
    if (a_nan != b_nan) return a_nan;
    if (!a_nan && a.v != b.v) return a.v > b.v;
    return a.c < b.c;
}

// Put p into the list, kept best first; the last pair falls off.
__device__ __forceinline__ void insert(Pair (&list)[K_MAX], Pair p) {
    int i = K_MAX - 1;                                                   // WRONG: no check that p beats the last pair
    for (; i > 0 && ahead(p, list[i - 1]); --i) list[i] = list[i - 1];   // shift the worse ones down
    list[i] = p;                                                         // a worse p overwrites the 4th best
}

extern "C" __global__ void fix_topk_insert(const float* __restrict__ x, float* __restrict__ probs,
                                         long long* __restrict__ columns, int n_cols, int k, long long x_row_stride) {
    const int lane = threadIdx.x;
    const float* row_x = x + blockIdx.x * x_row_stride;
    State s = {NEG_INF, 0.0f};
    Pair list[K_MAX];
    for (int i = 0; i < K_MAX; ++i) list[i] = {NEG_INF, NO_COLUMN};
    for (int j = lane; j < n_cols; j += 32) {
        const float v = row_x[j];
        s = combine(s, {v, 1.0f});
        insert(list, {v, j});
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        s = combine(s, {__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.l, offset)});
    const float inv_l = 1.0f / s.l;
    int head = 0;
    for (int r = 0; r < k; ++r) {
        const Pair mine = head < K_MAX ? list[head] : Pair{NEG_INF, NO_COLUMN};
        Pair best = mine;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const Pair other = {__shfl_xor_sync(0xffffffffu, best.v, offset), __shfl_xor_sync(0xffffffffu, best.c, offset)};
            if (ahead(other, best)) best = other;
        }
        if (mine.c == best.c) ++head;                  // a column is in one lane's list only
        if (lane == 0) {
            probs[blockIdx.x * k + r] = expf(best.v - s.m) * inv_l;
            columns[blockIdx.x * k + r] = best.c;
        }
    }
}
