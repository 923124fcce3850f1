// half.cuh — IEEE fp16 and bfloat16 storage without <cuda_fp16.h> / <cuda_bf16.h>.
//
// NVRTC (cupy's compiler) does not find <cuda_fp16.h> without the CUDA include path,
// so a half lives in an `unsigned short` and converts with one PTX instruction each way:
// cvt.f32.f16 is exact; cvt.rn.f16.f32 rounds to nearest even (as numpy's astype does).
// A bfloat16 is the upper 16 bits of an fp32, also kept in an `unsigned short`: widening
// is a shift left by 16 (exact); narrowing is cvt.rn.bf16.f32 (round to nearest even, as
// ml_dtypes' astype; NaN stays NaN). That instruction needs sm_80+; below, the same rounding
// is done on the bits, so a module holding a bf16 entry still loads on sm_70 / sm_75 (its
// fp32 entries must). All arithmetic stays in fp32. Packing
// helpers split the 32-bit words of a vector load (uint2 = 4 halves, int4 = 8 halves or
// 8 bfloat16s) into floats, lowest address first.
// (vec_io.cuh, the fast kernels' storage types, has its own `bf16_bits` struct with the
// same two conversions under the names bf16_to_float / float_to_bf16; the names here differ
// so that a file may include both.)
#pragma once

typedef unsigned short half_bits;  // the 16 bits of one IEEE binary16

__device__ __forceinline__ float half_to_float(half_bits h) {
#ifdef ONLINESOFTMAX_HOST_EMULATION   // the CPU emulator (kernels/emulator/): its conversions
    return simt_f16_to_float(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ half_bits float_to_half(float f) {
#ifdef ONLINESOFTMAX_HOST_EMULATION
    return simt_float_to_f16(f);
#else
    half_bits h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

// A 32-bit word holds two halves; the one at the lower address is the low 16 bits.
__device__ __forceinline__ void unpack_half2(unsigned int word, float& lo, float& hi) {
    lo = half_to_float(static_cast<half_bits>(word & 0xffffu));
    hi = half_to_float(static_cast<half_bits>(word >> 16));
}

__device__ __forceinline__ unsigned int pack_half2(float lo, float hi) {
    return static_cast<unsigned int>(float_to_half(lo)) |
           (static_cast<unsigned int>(float_to_half(hi)) << 16);
}

// 4 halves <-> uint2 (one 8-byte access).
__device__ __forceinline__ void unpack_half4(uint2 v, float f[4]) {
    unpack_half2(v.x, f[0], f[1]);
    unpack_half2(v.y, f[2], f[3]);
}

__device__ __forceinline__ uint2 pack_half4(const float f[4]) {
    return make_uint2(pack_half2(f[0], f[1]), pack_half2(f[2], f[3]));
}

// 8 halves <-> int4 (one 16-byte access).
__device__ __forceinline__ void unpack_half8(int4 v, float f[8]) {
    unpack_half2(static_cast<unsigned int>(v.x), f[0], f[1]);
    unpack_half2(static_cast<unsigned int>(v.y), f[2], f[3]);
    unpack_half2(static_cast<unsigned int>(v.z), f[4], f[5]);
    unpack_half2(static_cast<unsigned int>(v.w), f[6], f[7]);
}

__device__ __forceinline__ int4 pack_half8(const float f[8]) {
    return make_int4(static_cast<int>(pack_half2(f[0], f[1])), static_cast<int>(pack_half2(f[2], f[3])),
                     static_cast<int>(pack_half2(f[4], f[5])), static_cast<int>(pack_half2(f[6], f[7])));
}

// How many halves from `p` to the next `bytes`-aligned address (0 when p is aligned).
// Half pointers are always 2-byte aligned, so the count is exact.
__device__ __forceinline__ int halves_to_alignment(const void* p, int bytes) {
    const unsigned long long address = reinterpret_cast<unsigned long long>(p);
    return static_cast<int>(((bytes - (address & (bytes - 1))) & (bytes - 1)) >> 1);
}

// ---- bfloat16 ---------------------------------------------------------------------------

typedef unsigned short bfloat16_bits;  // the upper 16 bits of an fp32

__device__ __forceinline__ float bfloat16_to_float(bfloat16_bits b) {
    return __uint_as_float(static_cast<unsigned int>(b) << 16);
}

__device__ __forceinline__ bfloat16_bits float_to_bfloat16(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800 || defined(ONLINESOFTMAX_HOST_EMULATION)
    const unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bfloat16_bits>((u >> 16) | 0x40u);  // quiet NaN
    return static_cast<bfloat16_bits>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // nearest, ties to even
#else
    bfloat16_bits b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
#endif
}

// A 32-bit word holds two bfloat16s; the one at the lower address is the low 16 bits.
__device__ __forceinline__ void unpack_bfloat16x2(unsigned int word, float& lo, float& hi) {
    lo = __uint_as_float(word << 16);
    hi = __uint_as_float(word & 0xffff0000u);
}

__device__ __forceinline__ unsigned int pack_bfloat16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800 || defined(ONLINESOFTMAX_HOST_EMULATION)
    return static_cast<unsigned int>(float_to_bfloat16(lo)) |
           (static_cast<unsigned int>(float_to_bfloat16(hi)) << 16);
#else
    unsigned int word;  // cvt.rn.bf16x2.f32 d, a, b puts a in the upper half
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(word) : "f"(hi), "f"(lo));
    return word;
#endif
}

// 8 bfloat16s <-> int4 (one 16-byte access).
__device__ __forceinline__ void unpack_bfloat16x8(int4 v, float f[8]) {
    unpack_bfloat16x2(static_cast<unsigned int>(v.x), f[0], f[1]);
    unpack_bfloat16x2(static_cast<unsigned int>(v.y), f[2], f[3]);
    unpack_bfloat16x2(static_cast<unsigned int>(v.z), f[4], f[5]);
    unpack_bfloat16x2(static_cast<unsigned int>(v.w), f[6], f[7]);
}

__device__ __forceinline__ int4 pack_bfloat16x8(const float f[8]) {
    return make_int4(static_cast<int>(pack_bfloat16x2(f[0], f[1])), static_cast<int>(pack_bfloat16x2(f[2], f[3])),
                     static_cast<int>(pack_bfloat16x2(f[4], f[5])), static_cast<int>(pack_bfloat16x2(f[6], f[7])));
}
