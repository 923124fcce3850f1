// attention_11_wgmma_tma — attention_10_wgmma with its copies handed to the tensor memory accelerator
// and to one producer warp: the two consumer warpgroups only compute, and never meet at a barrier
// of the block inside the loop.
//
// Changed from attention_10_wgmma:
//   - Copies: one thread of a ninth warp (the producer) issues each Q, K and V tile as TMA boxes
//               of 64 columns by 128 rows (cp.async.bulk.tensor, kernels/common/tma.cuh), which
//               land in wgmma's swizzled layout by themselves and zero-fill rows past n. No
//               consumer thread computes a copy address.
//   - Synchronisation: shared-memory barriers (mbarrier) per stage instead of __syncthreads. The
//               producer announces a stage's bytes on its `full` barrier, which completes when
//               they have landed; the 256 consumer threads each arrive on the stage's `empty`
//               barrier when their warpgroup's products of it are done, and the producer waits
//               for that before refilling the stage. Q has a barrier of its own.
//   - The two warpgroups drift apart: one may be in its softmax while the other's products run.
//   - 288 threads (2 warpgroups and the producer warp), so a thread may keep 224 registers.
//   Still missing from FlashAttention-3: the softmax of one tile overlapped with the next tile's
//               S within a warpgroup, and registers moved from producer to consumers (setmaxnreg).
// Launch:       grid = (ceil(n_q / 128), heads, batch), longest causal query tiles first;
//               block = 288 threads (2 consumer warpgroups x 64 query rows, 1 producer warp);
//               dynamic shared memory as attention_10 plus 5 barriers of 8 bytes: 81 KiB at
//               D = 64, 161 KiB at D = 128. Three tensor maps (q, k, v as [heads][n][D], boxes of
//               64 columns by 128 rows, 128-byte swizzle) made on the host per call.
// Traffic:      as attention_10: q and out once; each K and V tile once per query tile of 128.
// Limits:       float16 or bfloat16, D = 64 or 128 (entries attention_11_wgmma_tma_<f16|bf16>_d<64|128>),
//               contiguous inputs whose base is 16-byte aligned (TMA's rule), any n_q, n_k >= 1, GQA,
//               bottom-right causal, any finite scale. Compute capability 9.0 (the sm_90a build).
#include "wgmma_attention.cuh"
#include "tma.cuh"

#define TMA_CONSUMERS 256
#define TMA_THREADS 288
#define TMA_STAGES 2

// Block (x, head, batch) of [batch][heads][n][D] tensors; the maps see them as [batch heads][n][D].
template <class T, int D>
__device__ __forceinline__ void attention_11(const TensorMap* q_map, const TensorMap* k_map, const TensorMap* v_map,
                                             const typename T::Elem* __restrict__ q, const typename T::Elem* __restrict__ k,
                                             const typename T::Elem* __restrict__ v, typename T::Elem* __restrict__ out,
                                             float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,
                                             float scale_log2, int causal) {
    typedef typename T::Elem Elem;
    constexpr int TILE = WG_KEYS * D;
    const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (heads / kv_heads);
    const int q_index = batch * heads + head, kv_index = batch * kv_heads + kv_head;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * WG_BLOCK_Q;
    extern __shared__ unsigned char shared_raw[];
#ifdef ONLINESOFTMAX_HOST_EMULATION
    unsigned char* shared = shared_raw;   // the emulator's dynamic shared memory is 1024-aligned
#else
    unsigned char* shared = shared_raw + ((1024 - (static_cast<u32>(__cvta_generic_to_shared(shared_raw)) & 1023)) & 1023);
#endif
    Elem* Qs = reinterpret_cast<Elem*>(shared);     // [D / 64][128][64]
    Elem* stages = Qs + WG_BLOCK_Q * D;             // stage s: K at 2s TILE, V at (2s + 1) TILE
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(stages + 2 * TMA_STAGES * TILE);
    unsigned long long *q_full = bars, *full = bars + 1, *empty = bars + 1 + TMA_STAGES;
    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);
#pragma unroll
        for (int s = 0; s < TMA_STAGES; ++s) mbarrier_init(&full[s], 1), mbarrier_init(&empty[s], TMA_CONSUMERS);
        mbarrier_init_fence();
    }
    __syncthreads();   // the barriers exist before anyone arrives or waits

    const int block_end = key_limit(min(q0 + WG_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    const int tiles = block_end > 0 ? (block_end + WG_KEYS - 1) / WG_KEYS : 0;
    if (threadIdx.x >= TMA_CONSUMERS) {   // the producer warp: one thread issues every copy
        if (threadIdx.x == TMA_CONSUMERS && tiles > 0) {
            mbarrier_arrive_expect_tx(q_full, WG_BLOCK_Q * D * 2);
#pragma unroll
            for (int c = 0; c < D; c += 64) tma_load_3d(Qs + c * WG_BLOCK_Q, q_map, q, c, q0, q_index, q_full);
            for (int j = 0; j < tiles; ++j) {
                const int s = j % TMA_STAGES;
                if (j >= TMA_STAGES) mbarrier_wait(&empty[s], (j / TMA_STAGES - 1) & 1);   // its last use is done
                mbarrier_arrive_expect_tx(&full[s], 2 * TILE * 2);
                Elem* Ks = stages + 2 * s * TILE;
#pragma unroll
                for (int c = 0; c < D; c += 64) {
                    tma_load_3d(Ks + c * WG_KEYS, k_map, k, c, j * WG_KEYS, kv_index, &full[s]);
                    tma_load_3d(Ks + TILE + c * WG_KEYS, v_map, v, c, j * WG_KEYS, kv_index, &full[s]);
                }
            }
        }
        return;
    }

    const GroupKeys keys = group_keys(q0, n_q, n_k, causal);
    const bool prescale = !(scale_log2 > 0.0f);
    float o[D / 8][4], m[2], l[2];
    start_rows<D>(o, m, l);
    if (tiles > 0) mbarrier_wait(q_full, 0);
    for (int j = 0; j < tiles; ++j) {
        const int s = j % TMA_STAGES, k0 = j * WG_KEYS;
        mbarrier_wait(&full[s], (j / TMA_STAGES) & 1);   // K and V of tile j have landed
        if (k0 < keys.group_end)                         // some row of this warpgroup sees a key of the tile
            wgmma_tile<T, D>(Qs, stages + 2 * s * TILE, stages + (2 * s + 1) * TILE, keys.group, k0, scale_log2,
                             prescale, k0 + WG_KEYS > keys.unmasked_end, keys.limit, o, m, l);
        mbarrier_arrive(&empty[s]);                      // this thread is done reading the stage
    }
    store_output<T, D>(o, m, l, out + (long long)q_index * n_q * D, lse == nullptr ? nullptr : lse + (long long)q_index * n_q,
                       q0 + 16 * (threadIdx.x >> 5), n_q);
}

#ifdef ONLINESOFTMAX_HOST_EMULATION
#define TENSOR_MAP_PARAM(name) const TensorMap name   // the emulator passes structs by value too
#else
#define TENSOR_MAP_PARAM(name) const __grid_constant__ TensorMap name
#endif

#define ATTENTION_11(TAG, T, D)                                                                                    \
    extern "C" __global__ void __launch_bounds__(TMA_THREADS, 1) attention_11_wgmma_tma_##TAG##_d##D(              \
        TENSOR_MAP_PARAM(q_map), TENSOR_MAP_PARAM(k_map), TENSOR_MAP_PARAM(v_map), const T::Elem* __restrict__ q,   \
        const T::Elem* __restrict__ k, const T::Elem* __restrict__ v, T::Elem* __restrict__ out,                  \
        float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k, float scale_log2, int causal) {         \
        attention_11<T, D>(&q_map, &k_map, &v_map, q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal); \
    }

ATTENTION_11(bf16, Bf16Mma, 64)
ATTENTION_11(bf16, Bf16Mma, 128)
ATTENTION_11(f16, F16Mma, 64)
ATTENTION_11(f16, F16Mma, 128)
