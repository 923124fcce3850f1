// mma.cuh — tensor-core building blocks: mma.sync m16n8k16 (bf16 or fp16 in, fp32 accumulate),
// ldmatrix, two floats packed into one 32-bit pair of 16-bit values, the XOR swizzle of a
// shared-memory tile, and the 16-byte asynchronous copy with zero fill. Included by the
// tensor-core attention kernels (attention_mma.cuh); never pasted.
//
// Fragments of one warp (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// with g = lane / 4 and t = lane % 4; a 32-bit register holds two 16-bit elements, the lower
// column (or k) in its low half:
//   A (16 x 16, row-major):  a[0] = (row g,     cols 2t, 2t+1)    a[1] = (row g + 8, cols 2t, 2t+1)
//                            a[2] = (row g,     cols 2t+8, 2t+9)  a[3] = (row g + 8, cols 2t+8, 2t+9)
//   B (16 x 8, k x n):       b[0] = (k 2t, 2t+1; col g)           b[1] = (k 2t+8, 2t+9; col g)
//   C, D (16 x 8, fp32):     c[0], c[1] = (row g, cols 2t, 2t+1)  c[2], c[3] = (row g + 8, cols 2t, 2t+1)
// ldmatrix.x4: lanes 8i .. 8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i;
// register i of lane l receives row g, columns 2t and 2t+1 of matrix i (with .trans: of its
// transpose, i.e. rows 2t and 2t+1 of column g). onlinesoftmax/kernels/mma_fragments.py holds the
// same maps in NumPy, with the tests that rebuild Q K^T and P V from them.
//
// Built with ONLINESOFTMAX_HOST_EMULATION defined (kernels/emulator/: the kernels run on the CPU,
// one fiber per thread), each instruction below calls the emulator's warp-collective version
// instead of inline PTX. Device builds (nvcc, NVRTC) never define it.
#pragma once

typedef unsigned int u32;

// Element offset of (row, col) in a [rows][D] tile of 16-bit elements stored with its 16-byte
// chunks XOR-swizzled: chunk c of row r sits at chunk c ^ (r % 8) of the same row. The 8 rows an
// ldmatrix phase reads (same logical chunk, 8 consecutive rows) then fall in 8 different
// 16-byte bank groups, and so do the 8 chunks a quarter-warp stores along one row.
template <int D>
__device__ __forceinline__ int swizzled(int row, int col) {
    static_assert(D % 64 == 0, "rows of at least 8 chunks of 16 bytes");
    return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

struct Bf16Mma {   // bfloat16 operands
    typedef unsigned short Elem;
    static __device__ __forceinline__ u32 pack(float lo, float hi) {   // round to nearest even
#ifdef ONLINESOFTMAX_HOST_EMULATION
        return simt_pack_bf16x2(lo, hi);
#else
        u32 word;   // cvt.rn.bf16x2.f32 d, a, b puts a in the upper half
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(word) : "f"(hi), "f"(lo));
        return word;
#endif
    }
    static __device__ __forceinline__ void mma(float c[4], const u32 a[4], const u32 b[2]) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
        simt_mma_m16n8k16(true, c, a, b);
#else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
    }
};

struct F16Mma {    // IEEE half operands
    typedef unsigned short Elem;
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
        return simt_pack_f16x2(lo, hi);
#else
        u32 word;   // cvt.rn.f16x2.f32 d, a, b puts a in the upper half
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(word) : "f"(hi), "f"(lo));
        return word;
#endif
    }
    static __device__ __forceinline__ void mma(float c[4], const u32 a[4], const u32 b[2]) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
        simt_mma_m16n8k16(false, c, a, b);
#else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
    }
};

// Two 16-bit elements as one register, `lo` in the low half (a B fragment gathered by hand).
__device__ __forceinline__ u32 pack_pair(unsigned short lo, unsigned short hi) {
    return static_cast<u32>(lo) | (static_cast<u32>(hi) << 16);
}

// Four 8 x 8 matrices of 16-bit elements from shared memory; see the header for who gets what.
__device__ __forceinline__ void ldmatrix_x4(u32 r[4], const void* row_address) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_ldmatrix_x4(r, row_address, false);
#else
    const u32 address = static_cast<u32>(__cvta_generic_to_shared(row_address));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 r[4], const void* row_address) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_ldmatrix_x4(r, row_address, true);
#else
    const u32 address = static_cast<u32>(__cvta_generic_to_shared(row_address));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
#endif
}

// 16 bytes global -> shared without passing through registers (cp.async.cg, sm_80+); when
// `valid` is false nothing is read and the 16 bytes are zero-filled (src-size 0). Both addresses
// 16-byte aligned. The copies land by cp_async_wait_all in the thread that issued them; other
// threads see them after a barrier.
__device__ __forceinline__ void cp_async_16_or_zero(void* shared_dst, const void* global_src, bool valid) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_cp_async_16(shared_dst, global_src, valid ? 16 : 0);
#else
    const u32 dst = static_cast<u32>(__cvta_generic_to_shared(shared_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(__cvta_generic_to_global(global_src)),
                 "r"(valid ? 16 : 0)
                 : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit_group() {
#ifndef ONLINESOFTMAX_HOST_EMULATION
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

__device__ __forceinline__ void cp_async_wait_all_groups() {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    simt_cp_async_wait_all();
#else
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// 2^x as one MUFU.EX2 (ex2.approx.ftz.f32: about 2 ulps, subnormal results flushed to 0). exp2f
// without fast math adds a compare and two multiplies per call to keep subnormal results.
__device__ __forceinline__ float exp2_ftz(float x) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

// A float rounded to the storage type (the output): the low half of a packed pair.
template <class T>
__device__ __forceinline__ typename T::Elem round_to(float x) {
    return static_cast<typename T::Elem>(T::pack(x, 0.0f) & 0xffffu);
}
