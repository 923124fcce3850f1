// wgmma_probe — one warpgroup computes D (64 x 128, fp32) = A (64 x 128) B (128 x 128) with eight
// wgmma instructions of kernels/common/wgmma.cuh, in each placement the Hopper kernels use: A from
// shared memory (_ss) or from registers (_rs), B stored K-major as [n][k] (_k, like K in Q K^T) or
// MN-major as [k][n] (_mn, like V in P V). It exists to be run twice, on the CPU emulator and on an
// sm_90a GPU, and compared (tests/test_wgmma_layout.py, tests/gpu/test_wgmma_gpu.py): the same
// answer on both says the emulator reads descriptors and fragments as the hardware does.
//
// Launch:       grid = 1; block = 128 threads (one warpgroup); dynamic shared memory 48 KiB + 1 KiB
//               (A 16 KiB, B 32 KiB, and room to align both to 1024 bytes).
// Traffic:      A, B read once; D written once.
// Limits:       64 x 128 and 128 x 128 row-major 16-bit inputs (bf16 or f16), D row-major fp32.
//               sm_90a only (compute capability 9.0): elsewhere it traps.
#include "wgmma.cuh"

#define PROBE_THREADS 128
#define PROBE_M 64
#define PROBE_K 128
#define PROBE_N 128
#define PROBE_SHARED_BYTES ((PROBE_M + PROBE_N) * PROBE_K * 2 + 1024)

// Copy a [rows][128] row-major tile into blocks of 64 columns, each [rows][64] and swizzled, as
// every wgmma operand is stored (wgmma.cuh).
template <class Elem>
__device__ __forceinline__ void store_blocks(Elem* tile, const Elem* __restrict__ src, int rows) {
    for (int chunk = threadIdx.x; chunk < rows * 128 / 8; chunk += PROBE_THREADS) {
        const int r = chunk / 16, c = 8 * (chunk % 16);
        *reinterpret_cast<int4*>(tile + (c / 64) * rows * 64 + swizzled<64>(r, c % 64)) =
            *reinterpret_cast<const int4*>(src + r * 128 + c);
    }
}

template <class T, int A_IN_REGISTERS, int TRANSPOSE_B>
__device__ __forceinline__ void wgmma_probe(const typename T::Elem* __restrict__ a, const typename T::Elem* __restrict__ b,
                                            float* __restrict__ d) {
    typedef typename T::Elem Elem;
    extern __shared__ unsigned char shared_raw[];
    unsigned char* base = aligned_shared(shared_raw);
    Elem* sa = reinterpret_cast<Elem*>(base);                                   // [2][64][64]
    Elem* sb = reinterpret_cast<Elem*>(base + PROBE_M * PROBE_K * 2);          // [2][128][64]
    store_blocks(sa, a, PROBE_M);
    store_blocks(sb, b, PROBE_K);
    fence_proxy_async();
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    u32 regs[PROBE_K / 16][4];   // A from registers: every step's fragment, written before the fence
    if (A_IN_REGISTERS) {
#pragma unroll
        for (int step = 0; step < PROBE_K / 16; ++step) {   // rows g, g + 8 of the warp's 16, from global memory
            const Elem* row = a + (16 * warp + g) * PROBE_K + 16 * step + 2 * t;
            regs[step][0] = *reinterpret_cast<const u32*>(row);
            regs[step][1] = *reinterpret_cast<const u32*>(row + 8 * PROBE_K);
            regs[step][2] = *reinterpret_cast<const u32*>(row + 8);
            regs[step][3] = *reinterpret_cast<const u32*>(row + 8 * PROBE_K + 8);
        }
    }
    float acc[PROBE_N / 2];
#pragma unroll
    for (int i = 0; i < PROBE_N / 2; ++i) acc[i] = __int_as_float(0x7fc00000);   // NaN: the first step must not add it
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < PROBE_K / 16; ++step) {
        const int k0 = 16 * step;
        const u64 b_desc = TRANSPOSE_B ? wgmma_descriptor(sb + k0 * 64, PROBE_K * 128, 1024)
                                       : wgmma_descriptor(sb + (k0 / 64) * PROBE_N * 64 + k0 % 64, 0, 1024);
        if (A_IN_REGISTERS) {
            wgmma_rs<T, PROBE_N, TRANSPOSE_B>(acc, regs[step], b_desc, step > 0);
        } else {
            const u64 a_desc = wgmma_descriptor(sa + (k0 / 64) * PROBE_M * 64 + k0 % 64, 0, 1024);
            wgmma_ss<T, PROBE_N, TRANSPOSE_B>(acc, a_desc, b_desc, step > 0);
        }
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(acc);
#pragma unroll
    for (int i = 0; i < PROBE_N / 2; ++i)
        d[(16 * warp + g + 8 * ((i % 4) >= 2)) * PROBE_N + 8 * (i / 4) + 2 * t + i % 2] = acc[i];
}

#define WGMMA_PROBE(TAG, T, FORM, A_IN_REGISTERS, LAYOUT, TRANSPOSE_B)                                            \
    extern "C" __global__ void __launch_bounds__(PROBE_THREADS, 1) wgmma_probe_##TAG##_##FORM##_##LAYOUT(          \
        const T::Elem* __restrict__ a, const T::Elem* __restrict__ b, float* __restrict__ d) {                  \
        wgmma_probe<T, A_IN_REGISTERS, TRANSPOSE_B>(a, b, d);                                                    \
    }

WGMMA_PROBE(bf16, Bf16Mma, ss, 0, k, 0)
WGMMA_PROBE(bf16, Bf16Mma, ss, 0, mn, 1)
WGMMA_PROBE(bf16, Bf16Mma, rs, 1, k, 0)
WGMMA_PROBE(bf16, Bf16Mma, rs, 1, mn, 1)
WGMMA_PROBE(f16, F16Mma, ss, 0, k, 0)
WGMMA_PROBE(f16, F16Mma, rs, 1, mn, 1)
