// attention_backward_01_blocked — the gradients of attention (dq, dk, dv) from its output and the LSE
// the forward saved: the FlashAttention-2 backward in fp32 on CUDA cores, no score matrix stored.
//
// For one query row with scores s_j = scale q.k_j, P_j = e^{s_j - LSE} (the forward's softmax,
// recomputed from the saved LSE: no normaliser to find again) and output O = sum_j P_j v_j:
//   dv_j += P_j dO                   dP_j = dO . v_j
//   D     = dO . O  (= sum_j P_j dP_j, one number per row: the "dot" kernel below)
//   dS_j  = P_j (dP_j - D)           dq += scale sum_j dS_j k_j      dk_j += scale dS_j q
// A block owns BLOCK_K keys of one kv head: it keeps their dk and dv in registers and walks every
// query tile of every query head that reads the kv head (grouped heads add into the same dk, dv),
// recomputing P and dS tile by tile; with causal, query tiles that see none of its keys are skipped.
// dq of a query row gathers from every key block: by fp32 atomicAdd into a zeroed fp32 buffer, or,
// deterministic, by the "dq" kernel, one block per query tile walking the key tiles in order (the
// same P and dS recomputed once more; no atomics, the same bits on every run).
// Scores are in the log2 domain as in attention_01_blocked: P = 2^(s log2 e - LSE log2 e). A row
// whose LSE is -inf saw no key in the forward: P = 0, so its gradients are 0.
// Launch:       dot: grid = (rows), block = (32), rows = batch heads n_q. keys: grid = (ceil(n_k / 32),
//               kv_heads, batch), block = (256) as 16 x 16 threads; dynamic shared memory 4 D (32 + 1)
//               + 2 x 32 (32 + 1) + 64 floats (Q, dO, K, V transposed; P and dS; the tile's LSE and
//               D). dq: grid = (ceil(n_q / 32), heads, batch), the same block and shared memory.
// Traffic:      q, k, v, out and dout once per pass, each K/V tile once per query tile of its group
//               (from L2 while they fit); dq 2 x 4 B per element and key block with atomics.
// Limits:       q, k, v, out, dout contiguous (batch, heads, seq, D) / (batch, kv_heads, seq, D), float32,
//               float16 or bfloat16, D = 64 or 128 (entries attention_backward_01_blocked_<kind>_<tag>_d<D>);
//               lse float32 (batch, heads, n_q) in natural log as the forward writes it; heads a
//               multiple of kv_heads; any n_q, n_k >= 1; causal bottom-right aligned (query i sees
//               keys j <= i + n_k - n_q). dq_acc float32, zeroed by the caller, when atomics are used.
#include "row_dot.cuh"

#define BWD_Q 32
#define BWD_K 32
#define BWD_LD 33                   // padded rows of the transposed tiles: lanes of one dim spread over banks
#define BWD_LOG2E 1.4426950408889634f

// The shared tiles of a block: Qt and dOt (a query tile), Kt and Vt (a key tile), transposed
// [D][BWD_LD]; Pt and dSt [key][query]; the query tile's LSE (log2) and D.
template <int D>
struct BackwardTiles {
    float* Qt; float* dOt; float* Kt; float* Vt; float* Pt; float* dSt; float* lse2; float* delta;
    __device__ __forceinline__ BackwardTiles(float* base) {
        Qt = base; dOt = Qt + D * BWD_LD; Kt = dOt + D * BWD_LD; Vt = Kt + D * BWD_LD;
        Pt = Vt + D * BWD_LD; dSt = Pt + BWD_K * BWD_LD; lse2 = dSt + BWD_K * BWD_LD; delta = lse2 + BWD_Q;
    }
};

// Rows [first, first + count) of a (seq, D) matrix into a transposed tile (zeros past `count`).
template <class Row, int D>
__device__ __forceinline__ void load_transposed(float* tile, const typename Row::Elem* __restrict__ src, int first,
                                                int count) {
    for (int i = threadIdx.x; i < 32 * D; i += blockDim.x) {
        const int r = i / D, d = i % D;
        tile[d * BWD_LD + r] = r < count ? Row::load1(src + (long long)(first + r) * D + d) : 0.0f;
    }
}

// The query tile's LSE (log2 domain; -inf for a row that saw no key) and D.
__device__ __forceinline__ void load_row_stats(float* lse2, float* delta, const float* __restrict__ lse,
                                               const float* __restrict__ row_delta, int first, int count) {
    if (threadIdx.x < BWD_Q) {
        const int r = threadIdx.x;
        lse2[r] = r < count ? lse[first + r] * BWD_LOG2E : neg_inf();
        delta[r] = r < count ? row_delta[first + r] : 0.0f;
    }
}

// P and dS of the query tile at q0 against the key tile at k0: thread (ty, tx) computes queries
// 2ty, 2ty + 1 x keys 2tx, 2tx + 1 and writes them to Pt[key][query] and dSt[key][query].
template <int D>
__device__ __forceinline__ void tile_p_and_ds(const BackwardTiles<D>& t, int q0, int k0, int n_q, int n_k,
                                              float scale_log2, int causal) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float s[2][2] = {}, dp[2][2] = {};
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
        const float qa[2] = {t.Qt[d * BWD_LD + 2 * ty], t.Qt[d * BWD_LD + 2 * ty + 1]};
        const float ga[2] = {t.dOt[d * BWD_LD + 2 * ty], t.dOt[d * BWD_LD + 2 * ty + 1]};
        const float kb[2] = {t.Kt[d * BWD_LD + 2 * tx], t.Kt[d * BWD_LD + 2 * tx + 1]};
        const float vb[2] = {t.Vt[d * BWD_LD + 2 * tx], t.Vt[d * BWD_LD + 2 * tx + 1]};
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                s[i][j] = fmaf(qa[i], kb[j], s[i][j]);
                dp[i][j] = fmaf(ga[i], vb[j], dp[i][j]);
            }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int r = 2 * ty + i, c = 2 * tx + j, row = q0 + r, key = k0 + c;
            const bool seen = row < n_q && key < n_k && (!causal || key <= row + n_k - n_q) && t.lse2[r] != neg_inf();
            const float p = seen ? exp2f(s[i][j] * scale_log2 - t.lse2[r]) : 0.0f;
            t.Pt[c * BWD_LD + r] = p;
            t.dSt[c * BWD_LD + r] = p * (dp[i][j] - t.delta[r]);
        }
}

// keys: one block per (key tile, kv head, batch): dk and dv of its keys; dq by atomics unless dq_acc is null.
template <class Row, int D>
__device__ __forceinline__ void attention_backward_keys(
    const typename Row::Elem* __restrict__ q, const typename Row::Elem* __restrict__ k,
    const typename Row::Elem* __restrict__ v, const typename Row::Elem* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq_acc,
    typename Row::Elem* __restrict__ dk, typename Row::Elem* __restrict__ dv, int heads, int kv_heads, int n_q,
    int n_k, float scale, int causal) {
    extern __shared__ float4 shared_raw[];
    const BackwardTiles<D> t(reinterpret_cast<float*>(shared_raw));
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int k0 = blockIdx.x * BWD_K, kv_head = blockIdx.y, batch = blockIdx.z;
    const int group = heads / kv_heads, keys = min(BWD_K, n_k - k0);
    const float scale_log2 = scale * BWD_LOG2E;
    const long long kv_base = (long long)(batch * kv_heads + kv_head) * n_k * D;
    load_transposed<Row, D>(t.Kt, k + kv_base, k0, keys);
    load_transposed<Row, D>(t.Vt, v + kv_base, k0, keys);
    // With causal, query row i sees key k0 only from i = k0 - (n_k - n_q) on: earlier tiles are skipped.
    const int first_row = causal ? max(0, k0 - (n_k - n_q)) : 0;

    float dk_acc[2][D / 16] = {}, dv_acc[2][D / 16] = {};
    for (int h = 0; h < group; ++h) {
        const int head = kv_head * group + h;
        const long long q_base = (long long)(batch * heads + head) * n_q;
        for (int q0 = (first_row / BWD_Q) * BWD_Q; q0 < n_q; q0 += BWD_Q) {
            const int rows = min(BWD_Q, n_q - q0);
            __syncthreads();   // the previous tile's Qt, dOt, Pt and dSt are no longer read
            load_transposed<Row, D>(t.Qt, q + q_base * D, q0, rows);
            load_transposed<Row, D>(t.dOt, dout + q_base * D, q0, rows);
            load_row_stats(t.lse2, t.delta, lse + q_base, delta + q_base, q0, rows);
            __syncthreads();
            tile_p_and_ds<D>(t, q0, k0, n_q, n_k, scale_log2, causal);
            __syncthreads();
            // dv[key] += sum_r P[r][key] dO[r];  dk[key] += sum_r dS[r][key] q[r]  (keys 2ty, 2ty + 1)
            for (int r = 0; r < rows; ++r) {
                const float p[2] = {t.Pt[(2 * ty) * BWD_LD + r], t.Pt[(2 * ty + 1) * BWD_LD + r]};
                const float ds[2] = {t.dSt[(2 * ty) * BWD_LD + r], t.dSt[(2 * ty + 1) * BWD_LD + r]};
#pragma unroll
                for (int c = 0; c < D / 16; ++c) {
                    const float g = t.dOt[(tx + 16 * c) * BWD_LD + r], x = t.Qt[(tx + 16 * c) * BWD_LD + r];
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        dv_acc[i][c] = fmaf(p[i], g, dv_acc[i][c]);
                        dk_acc[i][c] = fmaf(ds[i], x, dk_acc[i][c]);
                    }
                }
            }
            if (dq_acc == nullptr) continue;
            // dq[r] += scale sum_key dS[r][key] k[key]  (queries 2ty, 2ty + 1), added atomically
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r = 2 * ty + i;
                if (r >= rows) continue;
#pragma unroll
                for (int c = 0; c < D / 16; ++c) {
                    float sum = 0.0f;
                    for (int j = 0; j < keys; ++j) sum = fmaf(t.dSt[j * BWD_LD + r], t.Kt[(tx + 16 * c) * BWD_LD + j], sum);
                    atomicAdd(dq_acc + (q_base + q0 + r) * D + tx + 16 * c, sum * scale);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int key = k0 + 2 * ty + i;
        if (key >= n_k) continue;
#pragma unroll
        for (int c = 0; c < D / 16; ++c) {
            dk[kv_base + (long long)key * D + tx + 16 * c] = Row::from_float(dk_acc[i][c] * scale);
            dv[kv_base + (long long)key * D + tx + 16 * c] = Row::from_float(dv_acc[i][c]);
        }
    }
}

// dq, deterministic: one block per (query tile, head, batch) walks the key tiles its rows see, in order.
template <class Row, int D>
__device__ __forceinline__ void attention_backward_queries(
    const typename Row::Elem* __restrict__ q, const typename Row::Elem* __restrict__ k,
    const typename Row::Elem* __restrict__ v, const typename Row::Elem* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, typename Row::Elem* __restrict__ dq, int heads,
    int kv_heads, int n_q, int n_k, float scale, int causal) {
    extern __shared__ float4 shared_raw[];
    const BackwardTiles<D> t(reinterpret_cast<float*>(shared_raw));
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int q0 = blockIdx.x * BWD_Q, head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / (heads / kv_heads), rows = min(BWD_Q, n_q - q0);
    const float scale_log2 = scale * BWD_LOG2E;
    const long long q_base = (long long)(batch * heads + head) * n_q;
    const long long kv_base = (long long)(batch * kv_heads + kv_head) * n_k * D;
    load_transposed<Row, D>(t.Qt, q + q_base * D, q0, rows);
    load_transposed<Row, D>(t.dOt, dout + q_base * D, q0, rows);
    load_row_stats(t.lse2, t.delta, lse + q_base, delta + q_base, q0, rows);
    const int kv_end = causal ? min(n_k, q0 + rows + n_k - n_q) : n_k;   // keys the tile's last row sees
    float dq_acc[2][D / 16] = {};
    for (int k0 = 0; k0 < kv_end; k0 += BWD_K) {
        const int keys = min(BWD_K, n_k - k0);
        __syncthreads();   // the previous key tile's Kt, Vt and dSt are no longer read (and Qt is written)
        load_transposed<Row, D>(t.Kt, k + kv_base, k0, keys);
        load_transposed<Row, D>(t.Vt, v + kv_base, k0, keys);
        __syncthreads();
        tile_p_and_ds<D>(t, q0, k0, n_q, n_k, scale_log2, causal);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int c = 0; c < D / 16; ++c)
                for (int j = 0; j < keys; ++j)
                    dq_acc[i][c] = fmaf(t.dSt[j * BWD_LD + 2 * ty + i], t.Kt[(tx + 16 * c) * BWD_LD + j], dq_acc[i][c]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int r = 2 * ty + i;
        if (r >= rows) continue;
#pragma unroll
        for (int c = 0; c < D / 16; ++c) dq[(q_base + q0 + r) * D + tx + 16 * c] = Row::from_float(dq_acc[i][c] * scale);
    }
}

#define BACKWARD_01(TAG, ROW, D)                                                                             \
    extern "C" __global__ void __launch_bounds__(256) attention_backward_01_blocked_keys_##TAG##_d##D(     \
        const ROW::Elem* __restrict__ q, const ROW::Elem* __restrict__ k, const ROW::Elem* __restrict__ v,    \
        const ROW::Elem* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,  \
        float* __restrict__ dq_acc, ROW::Elem* __restrict__ dk, ROW::Elem* __restrict__ dv, int heads,      \
        int kv_heads, int n_q, int n_k, float scale, int causal) {                                          \
        attention_backward_keys<ROW, D>(q, k, v, dout, lse, delta, dq_acc, dk, dv, heads, kv_heads, n_q, n_k, \
                                        scale, causal);                                                      \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(256) attention_backward_01_blocked_queries_##TAG##_d##D(  \
        const ROW::Elem* __restrict__ q, const ROW::Elem* __restrict__ k, const ROW::Elem* __restrict__ v,    \
        const ROW::Elem* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,  \
        ROW::Elem* __restrict__ dq, int heads, int kv_heads, int n_q, int n_k, float scale, int causal) {    \
        attention_backward_queries<ROW, D>(q, k, v, dout, lse, delta, dq, heads, kv_heads, n_q, n_k, scale,  \
                                           causal);                                                          \
    }
#define BACKWARD_01_DOT(TAG, ROW)                                                                           \
    extern "C" __global__ void __launch_bounds__(32) attention_backward_01_blocked_dot_##TAG(             \
        const ROW::Elem* __restrict__ out, const ROW::Elem* __restrict__ dout, float* __restrict__ delta,   \
        int d) {                                                                                             \
        attention_backward_dot<ROW>(out, dout, delta, d);                                                    \
    }

BACKWARD_01(f32, F32Row, 64) BACKWARD_01(f32, F32Row, 128) BACKWARD_01_DOT(f32, F32Row)
BACKWARD_01(f16, F16Row, 64) BACKWARD_01(f16, F16Row, 128) BACKWARD_01_DOT(f16, F16Row)
BACKWARD_01(bf16, BF16Row, 64) BACKWARD_01(bf16, BF16Row, 128) BACKWARD_01_DOT(bf16, BF16Row)
