// wgmma_attention.cuh — the FlashAttention-2 forward on Hopper's warpgroup instruction (wgmma.cuh):
// the tile copies into wgmma's shared-memory layout, the online softmax of one warp's 16 rows on
// the accumulators, and the loop of one block. How the block works is told in
// kernels/attention/attention_10_wgmma.cu.
#pragma once
#include "attention_mma.cuh"
#include "wgmma.cuh"

#define WG_BLOCK_Q 128        // query rows of a block: two warpgroups of 64
#define WG_THREADS 256
#define WG_GROUP_ROWS 64
#define WG_KEYS 128           // keys of one K or V tile: the N of S = Q K^T
#define WG_SHARED_BYTES(D) ((WG_BLOCK_Q + 4 * WG_KEYS) * (D) * 2 + 1024)   // Q, two stages of K and V, alignment

// Copy rows r0 .. r0 + ROWS - 1 of one head (row r at head + r stride; n rows in all) into `tile`
// in wgmma's layout: blocks of 64 columns, each [ROWS][64] with swizzled 16-byte chunks. 16 bytes
// a thread, consecutive threads along a row; rows at or past n are zero-filled by the copy.
template <class Elem, int D, int ROWS>
__device__ __forceinline__ void issue_blocks(Elem* tile, const Elem* __restrict__ head, int stride, int r0, int n) {
    constexpr int CHUNKS = D / 8;
    static_assert(ROWS * CHUNKS % WG_THREADS == 0, "whole passes of the block");
#pragma unroll
    for (int pass = 0; pass < ROWS * CHUNKS / WG_THREADS; ++pass) {
        const int i = threadIdx.x + pass * WG_THREADS, r = i / CHUNKS, c = 8 * (i % CHUNKS);
        const bool inside = r0 + r < n;
        cp_async_16_or_zero(tile + (c / 64) * ROWS * 64 + swizzled<64>(r, c % 64),
                            inside ? head + (long long)(r0 + r) * stride + c : head, inside);   // an address inside the tensor
    }
}

// The online softmax of one key tile on a warp's raw score accumulators s (rows g and g + 8, keys
// k0 + 8j + 2t + e % 2), as attention_07's: m in scaled base-2 units, the scale applied as the
// exponent is taken (rounded before m is subtracted; for scale <= 0 the scores are scaled first).
// P replaces s; alpha[r] = 2^(m_old - m_new) is what O must be multiplied by (rescale_rows).
template <int KEYS>
__device__ __forceinline__ void softmax_scores(float s[KEYS / 8][4], float m[2], float l[2], float alpha[2],
                                               float scale_log2, bool prescale, bool masked, int k0, const int limit[2]) {
    const int t = threadIdx.x & 3;
    const float fold = prescale ? 1.0f : scale_log2;
    if (prescale || masked) {   // warp-uniform
#pragma unroll
        for (int j = 0; j < KEYS / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (prescale) s[j][e] *= scale_log2;
                if (masked && k0 + 8 * j + 2 * t + (e & 1) >= limit[e >> 1]) s[j][e] = neg_inf();
            }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float tile_max = neg_inf();
#pragma unroll
        for (int j = 0; j < KEYS / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));   // the quad holding the row
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_new = fmaxf(m[r], tile_max * fold);
        const float base = online_base(m_new);   // all masked so far: 2^(-inf - 0) = 0
        alpha[r] = exp2_ftz(m[r] - base);
        float row_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < KEYS / 8; ++j)
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
                s[j][e] = exp2_ftz(__fmul_rn(s[j][e], fold) - base);
                row_sum += s[j][e];
            }
        l[r] = l[r] * alpha[r] + row_sum;
        m[r] = m_new;
    }
}

// O *= alpha per row, skipped when no row of the warp has a new max (alpha = 1 changes no bit).
template <int D>
__device__ __forceinline__ void rescale_rows(float o[D / 8][4], const float alpha[2]) {
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
    }
}

// The accumulators of a warp as wgmma takes them: [N / 8][4] seen as N / 2 floats.
template <int C>
__device__ __forceinline__ float (&flat(float (&x)[C / 4][4]))[C] {
    return reinterpret_cast<float(&)[C]>(x);
}

// Where a thread's work stops: key tiles from block_end on are invisible to every row of the block;
// from group_end on to every row of its warpgroup (uniform in it: the instruction is the group's);
// tiles ending at or before unmasked_end are visible to every row of its warp. limit: its rows g
// and g + 8.
struct GroupKeys {
    int group, block_end, group_end, unmasked_end, limit[2];
};

__device__ __forceinline__ GroupKeys group_keys(int q0, int n_q, int n_k, int causal) {
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const int row0 = q0 + 16 * warp;
    GroupKeys k;
    k.group = warp >> 2;
    const int group_row0 = q0 + WG_GROUP_ROWS * k.group;
    k.block_end = key_limit(min(q0 + WG_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    k.group_end = group_row0 < n_q ? key_limit(min(group_row0 + WG_GROUP_ROWS, n_q) - 1, n_q, n_k, causal) : 0;
    k.unmasked_end = key_limit(row0, n_q, n_k, causal);
    k.limit[0] = key_limit(row0 + g, n_q, n_k, causal);
    k.limit[1] = key_limit(row0 + g + 8, n_q, n_k, causal);
    return k;
}

// O = 0, m = -inf, l = 0 for the warp's rows.
template <int D>
__device__ __forceinline__ void start_rows(float (&o)[D / 8][4], float m[2], float l[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) m[r] = neg_inf(), l[r] = 0.0f;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
}

// S = Q K^T for a warpgroup, issued and committed, not waited for: D / 16 instructions of
// 64 x KEYS x 16, A (rows 64 group .. 64 group + 63 of the Q tile) and B from shared memory.
template <class T, int D>
__device__ __forceinline__ void issue_scores(float (&s)[WG_KEYS / 8][4], const typename T::Elem* Qs,
                                             const typename T::Elem* Ks, int group) {
    wgmma_fence_operands(flat<WG_KEYS / 2>(s));   // the compiler's last use of s comes before the fence
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const int block = 16 * kk / 64, col = 16 * kk % 64;
        const u64 q_desc = wgmma_descriptor(Qs + block * WG_BLOCK_Q * 64 + group * WG_GROUP_ROWS * 64 + col, 0, 1024);
        const u64 k_desc = wgmma_descriptor(Ks + block * WG_KEYS * 64 + col, 0, 1024);
        wgmma_ss<T, WG_KEYS, 0>(flat<WG_KEYS / 2>(s), q_desc, k_desc, kk > 0);
    }
    wgmma_commit();
}

// P as A registers: the accumulators of keys 16kk .. 16kk + 15, rounded to T and paired.
template <class T>
__device__ __forceinline__ void pack_p(u32 (&p)[WG_KEYS / 16][4], const float (&s)[WG_KEYS / 8][4]) {
#pragma unroll
    for (int kk = 0; kk < WG_KEYS / 16; ++kk) {
        p[kk][0] = T::pack(s[2 * kk][0], s[2 * kk][1]);
        p[kk][1] = T::pack(s[2 * kk][2], s[2 * kk][3]);
        p[kk][2] = T::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[kk][3] = T::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

// O += P V, issued and committed, not waited for: KEYS / 16 instructions of 64 x D x 16, P from
// registers, V read MN-major.
template <class T, int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4], const u32 (&p)[WG_KEYS / 16][4],
                                         const typename T::Elem* Vs) {
    wgmma_fence_operands(flat<D / 2>(o));   // O's rescaling is done before the fence
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < WG_KEYS / 16; ++kk)
        wgmma_rs<T, D, 1>(flat<D / 2>(o), p[kk], wgmma_descriptor(Vs + 16 * kk * 64, WG_KEYS * 128, 1024), 1);
    wgmma_commit();
}

// One key tile for a warpgroup, each product waited for before its result is used: S = Q K^T, the
// online softmax of each warp's rows, O += P V.
template <class T, int D>
__device__ __forceinline__ void wgmma_tile(const typename T::Elem* Qs, const typename T::Elem* Ks,
                                           const typename T::Elem* Vs, int group, int k0, float scale_log2,
                                           bool prescale, bool masked, const int limit[2], float (&o)[D / 8][4],
                                           float m[2], float l[2]) {
    float s[WG_KEYS / 8][4];
    issue_scores<T, D>(s, Qs, Ks, group);
    wgmma_wait<0>();
    wgmma_fence_operands(flat<WG_KEYS / 2>(s));
    float alpha[2];
    softmax_scores<WG_KEYS>(s, m, l, alpha, scale_log2, prescale, masked, k0, limit);
    rescale_rows<D>(o, alpha);
    u32 p[WG_KEYS / 16][4];
    pack_p<T>(p, s);
    issue_pv<T, D>(o, p, Vs);
    wgmma_wait<0>();
    wgmma_fence_operands(flat<D / 2>(o));
}

// Query rows q0 .. q0 + 127 of one (batch, head) against its keys: warpgroup w takes rows
// q0 + 64w .. q0 + 64w + 63, warp i of it 16 of them. Each warp's O, m and l end in o, m, l.
template <class T, int D>
__device__ __forceinline__ void wgmma_forward(const typename T::Elem* __restrict__ q_head,
                                              const typename T::Elem* __restrict__ k_head,
                                              const typename T::Elem* __restrict__ v_head, int n_q, int n_k, int q0,
                                              float scale_log2, int causal, unsigned char* shared,
                                              float (&o)[D / 8][4], float m[2], float l[2]) {
    typedef typename T::Elem Elem;
    constexpr int TILE = WG_KEYS * D;                 // elements of one K or V tile
    Elem* Qs = reinterpret_cast<Elem*>(shared);       // [D / 64][128][64]
    Elem* stages = Qs + WG_BLOCK_Q * D;               // stage s: K at 2s TILE, V at (2s + 1) TILE, each [D / 64][KEYS][64]
    const GroupKeys keys = group_keys(q0, n_q, n_k, causal);
    const bool prescale = !(scale_log2 > 0.0f);

    if (keys.block_end > 0) {   // Q and key tile 0 -> stage 0, one group
        issue_blocks<Elem, D, WG_BLOCK_Q>(Qs, q_head, D, q0, n_q);
        issue_blocks<Elem, D, WG_KEYS>(stages, k_head, D, 0, n_k);
        issue_blocks<Elem, D, WG_KEYS>(stages + TILE, v_head, D, 0, n_k);
        cp_async_commit_group();
    }
    start_rows<D>(o, m, l);

    for (int k0 = 0, stage = 0; k0 < keys.block_end; k0 += WG_KEYS, stage ^= 1) {
        cp_async_wait_all_groups();   // this thread's copies of tile k0 (and Q) have landed
        fence_proxy_async();          // ... where the tensor cores will read them
        __syncthreads();              // everyone's have; and every warpgroup is done with the other stage
        if (k0 + WG_KEYS < keys.block_end) {
            Elem* next = stages + 2 * (stage ^ 1) * TILE;
            issue_blocks<Elem, D, WG_KEYS>(next, k_head, D, k0 + WG_KEYS, n_k);
            issue_blocks<Elem, D, WG_KEYS>(next + TILE, v_head, D, k0 + WG_KEYS, n_k);
            cp_async_commit_group();
        }
        if (k0 >= keys.group_end) continue;   // no row of this warpgroup sees a key of this tile
        wgmma_tile<T, D>(Qs, stages + 2 * stage * TILE, stages + (2 * stage + 1) * TILE, keys.group, k0, scale_log2,
                         prescale, k0 + WG_KEYS > keys.unmasked_end, keys.limit, o, m, l);
    }
}
