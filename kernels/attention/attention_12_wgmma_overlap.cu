// attention_12_wgmma_overlap — attention_11_wgmma_tma with the softmax of one key tile overlapped with
// the products: while a warpgroup computes the exponentials of tile j, its P V of tile j - 1 runs on
// the tensor cores (FlashAttention-3's intra-warpgroup overlap).
//
// Changed from attention_11_wgmma_tma:
//   - The loop is software-pipelined by one product: per tile j it issues S_j = Q K_j^T and then
//               O += P_{j-1} V_{j-1}, waits for S_j only (wgmma_wait<1>: the older group), runs the
//               softmax of tile j while P V is in flight, then waits for P V, releases tile j - 1's
//               stage, rescales O by tile j's alpha and packs P_j. P V of the last tile closes it.
//   - O is rescaled after P V of the previous tile lands, not inside the softmax (softmax_scores
//               and rescale_rows are the two halves of attention_10's step).
//   - Three stages of K and V (a warpgroup holds two at once: tile j - 1's V and tile j's K), 225
//               KiB at D = 128.
//   - A warpgroup computes the prefix of the tiles some of its rows see, then releases the rest
//               unread.
//   - Registers: S of tile j, P of tile j - 1 and O are live at once (160 at D = 128, before
//               addresses and loop state), which spills under the 168-register cap of 288
//               threads. So the producer is a whole warpgroup (384 threads) that lowers its
//               limit to 24 (setmaxnreg) and the consumers raise theirs to 240:
//               128 x 24 + 256 x 240 = 384 x 168, exactly the registers the block is
//               launched with (a raise draws on what the lowering warpgroup gave back).
// Launch:       grid = (ceil(n_q / 128), heads, batch); block = 384 threads (2 consumer
//               warpgroups, 1 producer warpgroup); dynamic shared memory the Q tile and three
//               stages of K and V (128 keys x D), 1 KiB to align them and 7 barriers: 113 KiB at
//               D = 64, 225 KiB at D = 128.
// Traffic:      as attention_10: q and out once; each K and V tile once per query tile of 128.
// Limits:       as attention_11_wgmma_tma (entries attention_12_wgmma_overlap_<f16|bf16>_d<64|128>).
#include "tma_attention.cuh"

#define OVERLAP_STAGES 3
#define OVERLAP_THREADS 384   // two consumer warpgroups and a producer warpgroup
#define PRODUCER_REGISTERS 24
#define CONSUMER_REGISTERS 240

// The consumers: warpgroup w computes query rows q0 + 64w .. q0 + 64w + 63 (see the header comment).
template <class T, int D, int STAGES>
__device__ __forceinline__ void consume(const TmaBlock<typename T::Elem, D, STAGES>& b, typename T::Elem* __restrict__ out,
                                        float* __restrict__ lse, int q_index, int n_q, int n_k, int q0, int tiles,
                                        float scale_log2, int causal) {
    const GroupKeys keys = group_keys(q0, n_q, n_k, causal);
    const bool prescale = !(scale_log2 > 0.0f);
    const int group_tiles = keys.group_end > 0 ? (keys.group_end + WG_KEYS - 1) / WG_KEYS : 0;   // a prefix of tiles
    float o[D / 8][4], m[2], l[2];
    start_rows<D>(o, m, l);
    if (tiles > 0) mbarrier_wait(b.q_full, 0);
    if (group_tiles > 0) {
        float s[WG_KEYS / 8][4], alpha[2];
        u32 p[WG_KEYS / 16][4];
        mbarrier_wait(&b.full[0], 0);   // tile 0: S, softmax, P (O is 0: nothing to rescale)
        issue_scores<T, D>(s, b.q, b.k(0), keys.group);
        wgmma_wait<0>();
        wgmma_fence_operands(flat<WG_KEYS / 2>(s));
        softmax_scores<WG_KEYS>(s, m, l, alpha, scale_log2, prescale, WG_KEYS > keys.unmasked_end, 0, keys.limit);
        pack_p<T>(p, s);
        for (int j = 1; j < group_tiles; ++j) {   // the pipelined loop
            const int stage = j % STAGES, previous = (j - 1) % STAGES, k0 = j * WG_KEYS;
            mbarrier_wait(&b.full[stage], (j / STAGES) & 1);
            issue_scores<T, D>(s, b.q, b.k(stage), keys.group);   // S_j
            issue_pv<T, D>(o, p, b.v(previous));                   // O += P_{j-1} V_{j-1}
            wgmma_wait<1>();                                        // S_j has landed; P V still runs
            wgmma_fence_operands(flat<WG_KEYS / 2>(s));
            softmax_scores<WG_KEYS>(s, m, l, alpha, scale_log2, prescale, k0 + WG_KEYS > keys.unmasked_end, k0,
                                    keys.limit);
            wgmma_wait<0>();                                        // P V of tile j - 1 has landed
            wgmma_fence_operands(flat<D / 2>(o));
            mbarrier_arrive(&b.empty[previous]);
            rescale_rows<D>(o, alpha);
            pack_p<T>(p, s);
        }
        const int last = (group_tiles - 1) % STAGES;
        issue_pv<T, D>(o, p, b.v(last));
        wgmma_wait<0>();
        wgmma_fence_operands(flat<D / 2>(o));
        mbarrier_arrive(&b.empty[last]);
    }
    for (int j = group_tiles; j < tiles; ++j) {   // tiles no row of this warpgroup sees: released unread
        mbarrier_wait(&b.full[j % STAGES], (j / STAGES) & 1);
        mbarrier_arrive(&b.empty[j % STAGES]);
    }
    store_output<T, D>(o, m, l, out + (long long)q_index * n_q * D, lse == nullptr ? nullptr : lse + (long long)q_index * n_q,
                       q0 + 16 * (threadIdx.x >> 5), n_q);
}

// Block (x, head, batch) of [batch][heads][n][D] tensors; the maps see them as [batch heads][n][D].
template <class T, int D>
__device__ __forceinline__ void attention_12(const TensorMap* q_map, const TensorMap* k_map, const TensorMap* v_map,
                                             const typename T::Elem* __restrict__ q, const typename T::Elem* __restrict__ k,
                                             const typename T::Elem* __restrict__ v, typename T::Elem* __restrict__ out,
                                             float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,
                                             float scale_log2, int causal) {
    constexpr int STAGES = OVERLAP_STAGES;
    const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (heads / kv_heads);
    const int q_index = batch * heads + head, kv_index = batch * kv_heads + kv_head;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * WG_BLOCK_Q;
    extern __shared__ unsigned char shared_raw[];
    const TmaBlock<typename T::Elem, D, STAGES> b(aligned_shared(shared_raw));
    b.init();

    const int block_end = key_limit(min(q0 + WG_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    const int tiles = block_end > 0 ? (block_end + WG_KEYS - 1) / WG_KEYS : 0;
    if (threadIdx.x >= TMA_CONSUMERS) {   // the producer warpgroup: one thread issues every copy
        setmaxnreg_dec<PRODUCER_REGISTERS>();
        if (threadIdx.x == TMA_CONSUMERS && tiles > 0) produce(b, q_map, k_map, v_map, q, k, v, q0, q_index, kv_index, tiles);
    } else {
        setmaxnreg_inc<CONSUMER_REGISTERS>();
        consume<T, D, STAGES>(b, out, lse, q_index, n_q, n_k, q0, tiles, scale_log2, causal);
    }
}

#define ATTENTION_12(TAG, T, D)                                                                                    \
    extern "C" __global__ void __launch_bounds__(OVERLAP_THREADS, 1) attention_12_wgmma_overlap_##TAG##_d##D(          \
        TENSOR_MAP_PARAM(q_map), TENSOR_MAP_PARAM(k_map), TENSOR_MAP_PARAM(v_map), const T::Elem* __restrict__ q,   \
        const T::Elem* __restrict__ k, const T::Elem* __restrict__ v, T::Elem* __restrict__ out,                  \
        float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k, float scale_log2, int causal) {         \
        attention_12<T, D>(&q_map, &k_map, &v_map, q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal); \
    }

ATTENTION_12(bf16, Bf16Mma, 64)
ATTENTION_12(bf16, Bf16Mma, 128)
ATTENTION_12(f16, F16Mma, 64)
ATTENTION_12(f16, F16Mma, 128)
