// attention_13_fp32_pipelined — attention_01_blocked's float32 loop fed the way the CUDA cores
// need: tiles kept in their natural layout, copied by cp.async ahead of use, read 16 bytes at a time,
// and register tiles large enough that shared memory keeps up with the FMAs.
//
// Changed from attention_01_blocked: the arithmetic is the same (S = Q K^T, the online softmax
//               in base 2, O += P V, O / l at the end), the feeding is not.
//               - Q, K and V are copied global -> shared by cp.async (16 bytes, no registers, rows
//                 past n zero-filled). V has two stages: V_{t+1} is copied during all of tile t.
//                 K has one: K_{t+1} is copied over K_t once every thread has its scores, during
//                 P V of tile t. attention_01 loaded element by element, transposed as it stored,
//                 and computed nothing while it loaded.
//               - The scale is applied to the scores (one multiply per score), not folded into q,
//                 so q is copied as it is.
//               - A score is summed over d in partial sums of 16 products, each added to the
//                 score once: one running sum over all of d rounds at every step, and with scores
//                 in the thousands (q scaled by hundreds) its error passed twice torch's.
//               - A thread owns 8 query rows (8ty .. 8ty+7) and, in S, the keys tx, tx + 16,
//                 tx + 32, tx + 48 of the tile: per four elements of d it reads 8 float4 of Q and
//                 4 of K and does 128 FMAs; in P V it reads 2 float4 of P and D / 64 of V per key
//                 for 32 D / 64 FMAs. A 16-byte read by a warp takes four shared-memory wavefronts
//                 (attention_01: 4 rows x 4 keys, half the FMAs per wavefront). Rows of Q and K are
//                 D + 4 floats, an odd number of 16-byte chunks, so the 8 rows of K a quarter-warp
//                 reads fall in 8 different chunk positions of the banks.
//               Two barriers a tile: the top one makes K_t and V_t visible and says every thread
//               has finished P V of tile t - 1 (V_{t+1} overwrites its stage, P is rewritten); the
//               second orders P's stores before P V and every read of K_t before K_{t+1} lands.
// Launch:       grid = (ceil(n_q / 128), heads, batch), block = (256) as 16 x 16 threads.
//               Dynamic shared memory ((128 + 64) (D + 4) + 2 x 64 D + 64 x 132) floats: Q, K,
//               two stages of V, P transposed; 196 KiB at D = 128, 116 KiB at D = 64 (one block an
//               SM). The launcher raises the 48 KiB default.
// Traffic:      q and out once; each K and V tile once per query tile (n_q / 128 times in all,
//               from L2 when they fit). FLOPs: 4 n_q n_k D per head (half with causal).
// Limits:       float32 q, k, v, contiguous (batch, heads, seq, D) / (batch, kv_heads, seq, D),
//               16-byte aligned (entries attention_13_fp32_pipelined_f32_d<64|128>); heads a
//               multiple of kv_heads; any n_q, n_k >= 1; causal aligned to the bottom-right corner
//               as attention_01 (key tiles past a query tile's last visible key skipped; a query
//               that sees no key writes 0 and LSE -inf). Compute capability 8.0 or newer (cp.async).
#include "attention_mma.cuh"

#define F32_ROWS 128                // query rows of a block: 8 per thread, 16 threads a row group
#define F32_KEYS 64                 // keys of a tile: 4 per thread
#define F32_THREADS 256
#define F32_LDP (F32_ROWS + 4)      // row length of P transposed: Pt[key][row]

// Float offsets of the tiles in dynamic shared memory.
template <int D>
struct F32Tiles {
    static constexpr int LD = D + 4;                                // Q and K rows: an odd number of chunks
    static constexpr int K = F32_ROWS * LD;                         // after Q: one K tile
    static constexpr int V = K + F32_KEYS * LD;                     // two stages of V [key][D]
    static constexpr int P = V + 2 * F32_KEYS * D;                  // Pt [key][F32_LDP]
    static constexpr int FLOATS = P + F32_KEYS * F32_LDP;
};

// Copy rows r0 .. r0 + ROWS - 1 of a [n][D] float32 head into a tile of row length LD, 16 bytes a
// thread, coalesced; rows at or past n are zero-filled by the copy (source size 0).
template <int ROWS, int D, int LD>
__device__ __forceinline__ void copy_rows(float* tile, const float* __restrict__ head, int r0, int n) {
    constexpr int CHUNKS = D / 4, STEP = F32_THREADS / CHUNKS;
    const int row = threadIdx.x / CHUNKS, col = 4 * (threadIdx.x % CHUNKS);
#pragma unroll
    for (int c = 0; c < ROWS / STEP; ++c) {
        const int r = row + c * STEP;
        const bool inside = r0 + r < n;
        cp_async_16_or_zero(tile + r * LD + col, inside ? head + (long long)(r0 + r) * D + col : head, inside);
    }
}

__device__ __forceinline__ void fma4(float4& acc, float p, float4 v) {
    acc.x = fmaf(p, v.x, acc.x); acc.y = fmaf(p, v.y, acc.y);
    acc.z = fmaf(p, v.z, acc.z); acc.w = fmaf(p, v.w, acc.w);
}

template <int D>
__device__ __forceinline__ void attention_fp32_pipelined(const float* __restrict__ q, const float* __restrict__ k,
                                                         const float* __restrict__ v, float* __restrict__ out,
                                                         float* __restrict__ lse, int heads, int kv_heads, int n_q,
                                                         int n_k, float scale_log2, int causal) {
    typedef F32Tiles<D> L;
    constexpr int G = D / 64;                                        // float4 columns of O per thread and row
    extern __shared__ float4 shared_raw[];
    float* shared = reinterpret_cast<float*>(shared_raw);
    float* Qs = shared;
    float* Ks = shared + L::K;
    float* Pt = shared + L::P;

    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int q0 = blockIdx.x * F32_ROWS, head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / (heads / kv_heads);
    const float* q_head = q + (long long)(batch * heads + head) * n_q * D;
    const float* k_head = k + (long long)(batch * kv_heads + kv_head) * n_k * D;
    const float* v_head = v + (long long)(batch * kv_heads + kv_head) * n_k * D;

    // Keys visible to the tile's last row: with causal, later key tiles are skipped whole.
    const int last_row = min(q0 + F32_ROWS, n_q) - 1;
    const int kv_end = causal ? min(n_k, last_row + 1 + n_k - n_q) : n_k;
    const int tiles = kv_end > 0 ? (kv_end + F32_KEYS - 1) / F32_KEYS : 0;

    copy_rows<F32_ROWS, D, L::LD>(Qs, q_head, q0, n_q);
    if (tiles > 0) {
        copy_rows<F32_KEYS, D, L::LD>(Ks, k_head, 0, n_k);
        copy_rows<F32_KEYS, D, D>(shared + L::V, v_head, 0, n_k);
    }
    cp_async_commit_group();

    float m[8], l[8];
    float4 o[8][G];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        m[i] = neg_inf(); l[i] = 0.0f;
#pragma unroll
        for (int g = 0; g < G; ++g) o[i][g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

    for (int t = 0; t < tiles; ++t) {
        const int k0 = t * F32_KEYS;
        const float* Vs = shared + L::V + (t & 1) * F32_KEYS * D;
        cp_async_wait_all_groups();   // this thread's copies of K_t and V_t (and Q) have landed
        __syncthreads();              // everyone's have; everyone is done with P V of tile t - 1
        if (t + 1 < tiles)            // V_{t+1} into the stage tile t - 1 used: in flight through all of tile t
            copy_rows<F32_KEYS, D, D>(shared + L::V + ((t + 1) & 1) * F32_KEYS * D, v_head, k0 + F32_KEYS, n_k);
        cp_async_commit_group();

        float s[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) s[i][j] = 0.0f;
        for (int d0 = 0; d0 < D; d0 += 16) {
            float part[8][4];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) part[i][j] = 0.0f;
#pragma unroll
            for (int d = d0; d < d0 + 16; d += 4) {
                float4 a[8], b[4];
#pragma unroll
                for (int i = 0; i < 8; ++i) a[i] = *reinterpret_cast<const float4*>(Qs + (8 * ty + i) * L::LD + d);
#pragma unroll
                for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * L::LD + d);
#pragma unroll
                for (int i = 0; i < 8; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        part[i][j] = fmaf(a[i].x, b[j].x, part[i][j]);
                        part[i][j] = fmaf(a[i].y, b[j].y, part[i][j]);
                        part[i][j] = fmaf(a[i].z, b[j].z, part[i][j]);
                        part[i][j] = fmaf(a[i].w, b[j].w, part[i][j]);
                    }
            }
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) s[i][j] += part[i][j];
        }

#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int limit = key_limit(q0 + 8 * ty + i, n_q, n_k, causal);   // keys j < limit are visible
            float tile_max = neg_inf();
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                s[i][j] = k0 + tx + 16 * j < limit ? s[i][j] * scale_log2 : neg_inf();
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
            for (int g = 0; g < G; ++g) {
                o[i][g].x *= alpha; o[i][g].y *= alpha; o[i][g].z *= alpha; o[i][g].w *= alpha;
            }
            m[i] = m_new;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {   // key tx + 16 j of rows 8 ty .. 8 ty + 7: two 16-byte stores
            float* p_row = Pt + (tx + 16 * j) * F32_LDP + 8 * ty;
            *reinterpret_cast<float4*>(p_row) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
            *reinterpret_cast<float4*>(p_row + 4) = make_float4(s[4][j], s[5][j], s[6][j], s[7][j]);
        }
        __syncthreads();   // P complete before any thread multiplies it by V; every thread is done with K_t
        if (t + 1 < tiles)   // K_{t+1} over K_t: in flight through P V of tile t
            copy_rows<F32_KEYS, D, L::LD>(Ks, k_head, k0 + F32_KEYS, n_k);
        cp_async_commit_group();

        const int keys = min(F32_KEYS, kv_end - k0);
#pragma unroll 2
        for (int j = 0; j < keys; ++j) {
            const float4 p0 = *reinterpret_cast<const float4*>(Pt + j * F32_LDP + 8 * ty);
            const float4 p1 = *reinterpret_cast<const float4*>(Pt + j * F32_LDP + 8 * ty + 4);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float4 vj = *reinterpret_cast<const float4*>(Vs + j * D + 4 * (tx + 16 * g));
                fma4(o[0][g], p0.x, vj); fma4(o[1][g], p0.y, vj); fma4(o[2][g], p0.z, vj); fma4(o[3][g], p0.w, vj);
                fma4(o[4][g], p1.x, vj); fma4(o[5][g], p1.y, vj); fma4(o[6][g], p1.z, vj); fma4(o[7][g], p1.w, vj);
            }
        }
    }
    cp_async_wait_all_groups();   // nothing in flight at exit (a block that sees no key never waited for Q)

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = q0 + 8 * ty + i;
        if (row >= n_q) continue;
        const float inv = l[i] != 0.0f ? 1.0f / l[i] : 0.0f;   // a query that sees no key: 0
        float* out_row = out + ((long long)(batch * heads + head) * n_q + row) * D;
#pragma unroll
        for (int g = 0; g < G; ++g)
            *reinterpret_cast<float4*>(out_row + 4 * (tx + 16 * g)) =
                make_float4(o[i][g].x * inv, o[i][g].y * inv, o[i][g].z * inv, o[i][g].w * inv);
        if (tx == 0 && lse != nullptr)
            lse[(long long)(batch * heads + head) * n_q + row] =
                l[i] != 0.0f ? (m[i] + log2f(l[i])) * 0.69314718056f : neg_inf();
    }
}

// One block an SM (196 KiB of shared memory at D = 128, 116 KiB at D = 64): up to 255 registers.
#define ATTENTION_13(D)                                                                                  \
    extern "C" __global__ void __launch_bounds__(F32_THREADS, 1) attention_13_fp32_pipelined_f32_d##D( \
        const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,          \
        float* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,    \
        float scale_log2, int causal) {                                                                 \
        attention_fp32_pipelined<D>(q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal);  \
    }

ATTENTION_13(64)
ATTENTION_13(128)
