// softmax_topk_01_topk_only — the k largest logits of each row and their columns, no softmax: the
// baseline of the paper's comparison (what any top-k costs; the fused kernels add the normalizer).
//
// Changed from softmax_02_online: no (m, l). Each thread keeps a sorted list of the K best
//               (value, column) pairs of its share of the row as 64-bit keys (K a compile-time
//               bucket >= k: 1, 4, 8, 16 or 32; top_keys.cuh), reading the row with 16-byte
//               loads after a scalar head (topk_rows.cuh: row_top_pass). After every step of
//               16 elements a warp publishes the k-th best of its 32 lanes' list heads in shared
//               memory with atomicMax and reads back the block's (top_keys.cuh: share_threshold):
//               an element below that threshold cannot be among the row's k best and is not
//               pushed, so after the first steps few elements cost a walk down a list. The
//               step's entering elements are pushed at one push site, after the step. The
//               block then merges the lists by rounds of argmax (block_top_keys: k rounds per
//               warp, one barrier, k rounds in warp 0) and warp 0 writes the k values in x's
//               dtype, read back from x at their columns (exactly the logits, -0.0 and NaN
//               included), and the columns.
//               Order: larger logit first; equal logits by the lower column; NaN ranks above
//               every number (as torch.topk).
// Launch:       grid = (n_rows), block = (TOPK_THREADS: 128, or 64 / 32 for many rows,
//               softmax_topk.block_threads), static shared memory 4 x K keys + 8 B;
//               registers by bucket: TOPK_MIN_BLOCKS_<K> (topk_rows.cuh).
// Traffic:      1 read per element + k (value + 8 B column) per row; the ideal is the read.
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_01_topk_only_<tag>_k<K>);
//               1 <= k <= K <= 32, k <= n_cols < 2^31; rows at any start and stride (unit
//               column stride).
#include "topk_rows.cuh"

template <class Row, int K>
__device__ __forceinline__ void topk_only_row(const typename Row::Elem* __restrict__ x,
                                              typename Row::Elem* __restrict__ values,
                                              long long* __restrict__ columns, int n_cols, long long x_row_stride,
                                              int k) {
    __shared__ TopKey scratch[(TOPK_THREADS / 32) * K];
    __shared__ TopKey threshold;
    const long long row = blockIdx.x;
    const typename Row::Elem* row_x = x + row * x_row_stride;
    if (threadIdx.x == 0) threshold = 0ull;
    __syncthreads();
    KeyList<K> list;
    list.clear();
    row_top_pass<Row, K, TOPK_ONLY>(row_x, n_cols, k, 0.0f, list, &threshold);
    const TopKey mine = block_top_keys<K>(list, k, scratch);
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32 && lane < k) {
        const int column = key_column(mine);
        values[row * k + lane] = row_x[column];
        columns[row * k + lane] = column;
    }
}

#define SOFTMAX_TOPK_01(TAG, ROW, K)                                                                            \
    extern "C" __global__ void __launch_bounds__(TOPK_THREADS, TOPK_MIN_BLOCKS_##K)                             \
        softmax_topk_01_topk_only_##TAG##_k##K(const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ values, \
                                               long long* __restrict__ columns, int n_cols,                     \
                                               long long x_row_stride, int k) {                                 \
        if constexpr (topk_builds<ROW, K>()) topk_only_row<ROW, K>(x, values, columns, n_cols, x_row_stride, k); \
    }
#define SOFTMAX_TOPK_01_ALL_K(TAG, ROW)                                                       \
    SOFTMAX_TOPK_01(TAG, ROW, 1) SOFTMAX_TOPK_01(TAG, ROW, 4) SOFTMAX_TOPK_01(TAG, ROW, 8) \
    SOFTMAX_TOPK_01(TAG, ROW, 16) SOFTMAX_TOPK_01(TAG, ROW, 32)

SOFTMAX_TOPK_01_ALL_K(f32, F32Row)
SOFTMAX_TOPK_01_ALL_K(f16, F16Row)
SOFTMAX_TOPK_01_ALL_K(bf16, BF16Row)
