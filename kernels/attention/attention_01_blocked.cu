// attention_01_blocked — softmax(q k^T * scale) v without the score matrix: the FlashAttention-2
// forward in fp32 on CUDA cores, one block per (query tile, head, batch).
//
// Changed from the softmax kernels: a row's "logits" are the scores of one query against every
//               key, made tile by tile and never stored. Per query row the block keeps the
//               chapter 05 state (m, l, O): for each tile of BLOCK_K keys
//                   S = Q K^T (scaled), m' = max(m, rowmax S), P = 2^(S - m'),
//                   l' = l 2^(m - m') + rowsum P,  O' = O 2^(m - m') + P V,
//               and O / l once at the end (FA2: one division per row). Scores are kept in the
//               log2 domain (q is pre-multiplied by scale * log2(e)) so every exponential is one
//               exp2f; LSE = (m + log2 l) ln 2. The -inf guard of the online kernels: a row whose
//               keys so far are all masked has m = -inf and subtracts 0 instead.
// Launch:       grid = (ceil(n_q / 64), heads, batch), block = (256) as 16 x 16 threads;
//               thread (ty, tx) owns query rows 4ty .. 4ty+3, score columns 4tx .. 4tx+3 and
//               output columns tx, tx + 16, ... (D / 16 of them). Dynamic shared memory
//               (2 D (64 + 4) + 64 D + 64 (64 + 4)) floats: Q and K transposed (padded rows),
//               V as it is, P transposed; 117 KB at D = 128 (above the 48 KB default: the
//               launcher raises the limit).
// Traffic:      q and out once; each K and V tile once per query tile (n_q / 64 times in all,
//               from L2 when they fit). FLOPs: 4 n_q n_k D per head (half with causal).
// Limits:       q, k, v contiguous (batch, heads, seq, D) / (batch, kv_heads, seq, D) in float32,
//               float16 or bfloat16 (entries attention_01_blocked_<tag>_d<D>, D = 32, 64, 96, 128);
//               heads a multiple of kv_heads; any n_q, n_k >= 1. causal is aligned to the
//               bottom-right corner: query i sees keys j < i + 1 + n_k - n_q; key tiles past the
//               last visible key of a query tile are skipped. A query that sees no key writes 0
//               and LSE -inf.
#include "online_rows.cuh"

#define BLOCK_Q 64
#define BLOCK_K 64
#define PAD 4                       // keeps float4 rows 16-byte aligned and spreads the banks
#define LD (BLOCK_Q + PAD)          // row length of the transposed tiles Qt, Kt and Pt

template <class Row, int D>
__device__ __forceinline__ void attention_blocked(const typename Row::Elem* __restrict__ q,
                                                  const typename Row::Elem* __restrict__ k,
                                                  const typename Row::Elem* __restrict__ v,
                                                  typename Row::Elem* __restrict__ out, float* __restrict__ lse,
                                                  int heads, int kv_heads, int n_q, int n_k,
                                                  float scale_log2, int causal) {
    extern __shared__ float4 shared_raw[];
    float* Qt = reinterpret_cast<float*>(shared_raw);   // [D][LD]: Qt[d][r] = q[r][d] * scale_log2
    float* Kt = Qt + D * LD;                             // [D][LD]: Kt[d][j] = k[j][d]
    float* Vs = Kt + D * LD;                             // [BLOCK_K][D]
    float* Pt = Vs + BLOCK_K * D;                        // [BLOCK_K][LD]: Pt[j][r] = P[r][j]

    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int q0 = blockIdx.x * BLOCK_Q, head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / (heads / kv_heads);
    const typename Row::Elem* q_head = q + ((long long)(batch * heads + head) * n_q) * D;
    const typename Row::Elem* k_head = k + ((long long)(batch * kv_heads + kv_head) * n_k) * D;
    const typename Row::Elem* v_head = v + ((long long)(batch * kv_heads + kv_head) * n_k) * D;

    for (int i = threadIdx.x; i < BLOCK_Q * D; i += blockDim.x) {   // coalesced along d
        const int r = i / D, d = i % D;
        Qt[d * LD + r] = q0 + r < n_q ? Row::load1(q_head + (long long)(q0 + r) * D + d) * scale_log2 : 0.0f;
    }

    // Keys visible to the tile's last row: with causal, later key tiles are skipped whole.
    const int last_row = min(q0 + BLOCK_Q, n_q) - 1;
    const int kv_end = causal ? min(n_k, last_row + 1 + n_k - n_q) : n_k;

    float m[4], l[4], o[4][D / 16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        m[i] = neg_inf(); l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 16; ++c) o[i][c] = 0.0f;
    }

    for (int k0 = 0; k0 < kv_end; k0 += BLOCK_K) {
        __syncthreads();   // every thread is done with the previous tile's Kt, Vs and Pt (and Qt is written)
        for (int i = threadIdx.x; i < BLOCK_K * D; i += blockDim.x) {
            const int j = i / D, d = i % D;
            const bool inside = k0 + j < n_k;    // the last tile may be short: zeros, masked below
            Kt[d * LD + j] = inside ? Row::load1(k_head + (long long)(k0 + j) * D + d) : 0.0f;
            Vs[j * D + d] = inside ? Row::load1(v_head + (long long)(k0 + j) * D + d) : 0.0f;
        }
        __syncthreads();

        float s[4][4] = {};
#pragma unroll 8
        for (int d = 0; d < D; ++d) {
            const float4 a = *reinterpret_cast<const float4*>(Qt + d * LD + 4 * ty);
            const float4 b = *reinterpret_cast<const float4*>(Kt + d * LD + 4 * tx);
            const float qa[4] = {a.x, a.y, a.z, a.w}, kb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) s[i][j] = fmaf(qa[i], kb[j], s[i][j]);
        }

#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = q0 + 4 * ty + i;
            const int limit = causal ? min(n_k, row + 1 + n_k - n_q) : n_k;   // keys j < limit are visible
            float tile_max = neg_inf();
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (k0 + 4 * tx + j >= limit) s[i][j] = neg_inf();
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            // the 16 threads of a row are 16 consecutive lanes: a butterfly inside the half-warp
#pragma unroll
            for (int offset = 8; offset >= 1; offset /= 2)
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
            const float m_new = fmaxf(m[i], tile_max);
            const float base = m_new == neg_inf() ? 0.0f : m_new;   // all masked so far: 2^(-inf - 0) = 0
            float row_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                s[i][j] = exp2f(s[i][j] - base);
                row_sum += s[i][j];
            }
#pragma unroll
            for (int offset = 8; offset >= 1; offset /= 2)
                row_sum += __shfl_xor_sync(0xffffffffu, row_sum, offset);
            const float alpha = exp2f(m[i] - base);
            l[i] = l[i] * alpha + row_sum;
#pragma unroll
            for (int c = 0; c < D / 16; ++c) o[i][c] *= alpha;
            m[i] = m_new;
#pragma unroll
            for (int j = 0; j < 4; ++j) Pt[(4 * tx + j) * LD + 4 * ty + i] = s[i][j];
        }
        __syncthreads();   // P complete before any thread multiplies it by V

        const int keys = min(BLOCK_K, kv_end - k0);
        for (int j = 0; j < keys; ++j) {
            const float4 p = *reinterpret_cast<const float4*>(Pt + j * LD + 4 * ty);
            const float pr[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int c = 0; c < D / 16; ++c) {
                const float vj = Vs[j * D + tx + 16 * c];
#pragma unroll
                for (int i = 0; i < 4; ++i) o[i][c] = fmaf(pr[i], vj, o[i][c]);
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = q0 + 4 * ty + i;
        if (row >= n_q) continue;
        const float inv = l[i] != 0.0f ? 1.0f / l[i] : 0.0f;   // a query that sees no key: 0
        typename Row::Elem* out_row = out + ((long long)(batch * heads + head) * n_q + row) * D;
#pragma unroll
        for (int c = 0; c < D / 16; ++c) out_row[tx + 16 * c] = Row::from_float(o[i][c] * inv);
        if (tx == 0 && lse != nullptr)
            lse[(long long)(batch * heads + head) * n_q + row] =
                l[i] != 0.0f ? (m[i] + log2f(l[i])) * 0.69314718056f : neg_inf();
    }
}

#define ATTENTION_01(TAG, ROW, D)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) attention_01_blocked_##TAG##_d##D(                  \
        const ROW::Elem* __restrict__ q, const ROW::Elem* __restrict__ k, const ROW::Elem* __restrict__ v, \
        ROW::Elem* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,  \
        float scale_log2, int causal) {                                                                   \
        attention_blocked<ROW, D>(q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal);      \
    }
#define ATTENTION_01_ALL_D(TAG, ROW) \
    ATTENTION_01(TAG, ROW, 32) ATTENTION_01(TAG, ROW, 64) ATTENTION_01(TAG, ROW, 96) ATTENTION_01(TAG, ROW, 128)

ATTENTION_01_ALL_D(f32, F32Row)
ATTENTION_01_ALL_D(f16, F16Row)
ATTENTION_01_ALL_D(bf16, BF16Row)
