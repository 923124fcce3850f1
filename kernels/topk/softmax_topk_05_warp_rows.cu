// softmax_topk_05_warp_rows — fused softmax + top-k for short rows (MoE gating: 8 to 1024
// experts, k up to 8): one warp per row, 8 rows per block, no shared memory, no barrier.
//
// Changed from softmax_topk_04_online_fused: a 256-thread block per row leaves most threads
//               with one or two elements of a 256-element row and pays block-wide barriers
//               for its states and its merge of lists. Here one warp owns a row: each lane folds its
//               strided slice (columns lane, lane + 32, ...) into its (m, l) and a register list
//               of K, the warp combines the states with the butterfly of softmax_02
//               (online_warp_reduce), and k rounds of warp_best pick the row's k best — a
//               round is 5 shuffle steps and no barrier; the winning lane pops its list head.
//               Lane i keeps the i-th winner and lanes 0 .. k-1 write the probabilities and
//               columns side by side (coalesced).
// Launch:       grid = (ceil(n_rows / 8)), block = (256): warp w of block b takes row 8 b + w.
// Traffic:      1 read per element + 12 B per kept (value, column) pair; the ideal is the read.
// Helpers:      the order, TopList and warp_best are in common/top_list.cuh.
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_05_warp_rows_<tag>_k<K>,
//               K = 1, 2, 4, 8); 1 <= k <= K <= 8, k <= n_cols <= 1024 (the list of K per
//               lane holds at most 32 elements of the row); rows strided, scalar loads.
#include "online_rows.cuh"
#include "top_list.cuh"
#include "topk_build.cuh"

#define ROWS_PER_BLOCK 8

template <class Row, int K>
__device__ __forceinline__ void softmax_topk_warp_row(const typename Row::Elem* __restrict__ x,
                                                      typename Row::Elem* __restrict__ probs,
                                                      long long* __restrict__ columns, float* __restrict__ lse,
                                                      int n_rows, int n_cols, long long x_row_stride, int k,
                                                      int renormalize) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= n_rows) return;   // a whole warp leaves: no barrier and no shuffle of other warps follow
    const typename Row::Elem* row_x = x + row * x_row_stride;

    OnlineState s = online_identity();
    TopList<K> list;
    list.clear();
    for (int j = lane; j < n_cols; j += 32) {
        const float v = Row::load1(row_x + j);
        online_push(s, v);
        list.push(v, j);
    }
    const OnlineState stats = online_warp_reduce(s);   // every lane holds the row's (m, l)

    Candidate mine{neg_inf(), -1};                       // lane i keeps the i-th winner
    for (int round = 0; round < k; ++round) {
        const Candidate best = warp_best({list.value[0], list.column[0]});
        if (best.column == list.column[0] && list.holds(0)) list.pop();   // columns are unique
        if (lane == round) mine = best;
    }
    const float base = online_base(stats.m);
    const float e = lane < k ? expf(mine.value - base) : 0.0f;
    float total = e;                                     // the sum of the k kept, for renormalize
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
    if (lane < k) {
        probs[row * k + lane] = Row::from_float(e * (renormalize ? 1.0f / total : 1.0f / stats.l));
        columns[row * k + lane] = mine.column;
    }
    if (lane == 0 && lse != nullptr) lse[row] = stats.m + logf(stats.l);
}

#define SOFTMAX_TOPK_05(TAG, ROW, K)                                                                     \
    extern "C" __global__ void __launch_bounds__(256) softmax_topk_05_warp_rows_##TAG##_k##K(           \
        const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ probs, long long* __restrict__ columns, \
        float* __restrict__ lse, int n_rows, int n_cols, long long x_row_stride, int k, int renormalize) { \
        if constexpr (topk_builds<ROW, K>())                                                             \
            softmax_topk_warp_row<ROW, K>(x, probs, columns, lse, n_rows, n_cols, x_row_stride, k, renormalize); \
    }
#define SOFTMAX_TOPK_05_ALL_K(TAG, ROW) \
    SOFTMAX_TOPK_05(TAG, ROW, 1) SOFTMAX_TOPK_05(TAG, ROW, 2) SOFTMAX_TOPK_05(TAG, ROW, 4) SOFTMAX_TOPK_05(TAG, ROW, 8)

SOFTMAX_TOPK_05_ALL_K(f32, F32Row)
SOFTMAX_TOPK_05_ALL_K(f16, F16Row)
SOFTMAX_TOPK_05_ALL_K(bf16, BF16Row)
