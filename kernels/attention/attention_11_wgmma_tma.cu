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
//   - 288 threads (2 warpgroups and the producer warp). Each of the SM's 4 schedulers serves 3 of
//               the 9 warps from its quarter of the register file, so ptxas caps a thread at 168
//               registers, as for 384 threads; the consumers need 165 at D = 128.
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
#include "tma_attention.cuh"

#define TMA_STAGES 2

// Block (x, head, batch) of [batch][heads][n][D] tensors; the maps see them as [batch heads][n][D].
template <class T, int D>
__device__ __forceinline__ void attention_11(const TensorMap* q_map, const TensorMap* k_map, const TensorMap* v_map,
                                             const typename T::Elem* __restrict__ q, const typename T::Elem* __restrict__ k,
                                             const typename T::Elem* __restrict__ v, typename T::Elem* __restrict__ out,
                                             float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,
                                             float scale_log2, int causal) {
    const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (heads / kv_heads);
    const int q_index = batch * heads + head, kv_index = batch * kv_heads + kv_head;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * WG_BLOCK_Q;
    extern __shared__ unsigned char shared_raw[];
    const TmaBlock<typename T::Elem, D, TMA_STAGES> b(aligned_shared(shared_raw));
    b.init();   // the barriers exist before anyone arrives or waits

    const int block_end = key_limit(min(q0 + WG_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    const int tiles = block_end > 0 ? (block_end + WG_KEYS - 1) / WG_KEYS : 0;
    if (threadIdx.x >= TMA_CONSUMERS) {   // the producer warp: one thread issues every copy
        if (threadIdx.x == TMA_CONSUMERS && tiles > 0) produce(b, q_map, k_map, v_map, q, k, v, q0, q_index, kv_index, tiles);
        return;
    }

    const GroupKeys keys = group_keys(q0, n_q, n_k, causal);
    const bool prescale = !(scale_log2 > 0.0f);
    float o[D / 8][4], m[2], l[2];
    start_rows<D>(o, m, l);
    if (tiles > 0) mbarrier_wait(b.q_full, 0);
    for (int j = 0; j < tiles; ++j) {   // the consumers' loop
        const int s = j % TMA_STAGES, k0 = j * WG_KEYS;
        mbarrier_wait(&b.full[s], (j / TMA_STAGES) & 1);   // K and V of tile j have landed
        if (k0 < keys.group_end)                           // some row of this warpgroup sees a key of the tile
            wgmma_tile<T, D>(b.q, b.k(s), b.v(s), keys.group, k0, scale_log2, prescale, k0 + WG_KEYS > keys.unmasked_end,
                             keys.limit, o, m, l);
        mbarrier_arrive(&b.empty[s]);                      // this thread is done reading the stage
    }
    store_output<T, D>(o, m, l, out + (long long)q_index * n_q * D, lse == nullptr ? nullptr : lse + (long long)q_index * n_q,
                       q0 + 16 * (threadIdx.x >> 5), n_q);
}

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
