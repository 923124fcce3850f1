// simt.h — a CPU emulator of the CUDA the book's kernels use, so that a kernel's own .cu runs on a
// machine without a GPU. onlinesoftmax/runtime/emulator.py compiles the file with g++ after this
// header, into a shared library with one launch function per kernel entry, and launches it on
// numpy arrays.
//
// Every thread of a block is a fiber (its own stack, entered once through ucontext, then switched
// with _setjmp/_longjmp) on one CPU thread; a grid runs one block after the other. What it models, and what it catches:
//   - __syncthreads is a barrier of the block's threads. One that some threads never reach (they
//     returned, or wait elsewhere) stops the launch with a message naming the threads and lines.
//   - A warp collective (a shuffle or vote, __syncwarp, mma.sync, ldmatrix) waits until every lane
//     of its mask has reached the same one, then computes every lane's result: shuffles by CUDA's
//     rules (width; a lane outside the mask is an error), mma.sync m16n8k16 and ldmatrix.x4 from
//     the PTX ISA's fragment definitions, written here independently of the kernels' own index
//     maps (onlinesoftmax/kernels/mma_fragments.py is a third, NumPy, copy; the tests compare).
//   - cp.async reads its source when issued and writes shared memory only when the issuing thread
//     waits (the latest the hardware may deliver); a thread that ends with copies it never waited
//     for is an error.
//   - Shared memory, the static __shared__ variables and the dynamic extern __shared__ array,
//     starts every block as 0xff bytes (NaN as a float, fp16 or bf16); a guard band after the
//     dynamic size must stay untouched. ldmatrix and cp.async check their shared addresses.
//   - Two schedules (simt_configure). "fixed": the fibers run round robin in thread order, each
//     until it waits, so a launch gives the same result every time, and a missing barrier lets a
//     writer overwrite what a reader has not read yet on every run. "random" (seeded): at every
//     wait a random runnable fiber runs next and the blocks run in a random order, so the warps
//     interleave differently with every seed.
//   - Every load and store goes through simt_checks.h: shared-memory races, accesses outside the
//     global arrays, misaligned accesses, and counters of what a launch touched.
// It is not a GPU: no memory model beyond that, no timing, only these intrinsics. A kernel that
// passes here can still fail on a GPU; one that fails here is wrong.
//
// Errors are recorded, never printed: a launch returns 1 and simt_error() says what happened.
// The kernels see ONLINESOFTMAX_HOST_EMULATION and call the simt_* functions of simt_warp.h
// instead of inline PTX (kernels/common/mma.cuh).
#pragma once
#define ONLINESOFTMAX_HOST_EMULATION 1

// A fortified libc checks that longjmp goes to an outer frame of the same stack; the fibers jump
// between stacks (simt_machine.h), so the check is off before any libc header is read.
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
// A block-scope `__shared__ T x[N]` is one variable for all the fibers of a block, in a section of
// its own that is poisoned before every block. emulator.py rewrites each such declaration to take
// its storage from simt_static_arena (below); the macro is what a declaration it did not rewrite
// gets (static, in the section: kept outside templates only). A declaration cannot be both extern
// and static, so emulator.py turns `extern __shared__ T name[]` into `extern SIMT_DYNAMIC_SHARED T
// name[]` and makes `name` another name of simt_dynamic_shared, the dynamic shared memory.
#define __shared__ static __attribute__((section("simt_shared")))
#define SIMT_DYNAMIC_SHARED

typedef unsigned int u32;

// What emulator.py makes of a static __shared__ variable `name`: a reference to it, opaque to g++
// so that every access to it goes through the access checks (simt_checks.h).
template <class T>
__attribute__((always_inline)) inline T& simt_shared_ref(T& x) {
    T* p = &x;
    asm("" : "+r"(p));
    return *p;
}

// The storage of the static __shared__ variables (emulator.py's rewrite): one arena in the section of
// the block's shared memory, handed out once per declaration (per template instance), aligned. A
// plain global (one translation unit), so g++ keeps its section.
#define SIMT_STATIC_SHARED_CAPACITY (256 * 1024)
alignas(1024) __attribute__((section("simt_shared"))) unsigned char simt_static_arena[SIMT_STATIC_SHARED_CAPACITY];
unsigned long simt_static_used = 0;
void simt_static_shared_full(unsigned long bytes);
template <class T>
inline T* simt_static_shared(unsigned long align) {
    if (align < alignof(T)) align = alignof(T);
    const unsigned long at = (simt_static_used + align - 1) / align * align;
    if (at + sizeof(T) > SIMT_STATIC_SHARED_CAPACITY) simt_static_shared_full(at + sizeof(T));
    simt_static_used = at + sizeof(T);
    return reinterpret_cast<T*>(simt_static_arena + at);
}

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;
// The vector types: a copy from or to an address that is not a multiple of the type's size is a
// misaligned access (g++ copies them element by element, so the check is here, not in the access
// callbacks of simt_checks.h).
__attribute__((noinline)) void simt_vector_alignment(const void* from, const void* to, unsigned bytes);
#define SIMT_VECTOR_COPY(T, N)                                                                        \
    T() = default;                                                                                    \
    __attribute__((always_inline)) T(const T& o) {                                                    \
        simt_vector_alignment(&o, this, N);                                                           \
        __builtin_memcpy(static_cast<void*>(this), &o, N);                                            \
    }                                                                                                 \
    __attribute__((always_inline)) T& operator=(const T& o) {                                         \
        simt_vector_alignment(&o, this, N);                                                           \
        __builtin_memcpy(static_cast<void*>(this), &o, N);                                            \
        return *this;                                                                                 \
    }
#define SIMT_VECTOR2(T, E)                                                                            \
    struct alignas(2 * sizeof(E)) T {                                                                 \
        E x, y;                                                                                       \
        constexpr T(E a, E b) : x(a), y(b) {}                                                         \
        SIMT_VECTOR_COPY(T, 2 * sizeof(E))                                                            \
    };
#define SIMT_VECTOR4(T, E)                                                                            \
    struct alignas(4 * sizeof(E)) T {                                                                 \
        E x, y, z, w;                                                                                 \
        constexpr T(E a, E b, E c, E d) : x(a), y(b), z(c), w(d) {}                                   \
        SIMT_VECTOR_COPY(T, 4 * sizeof(E))                                                            \
    };
SIMT_VECTOR2(float2, float)
SIMT_VECTOR4(float4, float)
SIMT_VECTOR2(int2, int)
SIMT_VECTOR4(int4, int)
SIMT_VECTOR2(uint2, unsigned int)
SIMT_VECTOR4(uint4, unsigned int)
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }

inline dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;
using std::isfinite;
using std::isinf;
using std::isnan;

// ---- arithmetic intrinsics (a fiber is never interrupted between two waits, so atomics are plain) ----
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { volatile float p = a * b; return p; }   // never contracted into an fma
inline float __fadd_rn(float a, float b) { volatile float s = a + b; return s; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }   // (every load sees memory: no L1 to bypass)
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline void __threadfence() {}
inline void __threadfence_block() {}

// The emulator's own code: not instrumented, so its bookkeeping (the fibers, the scheduler's
// state) does not pass through the checks meant for the kernel's accesses.
#define SIMT_UNCHECKED __attribute__((no_sanitize_address, optimize("O2")))
#include "simt_machine.h"
#include "simt_checks.h"
#include "simt_warp.h"
#include "simt_wgmma.h"
#include "simt_tma.h"

// Atomics: bounds-checked and counted, never a race (not instrumented; simt_checks.h).
#define SIMT_ATOMIC(name, body)                                                                      \
    template <class T>                                                                               \
    __attribute__((no_sanitize_address, noinline)) T name(T* p, T v) {                              \
        simt::access(reinterpret_cast<uintptr_t>(p), sizeof(T), false, true, SIMT_PC, true);         \
        simt::access(reinterpret_cast<uintptr_t>(p), sizeof(T), true, true, SIMT_PC, true);          \
        T old = *p;                                                                                  \
        body;                                                                                        \
        return old;                                                                                  \
    }
SIMT_ATOMIC(atomicAdd, *p = old + v)
SIMT_ATOMIC(atomicMax, if (old < v) *p = v)
SIMT_ATOMIC(atomicMin, if (v < old) *p = v)
SIMT_ATOMIC(atomicExch, *p = v)
#undef SIMT_ATOMIC
template <class T>
__attribute__((no_sanitize_address, noinline)) T atomicCAS(T* p, T compare, T v) {
    simt::access(reinterpret_cast<uintptr_t>(p), sizeof(T), false, true, SIMT_PC, true);
    simt::access(reinterpret_cast<uintptr_t>(p), sizeof(T), true, true, SIMT_PC, true);
    T old = *p;
    if (old == compare) *p = v;
    return old;
}

// What emulator.py's wrapper adds after the kernel's source: one SIMT_EXPORT per kernel entry, and
// SIMT_LIBRARY once. Everything else is hidden (built with -fvisibility=hidden), so that every
// library keeps its own machine even when several are loaded in one process.
#define SIMT_EXPORT(entry)                                                                           \
    extern "C" __attribute__((visibility("default")))                                               \
    int simt_launch__##entry(const unsigned* dims, unsigned shared_bytes, void** args) {             \
        return simt::launch(entry, dims, shared_bytes, args);                                        \
    }
#define SIMT_LIBRARY                                                                                 \
    extern "C" __attribute__((visibility("default"))) const char* simt_error() { return simt::state.error; } \
    extern "C" __attribute__((visibility("default"))) void simt_configure(int random, unsigned seed) { \
        simt::state.random = random != 0;                                                            \
        simt::state.seed = seed;                                                                     \
    }                                                                                                \
    extern "C" __attribute__((visibility("default"))) void simt_configure_checks(int races, int counting) { \
        simt::checks.races = races != 0;                                                             \
        simt::checks.counting = counting != 0;                                                       \
        simt::checks.max_block_bytes = 0;                                                            \
        simt::checks.block_reads.clear();                                                            \
        simt::checks.arrays.clear();                                                                 \
        simt::checks.arrays_low = UINTPTR_MAX, simt::checks.arrays_high = 0;                         \
    }                                                                                                \
    extern "C" __attribute__((visibility("default"))) void simt_add_array(                           \
        uintptr_t start, uintptr_t end, uintptr_t low, uintptr_t high, int arg, int itemsize,         \
        long long* reads, long long* writes) {                                                       \
        simt::Array a{start, end, low, high, arg, itemsize, reads, writes, {}};                     \
        if (simt::checks.counting) a.stamp.assign((end - start) / itemsize, 0);                      \
        simt::checks.arrays.push_back(std::move(a));                                                 \
        simt::checks.arrays_low = std::min(simt::checks.arrays_low, low);                            \
        simt::checks.arrays_high = std::max(simt::checks.arrays_high, high);                         \
    }                                                                                                \
    extern "C" __attribute__((visibility("default"))) unsigned long long simt_shared_bytes_touched() { \
        return simt::checks.max_block_bytes;                                                         \
    }                                                                                                \
    extern "C" __attribute__((visibility("default"))) unsigned long long simt_block_reads(long long* out) { \
        if (out) std::copy(simt::checks.block_reads.begin(), simt::checks.block_reads.end(), out);    \
        return simt::checks.block_reads.size();                                                      \
    }                                                                                                \
    extern "C" __attribute__((visibility("default"))) int simt_fragment_map(int operand, int lane, int index, \
                                                                          int* row, int* col) {      \
        return simt::fragment_position(operand, lane, index, *row, *col);                            \
    }
