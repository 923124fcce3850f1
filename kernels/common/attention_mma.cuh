// attention_mma.cuh — what the tensor-core attention kernels (attention_03 .. 05) share: the block
// and warp geometry, the Q fragments, the online softmax on the accumulator fragments, P as an A
// fragment straight from the score accumulators, and the epilogue. The kernels differ only in
// how K and V reach shared memory and how B fragments are read from it.
//
// One block of 8 warps takes 128 query rows of one (batch, head); warp w owns rows 16w .. 16w+15
// for the whole loop. Per key tile of 64 keys a warp holds, as mma fragments (mma.cuh):
//   q[D/16][4]  its 16 x D slice of Q (A fragments, loaded once, kept in registers),
//   s[8][4]     the 16 x 64 scores, accumulators of 8 n-tiles of 8 keys (C fragments),
//   o[D/8][4]   the 16 x D unnormalized output, accumulators of D/8 n-tiles (C fragments),
//   m[2], l[2]  the state of its two rows g and g + 8 (l: this lane's share of the row sum).
// A row lives in the 4 lanes of a quad (the same g), so a row max is two xor-shuffles (1, 2).
#pragma once
#include "mma.cuh"
// online_base: the -inf guard
#include "online_state.cuh"

#define MMA_BLOCK_Q 128
#define MMA_BLOCK_K 64
#define MMA_WARPS 8
#define MMA_THREADS (32 * MMA_WARPS)
#define MMA_WARP_ROWS 16

// Keys j < key_limit(row) are visible to query `row`: bottom-right causal, or all n_k.
__device__ __forceinline__ int key_limit(int row, int n_q, int n_k, int causal) {
    return causal ? min(n_k, row + 1 + n_k - n_q) : n_k;
}

// Where a warp's work stops (all warp-uniform): key tiles from `end` on are invisible to every
// row of the warp and skipped; tiles ending at or before `unmasked_end` are visible to every
// row and need no mask. A warp whose rows all lie past n_q has end = 0.
struct WarpKeys {
    int end;
    int unmasked_end;
    int limit[2];   // key_limit of this lane's rows g and g + 8
};

__device__ __forceinline__ WarpKeys warp_keys(int row0, int n_q, int n_k, int causal) {
    const int g = (threadIdx.x & 31) >> 2;
    WarpKeys w;
    w.end = row0 < n_q ? key_limit(min(row0 + MMA_WARP_ROWS, n_q) - 1, n_q, n_k, causal) : 0;
    w.unmasked_end = key_limit(row0, n_q, n_k, causal);
    w.limit[0] = key_limit(row0 + g, n_q, n_k, causal);
    w.limit[1] = key_limit(row0 + g + 8, n_q, n_k, causal);
    return w;
}

// The warp's 16 x D slice of Q as A fragments, read once from global memory (32-bit loads; rows
// past n_q are zeros). q_head points at row 0 of the (batch, head).
template <class T, int D>
__device__ __forceinline__ void load_q_fragments(u32 q[D / 16][4], const typename T::Elem* __restrict__ q_head,
                                                 int row0, int n_q) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = row0 + g + 8 * (r & 1), col = 16 * kk + 2 * t + 8 * (r >> 1);
            q[kk][r] = row < n_q ? *reinterpret_cast<const u32*>(q_head + (long long)row * D + col) : 0u;
        }
}

// The online softmax of one key tile on the score accumulators s (raw Q K^T of keys k0 .. k0+63):
// scale into base-2 units, mask if asked, then per row m' = max(m, rowmax), P = 2^(s - m'),
// l' = l 2^(m - m') + rowsum P (this lane's columns only), O' = O 2^(m - m'). P stays in s.
template <int D>
__device__ __forceinline__ void online_softmax_tile(float s[8][4], float m[2], float l[2], float o[D / 8][4],
                                                    float scale_log2, bool masked, int k0, const int limit[2]) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[j][e] *= scale_log2;
            if (masked && k0 + 8 * j + 2 * t + (e & 1) >= limit[e >> 1]) s[j][e] = neg_inf();
        }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float tile_max = neg_inf();
#pragma unroll
        for (int j = 0; j < 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));   // the quad holding the row
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_new = fmaxf(m[r], tile_max);
        const float base = online_base(m_new);   // all masked so far: 2^(-inf - 0) = 0, never -inf - -inf
        const float alpha = exp2f(m[r] - base);
        float row_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
                s[j][e] = exp2f(s[j][e] - base);
                row_sum += s[j][e];
            }
        l[r] = l[r] * alpha + row_sum;
        m[r] = m_new;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            o[n][2 * r] *= alpha;
            o[n][2 * r + 1] *= alpha;
        }
    }
}

// Keys 16kk .. 16kk+15 of P as the A fragment of O += P V: the C fragments of n-tiles 2kk and
// 2kk+1 hold exactly the A fragment's elements (rows g, g + 8; columns 2t, 2t+1 and 2t+8, 2t+9),
// so P never leaves the registers: each pair is rounded to T and packed.
template <class T>
__device__ __forceinline__ void p_fragment(u32 a[4], const float s[8][4], int kk) {
    a[0] = T::pack(s[2 * kk][0], s[2 * kk][1]);
    a[1] = T::pack(s[2 * kk][2], s[2 * kk][3]);
    a[2] = T::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = T::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// The end: the quad's partial sums added, O / l rounded to T (32-bit stores of column pairs), and
// LSE = (m + log2 l) ln 2 in fp32. A row that saw no key has l = 0: output 0, LSE -inf. Output
// row r is at out_head + r stride.
template <class T, int D>
__device__ __forceinline__ void store_output(const float o[D / 8][4], const float m[2], const float l[2],
                                             typename T::Elem* __restrict__ out_head, float* __restrict__ lse_head,
                                             int row0, int n_q, int stride = D) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float row_sum = l[r] + __shfl_xor_sync(0xffffffffu, l[r], 1);
        row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
        const float inv = row_sum != 0.0f ? 1.0f / row_sum : 0.0f;
        const int row = row0 + g + 8 * r;
        if (row >= n_q) continue;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<u32*>(out_head + (long long)row * stride + 8 * n + 2 * t) =
                T::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0 && lse_head != nullptr)
            lse_head[row] = row_sum != 0.0f ? (m[r] + log2f(row_sum)) * 0.69314718056f : neg_inf();
    }
}
