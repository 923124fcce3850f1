// decode_merge.cuh — the second kernel of split-K decoding: each split of a row wrote its output
// O_s (already divided by its own l) and its LSE in the log2 domain as fp32 partials; the row's
// answer weighs them by 2^(lse_s - max) (chapter 05's merge of (O, LSE) pairs). Used by
// attention_02_decode_split and attention_06_decode_mma; never pasted.
// Launch: grid = (batch * heads * n_q), block = (D); partials [splits][rows][D] and [splits][rows].
#pragma once
#include "online_rows.cuh"

// The splits of one row: out = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M), LSE = M + log2 of the sum.
template <class Row, int D>
__device__ __forceinline__ void decode_merge(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                             typename Row::Elem* __restrict__ out, float* __restrict__ lse,
                                             int splits) {
    const long long row = blockIdx.x, n_rows = gridDim.x;
    const int d = threadIdx.x;
    float mm = neg_inf();
    for (int s = 0; s < splits; ++s) mm = fmaxf(mm, lse_part[s * n_rows + row]);
    const float base = mm == neg_inf() ? 0.0f : mm;
    float total = 0.0f, acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float weight = exp2f(lse_part[s * n_rows + row] - base);   // a blind split weighs 0
        total += weight;
        acc = fmaf(weight, o_part[(s * n_rows + row) * D + d], acc);
    }
    out[row * D + d] = Row::from_float(total > 0.0f ? acc / total : 0.0f);
    if (d == 0 && lse != nullptr) lse[row] = total > 0.0f ? (mm + log2f(total)) * 0.69314718056f : neg_inf();
}

// The end of a split's block: WARPS warps each hold an (m, l, O) per row of the block in shared
// memory (partial[w][r][0 .. D-1] = O, [D] = m, [D + 1] = l, log2 domain) for rows row0 + r of one
// kv head (row = head in the group * n_q + query; first_head is the group's first head). Thread i
// finishes dims i, i + blockDim.x, ... of every row: with one split (gridDim.x == 1) the output and
// LSE themselves, else the split's partials for decode_merge. Called after a barrier by every thread.
template <class Row, int D, int R, int WARPS>
__device__ __forceinline__ void decode_block_finish(const float (*partial)[R][D + 2], int row0, int rows_per_kv,
                                                    int batch, int heads, int first_head, int n_q,
                                                    typename Row::Elem* __restrict__ out, float* __restrict__ lse,
                                                    float* __restrict__ o_part, float* __restrict__ lse_part) {
    const int split = blockIdx.x, splits = gridDim.x;
    for (int i = threadIdx.x; i < R * D; i += blockDim.x) {
        const int r = i / D, d = i % D, row = row0 + r;   // r varies at run time: no register array index
        if (row >= rows_per_kv) continue;
        const long long out_index = (long long)(batch * heads + first_head + row / n_q) * n_q + row % n_q;
        float mm = neg_inf();
#pragma unroll
        for (int w = 0; w < WARPS; ++w) mm = fmaxf(mm, partial[w][r][D]);
        const float base = mm == neg_inf() ? 0.0f : mm;
        float ll = 0.0f, oo = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const float weight = exp2f(partial[w][r][D] - base);
            ll += partial[w][r][D + 1] * weight;
            oo += partial[w][r][d] * weight;
        }
        const float value = ll > 0.0f ? oo / ll : 0.0f;
        const float row_lse = ll > 0.0f ? mm + log2f(ll) : neg_inf();   // log2 domain
        if (splits == 1) {
            out[out_index * D + d] = Row::from_float(value);
            if (d == 0 && lse != nullptr) lse[out_index] = row_lse * 0.69314718056f;
        } else {
            const long long n_rows = (long long)gridDim.z * heads * n_q;
            o_part[((long long)split * n_rows + out_index) * D + d] = value;
            if (d == 0) lse_part[(long long)split * n_rows + out_index] = row_lse;
        }
    }
}
