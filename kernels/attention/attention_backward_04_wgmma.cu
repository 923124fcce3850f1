// attention_backward_04_wgmma — attention_backward_03_pipelined's block on Hopper's warpgroup
// instruction (wgmma.mma_async, kernels/common/wgmma.cuh): all five products of a query tile as
// wgmma, with Q, dO, K, V and dS read by the tensor cores from shared memory and P^T, dS^T from
// registers.
//
// Changed from attention_backward_03_pipelined:
//   - Two warpgroups of 4 warps (256 threads) for the block's 128 keys: warpgroup w owns keys
//               64w .. 64w + 63, warp i of it 16 of them, as the instruction lays out its
//               accumulator rows (the per-warp fragments of 03, so P and dS are computed as there).
//   - S^T = K Q^T and dP^T = V dO^T: D / 16 instructions each of m64 n64 k16, both operands in
//               shared memory (K-major); no ldmatrix. Each product is its own group, waited for
//               when its result is needed: P's exponentials run while dP^T is on the tensor
//               cores, dS while dV is.
//   - dV += P^T dO and dK += dS^T Q: 4 instructions each of m64 n(D) k16, P^T and dS^T from
//               registers (the accumulators rounded and paired), dO and Q read MN-major.
//   - dS is stored (16-bit) as [query][key] blocks of 64 keys in wgmma's layout, each warpgroup
//               its own block, fenced into the async proxy; then dQ (64 queries x D) = dS K as
//               m64 n64 k16 instructions with K read MN-major. At D = 128 warpgroup w takes the
//               D columns 64w .. 64w + 63 over all 128 keys; at D = 64 it takes all 64 columns
//               over its own 64 keys (twice the atomics, one instruction shape).
//   - dQ's fp32 atomics two columns at a time (atomicAdd of a float2, sm_90); the step before the
//               keys kernel zeroes dq's fp32 buffer as it computes D (8 rows a block).
//   - Tiles in wgmma's layout (blocks of 64 columns, 16-byte chunks swizzled by the row,
//               1024-byte aligned), copied by cp.async as attention_10_wgmma copies them.
// Launch:       dot (D, and dq's fp32 buffer zeroed): grid = (ceil(rows / 8)), block = (256), rows =
//               batch heads n_q, a warp a row. keys: grid =
//               (ceil(n_k / 128), kv_heads, batch), block = 256 (2 warpgroups x 64 keys); dynamic
//               shared memory K and V tiles of 128 x D, two Q and two dO tiles of 64 x D, dS of
//               64 x 128 (16-bit), two tiles' LSE (log2) and D, and 1 KiB to align the tiles:
//               82 KiB at D = 64, 146 KiB at D = 128.
// Traffic:      as attention_backward_03_pipelined.
// Limits:       float16 or bfloat16, D = 64 or 128 (entries attention_backward_04_wgmma_keys_<f16|bf16>_d<64|128>
//               and attention_backward_04_wgmma_dot_<f16|bf16>), layouts, LSE, dq_acc, grouped
//               heads, lengths and causal alignment as attention_backward_02_mma. Compute
//               capability 9.0 (H100, H200: the sm_90a build); elsewhere it traps.
#include "wgmma_attention.cuh"
#include "online_rows.cuh"

#define BWD4_KEYS 128      // keys of a block: 2 warpgroups x 64
#define BWD4_QUERIES 64    // query rows of a tile
#define BWD4_LOG2E 1.4426950408889634f

#define BWD4_DOT_ROWS 8     // rows of a dot block, a warp each

// The step before the keys kernel, one warp per row and 8 rows a block: D[row] = dO[row] . O[row]
// (fp32 sums, as row_dot.cuh's), and the row's fp32 dq buffer zeroed for the keys kernel's atomics.
template <class Row>
__device__ __forceinline__ void dot_and_clear(const typename Row::Elem* __restrict__ out,
                                              const typename Row::Elem* __restrict__ dout, float* __restrict__ delta,
                                              float* __restrict__ dq_acc, int rows, int d) {
    const long long row = (long long)blockIdx.x * BWD4_DOT_ROWS + (threadIdx.x >> 5);
    if (row >= rows) return;
    float sum = 0.0f;
    for (int i = threadIdx.x & 31; i < d; i += 32) {
        sum = fmaf(Row::load1(out + row * d + i), Row::load1(dout + row * d + i), sum);
        dq_acc[row * d + i] = 0.0f;
    }
    sum = warp_sum(sum);
    if ((threadIdx.x & 31) == 0) delta[row] = sum;
}

// dst[0] += a, dst[1] += b in global memory, one instruction on sm_90.
__device__ __forceinline__ void atomic_add_pair(float* dst, float a, float b) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    atomicAdd(dst, a);
    atomicAdd(dst + 1, b);
#else
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#endif
}

// The accumulators of one warp's 16 rows by 64 columns as the A registers of the next product's four
// k-steps (columns 16kk .. 16kk + 15), rounded to T and paired.
template <class T>
__device__ __forceinline__ void pack_rows64(u32 (&a)[4][4], const float (&x)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        a[kk][0] = T::pack(x[2 * kk][0], x[2 * kk][1]);
        a[kk][1] = T::pack(x[2 * kk][2], x[2 * kk][3]);
        a[kk][2] = T::pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
        a[kk][3] = T::pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
    }
}

// acc (64 rows x 64 query columns) = A B^T over D: A the warpgroup's 64 rows of a [keys][D] tile,
// B the [64][D] query tile, both K-major in shared memory. Issued, not committed.
template <class T, int D>
__device__ __forceinline__ void issue_keys_by_queries(float (&acc)[8][4], const unsigned short* a_rows,
                                                      const unsigned short* b_tile) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const int block = 16 * kk / 64, col = 16 * kk % 64;
        wgmma_ss<T, 64, 0>(flat<32>(acc), wgmma_descriptor(a_rows + block * BWD4_KEYS * 64 + col, 0, 1024),
                           wgmma_descriptor(b_tile + block * BWD4_QUERIES * 64 + col, 0, 1024), kk > 0);
    }
}

// grad (64 rows x D) += X Y: X the A registers of four k-steps over the tile's 64 queries, Y the
// [64][D] query tile read MN-major. Issued, not committed.
template <class T, int D>
__device__ __forceinline__ void issue_rows_by_tile(float (&grad)[D / 8][4], const u32 (&x)[4][4],
                                                   const unsigned short* y_tile) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        wgmma_rs<T, D, 1>(flat<D / 2>(grad), x[kk], wgmma_descriptor(y_tile + 16 * kk * 64, BWD4_QUERIES * 128, 1024), 1);
}

template <class T, int D>
__device__ __forceinline__ void attention_backward_keys_wgmma(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,
    const unsigned short* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int heads,
    int kv_heads, int n_q, int n_k, float scale, int causal, unsigned char* shared) {
    typedef unsigned short Elem;
    constexpr int KEY_TILE = BWD4_KEYS * D, QUERY_TILE = BWD4_QUERIES * D;
    Elem* Ks = reinterpret_cast<Elem*>(shared);   // [D / 64][128][64]
    Elem* Vs = Ks + KEY_TILE;
    Elem* Qs = Vs + KEY_TILE;                     // [2][D / 64][64][64]: this tile and the next
    Elem* dOs = Qs + 2 * QUERY_TILE;
    Elem* dSs = dOs + 2 * QUERY_TILE;             // [2 key blocks][64 queries][64 keys]
    float* lse2_s = reinterpret_cast<float*>(dSs + BWD4_QUERIES * BWD4_KEYS);   // [2][64]
    float* delta_s = lse2_s + 2 * BWD4_QUERIES;                                  // [2][64]

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int group = warp >> 2, row16 = 16 * (warp & 3);   // warpgroup; the warp's first row in it
    const int k0 = blockIdx.x * BWD4_KEYS, kv_head = blockIdx.y, batch = blockIdx.z;
    const int heads_per_kv = heads / kv_heads;
    const float scale_log2 = scale * BWD4_LOG2E;
    const long long kv_base = (long long)(batch * kv_heads + kv_head) * n_k * D;
    const long long q_head0 = (long long)(batch * heads + kv_head * heads_per_kv) * n_q;   // the group's first head
    // With causal, query i sees key k0 from i = k0 - (n_k - n_q) on: earlier tiles are skipped.
    const int first_q = causal ? max(0, k0 - (n_k - n_q)) / BWD4_QUERIES * BWD4_QUERIES : 0;
    const long long q_end = q_head0 + (long long)heads_per_kv * n_q;   // past the group's last head
    // As in attention_backward_03_pipelined: tiles run through a head's rows from first_q, then the
    // group's next head; the next tile's LSE (log2) and D wait in registers of threads 0..63 until
    // this tile's products are issued.
    float next_lse2 = 0.0f, next_delta = 0.0f;
    auto load_tile = [&](int buffer, long long base, int r0) {
        issue_blocks<Elem, D, BWD4_QUERIES>(Qs + buffer * QUERY_TILE, q + base * D, D, r0, n_q);
        issue_blocks<Elem, D, BWD4_QUERIES>(dOs + buffer * QUERY_TILE, dout + base * D, D, r0, n_q);
        cp_async_commit_group();
        if (threadIdx.x < BWD4_QUERIES) {
            // A row past n_q, or one that saw no key (LSE -inf), gets +inf: P = 2^(s - inf) = 0.
            const int row = r0 + threadIdx.x;
            const float l = row < n_q ? lse[base + row] : neg_inf();
            next_lse2 = l == neg_inf() ? -neg_inf() : l * BWD4_LOG2E;
            next_delta = row < n_q ? delta[base + row] : 0.0f;
        }
    };
    auto store_row_terms = [&](int buffer) {
        if (threadIdx.x < BWD4_QUERIES) {
            lse2_s[buffer * BWD4_QUERIES + threadIdx.x] = next_lse2;
            delta_s[buffer * BWD4_QUERIES + threadIdx.x] = next_delta;
        }
    };

    issue_blocks<Elem, D, BWD4_KEYS>(Ks, k + kv_base, D, k0, n_k);
    issue_blocks<Elem, D, BWD4_KEYS>(Vs, v + kv_base, D, k0, n_k);
    const bool any_tile = first_q < n_q;
    if (any_tile) {
        load_tile(0, q_head0, first_q);
        store_row_terms(0);
    } else {
        cp_async_commit_group();
    }

    const int key_lo = k0 + 64 * group + row16 + g;   // this lane's keys: key_lo and key_lo + 8
    // dQ of this warpgroup: D columns 64 dq_block .. + 63 over the key k-steps dq_step0 ..
    constexpr int DQ_STEPS = D == 128 ? BWD4_KEYS / 16 : 64 / 16;
    const int dq_block = D == 128 ? group : 0, dq_step0 = D == 128 ? 0 : 4 * group;
    float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;

    long long q_base = q_head0;   // this tile's head (its first row) and first query row
    int q0 = first_q, buffer = 0;
    while (any_tile && q_base < q_end) {
        cp_async_wait_all_groups();   // this thread's copies of this tile (and of K, V) have landed
        fence_proxy_async();          // ... where the tensor cores read them
        __syncthreads();              // everyone's have; every warpgroup is done with the last tile
        int next_q0 = q0 + BWD4_QUERIES;
        long long next_base = q_base;
        if (next_q0 >= n_q) next_q0 = first_q, next_base += n_q;
        const bool more = next_base < q_end;
        if (more) load_tile(buffer ^ 1, next_base, next_q0);   // in flight during this tile
        const Elem* q_tile = Qs + buffer * QUERY_TILE;
        const Elem* dout_tile = dOs + buffer * QUERY_TILE;
        const float* lse2 = lse2_s + buffer * BWD4_QUERIES;
        const float* row_delta = delta_s + buffer * BWD4_QUERIES;

        // Each product is a group of instructions of its own, waited for only when its result is
        // needed, so that the exponentials run while dP^T is computed, and dS while dV is.
        float s[8][4], dp[8][4];
        wgmma_fence_operands(flat<32>(s));
        wgmma_fence_operands(flat<32>(dp));
        wgmma_fence();
        issue_keys_by_queries<T, D>(s, Ks + group * 64 * 64, q_tile);      // S^T = K Q^T
        wgmma_commit();
        issue_keys_by_queries<T, D>(dp, Vs + group * 64 * 64, dout_tile);  // dP^T = V dO^T
        wgmma_commit();
        wgmma_wait<1>();   // S^T has landed (dP^T may not have)
        wgmma_fence_operands(flat<32>(s));

        const bool masked = k0 + BWD4_KEYS > n_k || (causal && k0 + BWD4_KEYS - 1 > q0 + n_k - n_q);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int column = 8 * j + 2 * t + (e & 1), key = key_lo + 8 * (e >> 1);
                const float p = exp2_ftz(fmaf(s[j][e], scale_log2, -lse2[column]));
                s[j][e] = masked && (key >= n_k || (causal && key > q0 + column + n_k - n_q)) ? 0.0f : p;
            }
        u32 p_regs[4][4], ds_regs[4][4];
        pack_rows64<T>(p_regs, s);
        wgmma_fence_operands(flat<D / 2>(dv_acc));
        wgmma_fence();
        issue_rows_by_tile<T, D>(dv_acc, p_regs, dout_tile);   // dV += P^T dO
        wgmma_commit();
        wgmma_wait<1>();   // dP^T has landed (dV may not have)
        wgmma_fence_operands(flat<32>(dp));

        Elem* ds_block = dSs + group * BWD4_QUERIES * 64;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int column = 8 * j + 2 * t + (e & 1);
                dp[j][e] = s[j][e] * (dp[j][e] - row_delta[column]);   // dS^T
                ds_block[swizzled<64>(column, row16 + g + 8 * (e >> 1))] =
                    static_cast<Elem>(T::pack(dp[j][e], 0.0f) & 0xFFFFu);
            }
        pack_rows64<T>(ds_regs, dp);
        wgmma_fence_operands(flat<D / 2>(dk_acc));
        wgmma_fence();
        issue_rows_by_tile<T, D>(dk_acc, ds_regs, q_tile);     // dK += dS^T Q (scaled at the end)
        wgmma_commit();
        if (more) store_row_terms(buffer ^ 1);   // the last tile read that buffer before the barrier above
        fence_proxy_async();   // this thread's dS stores, for the tensor cores
        __syncthreads();       // dS is whole

        float dq[8][4];
        wgmma_fence_operands(flat<32>(dq));
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < DQ_STEPS; ++i) {   // dQ = dS K over the warpgroup's keys
            const int kk = dq_step0 + i;
            wgmma_ss<T, 64, 1>(flat<32>(dq), wgmma_descriptor(dSs + (kk / 4) * BWD4_QUERIES * 64 + 16 * (kk % 4), 0, 1024),
                               wgmma_descriptor(Ks + dq_block * BWD4_KEYS * 64 + 16 * kk * 64, BWD4_KEYS * 128, 1024),
                               i > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();   // dV, dK and dQ
        wgmma_fence_operands(flat<32>(dq));
        wgmma_fence_operands(flat<D / 2>(dv_acc));
        wgmma_fence_operands(flat<D / 2>(dk_acc));
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = q0 + row16 + g + 8 * half;
            if (row >= n_q) continue;
            float* dst = dq_acc + (q_base + row) * D + 64 * dq_block + 2 * t;
#pragma unroll
            for (int j = 0; j < 8; ++j) atomic_add_pair(dst + 8 * j, dq[j][2 * half] * scale, dq[j][2 * half + 1] * scale);
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

#define BACKWARD_04(TAG, T, D)                                                                                 \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) attention_backward_04_wgmma_keys_##TAG##_d##D( \
        const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,                             \
        const unsigned short* __restrict__ v, const unsigned short* __restrict__ dout,                          \
        const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq_acc,             \
        unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int heads, int kv_heads, int n_q,     \
        int n_k, float scale, int causal) {                                                                    \
        extern __shared__ unsigned char shared_raw[];                                                          \
        attention_backward_keys_wgmma<T, D>(q, k, v, dout, lse, delta, dq_acc, dk, dv, heads, kv_heads, n_q, n_k, \
                                            scale, causal, aligned_shared(shared_raw));                        \
    }

#define BACKWARD_04_DOT(TAG, ROW)                                                                              \
    extern "C" __global__ void __launch_bounds__(BWD4_DOT_ROWS * 32) attention_backward_04_wgmma_dot_##TAG(   \
        const ROW::Elem* __restrict__ out, const ROW::Elem* __restrict__ dout, float* __restrict__ delta,      \
        float* __restrict__ dq_acc, int rows, int d) {                                                          \
        dot_and_clear<ROW>(out, dout, delta, dq_acc, rows, d);                                                  \
    }

BACKWARD_04(bf16, Bf16Mma, 64) BACKWARD_04(bf16, Bf16Mma, 128) BACKWARD_04_DOT(bf16, BF16Row)
BACKWARD_04(f16, F16Mma, 64) BACKWARD_04(f16, F16Mma, 128) BACKWARD_04_DOT(f16, F16Row)
