// tma_attention.cuh — what the TMA attention kernels (attention_11_wgmma_tma, attention_12_wgmma_overlap)
// share: the block's shared memory (Q, a ring of STAGES K and V tiles, the barriers), and the
// producer warp's loop. How the block works is told in kernels/attention/attention_11_wgmma_tma.cu.
#pragma once
#include "wgmma_attention.cuh"
#include "tma.cuh"

#define TMA_CONSUMERS 256   // two consumer warpgroups
#define TMA_THREADS 288     // and one producer warp

// The block's shared memory, from a 1024-aligned base: Q [D / 64][128][64], then stage s's K at
// 2s TILE and V at (2s + 1) TILE, then the barriers: q_full, full[STAGES], empty[STAGES].
template <class Elem, int D, int STAGES>
struct TmaBlock {
    static constexpr int TILE = WG_KEYS * D;
    Elem* q;
    Elem* stages;
    unsigned long long *q_full, *full, *empty;

    __device__ __forceinline__ explicit TmaBlock(unsigned char* shared)
        : q(reinterpret_cast<Elem*>(shared)), stages(q + WG_BLOCK_Q * D) {
        q_full = reinterpret_cast<unsigned long long*>(stages + 2 * STAGES * TILE);
        full = q_full + 1;
        empty = full + STAGES;
    }
    __device__ __forceinline__ Elem* k(int stage) const { return stages + 2 * stage * TILE; }
    __device__ __forceinline__ Elem* v(int stage) const { return stages + (2 * stage + 1) * TILE; }

    // One thread sets the barriers up; then the whole block waits for them.
    __device__ __forceinline__ void init() const {
        if (threadIdx.x == 0) {
            mbarrier_init(q_full, 1);
#pragma unroll
            for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1), mbarrier_init(&empty[s], TMA_CONSUMERS);
            mbarrier_init_fence();
        }
        __syncthreads();
    }
};

// The producer: one thread issues Q and then key tiles 0 .. tiles - 1 into the ring, each stage
// refilled once the 256 consumer threads have released its previous use.
template <class Elem, int D, int STAGES>
__device__ __forceinline__ void produce(const TmaBlock<Elem, D, STAGES>& b, const TensorMap* q_map, const TensorMap* k_map,
                                        const TensorMap* v_map, const Elem* q, const Elem* k, const Elem* v, int q0,
                                        int q_index, int kv_index, int tiles) {
    mbarrier_arrive_expect_tx(b.q_full, WG_BLOCK_Q * D * 2);
#pragma unroll
    for (int c = 0; c < D; c += 64) tma_load_3d(b.q + c * WG_BLOCK_Q, q_map, q, c, q0, q_index, b.q_full);
    for (int j = 0; j < tiles; ++j) {
        const int s = j % STAGES;
        if (j >= STAGES) mbarrier_wait(&b.empty[s], (j / STAGES - 1) & 1);   // its last use is done
        mbarrier_arrive_expect_tx(&b.full[s], 2 * b.TILE * 2);
#pragma unroll
        for (int c = 0; c < D; c += 64) {
            tma_load_3d(b.k(s) + c * WG_KEYS, k_map, k, c, j * WG_KEYS, kv_index, &b.full[s]);
            tma_load_3d(b.v(s) + c * WG_KEYS, v_map, v, c, j * WG_KEYS, kv_index, &b.full[s]);
        }
    }
}

// A tensor map as a kernel parameter: by value, and __grid_constant__ on the GPU (the copy engine reads
// it where the launch put it).
#ifdef ONLINESOFTMAX_HOST_EMULATION
#define TENSOR_MAP_PARAM(name) const TensorMap name   // the emulator passes structs by value too
#else
#define TENSOR_MAP_PARAM(name) const __grid_constant__ TensorMap name
#endif
