// decode_mma.cuh — split-K decoding with the heads of a kv head on tensor cores, over a cache the
// caller describes: the body of attention_06_decode_mma, with the keys of a (batch, kv head) found
// through a Cache policy instead of one contiguous [n_k][D] array. Used by attention_08_paged_decode
// (PagedCache: pages through a page table, one length per sequence); never pasted.
//
// A Cache policy gives, for a batch b and a split s of gridDim.x:
//   length(b)            the keys of sequence b (its causal diagonal is aligned to it)
//   valid(b)             false when sequence b's length is wrong: its rows come out NaN
//   range(b, s)          the keys [begin, end) of split s (begin >= end: an empty split)
//   step(b, h, j0, bad)  what the policy looks up once for a warp's step of keys j0 .. j0 + 15
//                        (j0 a multiple of 16, below the sequence's length), passed back below
//   k_row(b, h, j, j0, at, bad), v_row(...)   the D 16-bit elements of key j of kv head h (j in
//                        the step of j0, whose lookup is `at`), 16-byte aligned
// A lookup that finds a wrong entry sets `bad` (and points at a harmless row): a warp that saw
// one, or a block of an invalid sequence, turns its rows' sums to NaN, so the rows come out NaN.
// The rows a block takes, the fragments, the online softmax and the block's finish are those of
// attention_06_decode_mma (its header explains them); an empty split writes the merge's identity
// (LSE -inf), and a sequence of length 0 gives zeros and LSE -inf.
#pragma once
#include "decode_merge.cuh"
#include "mma.cuh"

#define DECODE_MMA_WARPS 4
#define DECODE_MMA_ROWS 8    // the n of m16n8k16: query rows of a block
#define DECODE_MMA_KEYS 16   // the m: keys of a warp's step

// The output type as decode_merge.cuh's functions take it: 16-bit words rounded by the mma type's
// conversion (cvt.rn, or the emulator's).
template <class T>
struct MmaOut {
    typedef unsigned short Elem;
    static __device__ __forceinline__ Elem from_float(float f) { return round_to<T>(f); }
};

// The low halves of two words as one word (x's in the low half), and the high halves.
__device__ __forceinline__ u32 low_halves(u32 x, u32 y) { return (x & 0xffffu) | (y << 16); }
__device__ __forceinline__ u32 high_halves(u32 x, u32 y) { return (x >> 16) | (y & 0xffff0000u); }

// N 16-bit elements from p (16-byte aligned) as N / 2 words, in 16-byte loads; zeros when !valid.
template <int N>
__device__ __forceinline__ void load_words(const unsigned short* __restrict__ p, bool valid, u32 (&w)[N / 2]) {
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
        const int4 x = valid ? __ldg(reinterpret_cast<const int4*>(p) + i) : make_int4(0, 0, 0, 0);
        w[4 * i + 0] = static_cast<u32>(x.x); w[4 * i + 1] = static_cast<u32>(x.y);
        w[4 * i + 2] = static_cast<u32>(x.z); w[4 * i + 3] = static_cast<u32>(x.w);
    }
}

template <class T, int D, class Cache>
__device__ __forceinline__ void decode_mma_cache(const unsigned short* __restrict__ q, const Cache& cache,
                                                 float* __restrict__ o_part, float* __restrict__ lse_part,
                                                 unsigned short* __restrict__ out, float* __restrict__ lse, int heads,
                                                 int kv_heads, int n_q, float scale_log2, int causal) {
    constexpr int KK = D / 16;   // k-steps of S^T, and m-tiles of O^T
    constexpr int KD = D / 4;    // dims of a K (and Q) row a lane loads: quad lane t owns [KD t, KD t + KD)
    constexpr int VD = D / 8;    // dims of a V row a lane loads: lane group g owns [VD g, VD g + VD)
    __shared__ float partial[DECODE_MMA_WARPS][DECODE_MMA_ROWS][D + 2];   // O, then m and l
    dependents_may_launch();   // the merge kernel may be scheduled once every block has started
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int split = blockIdx.x, batch = blockIdx.z;
    const int group_size = heads / kv_heads, rows_per_kv = group_size * n_q;
    const int row_chunks = (rows_per_kv + DECODE_MMA_ROWS - 1) / DECODE_MMA_ROWS;
    const int kv_head = blockIdx.y / row_chunks, row0 = (blockIdx.y % row_chunks) * DECODE_MMA_ROWS;
    const int n_k = cache.length(batch);

    // Q^T as B fragments (k = dims, n = rows): column g is row row0 + g; b[0] of k-step kk holds
    // the lane's dims KD t + 4 kk + {0, 1}, b[1] dims + {2, 3} (zeros for a row past the last).
    u32 qb[KK][2];
    {
        const int row = row0 + g, head = kv_head * group_size + row / n_q, query = row % n_q;
        u32 w[KD / 2];
        load_words<KD>(q + ((long long)(batch * heads + head) * n_q + query) * D + KD * t, row < rows_per_kv, w);
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) { qb[kk][0] = w[2 * kk]; qb[kk][1] = w[2 * kk + 1]; }
    }
    // The lane's two rows of S^T and O^T are columns 2t and 2t + 1: their state and key limits.
    int begin, end;
    cache.range(batch, split, begin, end);
    bool bad = !cache.valid(batch);
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
    int limit[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int row = row0 + 2 * t + e, query = row % n_q;
        limit[e] = row < rows_per_kv && causal ? min(end, query + 1 + n_k - n_q) : end;
    }
    float o[KK][4];
#pragma unroll
    for (int mm = 0; mm < KK; ++mm) o[mm][0] = o[mm][1] = o[mm][2] = o[mm][3] = 0.0f;

    for (int j0 = begin + DECODE_MMA_KEYS * warp; j0 < end; j0 += DECODE_MMA_KEYS * DECODE_MMA_WARPS) {
        // K rows j0 + g and j0 + g + 8 (the A fragment's two rows), the lane's KD dims of each;
        // V rows j0 + 2t, 2t + 1, 2t + 8, 2t + 9 (the B side's keys), the lane's VD dims of each.
        u32 kw[2][KD / 2], vw[4][VD / 2];
        const long long at = cache.step(batch, kv_head, j0, bad);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int key = j0 + g + 8 * h;
            load_words<KD>(key < end ? cache.k_row(batch, kv_head, key, j0, at, bad) + KD * t : q, key < end, kw[h]);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int key = j0 + 2 * t + (c & 1) + 8 * (c >> 1);
            load_words<VD>(key < end ? cache.v_row(batch, kv_head, key, j0, at, bad) + VD * g : q, key < end, vw[c]);
        }
        // S^T = K Q^T: the A fragment of k-step kk is the lane's words 2kk and 2kk + 1 of both rows.
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) {
            const u32 a[4] = {kw[0][2 * kk], kw[1][2 * kk], kw[0][2 * kk + 1], kw[1][2 * kk + 1]};
            T::mma(s, a, qb[kk]);
        }
        // The online softmax on s: s[e] is (key j0 + g + 8 (e >> 1), row 2t + (e & 1)).
        float alpha[2];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[e] *= scale_log2;
            if (j0 + g + 8 * (e >> 1) >= limit[e & 1]) s[e] = neg_inf();
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float tile_max = fmaxf(s[r], s[r + 2]);
#pragma unroll
            for (int offset = 4; offset < 32; offset <<= 1)   // the 8 lane groups hold the 16 keys
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
            const float m_new = fmaxf(m[r], tile_max);
            const float base = online_base(m_new);
            alpha[r] = exp2f(m[r] - base);
            s[r] = exp2f(s[r] - base);
            s[r + 2] = exp2f(s[r + 2] - base);
            l[r] = l[r] * alpha[r] + (s[r] + s[r + 2]);   // this lane's two keys; summed over g at the end
            m[r] = m_new;
        }
        // P^T as the B fragment (k = keys, n = rows): lane (g, t) needs keys 2t, 2t + 1 (b[0]) and
        // 2t + 8, 2t + 9 (b[1]) of row g, which lanes 8t + g/2 and 8t + 4 + g/2 hold (row g is their
        // column 2 (g/2) + g % 2: the low or high half of their packed pair).
        const u32 p_low = T::pack(s[0], s[1]), p_high = T::pack(s[2], s[3]);   // keys g and g + 8
        const int from0 = 8 * t + (g >> 1), from1 = from0 + 4;
        const u32 x0 = __shfl_sync(0xffffffffu, p_low, from0), x1 = __shfl_sync(0xffffffffu, p_low, from1);
        const u32 y0 = __shfl_sync(0xffffffffu, p_high, from0), y1 = __shfl_sync(0xffffffffu, p_high, from1);
        const u32 b[2] = {(g & 1) ? high_halves(x0, x1) : low_halves(x0, x1),
                          (g & 1) ? high_halves(y0, y1) : low_halves(y0, y1)};
        // O^T = O^T alpha + V^T P^T. m-tile mm's rows g and g + 8 are dims VD g + 2mm and + 1: the
        // lane's V word mm of each key holds both, so its A fragment is two pairs of keys repacked.
#pragma unroll
        for (int mm = 0; mm < KK; ++mm) {
            o[mm][0] *= alpha[0]; o[mm][1] *= alpha[1]; o[mm][2] *= alpha[0]; o[mm][3] *= alpha[1];
            const u32 a[4] = {low_halves(vw[0][mm], vw[1][mm]), high_halves(vw[0][mm], vw[1][mm]),
                              low_halves(vw[2][mm], vw[3][mm]), high_halves(vw[2][mm], vw[3][mm])};
            T::mma(o[mm], a, b);
        }
    }

    // The warp's state into shared memory: l summed over the 8 lane groups; o[mm][e] is dim
    // VD g + 2mm + (e >> 1) of row 2t + (e & 1). A wrong entry seen by any lane: NaN sums.
    if (__any_sync(0xffffffffu, bad)) l[0] = l[1] = __int_as_float(0x7fffffff);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int offset = 4; offset < 32; offset <<= 1) l[r] += __shfl_xor_sync(0xffffffffu, l[r], offset);
#pragma unroll
    for (int mm = 0; mm < KK; ++mm)
#pragma unroll
        for (int e = 0; e < 4; ++e) partial[warp][2 * t + (e & 1)][VD * g + 2 * mm + (e >> 1)] = o[mm][e];
    if (g == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) { partial[warp][2 * t + r][D] = m[r]; partial[warp][2 * t + r][D + 1] = l[r]; }
    }
    __syncthreads();
    decode_block_finish<MmaOut<T>, D, DECODE_MMA_ROWS, DECODE_MMA_WARPS>(partial, row0, rows_per_kv, batch, heads,
                                                                    kv_head * group_size, n_q, out, lse, o_part,
                                                                    lse_part);
}

