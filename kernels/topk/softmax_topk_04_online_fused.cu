// softmax_topk_04_online_fused — the k largest probabilities of each row and their indices, with
// the row's normalizer, in one read of the logits (the online fused kernel of Milakov & Gimelshein).
//
// Changed from softmax_topk_03_safe_fused: no maximum pass. Each thread folds every step of 16
//               elements into its online state (m, l) (one rescale per step, online_rows.cuh)
//               while the same values go through its list of the K best; the states combine as
//               in softmax_02 (online_block_reduce) and the lists as in softmax_topk_01. The
//               logits are read once: the paper's point, since softmax is increasing and the k
//               best logits are the k best probabilities.
//               Warp 0 writes p_i = e^(v_i - m) / l (or over the sum of the k kept,
//               renormalize) in x's dtype and the columns (int64). NaN ranks above every number,
//               so a row holding NaN returns NaN probabilities (its normalizer is NaN) at its NaN
//               columns first; a row of all -inf returns NaN at columns 0 .. k-1.
// Launch:       grid = (n_rows), block = (TOPK_THREADS: 128, or 64 / 32 for many rows,
//               softmax_topk.block_threads), static shared memory 4 x K keys + 32 states + 8 B.
// Traffic:      1 read per element + k (probability + 8 B column) + 4 B per row; the ideal is the read.
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_04_online_fused_<tag>_k<K>,
//               K = 1, 4, 8, 16, 32); 1 <= k <= K, k <= n_cols < 2^31; rows at any start and
//               stride (unit column stride); lse may be null.
#include "topk_rows.cuh"

template <class Row, int K>
__device__ __forceinline__ void online_fused_row(const typename Row::Elem* __restrict__ x,
                                                 typename Row::Elem* __restrict__ probs,
                                                 long long* __restrict__ columns, float* __restrict__ lse,
                                                 int n_cols, long long x_row_stride, int k, int renormalize) {
    __shared__ OnlineState states[32];
    __shared__ TopKey scratch[(TOPK_THREADS / 32) * K];
    __shared__ TopKey threshold;
    const long long row = blockIdx.x;
    if (threadIdx.x == 0) threshold = 0ull;
    __syncthreads();
    KeyList<K> list;
    list.clear();
    const OnlineState s = row_top_pass<Row, K, TOPK_ONLINE>(x + row * x_row_stride, n_cols, k, 0.0f, list,
                                                            &threshold);
    const OnlineState stats = online_block_reduce(s, states);
    const TopKey mine = block_top_keys<K>(list, k, scratch);
    if (threadIdx.x < 32)
        write_top_probabilities<Row>(mine, k, stats, renormalize, probs + row * k, columns + row * k,
                                     lse == nullptr ? nullptr : lse + row);
}

#define SOFTMAX_TOPK_04(TAG, ROW, K)                                                                       \
    extern "C" __global__ void __launch_bounds__(TOPK_THREADS, TOPK_MIN_BLOCKS_##K)                        \
        softmax_topk_04_online_fused_##TAG##_k##K(const ROW::Elem* __restrict__ x,                        \
                                                  ROW::Elem* __restrict__ probs,                          \
                                                  long long* __restrict__ columns, float* __restrict__ lse, \
                                                  int n_cols, long long x_row_stride, int k, int renormalize) { \
        if constexpr (topk_builds<ROW, K>())                                                               \
            online_fused_row<ROW, K>(x, probs, columns, lse, n_cols, x_row_stride, k, renormalize);         \
    }
#define SOFTMAX_TOPK_04_ALL_K(TAG, ROW)                                                       \
    SOFTMAX_TOPK_04(TAG, ROW, 1) SOFTMAX_TOPK_04(TAG, ROW, 4) SOFTMAX_TOPK_04(TAG, ROW, 8) \
    SOFTMAX_TOPK_04(TAG, ROW, 16) SOFTMAX_TOPK_04(TAG, ROW, 32)

SOFTMAX_TOPK_04_ALL_K(f32, F32Row)
SOFTMAX_TOPK_04_ALL_K(f16, F16Row)
SOFTMAX_TOPK_04_ALL_K(bf16, BF16Row)
