// softmax_03_online_masked — softmax_02_online with the mask fused into both passes.
//
// Changed from softmax_02_online: each logit is formed on the fly as
//               v_j = fill                   if j >= limit(i)      (causal / padding)
//               v_j = x_ij + mask_ij          otherwise             (additive mask, optional)
//               where limit(i) = min(N, q(i) + 1 if causal, valid_lengths[i] if given),
//               q(i) = i mod causal_rows: rows come in (causal_rows, N) matrices (a score
//               tensor (..., q, N) has causal_rows = q; a 2-D x has causal_rows = its rows).
//               Causal is top-left aligned like torch's is_causal: row q keeps columns
//               j <= q, i.e. ones(q, N).tril(0), for q <= N and q > N alike. The additive
//               mask has mask_rows rows used in turn: row i reads mask row i mod mask_rows
//               (1: one row for all; q: a (q, N) mask over (..., q, N); n_rows: one each).
//               Columns past the limit are never loaded; `fill` stands in for them.
//               No masked copy of x is ever written: the mask costs no extra pass.
//               One body, templated on the element type (the row policies of
//               online_rows.cuh), three entries: softmax_03_online_masked_f32, _f16 and
//               _bf16. Each x_ij is widened to fp32 as it is loaded (exact), the mask added
//               and everything computed in fp32 exactly as in the fp32 entry, and y_ij
//               rounded once to x's dtype as it is stored (round to nearest even).
//               Pass 1 folds each thread's columns in chunks merged pairwise, as
//               softmax_02_online does (thread_fold.cuh; -DTHREAD_FOLD_SEQUENTIAL=1: one
//               running state).
// Launch:       grid = (n_rows), block = (T), T the power of two >= N / 4 between 64 and 256
//               (256, softmax_02's block, from N = 513 on; a short row gets 64 or 128 threads,
//               four or more columns each, and 32 blocks fill an SM), static shared memory 32
//               states (256 B).
//               The body works for any T that is a multiple of 32, up to 1024.
// Traffic:      x: 2 reads + 1 write per kept element, 1 write per element past the limit
//               (causal on a square matrix: ~1 + 1 read instead of 2 + 1); 4 B per access
//               for fp32, 2 B for fp16 / bf16. An additive mask of rows x N adds 2 reads of
//               4 B per element; a broadcast mask (mask_rows = 1) is one row of N re-read by
//               every block (mostly from L2).
// Limits:       x and y float32, float16 or bfloat16 (the same dtype); the additive mask
//               and `fill` float32 for every dtype; 1 <= n_cols <= 2^31 - 2^16; rows may be
//               strided (unit column stride), scalar accesses (any alignment);
//               mask == nullptr: no additive mask; valid_lengths == nullptr: no padding;
//               causal_rows == 0: no causal mask; mask_rows >= 1 divides nothing (any value);
//               any valid_lengths[i] (>= N keeps the row, <= 0 removes it; never read on the
//               host, so no synchronization). With fill = -inf a fully
//               masked row gives NaN (0/0), as torch.softmax does; with a finite fill
//               (-1e6, -FLT_MAX) it gives the uniform distribution 1/N.
#include "online_rows.cuh"
#include "thread_fold.cuh"

// The logit column j of one row sees, after masking (in fp32, whatever x's dtype).
template <class Row>
__device__ __forceinline__ float masked_logit(const typename Row::Elem* row_x, const float* row_mask,
                                              int j, int limit, float fill) {
    if (j >= limit) return fill;  // not loaded: causal / padding mask
    float v = Row::load1(row_x + j);
    if (row_mask != nullptr) v += row_mask[j];
    return v;
}

template <class Row>
__device__ __forceinline__ void masked_softmax_row(const typename Row::Elem* __restrict__ x,
                                                   typename Row::Elem* __restrict__ y, int n_cols,
                                                   long long x_row_stride, long long y_row_stride,
                                                   const float* __restrict__ mask,
                                                   long long mask_row_stride, int mask_rows,
                                                   const int* __restrict__ valid_lengths,
                                                   int causal_rows, float fill) {
    __shared__ OnlineState scratch[32];
    const long long row = blockIdx.x;
    const typename Row::Elem* row_x = x + row * x_row_stride;
    typename Row::Elem* row_y = y + row * y_row_stride;
    // a mask of mask_rows rows repeats over the rows (1: one row for all; (q, N) over (..., q, N))
    const float* row_mask = mask != nullptr ? mask + (row % mask_rows) * mask_row_stride : nullptr;

    int limit = n_cols;  // columns [limit, N) are masked
    if (causal_rows > 0) {  // row i of each (causal_rows, N) matrix keeps columns j <= i
        const long long query = row % causal_rows;
        if (query + 1 < limit) limit = static_cast<int>(query + 1);
    }
    if (valid_lengths != nullptr && valid_lengths[row] < limit) limit = valid_lengths[row];

    const OnlineState s = thread_fold(  // pass 1: statistics of the masked row
        n_cols, online_identity(),
        [&](int j) { return masked_logit<Row>(row_x, row_mask, j, limit, fill); },
        [](OnlineState& state, float v) { online_push(state, v); },
        [](OnlineState a, OnlineState b) { return online_combine(a, b); });
    const OnlineState stats = online_block_reduce(s, scratch);

    const float inv_l = 1.0f / stats.l;  // pass 2: the output, same logits again
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x)
        row_y[j] = Row::from_float(expf(masked_logit<Row>(row_x, row_mask, j, limit, fill) - stats.m) * inv_l);
}

#define SOFTMAX_03(TAG, ROW)                                                                        \
    extern "C" __global__ void softmax_03_online_masked_##TAG(                                      \
        const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ y, int n_cols, long long x_row_stride, \
        long long y_row_stride, const float* __restrict__ mask, long long mask_row_stride,         \
        int mask_rows, const int* __restrict__ valid_lengths, int causal_rows, float fill) {       \
        masked_softmax_row<ROW>(x, y, n_cols, x_row_stride, y_row_stride, mask, mask_row_stride,    \
                                mask_rows, valid_lengths, causal_rows, fill);                       \
    }

SOFTMAX_03(f32, F32Row) SOFTMAX_03(f16, F16Row) SOFTMAX_03(bf16, BF16Row)
