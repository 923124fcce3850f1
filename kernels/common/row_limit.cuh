// row_limit.cuh — where a masked softmax row stops: columns [limit, N) of a row are masked.
//
// Causal: rows come in (causal_rows, N) matrices (a score tensor (..., q, N) has causal_rows = q;
// a 2-D x has causal_rows = its rows); row q of a matrix keeps columns j <= q + causal_offset.
// causal_offset = N - causal_rows aligns the diagonal bottom-right (the last query sees every key:
// attention's causal=True, FlashAttention's convention); causal_offset = 0 aligns it top-left
// (torch's is_causal, ones(q, N).tril(0)). causal_rows == 0: no causal mask.
// Padding: row i keeps columns j < valid_lengths[i] (valid_lengths == nullptr: none). Any limit is
// allowed: >= N keeps the row, <= 0 removes all of it.
#pragma once

__device__ __forceinline__ int row_limit(long long row, int n_cols, const int* valid_lengths, int causal_rows,
                                         int causal_offset) {
    long long limit = n_cols;
    if (causal_rows > 0) {
        const long long kept = row % causal_rows + 1 + causal_offset;
        if (kept < limit) limit = kept < 0 ? 0 : kept;
    }
    if (valid_lengths != nullptr && valid_lengths[row] < limit) limit = valid_lengths[row];
    return static_cast<int>(limit);
}
