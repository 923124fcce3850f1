// fragment_reuse.cuh — the forward of attention_07_fragment_reuse over one (sequence, head) whose
// rows are wherever a HeadRows says: [batch][heads][n][D] (attention_07) or packed sequences of
// [tokens][heads][D] (attention_09_varlen). How the block and its warps work is told in
// kernels/attention/attention_07_fragment_reuse.cu.
#pragma once
#include "attention_mma.cuh"

#define REUSE_THREADS 128
#define REUSE_WARP_ROWS 32
#ifndef REUSE_KEYS_D128
#define REUSE_KEYS_D128 48   // keys per tile at D = 128: with 64, o, s and Q fragments spill
#endif
#define REUSE_KEYS(D) ((D) == 128 ? REUSE_KEYS_D128 : 64)

// Copy `rows` rows of D 16-bit elements, from row r0 of `head` (n rows in all, row r at
// head + r stride), into a swizzled tile: 16 bytes a thread, coalesced, a pass of
// REUSE_THREADS / (D / 8) rows (a multiple of 8, so every pass has the swizzle of the first and its
// addresses are the first's plus a constant).
// Rows at or past n (only in a last, short tile) are zero-filled by the copy itself.
template <class Elem, int D>
__device__ __forceinline__ void issue_rows(Elem* tile, const Elem* __restrict__ head, int stride, int r0, int rows, int n) {
    constexpr int STEP = REUSE_THREADS / (D / 8);
    static_assert(STEP % 8 == 0, "a pass of whole swizzle periods");
    const int row = threadIdx.x / (D / 8), col = 8 * (threadIdx.x % (D / 8));
    Elem* dst = tile + swizzled<D>(row, col);
    const Elem* src = head + (long long)(r0 + row) * stride + col;
    if (r0 + rows <= n) {   // the whole tile is inside (block-uniform)
#pragma unroll
        for (int c = 0; c < rows / STEP; ++c) cp_async_16_or_zero(dst + c * STEP * D, src + c * STEP * stride, true);
    } else {
#pragma unroll
        for (int c = 0; c < rows / STEP; ++c) {
            const bool inside = r0 + row + c * STEP < n;
            cp_async_16_or_zero(dst + c * STEP * D, inside ? src + c * STEP * stride : head, inside);   // an address inside the tensor
        }
    }
}

// The online softmax of one key tile on the raw score accumulators s[i] of m-tile i (rows g + 16i
// and g + 8 + 16i of the warp: state r = 2i + half). m is in scaled base-2 units; P replaces s.
template <int D, int KEYS>
__device__ __forceinline__ void softmax_two_tiles(float s[2][KEYS / 8][4], float m[4], float l[4], float o[2][D / 8][4],
                                                  float scale_log2, bool prescale, bool masked, int k0,
                                                  int row0, int n_q, int n_k, int causal) {
    const int t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
    const float fold = prescale ? 1.0f : scale_log2;
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (prescale || masked) {   // warp-uniform; prescale only for scale <= 0
#pragma unroll
            for (int j = 0; j < KEYS / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (prescale) s[i][j][e] *= scale_log2;
                    if (masked && k0 + 8 * j + 2 * t + (e & 1) >= key_limit(row0 + g + 16 * i + 8 * (e >> 1), n_q, n_k, causal))
                        s[i][j][e] = neg_inf();
                }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = 2 * i + h;
            float tile_max = neg_inf();
#pragma unroll
            for (int j = 0; j < KEYS / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[i][j][2 * h], s[i][j][2 * h + 1]));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));   // the quad holding the row
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
            const float m_new = fmaxf(m[r], tile_max * fold);   // fold > 0: the max of the scaled scores
            const float base = online_base(m_new);
            alpha[r] = exp2_ftz(m[r] - base);
            float row_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < KEYS / 8; ++j)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    s[i][j][e] = exp2_ftz(__fmul_rn(s[i][j][e], fold) - base);
                    row_sum += s[i][j][e];
                }
            l[r] = l[r] * alpha[r] + row_sum;
            m[r] = m_new;
        }
    }
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f || alpha[2] != 1.0f || alpha[3] != 1.0f)) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                o[i][n][0] *= alpha[2 * i];
                o[i][n][1] *= alpha[2 * i];
                o[i][n][2] *= alpha[2 * i + 1];
                o[i][n][3] *= alpha[2 * i + 1];
            }
    }
}

// Where the rows of one (sequence, head) are: query row r at q + r q_stride, key and value row r
// at k + r kv_stride and v + r kv_stride.
template <class Elem>
struct HeadRows {
    const Elem* q;
    const Elem* k;
    const Elem* v;
    int q_stride, kv_stride, n_q, n_k;
};

// The state a warp ends with: O (two m-tiles of 16 rows), m and l of its four rows per lane.
template <int D>
struct WarpRows {
    float o[2][D / 8][4], m[4], l[4];
};

// Query rows q0 .. q0+127 of one (sequence, head) against its keys, in the block's dynamic shared
// memory `shared`: each warp's unnormalised O, m and l (the caller stores them with store_rows,
// so that where the outputs go is not held in registers through the loop).
template <class T, int D, int KEYS>
__device__ __forceinline__ void fragment_reuse_forward(const HeadRows<typename T::Elem>& rows, int q0,
                                                       float scale_log2, int causal, int4* shared,
                                                       WarpRows<D>& state) {
    typedef typename T::Elem Elem;
    constexpr int TILE = KEYS * D;   // elements of one K or V tile
    Elem* Qs = reinterpret_cast<Elem*>(shared);        // [128][D], swizzled
    Elem* stages = Qs + MMA_BLOCK_Q * D;               // stage s: K at 2s TILE, V at (2s + 1) TILE
    const int n_q = rows.n_q, n_k = rows.n_k;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = q0 + REUSE_WARP_ROWS * warp;
    const int block_end = key_limit(min(q0 + MMA_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    // The warp's key range (warp-uniform); the limit of each row is computed where a tile is masked.
    const int warp_end = row0 < n_q ? key_limit(min(row0 + REUSE_WARP_ROWS, n_q) - 1, n_q, n_k, causal) : 0;
    const int unmasked_end = key_limit(row0, n_q, n_k, causal);
    // Where this lane points ldmatrix, as element offsets into a swizzled tile. For the fragment
    // at 16-column step kk the logical chunk is 2kk + c (c = 0 or 1: no carry), so its swizzled
    // chunk is (2kk) ^ (c ^ row % 8): the offset of step kk is step 0's XOR 16 kk (kk << 4), and
    // rows 8j or 16i further on are a constant added. Q and V point as attention_05's V (rows +8
    // by lane / 8 % 2, chunk +1 by lane / 16), K as attention_05's K (rows +8 by lane / 16, chunk
    // +1 by lane / 8 % 2).
    const int r8 = lane & 7, a_row = r8 + (((lane >> 3) & 1) << 3), a_chunk = (lane >> 4) ^ r8;
    const int q_lane = (REUSE_WARP_ROWS * warp + a_row) * D + (a_chunk << 3);
    const int k_lane = (r8 + ((lane >> 4) << 3)) * D + ((((lane >> 3) & 1) ^ r8) << 3);
    const int v_lane = a_row * D + (a_chunk << 3);
    const bool prescale = !(scale_log2 > 0.0f);

    if (block_end > 0) {   // Q and key tile 0 -> stage 0, one group
        issue_rows<Elem, D>(Qs, rows.q, rows.q_stride, q0, MMA_BLOCK_Q, n_q);
        issue_rows<Elem, D>(stages, rows.k, rows.kv_stride, 0, KEYS, n_k);
        issue_rows<Elem, D>(stages + TILE, rows.v, rows.kv_stride, 0, KEYS, n_k);
        cp_async_commit_group();
    }
    float (&o)[2][D / 8][4] = state.o;
    float* m = state.m;
    float* l = state.l;
#pragma unroll
    for (int r = 0; r < 4; ++r) m[r] = neg_inf(), l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int n = 0; n < D / 8; ++n) o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;

    for (int k0 = 0, stage = 0; k0 < block_end; k0 += KEYS, stage ^= 1) {
        cp_async_wait_all_groups();   // this thread's copies of tile k0 (and Q) have landed
        __syncthreads();              // everyone's have; and every warp is done with the other stage
        if (k0 + KEYS < block_end) {
            Elem* next = stages + (2 * (stage ^ 1)) * TILE;
            issue_rows<Elem, D>(next, rows.k, rows.kv_stride, k0 + KEYS, KEYS, n_k);
            issue_rows<Elem, D>(next + TILE, rows.v, rows.kv_stride, k0 + KEYS, KEYS, n_k);
            cp_async_commit_group();
        }
        if (k0 >= warp_end) continue;   // no row of this warp sees a key of this tile (warp-uniform)
        const int k_at = 2 * stage * TILE + k_lane, v_at = (2 * stage + 1) * TILE + v_lane;   // bits of TILE above the XOR

        float s[2][KEYS / 8][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < KEYS / 8; ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            u32 a[2][4];
            const Elem* q_step = Qs + (q_lane ^ (kk << 4));
            ldmatrix_x4(a[0], q_step);
            ldmatrix_x4(a[1], q_step + 16 * D);
            const Elem* k_step = stages + (k_at ^ (kk << 4));
#pragma unroll
            for (int j = 0; j < KEYS / 8; j += 2) {   // n-tiles j and j + 1: keys 8j .. 8j+15, for both m-tiles
                u32 b[4];
                ldmatrix_x4(b, k_step + 8 * j * D);
                T::mma(s[0][j], a[0], b);
                T::mma(s[0][j + 1], a[0], b + 2);
                T::mma(s[1][j], a[1], b);
                T::mma(s[1][j + 1], a[1], b + 2);
            }
        }
        softmax_two_tiles<D, KEYS>(s, m, l, o, scale_log2, prescale, k0 + KEYS > unmasked_end, k0,
                             row0, n_q, n_k, causal);

#pragma unroll
        for (int kk = 0; kk < KEYS / 16; ++kk) {
            u32 a[2][4];
            p_fragment<T>(a[0], s[0], kk);
            p_fragment<T>(a[1], s[1], kk);
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {   // d n-tiles n and n + 1: columns 8n .. 8n+15
                u32 b[4];
                ldmatrix_x4_trans(b, stages + (v_at ^ (n << 3)) + 16 * kk * D);
                T::mma(o[0][n], a[0], b);
                T::mma(o[0][n + 1], a[0], b + 2);
                T::mma(o[1][n], a[1], b);
                T::mma(o[1][n + 1], a[1], b + 2);
            }
        }
    }
}

// The warp's 32 rows of out (row r at out + r stride) and of lse (null: none), from query row q0.
template <class T, int D>
__device__ __forceinline__ void store_rows(const WarpRows<D>& state, typename T::Elem* out, float* lse, int stride,
                                           int q0, int n_q) {
    const int row0 = q0 + REUSE_WARP_ROWS * (threadIdx.x >> 5);
    store_output<T, D>(state.o[0], state.m, state.l, out, lse, row0, n_q, stride);
    store_output<T, D>(state.o[1], state.m + 2, state.l + 2, out, lse, row0 + 16, n_q, stride);
}

