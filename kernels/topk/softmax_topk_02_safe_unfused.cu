// softmax_topk_02_safe_unfused — the path the paper starts from: a safe softmax that writes all N
// probabilities, then a top-k kernel that reads them back and selects k of them.
//
// Changed from softmax_topk_01_topk_only: a softmax first. softmax_topk_02_safe_unfused_softmax
//               reads the row three times (maximum, sum of e^(x - m), then p = e^(x - m) / l,
//               written with 16-byte stores into a buffer of x's dtype laid out like x, so its
//               rows have x's 16-byte phase) and writes the row's LSE;
//               softmax_topk_02_safe_unfused_select is softmax_topk_01's selection run on
//               those probabilities, writing the k kept as stored (or over their sum,
//               renormalize) and their columns. Selecting on the rounded probabilities is what
//               torch.softmax followed by torch.topk does: two logits whose probabilities round
//               to the same value tie and go to the lower column, and a row whose softmax is
//               NaN (NaN, +inf, all -inf) returns columns 0 .. k-1.
// Launch:       both grid = (n_rows), block = (TOPK_THREADS: 128, or 64 / 32 for many rows,
//               softmax_topk.block_threads); select: static shared memory 4 x K keys + 8 B.
// Traffic:      softmax: 3 reads + 1 write per element; select: 1 read; 4 reads + 1 write in all
//               against the fused ideal of 1 read.
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_02_safe_unfused_softmax_<tag>
//               and softmax_topk_02_safe_unfused_select_<tag>_k<K>, K = 1, 4, 8, 16, 32);
//               1 <= k <= K, k <= n_cols < 2^31; rows at any start and stride; the buffer's
//               row stride and 16-byte phase equal x's (the launcher allocates it so).
#include "topk_rows.cuh"

// This thread's sum of e^(x - base) over its share of the row (row_max_pass's order).
template <class Row>
__device__ __forceinline__ float row_sum_pass(const typename Row::Elem* __restrict__ row, int n_cols, float base) {
    constexpr int VEC = Row::VEC, UNROLL = Row::UNROLL, STEP = VEC * UNROLL;
    const int threads = blockDim.x;
    const RowSplit split = row_split<Row>(row, n_cols);
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row + split.head);
    OnlineState s = {base, 0.0f};
    for (int i = threadIdx.x; i < split.head; i += threads) {
        float v[1] = {Row::load1(row + i)};
        fold_values<TOPK_SAFE, 1>(s, v, base);
    }
    for (int first = threadIdx.x; first < split.n_vec; first += threads * UNROLL) {
        float v[STEP];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int index = first + u * threads;
            if (index < split.n_vec) {
                Row::unpack(__ldg(vec + index), v + u * VEC);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[u * VEC + e] = neg_inf();
            }
        }
        fold_values<TOPK_SAFE, STEP>(s, v, base);
    }
    for (int i = split.tail + threadIdx.x; i < n_cols; i += threads) {
        float v[1] = {Row::load1(row + i)};
        fold_values<TOPK_SAFE, 1>(s, v, base);
    }
    return s.l;
}

template <class Row>
__device__ __forceinline__ void safe_softmax_row(const typename Row::Elem* __restrict__ x,
                                                 typename Row::Elem* __restrict__ p, float* __restrict__ lse,
                                                 int n_cols, long long row_stride) {
    constexpr int VEC = Row::VEC;
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const typename Row::Elem* row_x = x + row * row_stride;
    typename Row::Elem* row_p = p + row * row_stride;
    const float m = block_max(row_max_pass<Row>(row_x, n_cols), scratch);
    const float base = online_base(m);
    const float l = block_sum(row_sum_pass<Row>(row_x, n_cols, base), scratch);
    const float inv_l = 1.0f / l;
    const RowSplit split = row_split<Row>(row_x, n_cols);   // row_p has the same phase
    const typename Row::Vec* vec_x = reinterpret_cast<const typename Row::Vec*>(row_x + split.head);
    typename Row::Vec* vec_p = reinterpret_cast<typename Row::Vec*>(row_p + split.head);
    for (int i = threadIdx.x; i < split.head; i += blockDim.x)
        row_p[i] = Row::from_float(exp2f((Row::load1(row_x + i) - base) * ONLINE_ROWS_LOG2E) * inv_l);
    for (int i = threadIdx.x; i < split.n_vec; i += blockDim.x) {
        float v[VEC];
        Row::unpack(__ldg(vec_x + i), v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = exp2f((v[e] - base) * ONLINE_ROWS_LOG2E) * inv_l;
        vec_p[i] = Row::pack(v);
    }
    for (int i = split.tail + threadIdx.x; i < n_cols; i += blockDim.x)
        row_p[i] = Row::from_float(exp2f((Row::load1(row_x + i) - base) * ONLINE_ROWS_LOG2E) * inv_l);
    if (threadIdx.x == 0 && lse != nullptr) lse[row] = m + logf(l);
}

template <class Row, int K>
__device__ __forceinline__ void select_row(const typename Row::Elem* __restrict__ p,
                                           typename Row::Elem* __restrict__ probs, long long* __restrict__ columns,
                                           int n_cols, long long row_stride, int k, int renormalize) {
    __shared__ TopKey scratch[(TOPK_THREADS / 32) * K];
    __shared__ TopKey threshold;
    const long long row = blockIdx.x;
    const typename Row::Elem* row_p = p + row * row_stride;
    if (threadIdx.x == 0) threshold = 0ull;
    __syncthreads();
    KeyList<K> list;
    list.clear();
    row_top_pass<Row, K, TOPK_ONLY>(row_p, n_cols, k, 0.0f, list, &threshold);
    const TopKey mine = block_top_keys<K>(list, k, scratch);
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        const int column = key_column(mine);
        const float v = lane < k ? Row::load1(row_p + column) : 0.0f;
        const float total = warp_sum(v);
        if (lane < k) {
            probs[row * k + lane] = renormalize ? Row::from_float(v * (1.0f / total)) : row_p[column];
            columns[row * k + lane] = column;
        }
    }
}

#define SOFTMAX_TOPK_02_SELECT(TAG, ROW, K)                                                                 \
    extern "C" __global__ void __launch_bounds__(TOPK_THREADS, TOPK_MIN_BLOCKS_##K)                         \
        softmax_topk_02_safe_unfused_select_##TAG##_k##K(const ROW::Elem* __restrict__ p,                  \
                                                         ROW::Elem* __restrict__ probs,                    \
                                                         long long* __restrict__ columns, int n_cols,      \
                                                         long long row_stride, int k, int renormalize) {   \
        if constexpr (topk_builds<ROW, K>()) select_row<ROW, K>(p, probs, columns, n_cols, row_stride, k, renormalize); \
    }
#define SOFTMAX_TOPK_02(TAG, ROW)                                                                            \
    extern "C" __global__ void __launch_bounds__(TOPK_THREADS, 8) softmax_topk_02_safe_unfused_softmax_##TAG( \
        const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ p, float* __restrict__ lse, int n_cols,    \
        long long row_stride) {                                                                              \
        if constexpr (topk_builds_row<ROW>()) safe_softmax_row<ROW>(x, p, lse, n_cols, row_stride);          \
    }                                                                                                        \
    SOFTMAX_TOPK_02_SELECT(TAG, ROW, 1) SOFTMAX_TOPK_02_SELECT(TAG, ROW, 4) SOFTMAX_TOPK_02_SELECT(TAG, ROW, 8) \
    SOFTMAX_TOPK_02_SELECT(TAG, ROW, 16) SOFTMAX_TOPK_02_SELECT(TAG, ROW, 32)

SOFTMAX_TOPK_02(f32, F32Row)
SOFTMAX_TOPK_02(f16, F16Row)
SOFTMAX_TOPK_02(bf16, BF16Row)
