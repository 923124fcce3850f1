// async_copy.cuh — Ampere-style asynchronous copies global -> shared (cp.async, sm_80+).
//
// cp_async_16 starts a 16-byte copy that bypasses the registers (and L1: .cg); the copies a
// thread has started form a group at cp_async_commit, and cp_async_wait_all blocks the
// thread until all of its groups have landed, which also makes them visible to it. Other
// threads see them only after a barrier. Both addresses must be 16-byte aligned.
#pragma once

template <typename R, typename T>
__device__ __forceinline__ void cp_async_16(R* shared_dst, const T* global_src) {
    const unsigned int dst = static_cast<unsigned int>(__cvta_generic_to_shared(shared_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(__cvta_generic_to_global(global_src))
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
