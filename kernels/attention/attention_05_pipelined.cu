// attention_05_pipelined — attention_04_ldmatrix with K and V double-buffered in shared memory and
// loaded by cp.async, so the next tile's loads are in flight while the warps compute this one.
//
// Changed from attention_04_ldmatrix: two stages of (K, V) tiles. At the top of iteration i
//               every thread waits for its own copies of tile i (cp.async.wait_all), and one
//               barrier makes them visible to all and also says that every warp has finished
//               tile i - 1, whose stage tile i + 1 now overwrites: its copies are issued before
//               the math of tile i, which hides them behind it. The copies go global -> shared
//               without passing through registers (cp.async.cg, 16 bytes, into the swizzled
//               places); a row past n_k is zero-filled by the copy itself (source size 0).
//               attention_04 had each thread wait for its loads, store them, and only then
//               compute: two barriers and a load latency per tile with no math to cover them.
// Launch:       grid = (ceil(n_q / 128), heads, batch), longest causal query tiles first;
//               block = 256 threads (8 warps x 16 query rows); dynamic shared memory two stages
//               of one K and one V tile of 64 x D 16-bit elements (32 KiB at D = 64, 64 KiB at
//               D = 128: above the 48 KiB default, the launcher raises the limit).
// Traffic:      as attention_03_mma: q and out once; each K and V tile once per query tile of 128.
// Limits:       as attention_03_mma: float16 or bfloat16, D = 64 or 128 (entries
//               attention_05_pipelined_<f16|bf16>_d<64|128>), contiguous 16-byte aligned inputs,
//               any n_q, n_k >= 1, GQA, bottom-right causal. Compute capability 8.0 or newer
//               (cp.async, mma.sync with bf16).
#include "attention_mma.cuh"

// Issue the copies of key tile k0 into one stage (K then V), zero rows past n_k, and commit them.
template <class T, int D>
__device__ __forceinline__ void issue_tile(typename T::Elem* Ks, typename T::Elem* Vs,
                                           const typename T::Elem* __restrict__ k_head,
                                           const typename T::Elem* __restrict__ v_head, int k0, int n_k) {
#pragma unroll
    for (int c = 0; c < MMA_BLOCK_K * D / 8 / MMA_THREADS; ++c) {   // 16 bytes a thread, coalesced
        const int i = threadIdx.x + c * MMA_THREADS, row = i / (D / 8), col = 8 * (i % (D / 8));
        const bool inside = k0 + row < n_k;
        const long long at = inside ? (long long)(k0 + row) * D + col : 0;   // an address inside the tensor
        cp_async_16_or_zero(Ks + swizzled<D>(row, col), k_head + at, inside);
        cp_async_16_or_zero(Vs + swizzled<D>(row, col), v_head + at, inside);
    }
    cp_async_commit_group();
}

template <class T, int D>
__device__ __forceinline__ void attention_forward(const typename T::Elem* __restrict__ q,
                                                  const typename T::Elem* __restrict__ k,
                                                  const typename T::Elem* __restrict__ v,
                                                  typename T::Elem* __restrict__ out, float* __restrict__ lse,
                                                  int heads, int kv_heads, int n_q, int n_k, float scale_log2,
                                                  int causal) {
    typedef typename T::Elem Elem;
    constexpr int TILE = MMA_BLOCK_K * D;   // elements of one K or V tile
    extern __shared__ int4 shared_raw[];
    Elem* stages = reinterpret_cast<Elem*>(shared_raw);   // stage s: K at 2s TILE, V at (2s + 1) TILE

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_BLOCK_Q, head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / (heads / kv_heads);
    const long long q_offset = (long long)(batch * heads + head) * n_q;
    const Elem* k_head = k + (long long)(batch * kv_heads + kv_head) * n_k * D;
    const Elem* v_head = v + (long long)(batch * kv_heads + kv_head) * n_k * D;
    const int row0 = q0 + MMA_WARP_ROWS * warp;
    const int block_end = key_limit(min(q0 + MMA_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    const WarpKeys keys = warp_keys(row0, n_q, n_k, causal);
    const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) << 3;   // as attention_04
    const int v_row = (lane & 7) + (((lane >> 3) & 1) << 3), v_col = (lane >> 4) << 3;

    if (block_end > 0) issue_tile<T, D>(stages, stages + TILE, k_head, v_head, 0, n_k);   // tile 0 -> stage 0
    u32 qf[D / 16][4];
    load_q_fragments<T, D>(qf, q + q_offset * D, row0, n_q);   // while tile 0 is on its way
    float o[D / 8][4], m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int k0 = 0, stage = 0; k0 < block_end; k0 += MMA_BLOCK_K, stage ^= 1) {
        cp_async_wait_all_groups();   // this thread's copies of tile k0 have landed
        __syncthreads();              // everyone's have; and every warp is done with the other stage
        if (k0 + MMA_BLOCK_K < block_end)
            issue_tile<T, D>(stages + (2 * (stage ^ 1)) * TILE, stages + (2 * (stage ^ 1) + 1) * TILE, k_head, v_head,
                             k0 + MMA_BLOCK_K, n_k);
        if (k0 >= keys.end) continue;   // no row of this warp sees a key of this tile (warp-uniform)
        const Elem* Ks = stages + (2 * stage) * TILE;
        const Elem* Vs = Ks + TILE;

        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
            for (int j = 0; j < 8; j += 2) {   // n-tiles j and j + 1: keys 8j .. 8j+15
                u32 b[4];
                ldmatrix_x4(b, Ks + swizzled<D>(8 * j + k_row, 16 * kk + k_col));
                T::mma(s[j], qf[kk], b);
                T::mma(s[j + 1], qf[kk], b + 2);
            }
        online_softmax_tile<D>(s, m, l, o, scale_log2, k0 + MMA_BLOCK_K > keys.unmasked_end, k0, keys.limit);

#pragma unroll
        for (int kk = 0; kk < MMA_BLOCK_K / 16; ++kk) {
            u32 a[4];
            p_fragment<T>(a, s, kk);
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {   // d n-tiles n and n + 1: columns 8n .. 8n+15
                u32 b[4];
                ldmatrix_x4_trans(b, Vs + swizzled<D>(16 * kk + v_row, 8 * n + v_col));
                T::mma(o[n], a, b);
                T::mma(o[n + 1], a, b + 2);
            }
        }
    }
    store_output<T, D>(o, m, l, out + q_offset * D, lse == nullptr ? nullptr : lse + q_offset, row0, n_q);
}

#define ATTENTION_05(TAG, T, D)                                                                               \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS) attention_05_pipelined_##TAG##_d##D(             \
        const T::Elem* __restrict__ q, const T::Elem* __restrict__ k, const T::Elem* __restrict__ v,            \
        T::Elem* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,          \
        float scale_log2, int causal) {                                                                       \
        attention_forward<T, D>(q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal);             \
    }

ATTENTION_05(bf16, Bf16Mma, 64)
ATTENTION_05(bf16, Bf16Mma, 128)
ATTENTION_05(f16, F16Mma, 64)
ATTENTION_05(f16, F16Mma, 128)
