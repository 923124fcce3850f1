// decode_merge.cuh — the second kernel of split-K decoding: each split of a row wrote its output
// O_s (already divided by its own l) and its LSE in the log2 domain as fp32 partials; the row's
// answer weighs them by 2^(lse_s - max) (chapter 05's merge of (O, LSE) pairs). Used by
// attention_02_decode_split and attention_06_decode_mma; never pasted.
// Launch: grid = (batch * heads * n_q), block = (D); partials [splits][rows][D] and [splits][rows];
// a programmatic dependent launch where the GPU allows (sm_90): the split kernel lets it start early.
#pragma once
#include "launch_order.cuh"
#include "online_rows.cuh"

// The splits of one row: out = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M), LSE = M + log2 of the sum.
// One pass, MERGE_BATCH splits at a time: the batch's LSEs and values are all loaded before any is
// used (one wait for memory per batch, not one per split), then the running sums are rebased on
// the batch's maximum, as the online softmax rebases (m, l). The kernel may start while the split
// kernel runs (a programmatic dependent launch): it waits for that grid before reading the partials.
#define MERGE_BATCH 16
template <class Row, int D>
__device__ __forceinline__ void decode_merge(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                             typename Row::Elem* __restrict__ out, float* __restrict__ lse,
                                             int splits) {
    const long long row = blockIdx.x, n_rows = gridDim.x;
    const int d = threadIdx.x;
    wait_for_prerequisite_grid();   // the split kernel has finished and its partials are visible
    float mm = neg_inf(), total = 0.0f, acc = 0.0f;
    for (int first = 0; first < splits; first += MERGE_BATCH) {
        float part_lse[MERGE_BATCH], part_o[MERGE_BATCH];
#pragma unroll
        for (int i = 0; i < MERGE_BATCH; ++i) {   // a split past the last weighs 0
            const int s = first + i;
            part_lse[i] = s < splits ? lse_part[s * n_rows + row] : neg_inf();
            part_o[i] = s < splits ? o_part[(s * n_rows + row) * D + d] : 0.0f;
        }
        float batch_max = mm;
#pragma unroll
        for (int i = 0; i < MERGE_BATCH; ++i) batch_max = fmaxf(batch_max, part_lse[i]);
        const float base = batch_max == neg_inf() ? 0.0f : batch_max;
        const float rebase = exp2f(mm - base);   // 0 while nothing was seen (mm = -inf)
        total *= rebase;
        acc *= rebase;
#pragma unroll
        for (int i = 0; i < MERGE_BATCH; ++i) {
            const float weight = exp2f(part_lse[i] - base);   // a blind split weighs 0
            total += weight;
            acc = fmaf(weight, part_o[i], acc);
        }
        mm = batch_max;
    }
    out[row * D + d] = Row::from_float(total != 0.0f ? acc / total : 0.0f);
    if (d == 0 && lse != nullptr) lse[row] = total != 0.0f ? (mm + log2f(total)) * 0.69314718056f : neg_inf();
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
        const float value = ll != 0.0f ? oo / ll : 0.0f;
        const float row_lse = ll != 0.0f ? mm + log2f(ll) : neg_inf();   // log2 domain
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
