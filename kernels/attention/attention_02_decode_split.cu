// attention_02_decode_split — decoding attention (a few queries against a long KV cache) with
// the cache split over blocks, each split's (O, LSE) merged by a second kernel (Flash-Decoding).
//
// Changed from attention_01_blocked: with 1 to 8 queries there is no query tile to fill a block
//               and batch x heads blocks leave most SMs idle, so the KV sequence itself is cut
//               into `splits` ranges, one block each. Inside a block, 8 lanes share one key
//               (16 when a block has 4 rows; D / 8 or D / 16 dims each, 16-byte loads where they
//               fill), a warp works on 4 (or 2) keys at a time, and every group of lanes keeps
//               the online state (m, l, O) of each query row of the block over the keys it
//               visits (two keys per step: one rescale per two). The groups' states combine
//               with the chapter 04 combine (a butterfly over the groups of a warp, then
//               across the 4 warps in shared memory). The rows of
//               a block are the queries of one kv head (grouped-query attention: the heads that
//               share it, times n_q), so K and V are read once for all of them; R rows per
//               block (1, 2 or 4; more rows use more blocks).
//               The split writes O / l and its LSE (log2 domain) as fp32 partials; the merge
//               kernel weighs them by 2^(lse_s - max) (chapter 05's merge of (O, LSE) pairs).
//               With one split the first kernel writes the output itself.
// Launch:       split: grid = (splits, kv_heads * row_chunks, batch), block = (128), static
//               shared memory 4 x R x (D + 2) floats. merge: grid = (batch * heads * n_q),
//               block = (D), a programmatic dependent launch on sm_90 (decode_merge.cuh).
// Traffic:      K and V once (the ideal) + q and out; partials 4 (D + 1) B per row and split,
//               written and read once.
// Limits:       q, k, v contiguous, float32, float16 or bfloat16 (entries
//               attention_02_decode_split_<tag>_d<D>_r<R> and attention_02_decode_split_merge_<tag>_d<D>),
//               D = 32, 64, 96, 128; any n_q (meant for n_q <= 8: more queries go to
//               attention_01_blocked), any n_k >= 1; causal bottom-right aligned as in
//               attention_01_blocked. A query that sees no key writes 0 and LSE -inf.
#include "online_rows.cuh"
#include "decode_merge.cuh"

#define WARPS 4
// Lanes that share one key: 8 for R <= 2 rows, 16 for R = 4 (halves the registers that hold q and
// O per lane: 4 rows x D / 8 of each would leave room for two blocks per SM only).
template <int R> struct LanesPerKey { static constexpr int value = R >= 4 ? 16 : 8; };

// A 32-bit word of the storage type as fp32 values (1 float, or 2 halves / bfloat16s).
template <class Row> __device__ __forceinline__ void unpack_word(unsigned int w, float* f);
template <> __device__ __forceinline__ void unpack_word<F32Row>(unsigned int w, float* f) { f[0] = __uint_as_float(w); }
template <> __device__ __forceinline__ void unpack_word<F16Row>(unsigned int w, float* f) { unpack_half2(w, f[0], f[1]); }
template <> __device__ __forceinline__ void unpack_word<BF16Row>(unsigned int w, float* f) {
    f[0] = __uint_as_float(w << 16);
    f[1] = __uint_as_float(w & 0xffff0000u);
}

// N consecutive elements from p into fp32, in 16-byte loads where N elements fill them (8-byte
// otherwise); p is aligned to the load (the launcher checks the arrays' addresses).
template <class Row, int N>
__device__ __forceinline__ void load_slice(const typename Row::Elem* __restrict__ p, float* f) {
    constexpr int BYTES = N * sizeof(typename Row::Elem), PER_WORD = 4 / sizeof(typename Row::Elem);
    if constexpr (BYTES % 16 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; ++i) {
            const uint4 w = __ldg(reinterpret_cast<const uint4*>(p) + i);
            unpack_word<Row>(w.x, f + (4 * i + 0) * PER_WORD); unpack_word<Row>(w.y, f + (4 * i + 1) * PER_WORD);
            unpack_word<Row>(w.z, f + (4 * i + 2) * PER_WORD); unpack_word<Row>(w.w, f + (4 * i + 3) * PER_WORD);
        }
    } else if constexpr (BYTES % 8 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 8; ++i) {
            const uint2 w = __ldg(reinterpret_cast<const uint2*>(p) + i);
            unpack_word<Row>(w.x, f + (2 * i + 0) * PER_WORD); unpack_word<Row>(w.y, f + (2 * i + 1) * PER_WORD);
        }
    } else {
        static_assert(BYTES % 4 == 0, "a lane's slice is a whole number of 4-byte words");
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) unpack_word<Row>(__ldg(reinterpret_cast<const unsigned int*>(p) + i), f + i * PER_WORD);
    }
}

// One (m, l, O[DPL]) per row, combined with another: the chapter 04 combine with a vector O.
template <int DPL>
__device__ __forceinline__ void combine_into(float& m, float& l, float* o, float m_b, float l_b, const float* o_b) {
    const float m_new = fmaxf(m, m_b);
    const float base = m_new == neg_inf() ? 0.0f : m_new;
    const float a = exp2f(m - base), b = exp2f(m_b - base);
    l = l * a + l_b * b;
#pragma unroll
    for (int d = 0; d < DPL; ++d) o[d] = o[d] * a + o_b[d] * b;
    m = m_new;
}

template <class Row, int D, int R>
__device__ __forceinline__ void decode_split(const typename Row::Elem* __restrict__ q,
                                             const typename Row::Elem* __restrict__ k,
                                             const typename Row::Elem* __restrict__ v,
                                             float* __restrict__ o_part, float* __restrict__ lse_part,
                                             typename Row::Elem* __restrict__ out, float* __restrict__ lse,
                                             int heads, int kv_heads, int n_q, int n_k, int keys_per_split,
                                             float scale_log2, int causal) {
    constexpr int LANES_PER_KEY = LanesPerKey<R>::value;
    constexpr int KEYS_PER_STEP = WARPS * 32 / LANES_PER_KEY;   // keys in flight per block step (x2 unrolled)
    constexpr int DPL = D / LANES_PER_KEY;                       // dims per lane
    __shared__ float partial[WARPS][R][D + 2];                   // O, then m and l
    dependents_may_launch();   // the merge kernel may be scheduled once every block has started
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int sub = lane % LANES_PER_KEY, group = lane / LANES_PER_KEY;
    const int split = blockIdx.x, batch = blockIdx.z;
    const int group_size = heads / kv_heads;
    const int rows_per_kv = group_size * n_q;                    // rows of one kv head: (head in group, query)
    const int row_chunks = (rows_per_kv + R - 1) / R;
    const int kv_head = blockIdx.y / row_chunks, row0 = (blockIdx.y % row_chunks) * R;
    const long long kv_offset = ((long long)(batch * kv_heads + kv_head) * n_k) * D;

    // This block's rows: q pre-scaled into the log2 domain, the dims of this lane only.
    float qr[R][DPL];
    int limit[R];           // keys j < limit[r] are visible to row r (0 for a row past the last)
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int row = row0 + r;
        const int head = kv_head * group_size + row / n_q, query = row % n_q;
        limit[r] = row < rows_per_kv ? (causal ? min(n_k, query + 1 + n_k - n_q) : n_k) : 0;
        if (row < rows_per_kv) {
            load_slice<Row, DPL>(q + ((long long)(batch * heads + head) * n_q + query) * D + sub * DPL, qr[r]);
#pragma unroll
            for (int d = 0; d < DPL; ++d) qr[r][d] *= scale_log2;
        } else {
#pragma unroll
            for (int d = 0; d < DPL; ++d) qr[r][d] = 0.0f;
        }
    }

    float m[R], l[R], o[R][DPL];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        m[r] = neg_inf(); l[r] = 0.0f;
#pragma unroll
        for (int d = 0; d < DPL; ++d) o[r][d] = 0.0f;
    }

    const int begin = split * keys_per_split, end = min(n_k, begin + keys_per_split);
    // The lanes of a key run the loop the same number of times, the groups of a warp not always
    // (the last keys of a split): the dot-product shuffles name only the group's lanes.
    const unsigned int group_lanes = ((1u << LANES_PER_KEY) - 1u) << (group * LANES_PER_KEY);
    for (int j0 = begin + warp * (32 / LANES_PER_KEY) + group; j0 < end; j0 += 2 * KEYS_PER_STEP) {
        const int j1 = j0 + KEYS_PER_STEP;
        const bool has1 = j1 < end;
        float k0v[DPL], k1v[DPL], v0v[DPL], v1v[DPL];
        load_slice<Row, DPL>(k + kv_offset + (long long)j0 * D + sub * DPL, k0v);
        load_slice<Row, DPL>(v + kv_offset + (long long)j0 * D + sub * DPL, v0v);
        if (has1) {
            load_slice<Row, DPL>(k + kv_offset + (long long)j1 * D + sub * DPL, k1v);
            load_slice<Row, DPL>(v + kv_offset + (long long)j1 * D + sub * DPL, v1v);
        } else {
#pragma unroll
            for (int d = 0; d < DPL; ++d) { k1v[d] = 0.0f; v1v[d] = 0.0f; }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int d = 0; d < DPL; ++d) { s0 = fmaf(qr[r][d], k0v[d], s0); s1 = fmaf(qr[r][d], k1v[d], s1); }
#pragma unroll
            for (int offset = LANES_PER_KEY / 2; offset >= 1; offset /= 2) {   // inside the lanes of a key
                s0 += __shfl_xor_sync(group_lanes, s0, offset);
                s1 += __shfl_xor_sync(group_lanes, s1, offset);
            }
            if (j0 >= limit[r]) s0 = neg_inf();
            if (!has1 || j1 >= limit[r]) s1 = neg_inf();
            const float m_new = fmaxf(m[r], fmaxf(s0, s1));
            const float base = m_new == neg_inf() ? 0.0f : m_new;
            const float alpha = exp2f(m[r] - base), p0 = exp2f(s0 - base), p1 = exp2f(s1 - base);
            l[r] = l[r] * alpha + (p0 + p1);
#pragma unroll
            for (int d = 0; d < DPL; ++d) o[r][d] = fmaf(o[r][d], alpha, fmaf(p0, v0v[d], p1 * v1v[d]));
            m[r] = m_new;
        }
    }

    // The key groups of a warp: butterfly over lanes LANES_PER_KEY .. 16 apart (same dims, other keys).
#pragma unroll
    for (int offset = LANES_PER_KEY; offset < 32; offset *= 2) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float o_b[DPL];
#pragma unroll
            for (int d = 0; d < DPL; ++d) o_b[d] = __shfl_xor_sync(0xffffffffu, o[r][d], offset);
            const float m_b = __shfl_xor_sync(0xffffffffu, m[r], offset);
            const float l_b = __shfl_xor_sync(0xffffffffu, l[r], offset);
            combine_into<DPL>(m[r], l[r], o[r], m_b, l_b, o_b);
        }
    }
    if (group == 0) {   // the first group's lanes hold the warp's states (partners may differ in the last bit: one copy is used)
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int d = 0; d < DPL; ++d) partial[warp][r][sub * DPL + d] = o[r][d];
            if (sub == 0) { partial[warp][r][D] = m[r]; partial[warp][r][D + 1] = l[r]; }
        }
    }
    __syncthreads();

    // The 4 warps' states: thread t finishes dims t, t + 128, ... of every row.
    decode_block_finish<Row, D, R, WARPS>(partial, row0, rows_per_kv, batch, heads, kv_head * group_size, n_q,
                                          out, lse, o_part, lse_part);
}

#define ATTENTION_02_SPLIT(TAG, ROW, D, R)                                                                \
    extern "C" __global__ void __launch_bounds__(128, R == 2 ? 2 : 4) attention_02_decode_split_##TAG##_d##D##_r##R(     \
        const ROW::Elem* __restrict__ q, const ROW::Elem* __restrict__ k, const ROW::Elem* __restrict__ v, \
        float* __restrict__ o_part, float* __restrict__ lse_part, ROW::Elem* __restrict__ out,          \
        float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k, int keys_per_split,          \
        float scale_log2, int causal) {                                                                  \
        decode_split<ROW, D, R>(q, k, v, o_part, lse_part, out, lse, heads, kv_heads, n_q, n_k,          \
                                keys_per_split, scale_log2, causal);                                     \
    }
#define ATTENTION_02_MERGE(TAG, ROW, D)                                                                   \
    extern "C" __global__ void attention_02_decode_split_merge_##TAG##_d##D(                                    \
        const float* __restrict__ o_part, const float* __restrict__ lse_part, ROW::Elem* __restrict__ out, \
        float* __restrict__ lse, int splits) {                                                           \
        decode_merge<ROW, D>(o_part, lse_part, out, lse, splits);                                        \
    }
#define ATTENTION_02_D(TAG, ROW, D) \
    ATTENTION_02_SPLIT(TAG, ROW, D, 1) ATTENTION_02_SPLIT(TAG, ROW, D, 2) ATTENTION_02_SPLIT(TAG, ROW, D, 4) \
    ATTENTION_02_MERGE(TAG, ROW, D)
#define ATTENTION_02_ALL_D(TAG, ROW) \
    ATTENTION_02_D(TAG, ROW, 32) ATTENTION_02_D(TAG, ROW, 64) ATTENTION_02_D(TAG, ROW, 96) ATTENTION_02_D(TAG, ROW, 128)

ATTENTION_02_ALL_D(f32, F32Row)
ATTENTION_02_ALL_D(f16, F16Row)
ATTENTION_02_ALL_D(bf16, BF16Row)
