// attention_backward_02_mma — the gradients of attention on tensor cores: attention_backward_01_blocked's
// formulas with every product an mma.sync m16n8k16 (bf16 or fp16 operands, fp32 accumulation).
//
// Changed from attention_backward_01_blocked: a block owns 64 keys of one kv head, 16 per warp, and
//               walks the query tiles of 64 rows of every head of its group. Per tile each warp
//               computes its keys' rows of the transposed scores, S^T = K Q^T (16 x 64), so that
//               P^T and dS^T come out of the accumulators with keys as rows: exactly the A operand
//               of dV += P^T dO and dK += dS^T Q, packed from the C fragments as attention_03 packs
//               P (no trip through shared memory). dP^T = V dO^T the same way. dQ needs dS with
//               queries as rows: the warps store dS^T (16-bit) in shared memory and, after a
//               barrier, each takes 16 query rows and reads dS through ldmatrix.trans; its
//               dQ += dS K is added to an fp32 buffer by atomicAdd. P and dS are rounded to the
//               input dtype as mma operands (as FlashAttention-2 does); every sum is fp32.
//               Q, dO, K and V live in XOR-swizzled shared tiles copied by cp.async
//               (attention_07's copy) and are read by ldmatrix: K and V as A fragments
//               (non-transposed), Q and dO as B fragments non-transposed for S^T and dP^T and
//               transposed for dK and dV.
// Launch:       dot: grid = (rows), block = (32), rows = batch heads n_q (row_dot.cuh). keys:
//               grid = (ceil(n_k / 64), kv_heads, batch), block = 128 (4 warps x 16 keys);
//               dynamic shared memory K, V, Q, dO tiles of 64 x D, dS^T of 64 x 64 (16-bit),
//               the tile's LSE (log2) and D: 40.5 KiB at D = 64, 72.5 KiB at D = 128.
// Traffic:      K and V once; q, dout, lse and D once per key block of the group's heads; dq
//               4 B read and written per element and key block (atomics into L2).
// Limits:       float16 or bfloat16, D = 64 or 128 (entries attention_backward_02_mma_keys_<f16|bf16>_d<64|128>
//               and attention_backward_02_mma_dot_<f16|bf16>), q, k, v, out, dout contiguous
//               (batch, heads, seq, D) / (batch, kv_heads, seq, D); lse float32 (batch, heads, n_q)
//               in natural log as the forward writes it; dq_acc float32 zeroed by the caller;
//               heads a multiple of kv_heads; any n_q, n_k >= 1; causal bottom-right aligned. A row
//               whose LSE is -inf saw no key: P = 0 and its gradients are 0. Compute capability 8.0.
#include "fragment_reuse.cuh"
#include "row_dot.cuh"

#define BWD2_THREADS 128
#define BWD2_KEYS 64       // keys of a block: 4 warps x 16
#define BWD2_QUERIES 64    // query rows of a tile
#define BWD2_LOG2E 1.4426950408889634f

// The shared tiles of a block, 16-bit elements: K, V, Q, dO ([64][D] swizzled), dS^T ([key][query],
// swizzled as [64][64]), then the tile's LSE in log2 units and D (floats).
template <int D>
struct BackwardMmaTiles {
    unsigned short *k, *v, *q, *dout, *ds;
    float *lse2, *delta;
    __device__ __forceinline__ BackwardMmaTiles(int4* base) {
        k = reinterpret_cast<unsigned short*>(base);
        v = k + BWD2_KEYS * D;
        q = v + BWD2_KEYS * D;
        dout = q + BWD2_QUERIES * D;
        ds = dout + BWD2_QUERIES * D;
        lse2 = reinterpret_cast<float*>(ds + BWD2_KEYS * BWD2_QUERIES);
        delta = lse2 + BWD2_QUERIES;
    }
};

// The warp's 16 keys against the 64 queries of the tile: acc = A B^T, A the warp's rows of a [64][D]
// tile (K or V, A fragments at a_lane), B the tile's query rows (Q or dO, B fragments at b_lane).
template <class T, int D>
__device__ __forceinline__ void keys_by_queries(float acc[8][4], const unsigned short* a_tile,
                                                const unsigned short* b_tile, int a_lane, int b_lane) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        u32 a[4];
        ldmatrix_x4(a, a_tile + (a_lane ^ (kk << 4)));
#pragma unroll
        for (int j = 0; j < 8; j += 2) {   // query n-tiles j and j + 1
            u32 b[4];
            ldmatrix_x4(b, b_tile + (b_lane ^ (kk << 4)) + 8 * j * D);
            T::mma(acc[j], a, b);
            T::mma(acc[j + 1], a, b + 2);
        }
    }
}

// grad += X^T Y for the warp's 16 keys: X^T the keys-by-queries accumulators x (P^T or dS^T, packed
// to A fragments), Y the tile's [64][D] query rows (dO or Q, B fragments by ldmatrix.trans at t_lane).
template <class T, int D>
__device__ __forceinline__ void add_keys_product(float grad[D / 8][4], const float x[8][4], const unsigned short* y,
                                                 int t_lane) {
#pragma unroll
    for (int kk = 0; kk < BWD2_QUERIES / 16; ++kk) {
        u32 a[4];
        p_fragment<T>(a, x, kk);
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            u32 b[4];
            ldmatrix_x4_trans(b, y + (t_lane ^ (n << 3)) + 16 * kk * D);
            T::mma(grad[n], a, b);
            T::mma(grad[n + 1], a, b + 2);
        }
    }
}

template <class T, int D>
__device__ __forceinline__ void attention_backward_keys_mma(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,
    const unsigned short* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int heads,
    int kv_heads, int n_q, int n_k, float scale, int causal, int4* shared) {
    const BackwardMmaTiles<D> tiles(shared);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0 = blockIdx.x * BWD2_KEYS, kv_head = blockIdx.y, batch = blockIdx.z;
    const int group = heads / kv_heads;
    const float scale_log2 = scale * BWD2_LOG2E;
    const long long kv_base = (long long)(batch * kv_heads + kv_head) * n_k * D;
    issue_rows<unsigned short, D>(tiles.k, k + kv_base, D, k0, BWD2_KEYS, n_k);
    issue_rows<unsigned short, D>(tiles.v, v + kv_base, D, k0, BWD2_KEYS, n_k);
    cp_async_commit_group();

    // ldmatrix addresses of this lane, as element offsets into swizzled tiles (see attention_07):
    // A rows of the warp's keys; B query rows (non-transposed, n-tiles j, j + 1 at + 8 j D); B rows
    // by k (transposed: k-step kk at + 16 kk D, n-tile n by XOR n << 3); dS^T read transposed as the
    // A fragment of the warp's 16 query rows (k-step kk at + 16 kk 64).
    const int r8 = lane & 7, a_row = r8 + (((lane >> 3) & 1) << 3), a_chunk = (lane >> 4) ^ r8;
    const int a_lane = (16 * warp + a_row) * D + (a_chunk << 3);
    const int b_lane = (r8 + ((lane >> 4) << 3)) * D + ((((lane >> 3) & 1) ^ r8) << 3);
    const int t_lane = a_row * D + (a_chunk << 3);
    const int ds_lane = (r8 + ((lane >> 4) << 3)) * BWD2_QUERIES + (((2 * warp + ((lane >> 3) & 1)) ^ r8) << 3);
    const int key_lo = k0 + 16 * warp + g;            // this lane's keys: key_lo and key_lo + 8
    // With causal, query i sees key k0 from i = k0 - (n_k - n_q) on: earlier tiles are skipped.
    const int first_q = causal ? max(0, k0 - (n_k - n_q)) / BWD2_QUERIES * BWD2_QUERIES : 0;

    float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;

    for (int h = 0; h < group; ++h) {
        const long long q_base = (long long)(batch * heads + kv_head * group + h) * n_q;
        for (int q0 = first_q; q0 < n_q; q0 += BWD2_QUERIES) {
            __syncthreads();   // every warp is done with the previous tile's Q, dO and dS^T
            issue_rows<unsigned short, D>(tiles.q, q + q_base * D, D, q0, BWD2_QUERIES, n_q);
            issue_rows<unsigned short, D>(tiles.dout, dout + q_base * D, D, q0, BWD2_QUERIES, n_q);
            cp_async_commit_group();
            if (threadIdx.x < BWD2_QUERIES) {
                // A row past n_q, or one that saw no key (LSE -inf), gets +inf: P = 2^(s - inf) = 0.
                const int row = q0 + threadIdx.x;
                const float l = row < n_q ? lse[q_base + row] : neg_inf();
                tiles.lse2[threadIdx.x] = l == neg_inf() ? -neg_inf() : l * BWD2_LOG2E;
                tiles.delta[threadIdx.x] = row < n_q ? delta[q_base + row] : 0.0f;
            }
            cp_async_wait_all_groups();
            __syncthreads();

            float s[8][4], dp[8][4];
            keys_by_queries<T, D>(s, tiles.k, tiles.q, a_lane, b_lane);          // S^T = K Q^T
            const bool masked = k0 + BWD2_KEYS > n_k || (causal && k0 + BWD2_KEYS - 1 > q0 + n_k - n_q);
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int query = q0 + 8 * j + 2 * t + (e & 1), key = key_lo + 8 * (e >> 1);
                    const float p = exp2_ftz(fmaf(s[j][e], scale_log2, -tiles.lse2[8 * j + 2 * t + (e & 1)]));
                    s[j][e] = masked && (key >= n_k || (causal && key > query + n_k - n_q)) ? 0.0f : p;
                }
            add_keys_product<T, D>(dv_acc, s, tiles.dout, t_lane);                // dV += P^T dO
            keys_by_queries<T, D>(dp, tiles.v, tiles.dout, a_lane, b_lane);       // dP^T = V dO^T
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - tiles.delta[8 * j + 2 * t + (e & 1)]);
            add_keys_product<T, D>(dk_acc, dp, tiles.q, t_lane);                  // dK += dS^T Q (scaled at the end)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int half = 0; half < 2; ++half)
                    *reinterpret_cast<u32*>(tiles.ds + swizzled<BWD2_QUERIES>(16 * warp + g + 8 * half, 8 * j + 2 * t)) =
                        T::pack(dp[j][2 * half], dp[j][2 * half + 1]);
            __syncthreads();   // dS^T is whole

            // dQ of query rows q0 + 16 warp .. + 15: dS (those rows, 64 keys) K, added to dq_acc.
            float dq[D / 8][4];
#pragma unroll
            for (int n = 0; n < D / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < BWD2_KEYS / 16; ++kk) {
                u32 a[4];
                ldmatrix_x4_trans(a, tiles.ds + ds_lane + 16 * kk * BWD2_QUERIES);
#pragma unroll
                for (int n = 0; n < D / 8; n += 2) {
                    u32 b[4];
                    ldmatrix_x4_trans(b, tiles.k + (t_lane ^ (n << 3)) + 16 * kk * D);
                    T::mma(dq[n], a, b);
                    T::mma(dq[n + 1], a, b + 2);
                }
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = q0 + 16 * warp + g + 8 * half;
                if (row >= n_q) continue;
                float* dst = dq_acc + (q_base + row) * D + 2 * t;
#pragma unroll
                for (int n = 0; n < D / 8; ++n) {
                    atomicAdd(dst + 8 * n, dq[n][2 * half] * scale);
                    atomicAdd(dst + 8 * n + 1, dq[n][2 * half + 1] * scale);
                }
            }
        }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int key = key_lo + 8 * half;
        if (key >= n_k) continue;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            const long long at = kv_base + (long long)key * D + 8 * n + 2 * t;
            *reinterpret_cast<u32*>(dk + at) = T::pack(dk_acc[n][2 * half] * scale, dk_acc[n][2 * half + 1] * scale);
            *reinterpret_cast<u32*>(dv + at) = T::pack(dv_acc[n][2 * half], dv_acc[n][2 * half + 1]);
        }
    }
}

#define BACKWARD_02(TAG, T, ROW, D)                                                                            \
    extern "C" __global__ void __launch_bounds__(BWD2_THREADS) attention_backward_02_mma_keys_##TAG##_d##D(      \
        const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,                             \
        const unsigned short* __restrict__ v, const unsigned short* __restrict__ dout,                          \
        const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq_acc,             \
        unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int heads, int kv_heads, int n_q,     \
        int n_k, float scale, int causal) {                                                                    \
        extern __shared__ int4 shared_raw[];                                                                   \
        attention_backward_keys_mma<T, D>(q, k, v, dout, lse, delta, dq_acc, dk, dv, heads, kv_heads, n_q, n_k,  \
                                          scale, causal, shared_raw);                                          \
    }
#define BACKWARD_02_DOT(TAG, ROW)                                                                              \
    extern "C" __global__ void __launch_bounds__(32) attention_backward_02_mma_dot_##TAG(                     \
        const ROW::Elem* __restrict__ out, const ROW::Elem* __restrict__ dout, float* __restrict__ delta,      \
        int d) {                                                                                                \
        attention_backward_dot<ROW>(out, dout, delta, d);                                                       \
    }

BACKWARD_02(bf16, Bf16Mma, BF16Row, 64) BACKWARD_02(bf16, Bf16Mma, BF16Row, 128) BACKWARD_02_DOT(bf16, BF16Row)
BACKWARD_02(f16, F16Mma, F16Row, 64) BACKWARD_02(f16, F16Mma, F16Row, 128) BACKWARD_02_DOT(f16, F16Row)
