// softmax_topk_03_safe_fused — the k largest probabilities of each row and their indices from the
// safe softmax fused with the top-k: a maximum pass, then one pass for the sum and the lists.
//
// Changed from softmax_topk_02_safe_unfused: no probabilities are written. Pass 1 reads the row
//               for its maximum m (block_max); pass 2 reads it again, each thread adding
//               e^(x - m) to its l (a tree sum per step of 16 elements) while the same values go
//               through its list of the K best (softmax_topk_01's lists and threshold); the sums
//               combine with block_sum. The probabilities of the k kept are e^(v - m) / l, so the
//               answer needs no third pass and no write of N probabilities: 2 reads instead of
//               the unfused 4 reads and 1 write.
//               Warp 0 writes them (or over the sum of the k kept, renormalize) in x's dtype
//               and the columns; a row holding NaN or +inf has l = NaN (NaN probabilities, its
//               NaN or +inf columns first), a row of all -inf has m = -inf and l = 0 (NaN).
// Launch:       grid = (n_rows), block = (TOPK_THREADS: 128, or 64 / 32 for many rows,
//               softmax_topk.block_threads), static shared memory 4 x K keys + 32 floats + 8 B.
// Traffic:      2 reads per element + k (probability + 8 B column) + 4 B per row; the ideal is 1 read.
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_03_safe_fused_<tag>_k<K>,
//               K = 1, 4, 8, 16, 32); 1 <= k <= K, k <= n_cols < 2^31; rows at any start and
//               stride (unit column stride); lse may be null.
#include "topk_rows.cuh"

template <class Row, int K>
__device__ __forceinline__ void safe_fused_row(const typename Row::Elem* __restrict__ x,
                                               typename Row::Elem* __restrict__ probs,
                                               long long* __restrict__ columns, float* __restrict__ lse,
                                               int n_cols, long long x_row_stride, int k, int renormalize) {
    __shared__ float sums[32];
    __shared__ TopKey scratch[(TOPK_THREADS / 32) * K];
    __shared__ TopKey threshold;
    const long long row = blockIdx.x;
    const typename Row::Elem* row_x = x + row * x_row_stride;
    if (threadIdx.x == 0) threshold = 0ull;
    const float m = block_max(row_max_pass<Row>(row_x, n_cols), sums);   // its barriers cover threshold
    KeyList<K> list;
    list.clear();
    const OnlineState s = row_top_pass<Row, K, TOPK_SAFE>(row_x, n_cols, k, online_base(m), list, &threshold);
    const OnlineState stats = {m, block_sum(s.l, sums)};
    const TopKey mine = block_top_keys<K>(list, k, scratch);
    if (threadIdx.x < 32)
        write_top_probabilities<Row>(mine, k, stats, renormalize, probs + row * k, columns + row * k,
                                     lse == nullptr ? nullptr : lse + row);
}

#define SOFTMAX_TOPK_03(TAG, ROW, K)                                                                          \
    extern "C" __global__ void __launch_bounds__(TOPK_THREADS, TOPK_MIN_BLOCKS_##K)                           \
        softmax_topk_03_safe_fused_##TAG##_k##K(const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ probs, \
                                                long long* __restrict__ columns, float* __restrict__ lse,      \
                                                int n_cols, long long x_row_stride, int k, int renormalize) {  \
        if constexpr (topk_builds<ROW, K>())                                                                  \
            safe_fused_row<ROW, K>(x, probs, columns, lse, n_cols, x_row_stride, k, renormalize);              \
    }
#define SOFTMAX_TOPK_03_ALL_K(TAG, ROW)                                                       \
    SOFTMAX_TOPK_03(TAG, ROW, 1) SOFTMAX_TOPK_03(TAG, ROW, 4) SOFTMAX_TOPK_03(TAG, ROW, 8) \
    SOFTMAX_TOPK_03(TAG, ROW, 16) SOFTMAX_TOPK_03(TAG, ROW, 32)

SOFTMAX_TOPK_03_ALL_K(f32, F32Row)
SOFTMAX_TOPK_03_ALL_K(f16, F16Row)
SOFTMAX_TOPK_03_ALL_K(bf16, BF16Row)
