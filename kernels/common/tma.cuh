// tma.cuh — Hopper's tensor memory accelerator (TMA) and the shared-memory barriers it completes on
// (sm_90): a 3-D tile copy global -> shared memory by one thread, written in the 128-byte swizzled
// layout of wgmma.cuh, and mbarrier init / arrive / expect-bytes / wait. Included by the Hopper
// attention kernels; never pasted.
//
// A tensor map describes the global tensor: on the GPU the driver's 128-byte CUtensorMap, made on
// the host by cuTensorMapEncodeTiled (onlinesoftmax/runtime/tensor_maps.py) and passed as a
// `const __grid_constant__` kernel parameter; in the CPU emulator the fields it needs (its dims,
// strides, box and swizzle) in the same 128 bytes, made by the same module. Dims are innermost
// first: (columns, rows, heads); a box is 64 columns (128 bytes, the swizzle's width) by `box_rows`
// rows of one head. Elements of the box outside the tensor (rows past its n) arrive as zeros.
//
// An mbarrier (8 bytes of shared memory) counts arrivals and bytes: a phase completes when its
// `count` arrivals have come and every byte announced by arrive_expect_tx has landed; waiting names
// the phase by its parity (0, 1, 0, ...). The copy announces nothing itself: the thread that
// issues it first calls mbarrier_arrive_expect_tx with the bytes of every copy of that phase.
#pragma once
#include "mma.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "tma.cuh: TMA and mbarrier transaction counts need sm_90 (a kernel that includes it declares min_cc = 90)"
#endif

struct alignas(64) TensorMap {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    unsigned long long dims[3], strides[2], box_rows, element_bytes, swizzle_bytes, unused[8];
#else
    unsigned long long opaque[16];
#endif
};

__device__ __forceinline__ u32 shared_u32(const void* p) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    return simt_shared_address(p);
#else
    return static_cast<u32>(__cvta_generic_to_shared(p));
#endif
}

// Set up a barrier for `count` arrivals a phase (one thread, then a barrier of the block before use).
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, u32 count) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_mbarrier_init(bar, count);
#else
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_u32(bar)), "r"(count) : "memory");
#endif
}

// Make the initialised barriers visible to the async proxy (the copies' completions).
__device__ __forceinline__ void mbarrier_init_fence() {
#ifndef ONLINESOFTMAX_HOST_EMULATION
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// One arrival.
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_mbarrier_arrive(bar, 0);
#else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_u32(bar)) : "memory");
#endif
}

// One arrival that also announces `bytes` to land in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, u32 bytes) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_mbarrier_arrive(bar, bytes);
#else
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_u32(bar)), "r"(bytes) : "memory");
#endif
}

// Wait until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, u32 parity) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    while (!simt_mbarrier_try_wait(bar, parity)) {
    }
#else
    const u32 address = shared_u32(bar);
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(address),
        "r"(parity)
        : "memory");
#endif
}

// The box at (column c0, row r0, head h) of the tensor `map` -> `dst` (1024-byte aligned), in the
// 128-byte swizzled layout; completes `bytes` on `bar`. `tensor` is the tensor's global address,
// which the GPU's map holds itself and the emulator's does not.
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, const void* tensor, int c0, int r0, int h,
                                            unsigned long long* bar) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_tma_load_3d(dst, map->dims, map->strides, map->box_rows, map->element_bytes, map->swizzle_bytes, tensor, c0,
                     r0, h, bar);
#else
    (void)tensor;
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        ::"r"(shared_u32(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(r0), "r"(h),
        "r"(shared_u32(bar))
        : "memory");
#endif
}
