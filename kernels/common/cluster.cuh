// cluster.cuh — Hopper thread-block clusters through inline PTX (sm_90): rank, barrier,
// and reading a state from another block's shared memory (distributed shared memory).
// A kernel launched without cluster dimensions is a cluster of one, so these still work.
// Clusters exist from sm_90 on: a kernel that includes this header is Hopper-only (its variant
// declares min_cc = 90 in the registry), and a build for an older arch stops here with one error
// instead of ptxas's list of unsupported instructions.
#pragma once
#include "online_state.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "cluster.cuh: thread-block clusters need sm_90 or newer (a kernel that includes it declares min_cc = 90)"
#endif

__device__ __forceinline__ unsigned int cluster_rank() {
    unsigned int r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ unsigned int cluster_size() {
    unsigned int n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}

// Every thread of every block in the cluster arrives; release / acquire order shared memory.
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// The state at `local` (a __shared__ OnlineState) as stored in block `rank` of the cluster.
__device__ __forceinline__ OnlineState cluster_load_state(const OnlineState* local, unsigned int rank) {
    const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(local));
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    OnlineState s;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(s.m), "=f"(s.l) : "r"(remote) : "memory");
    return s;
}

// Warp 0 combines the cluster's per-block states (lane r reads block r, the identity past
// the cluster size) with the xor butterfly over offsets below the cluster size; every
// thread of the block gets the row's state through `broadcast`. The block's own state must
// be in `mine` (shared) and a cluster_sync must separate its store from this call.
__device__ __forceinline__ OnlineState cluster_reduce_states(const OnlineState* mine, OnlineState* broadcast) {
    const unsigned int n = cluster_size();
    if (threadIdx.x < 32) {
        const unsigned int lane = threadIdx.x;
        OnlineState s = lane < n ? cluster_load_state(mine, lane) : online_identity();
        s = online_warp_reduce(s, static_cast<int>(n));
        if (lane == 0) *broadcast = s;
    }
    __syncthreads();
    return *broadcast;
}
