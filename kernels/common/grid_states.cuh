// grid_states.cuh — blocks of one grid exchanging (m, l) states through global memory.
//
// A cluster (cluster.cuh) gives at most 16 co-scheduled blocks and a hardware barrier. Past
// that, blocks can still meet in global memory if every one of them is resident at once —
// which a *cooperative* launch guarantees (it fails with an error instead of launching a grid
// that cannot all be resident, so a waiting block can never wait on a block that is not running).
//
// publish_state: thread 0 stores its block's state in `slot`, makes it visible to the whole GPU
//                (__threadfence), then counts itself in `*arrived` (atomicAdd).
// wait_for_count: thread 0 polls `*arrived` with an acquire load (L2, never a stale L1 copy),
//                 backing off with __nanosleep, until `count` blocks have arrived; the barrier
//                 that follows hands the news to the rest of the block.
// load_state_cg:  a published state read from L2 (ld.global.cg), past the non-coherent L1.
#pragma once
#include "online_state.cuh"

__device__ __forceinline__ void publish_state(OnlineState* slot, unsigned int* arrived, OnlineState s) {
    if (threadIdx.x == 0) {
        *slot = s;
        __threadfence();
        atomicAdd(arrived, 1u);
    }
}

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void wait_for_count(const unsigned int* arrived, unsigned int count) {
    if (threadIdx.x == 0) {
        while (load_acquire(arrived) < count) __nanosleep(100);
    }
    __syncthreads();
}

__device__ __forceinline__ OnlineState load_state_cg(const OnlineState* slot) {
    const float2 v = __ldcg(reinterpret_cast<const float2*>(slot));
    return {v.x, v.y};
}
