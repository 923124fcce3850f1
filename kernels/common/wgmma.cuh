// wgmma.cuh — Hopper's warpgroup matrix multiply-accumulate (wgmma.mma_async, sm_90a): the
// shared-memory descriptor of a 128-byte-swizzled tile, the instruction with A from shared memory
// (wgmma_ss) or from registers (wgmma_rs) for N = 64 and 128, and the fences around it. Included by
// the Hopper attention kernels; never pasted.
//
// One instruction, issued by the 4 warps of a warpgroup (128 consecutive threads starting at a
// multiple of 128): D (64 x N, fp32, in registers) = A (64 x 16) B (16 x N) + D. Warp w owns rows
// 16w .. 16w + 15, with mma.sync's m16n8k16 fragments: a thread's accumulator i is row
// 16w + g + 8 (i % 4 >= 2), column 8 (i / 4) + 2t + i % 2 (g = lane / 4, t = lane % 4), and A from
// registers is mma.sync's A fragment of the warp's 16 rows — the accumulators of one product,
// packed in pairs, are the A registers of the next (P of S for P V).
//
// Operands in shared memory are tiles of 16-bit elements in blocks of 64 columns (128 bytes, the
// swizzle's width), each block [rows][64] with its 16-byte chunks XOR-swizzled by the row
// (chunk c of row r at c ^ (r % 8): `swizzled<64>` of mma.cuh) and 1024-byte aligned; blocks
// rows * 128 bytes apart. A descriptor names where one instruction's operand starts:
//   - K-major (A, and B stored [N][K], as K for Q K^T): 8-row groups `stride` = 1024 bytes apart;
//     the k-step at column k0 starts at block k0 / 64, byte 2 (k0 % 64) of its first row.
//   - MN-major (B stored [K][N], as V for P V; TRANSPOSE_B = 1): the k-step at row k0 starts at row
//     k0; 8-row groups `stride` = 1024 bytes apart, the next 64 columns `leading` = rows * 128 on.
// onlinesoftmax/kernels/attention/wgmma_layout.py holds the same rules in NumPy, with the tests
// that check them against the CPU emulator and, on a GPU, against the hardware
// (tests/probes/wgmma_probe.cu).
//
// The instruction is asynchronous: its operands must stay unchanged and its accumulators unread
// until wgmma_wait<n>() says that at most n committed groups are still in flight. Shared memory
// written by ordinary stores or cp.async must be fenced into the async proxy (fence_proxy_async,
// by each writing thread, before the barrier) before an instruction reads it. Below sm_90 the
// header stops the build; for sm_90 without the a, or a later arch, every function here traps (the
// loader builds a kernel that includes it for sm_90a, on compute capability 9.0 only).
#pragma once
#include "mma.cuh"

typedef unsigned long long u64;

// Which 16-bit type an mma.cuh operand struct stands for.
template <class T> struct WgmmaType;
template <> struct WgmmaType<Bf16Mma> { static constexpr bool bf16 = true; };
template <> struct WgmmaType<F16Mma> { static constexpr bool bf16 = false; };

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "wgmma.cuh: wgmma needs sm_90a (a kernel that includes it declares min_cc = 90)"
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(ONLINESOFTMAX_HOST_EMULATION)
#define WGMMA_UNAVAILABLE 1   // sm_90 without the a, or a later arch: the functions trap
#endif

// The descriptor of an operand starting at `start` (shared memory), with the 128-byte swizzle.
__device__ __forceinline__ u64 wgmma_descriptor(const void* start, u32 leading_bytes, u32 stride_bytes) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    const u32 address = simt_shared_address(start);
#else
    const u32 address = static_cast<u32>(__cvta_generic_to_shared(start));
#endif
    return static_cast<u64>((address & 0x3FFFFu) >> 4) | (static_cast<u64>((leading_bytes >> 4) & 0x3FFFu) << 16) |
           (static_cast<u64>((stride_bytes >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

// The first 1024-byte boundary of the block's dynamic shared memory at or after `raw` (the swizzle's
// atoms are 1024-byte aligned; a kernel asks for 1 KiB more than its tiles).
__device__ __forceinline__ unsigned char* aligned_shared(unsigned char* raw) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    return raw;   // the emulator's dynamic shared memory is 1024-aligned
#else
    return raw + ((1024 - (static_cast<u32>(__cvta_generic_to_shared(raw)) & 1023)) & 1023);
#endif
}

// Before the first instruction that reads registers (accumulators or A) written since the last one.
__device__ __forceinline__ void wgmma_fence() {
#if defined(ONLINESOFTMAX_HOST_EMULATION)
#elif defined(WGMMA_UNAVAILABLE)
    __trap();
#else
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

// Close the group of instructions issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
#if defined(ONLINESOFTMAX_HOST_EMULATION)
    simt_wgmma_commit();
#elif defined(WGMMA_UNAVAILABLE)
    __trap();
#else
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

// Wait until at most PENDING committed groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
#if defined(ONLINESOFTMAX_HOST_EMULATION)
    simt_wgmma_wait(PENDING);
#elif defined(WGMMA_UNAVAILABLE)
    __trap();
#else
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
#endif
}

// Shared memory this thread wrote by ordinary stores or cp.async, made visible to the async proxy
// (the tensor cores' reads); then a barrier.
__device__ __forceinline__ void fence_proxy_async() {
#if !defined(ONLINESOFTMAX_HOST_EMULATION) && !defined(WGMMA_UNAVAILABLE)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Move registers between the warpgroups of a block (sm_90a): every thread of a warpgroup lowers
// (dec) or raises (inc) its own limit to REGS, a multiple of 8 from 24 to 256. It takes effect
// only in a kernel with a register cap at entry (__launch_bounds__(threads, 1)) whose warpgroups'
// roles are the branches of one if / else; the compiler says when it ignores it (C7508).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(ONLINESOFTMAX_HOST_EMULATION)
#elif defined(WGMMA_UNAVAILABLE)
    __trap();
#else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
#endif
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(ONLINESOFTMAX_HOST_EMULATION)
#elif defined(WGMMA_UNAVAILABLE)
    __trap();
#else
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
#endif
}

// Keeps the compiler from moving reads or writes of the accumulators across a wgmma or a wait.
template <int C>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[C]) {
#ifndef ONLINESOFTMAX_HOST_EMULATION
#pragma unroll
    for (int i = 0; i < C; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

#define WGMMA_OUT8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                         "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_OUT32(d) WGMMA_OUT8(d, 0), WGMMA_OUT8(d, 8), WGMMA_OUT8(d, 16), WGMMA_OUT8(d, 24)
#define WGMMA_OUT64(d) WGMMA_OUT32(d), WGMMA_OUT8(d, 32), WGMMA_OUT8(d, 40), WGMMA_OUT8(d, 48), WGMMA_OUT8(d, 56)
#define WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WGMMA_SS_64(TYPE)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " WGMMA_D32           \
                 ", %32, %33, p, 1, 1, 0, %35;\n}\n"                                              \
                 : WGMMA_OUT32(d)                                                                \
                 : "l"(a_desc), "l"(b_desc), "r"(accumulate), "n"(TRANSPOSE_B))
#define WGMMA_SS_128(TYPE)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " WGMMA_D64           \
                 ", %64, %65, p, 1, 1, 0, %67;\n}\n"                                              \
                 : WGMMA_OUT64(d)                                                                \
                 : "l"(a_desc), "l"(b_desc), "r"(accumulate), "n"(TRANSPOSE_B))
#define WGMMA_RS_64(TYPE)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " WGMMA_D32           \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                        \
                 : WGMMA_OUT32(d)                                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate), "n"(TRANSPOSE_B))
#define WGMMA_RS_128(TYPE)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " WGMMA_D64           \
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                        \
                 : WGMMA_OUT64(d)                                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate), "n"(TRANSPOSE_B))

// D (64 x N) = A B + D, or A B when `accumulate` is 0; A and B named by descriptors. T: Bf16Mma or
// F16Mma (mma.cuh); N: 64 or 128; TRANSPOSE_B: B MN-major.
template <class T, int N, int TRANSPOSE_B>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 a_desc, u64 b_desc, int accumulate) {
    static_assert(N == 64 || N == 128, "wgmma_ss: N = 64 or 128");
#if defined(ONLINESOFTMAX_HOST_EMULATION)
    simt_wgmma(WgmmaType<T>::bf16, d, N, nullptr, a_desc, b_desc, TRANSPOSE_B, accumulate);
#elif defined(WGMMA_UNAVAILABLE)
    __trap();
#else
    if constexpr (N == 64) {
        if constexpr (WgmmaType<T>::bf16) WGMMA_SS_64("bf16"); else WGMMA_SS_64("f16");
    } else {
        if constexpr (WgmmaType<T>::bf16) WGMMA_SS_128("bf16"); else WGMMA_SS_128("f16");
    }
#endif
}

// The same with A from registers: each thread's mma.sync A fragment of its warp's 16 rows.
template <class T, int N, int TRANSPOSE_B>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 a[4], u64 b_desc, int accumulate) {
    static_assert(N == 64 || N == 128, "wgmma_rs: N = 64 or 128");
#if defined(ONLINESOFTMAX_HOST_EMULATION)
    simt_wgmma(WgmmaType<T>::bf16, d, N, a, 0, b_desc, TRANSPOSE_B, accumulate);
#elif defined(WGMMA_UNAVAILABLE)
    __trap();
#else
    if constexpr (N == 64) {
        if constexpr (WgmmaType<T>::bf16) WGMMA_RS_64("bf16"); else WGMMA_RS_64("f16");
    } else {
        if constexpr (WgmmaType<T>::bf16) WGMMA_RS_128("bf16"); else WGMMA_RS_128("f16");
    }
#endif
}
