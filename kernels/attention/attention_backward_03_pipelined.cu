// attention_backward_03_pipelined — attention_backward_02_mma with twice the keys per block and the
// next query tile's loads in flight while this one is computed.
//
// Changed from attention_backward_02_mma: a block owns 128 keys of one kv head (8 warps x 16), so each
//               query tile of Q, dO, LSE and D brought into shared memory serves twice the keys,
//               and dQ's fp32 atomics per query row are spread over twice the keys (half of
//               02's atomics per product). The query tiles of all the group's heads form one
//               sequence; Q and dO are double-buffered: tile i + 1 is copied by cp.async (and its
//               LSE and D loaded into registers) while tile i's products run, so the block
//               waits on memory only for the first tile. dQ of a tile (64 query rows x D, over the
//               block's 128 keys) is split over the 8 warps as 16 rows x D / 2 columns each.
//               Per warp, S^T, P, dV, dP^T, dS and dK are computed as 02 computes them.
// Launch:       dot: grid = (rows), block = (32), rows = batch heads n_q (row_dot.cuh). keys: grid = (ceil(n_k / 128),
//               kv_heads, batch), block = 256 (8 warps x 16 keys); dynamic shared memory K and V
//               tiles of 128 x D, two Q and two dO tiles of 64 x D, dS^T of 128 x 64 (16-bit), two
//               tiles' LSE (log2) and D: 81 KiB at D = 64, 145 KiB at D = 128.
// Traffic:      K and V once; q, dout, lse and D once per 128 keys of the group's heads; dq
//               4 B read and written per element and 128 keys (atomics into L2).
// Limits:       float16 or bfloat16, D = 64 or 128 (entries attention_backward_03_pipelined_keys_<f16|bf16>_d<64|128>
//               and attention_backward_03_pipelined_dot_<f16|bf16>), layouts, LSE, dq_acc,
//               grouped heads, lengths and causal alignment as attention_backward_02_mma.
//               Compute capability 8.0.
#include "backward_tiles.cuh"
#include "row_dot.cuh"

#define BWD3_THREADS 256
#define BWD3_KEYS 128     // keys of a block: 8 warps x 16
#define BWD3_LOG2E 1.4426950408889634f

// The shared tiles of a block, 16-bit elements: K, V ([128][D] swizzled), Q and dO ([2][64][D]: the
// tile being computed and the next), dS^T ([key][query], swizzled as rows of 64), then the two
// tiles' LSE in log2 units and D (floats).
template <int D>
struct PipelinedTiles {
    unsigned short *k, *v, *q, *dout, *ds;
    float *lse2, *delta;
    __device__ __forceinline__ PipelinedTiles(int4* base) {
        k = reinterpret_cast<unsigned short*>(base);
        v = k + BWD3_KEYS * D;
        q = v + BWD3_KEYS * D;
        dout = q + 2 * BACKWARD_QUERIES * D;
        ds = dout + 2 * BACKWARD_QUERIES * D;
        lse2 = reinterpret_cast<float*>(ds + BWD3_KEYS * BACKWARD_QUERIES);
        delta = lse2 + 2 * BACKWARD_QUERIES;
    }
};

template <class T, int D>
__device__ __forceinline__ void attention_backward_keys_pipelined(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,
    const unsigned short* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int heads,
    int kv_heads, int n_q, int n_k, float scale, int causal, int4* shared) {
    const PipelinedTiles<D> tiles(shared);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0 = blockIdx.x * BWD3_KEYS, kv_head = blockIdx.y, batch = blockIdx.z;
    const int group = heads / kv_heads;
    const float scale_log2 = scale * BWD3_LOG2E;
    const long long kv_base = (long long)(batch * kv_heads + kv_head) * n_k * D;
    const long long q_head0 = (long long)(batch * heads + kv_head * group) * n_q;   // the group's first head
    // With causal, query i sees key k0 from i = k0 - (n_k - n_q) on: earlier tiles are skipped.
    const int first_q = causal ? max(0, k0 - (n_k - n_q)) / BACKWARD_QUERIES * BACKWARD_QUERIES : 0;
    const long long q_end = q_head0 + (long long)group * n_q;   // past the group's last head
    // Tiles run through a head's rows from first_q, then on to the group's next head. The next
    // tile's LSE (log2) and D are loaded into registers of threads 0..63 when its copies are issued
    // and stored into its shared slots after this tile's products, so the loads' latency is hidden.
    float next_lse2 = 0.0f, next_delta = 0.0f;
    auto load_tile = [&](int buffer, long long base, int r0) {   // Q and dO by cp.async; LSE and D
        issue_tile_rows<D, BWD3_THREADS>(tiles.q + buffer * BACKWARD_QUERIES * D, q + base * D, r0,
                                         BACKWARD_QUERIES, n_q);
        issue_tile_rows<D, BWD3_THREADS>(tiles.dout + buffer * BACKWARD_QUERIES * D, dout + base * D, r0,
                                         BACKWARD_QUERIES, n_q);
        cp_async_commit_group();
        if (threadIdx.x < BACKWARD_QUERIES) {
            // A row past n_q, or one that saw no key (LSE -inf), gets +inf: P = 2^(s - inf) = 0.
            const int row = r0 + threadIdx.x;
            const float l = row < n_q ? lse[base + row] : neg_inf();
            next_lse2 = l == neg_inf() ? -neg_inf() : l * BWD3_LOG2E;
            next_delta = row < n_q ? delta[base + row] : 0.0f;
        }
    };
    auto store_row_terms = [&](int buffer) {
        if (threadIdx.x < BACKWARD_QUERIES) {
            tiles.lse2[buffer * BACKWARD_QUERIES + threadIdx.x] = next_lse2;
            tiles.delta[buffer * BACKWARD_QUERIES + threadIdx.x] = next_delta;
        }
    };

    issue_tile_rows<D, BWD3_THREADS>(tiles.k, k + kv_base, k0, BWD3_KEYS, n_k);
    issue_tile_rows<D, BWD3_THREADS>(tiles.v, v + kv_base, k0, BWD3_KEYS, n_k);
    const bool any_tile = first_q < n_q;
    if (any_tile) {
        load_tile(0, q_head0, first_q);
        store_row_terms(0);
    } else {
        cp_async_commit_group();
    }

    // ldmatrix addresses of this lane, as element offsets into swizzled tiles (see attention_07):
    // A rows of the warp's keys; B query rows (non-transposed, n-tiles j, j + 1 at + 8 j D); B rows
    // by k (transposed: k-step kk at + 16 kk D, n-tile n by XOR n << 3); dS^T read transposed as the
    // A fragment of query rows 16 (warp % 4) .. + 15 (k-step kk at + 16 kk 64).
    const int r8 = lane & 7, a_row = r8 + (((lane >> 3) & 1) << 3), a_chunk = (lane >> 4) ^ r8;
    const int a_lane = (16 * warp + a_row) * D + (a_chunk << 3);
    const int b_lane = (r8 + ((lane >> 4) << 3)) * D + ((((lane >> 3) & 1) ^ r8) << 3);
    const int t_lane = a_row * D + (a_chunk << 3);
    const int dq_rows = warp & 3, dq_half = warp >> 2;   // this warp's dQ: 16 rows x D / 2 columns
    const int ds_lane = (r8 + ((lane >> 4) << 3)) * BACKWARD_QUERIES + (((2 * dq_rows + ((lane >> 3) & 1)) ^ r8) << 3);
    const int key_lo = k0 + 16 * warp + g;            // this lane's keys: key_lo and key_lo + 8

    float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;

    long long q_base = q_head0;   // this tile's head (its first row) and first query row
    int q0 = first_q, buffer = 0;
    while (any_tile && q_base < q_end) {
        cp_async_wait_all_groups();   // this thread's copies of this tile (and of K, V) have landed
        __syncthreads();       // everyone's have; every warp is done with the last tile (its buffer and dS^T)
        int next_q0 = q0 + BACKWARD_QUERIES;
        long long next_base = q_base;
        if (next_q0 >= n_q) next_q0 = first_q, next_base += n_q;
        const bool more = next_base < q_end;
        if (more) load_tile(buffer ^ 1, next_base, next_q0);   // in flight during this tile
        const unsigned short* q_tile = tiles.q + buffer * BACKWARD_QUERIES * D;
        const unsigned short* dout_tile = tiles.dout + buffer * BACKWARD_QUERIES * D;
        const float* lse2 = tiles.lse2 + buffer * BACKWARD_QUERIES;
        const float* row_delta = tiles.delta + buffer * BACKWARD_QUERIES;

        float s[8][4], dp[8][4];
        keys_times_queries<T, D>(s, tiles.k, q_tile, a_lane, b_lane);            // S^T = K Q^T
        const bool masked = k0 + BWD3_KEYS > n_k || (causal && k0 + BWD3_KEYS - 1 > q0 + n_k - n_q);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int query = q0 + 8 * j + 2 * t + (e & 1), key = key_lo + 8 * (e >> 1);
                const float p = exp2_ftz(fmaf(s[j][e], scale_log2, -lse2[8 * j + 2 * t + (e & 1)]));
                s[j][e] = masked && (key >= n_k || (causal && key > query + n_k - n_q)) ? 0.0f : p;
            }
        add_key_rows_product<T, D>(dv_acc, s, dout_tile, t_lane);                 // dV += P^T dO
        keys_times_queries<T, D>(dp, tiles.v, dout_tile, a_lane, b_lane);          // dP^T = V dO^T
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - row_delta[8 * j + 2 * t + (e & 1)]);
        add_key_rows_product<T, D>(dk_acc, dp, q_tile, t_lane);                   // dK += dS^T Q (scaled at the end)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                *reinterpret_cast<u32*>(tiles.ds + swizzled<BACKWARD_QUERIES>(16 * warp + g + 8 * half, 8 * j + 2 * t)) =
                    T::pack(dp[j][2 * half], dp[j][2 * half + 1]);
        if (more) store_row_terms(buffer ^ 1);   // the last tile read that buffer before the barrier above
        __syncthreads();   // dS^T is whole

        // dQ of query rows q0 + 16 dq_rows .. + 15, columns of half dq_half: dS (those rows, 128 keys) K.
        float dq[D / 16][4];
#pragma unroll
        for (int n = 0; n < D / 16; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BWD3_KEYS / 16; ++kk) {
            u32 a[4];
            ldmatrix_x4_trans(a, tiles.ds + ds_lane + 16 * kk * BACKWARD_QUERIES);
#pragma unroll
            for (int n = 0; n < D / 16; n += 2) {
                const int column_tile = dq_half * (D / 16) + n;
                u32 b[4];
                ldmatrix_x4_trans(b, tiles.k + (t_lane ^ (column_tile << 3)) + 16 * kk * D);
                T::mma(dq[n], a, b);
                T::mma(dq[n + 1], a, b + 2);
            }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = q0 + 16 * dq_rows + g + 8 * half;
            if (row >= n_q) continue;
            float* dst = dq_acc + (q_base + row) * D + dq_half * (D / 2) + 2 * t;
#pragma unroll
            for (int n = 0; n < D / 16; ++n) {
                atomicAdd(dst + 8 * n, dq[n][2 * half] * scale);
                atomicAdd(dst + 8 * n + 1, dq[n][2 * half + 1] * scale);
            }
        }
        q0 = next_q0, q_base = next_base, buffer ^= 1;
    }
    cp_async_wait_all_groups();   // with no tile, K and V's copies still land before the block ends
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

#define BACKWARD_03(TAG, T, D)                                                                                 \
    extern "C" __global__ void __launch_bounds__(BWD3_THREADS)                                                \
    attention_backward_03_pipelined_keys_##TAG##_d##D(                                                         \
        const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,                             \
        const unsigned short* __restrict__ v, const unsigned short* __restrict__ dout,                          \
        const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq_acc,             \
        unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int heads, int kv_heads, int n_q,     \
        int n_k, float scale, int causal) {                                                                    \
        extern __shared__ int4 shared_raw[];                                                                   \
        attention_backward_keys_pipelined<T, D>(q, k, v, dout, lse, delta, dq_acc, dk, dv, heads, kv_heads, n_q, \
                                                n_k, scale, causal, shared_raw);                               \
    }

#define BACKWARD_03_DOT(TAG, ROW)                                                                              \
    extern "C" __global__ void __launch_bounds__(32) attention_backward_03_pipelined_dot_##TAG(               \
        const ROW::Elem* __restrict__ out, const ROW::Elem* __restrict__ dout, float* __restrict__ delta,      \
        int d) {                                                                                                \
        attention_backward_dot<ROW>(out, dout, delta, d);                                                       \
    }

BACKWARD_03(bf16, Bf16Mma, 64) BACKWARD_03(bf16, Bf16Mma, 128) BACKWARD_03_DOT(bf16, BF16Row)
BACKWARD_03(f16, F16Mma, 64) BACKWARD_03(f16, F16Mma, 128) BACKWARD_03_DOT(f16, F16Row)
