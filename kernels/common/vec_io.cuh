// vec_io.cuh — storage types, 16-byte vector loads/stores and exp for the fast kernels.
//
// Three storage types, all computed in fp32:
//   float      fp32
//   half_bits  IEEE fp16 (the 16 bits in an unsigned short; conversions in half.cuh)
//   bf16_bits  bfloat16  (the upper 16 bits of an fp32; widening is a shift, narrowing
//              is `cvt.rn.bf16.f32`, round to nearest even, NaN stays NaN)
// No <cuda_fp16.h> / <cuda_bf16.h>: NVRTC does not find them without the CUDA include path.
//
// Io<T, V> moves V consecutive elements: V = 16 / sizeof(T) is one 16-byte access
// (LDG.E.128 / STG.E.128), V = 1 the scalar path for rows that are not 16-byte aligned.
#pragma once
#include "half.cuh"

struct bf16_bits {
    unsigned short bits;
};

__device__ __forceinline__ float bf16_to_float(unsigned short b) {
    return __uint_as_float(static_cast<unsigned int>(b) << 16);
}

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}

// Scalar conversions for each storage type.
template <typename T> struct Elem;
template <> struct Elem<float> {
    typedef float storage;
    static __device__ __forceinline__ float load(const float* p) { return *p; }
    static __device__ __forceinline__ void store(float* p, float v) { *p = v; }
};
template <> struct Elem<half_bits> {
    typedef half_bits storage;
    static __device__ __forceinline__ float load(const half_bits* p) { return half_to_float(*p); }
    static __device__ __forceinline__ void store(half_bits* p, float v) { *p = float_to_half(v); }
};
template <> struct Elem<bf16_bits> {
    typedef bf16_bits storage;
    static __device__ __forceinline__ float load(const bf16_bits* p) { return bf16_to_float(p->bits); }
    static __device__ __forceinline__ void store(bf16_bits* p, float v) { p->bits = float_to_bf16(v); }
};

// Two floats from / to one 32-bit word of two 16-bit elements (lower address = low half).
__device__ __forceinline__ void unpack2(unsigned int w, float& lo, float& hi, half_bits) {
    unpack_half2(w, lo, hi);
}
__device__ __forceinline__ void unpack2(unsigned int w, float& lo, float& hi, bf16_bits) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ unsigned int pack2(float lo, float hi, half_bits) {
    unsigned int w;  // cvt.rn.f16x2.f32 d, a, b puts a in the upper half
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
__device__ __forceinline__ unsigned int pack2(float lo, float hi, bf16_bits) {
    unsigned int w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}

// Io<T, V>: raw_t is what one access moves (uint4 for 16 bytes, T for the scalar path);
// load / store touch global (or shared) memory, unpack / pack convert to and from fp32.
template <typename T, int V> struct Io;

template <typename T> struct Io<T, 1> {  // scalar path: any alignment
    typedef T raw_t;
    static __device__ __forceinline__ raw_t load_raw(const T* p) { return *p; }
    static __device__ __forceinline__ void store_raw(T* p, raw_t r) { *p = r; }
    static __device__ __forceinline__ void store_unsplit(T* p, raw_t r) { *p = r; }
    static __device__ __forceinline__ void unpack(raw_t r, float* v) { v[0] = Elem<T>::load(&r); }
    static __device__ __forceinline__ raw_t pack(const float* v) { raw_t r; Elem<T>::store(&r, v[0]); return r; }
};

// One 16-byte global store the compiler cannot split. In the persistent row loops of softmax_12
// and softmax_13, nvcc turns the plain uint4 store into four 4-byte STG.E (a quarter of the
// store width); st.global.v4 keeps STG.E.128. No "memory" clobber: nothing in a kernel reads y.
__device__ __forceinline__ void store_global_16(void* p, uint4 r) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)), "r"(r.x), "r"(r.y),
                 "r"(r.z), "r"(r.w));
}

template <typename T, int V> struct Io16B {  // one 16-byte access: the row must be 16-byte aligned
    typedef uint4 raw_t;
    static __device__ __forceinline__ raw_t load_raw(const T* p) { return *reinterpret_cast<const uint4*>(p); }
    static __device__ __forceinline__ void store_raw(T* p, raw_t r) { *reinterpret_cast<uint4*>(p) = r; }
    static __device__ __forceinline__ void store_unsplit(T* p, raw_t r) { store_global_16(p, r); }
};

template <> struct Io<float, 4> : Io16B<float, 4> {
    static __device__ __forceinline__ void unpack(raw_t r, float* v) {
        v[0] = __uint_as_float(r.x); v[1] = __uint_as_float(r.y);
        v[2] = __uint_as_float(r.z); v[3] = __uint_as_float(r.w);
    }
    static __device__ __forceinline__ raw_t pack(const float* v) {
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                          __float_as_uint(v[3]));
    }
};

template <typename T16> struct Io16x8 : Io16B<T16, 8> {
    typedef uint4 raw_t;
    static __device__ __forceinline__ void unpack(raw_t q, float* v) {
        unpack2(q.x, v[0], v[1], T16()); unpack2(q.y, v[2], v[3], T16());
        unpack2(q.z, v[4], v[5], T16()); unpack2(q.w, v[6], v[7], T16());
    }
    static __device__ __forceinline__ raw_t pack(const float* v) {
        return make_uint4(pack2(v[0], v[1], T16()), pack2(v[2], v[3], T16()),
                          pack2(v[4], v[5], T16()), pack2(v[6], v[7], T16()));
    }
};
template <> struct Io<half_bits, 8> : Io16x8<half_bits> {};
template <> struct Io<bf16_bits, 8> : Io16x8<bf16_bits> {};

// ---- exp -------------------------------------------------------------------------------
// e^(x - m) = 2^((x - m) log2 e): MUFU.EX2 through ex2.approx.ftz (2^-inf = 0, NaN stays NaN).
#define LOG2E_F 1.4426950408889634f

__device__ __forceinline__ float ex2(float t) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
    return r;
}

// e^(x - m), the subtraction first: FADD + FMUL + MUFU.EX2. For x <= m, x - m never overflows and is
// exact or nearly so at any magnitude; the folded form 2^(fma(x, log2e, -m log2e)) saves the FADD but
// overflows once |m log2e| passes FLT_MAX (bf16 rows near its finfo.max or finfo.min) and rounds
// m log2e by |m| 2^-24, hundreds in the exponent for |m| near 1e10: NaN or 0 / 0 rows.
__device__ __forceinline__ float exp_sub(float x, float m) { return ex2((x - m) * LOG2E_F); }
