// cpu_emulator.h: the CUDA the book's exercise kernels use, run on the CPU.
//
// A grid runs one block after the other; every thread of a block is a fiber (ucontext) and the
// fibers are scheduled round robin: each runs until it waits (__syncthreads, a warp shuffle or
// vote, __syncwarp, __nanosleep) or returns, then the next one runs. The order is fixed, so a
// kernel gives the same result on every run, and the bugs the exercises are about show up every
// time instead of now and then:
//   - a barrier or a full-mask shuffle that some threads never reach (they returned early, or
//     took another branch) stops the launch with a message naming the threads and the line;
//   - a thread that writes shared memory another thread has not finished reading (a missing
//     barrier) does so before that thread runs again: the reader sees the new data;
//   - shared memory starts each block filled with 0xff bytes (NaN as a float), so a read of a
//     slot no thread wrote gives NaN.
// It is not a GPU: there is no memory model to speak of, no timing, and only the intrinsics
// below. A kernel that passes here can still fail on a GPU; one that fails here is wrong.
//
// The grader compiles the reader's .cu with this header (g++ -include), plus one small wrapper
// per kernel entry that calls emu::launch (cpu_emulator.py writes it).
#pragma once
#include <ucontext.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
#define __shared__ static __attribute__((section("emu_shared")))

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }

inline dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;
using std::isfinite;
using std::isinf;
using std::isnan;

// ---- arithmetic intrinsics -------------------------------------------------------------------
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <class T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicMax(T* p, T v) { T old = *p; if (old < v) *p = v; return old; }
template <class T> inline T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <class T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicCAS(T* p, T compare, T v) { T old = *p; if (old == compare) *p = v; return old; }

// The linker marks where the section of all __shared__ variables starts and ends (hidden: each
// library its own, never another one loaded in the same process).
extern char __start_emu_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_emu_shared[] __attribute__((weak, visibility("hidden")));

namespace emu {

constexpr int MAX_THREADS = 1024;
constexpr size_t STACK_BYTES = 96 * 1024;
constexpr size_t MAX_DYNAMIC_SHARED = 228 * 1024;

enum Wait { RUNNABLE, BARRIER, COLLECTIVE, YIELD, DONE };

struct Fiber {
    ucontext_t context;
    char* stack;
    dim3 tid;
    Wait wait;
    unsigned mask;          // the collective's mask
    int line;               // where it waits
    const char* what;       // what it waits in
    uint64_t posted;        // its value for the collective
    uint64_t result[32];    // every lane's posted value, once the collective completes
};

struct State {
    Fiber fibers[MAX_THREADS];
    int n_threads = 0;
    int current = 0;
    ucontext_t scheduler;
    unsigned shared_bytes = 0;
    void (*body)(void*) = nullptr;
    void* body_arg = nullptr;
    char error[4096] = "";
    alignas(16) char dynamic_shared[MAX_DYNAMIC_SHARED];
};
inline State state;

inline void fail(const char* text) {
    if (!state.error[0]) std::snprintf(state.error, sizeof state.error, "%s", text);
}

inline void switch_out(Wait wait, const char* what, int line, unsigned mask = 0) {
    Fiber& f = state.fibers[state.current];
    f.wait = wait;
    f.what = what;
    f.line = line;
    f.mask = mask;
    swapcontext(&f.context, &state.scheduler);
}

inline int lane_of(int thread) { return thread & 31; }
inline int warp_of(int thread) { return thread >> 5; }
inline int lanes_in_warp(int warp) { return min(32, state.n_threads - 32 * warp); }

// Wait until every lane named in `mask` has posted a value in a collective with the same mask;
// returns the 32 posted values (lanes outside the mask: 0).
inline const uint64_t* collective(unsigned mask, uint64_t mine, const char* what, int line) {
    Fiber& f = state.fibers[state.current];
    const int lane = lane_of(state.current);
    if (!(mask >> lane & 1u)) {
        char text[256];
        std::snprintf(text, sizeof text, "line %d: lane %d of warp %d calls %s with mask 0x%08x, which does not "
                      "name the lane itself", line, lane, warp_of(state.current), what, mask);
        fail(text);
    }
    f.posted = mine;
    switch_out(COLLECTIVE, what, line, mask);
    return f.result;
}

inline unsigned lane_bits(int warp) {
    const int n = lanes_in_warp(warp);
    return n >= 32 ? 0xffffffffu : ((1u << n) - 1u);
}

inline void describe(char* out, size_t size, int first, int last, const Fiber& f) {
    if (f.wait == DONE)
        std::snprintf(out, size, "threads %d-%d returned", first, last);
    else if (f.wait == BARRIER)
        std::snprintf(out, size, "threads %d-%d wait at %s (line %d)", first, last, f.what, f.line);
    else
        std::snprintf(out, size, "threads %d-%d wait in %s (mask 0x%08x, line %d)", first, last, f.what, f.mask, f.line);
}

inline bool same_wait(const Fiber& a, const Fiber& b) {
    return a.wait == b.wait && (a.wait == DONE || (a.line == b.line && a.mask == b.mask && a.what == b.what));
}

// Why no thread can go on: the threads grouped by where they stand.
inline void deadlock(const char* headline) {
    char text[4096];
    int used = std::snprintf(text, sizeof text, "%s (block %u,%u,%u):", headline, blockIdx.x, blockIdx.y, blockIdx.z);
    for (int t = 0; t < state.n_threads && used < (int)sizeof text - 200;) {
        int u = t;
        while (u + 1 < state.n_threads && same_wait(state.fibers[u + 1], state.fibers[t])) ++u;
        char part[256];
        describe(part, sizeof part, t, u, state.fibers[t]);
        used += std::snprintf(text + used, sizeof text - used, "%s %s", t ? ";" : "", part);
        t = u + 1;
    }
    fail(text);
}

// Release what can be released: a barrier every live thread has reached, collectives every lane of
// their mask has joined. False when nothing could be (with an error if the launch cannot go on).
inline bool release() {
    int live = 0, at_barrier = 0, done = 0;
    bool released = false;
    for (int t = 0; t < state.n_threads; ++t) {
        const Wait w = state.fibers[t].wait;
        live += w != DONE;
        done += w == DONE;
        at_barrier += w == BARRIER;
    }
    if (at_barrier && at_barrier == live) {
        if (done) {
            deadlock("__syncthreads() reached by only some of the block's threads: the others returned before it");
            return false;
        }
        for (int t = 0; t < state.n_threads; ++t) state.fibers[t].wait = RUNNABLE;
        return true;
    }
    for (int warp = 0; warp * 32 < state.n_threads; ++warp) {
        for (int lane = 0; lane < lanes_in_warp(warp); ++lane) {
            Fiber& f = state.fibers[warp * 32 + lane];
            if (f.wait != COLLECTIVE) continue;
            const unsigned mask = f.mask & lane_bits(warp);
            bool complete = true;
            for (int other = 0; other < 32; ++other) {
                if (!(mask >> other & 1u)) continue;
                const Fiber& g = state.fibers[warp * 32 + other];
                if (g.wait == DONE) {
                    char text[512];
                    std::snprintf(text, sizeof text, "line %d: lane %d of warp %d calls %s with mask 0x%08x, but lane "
                                  "%d returned before it", f.line, lane, warp, f.what, f.mask, other);
                    fail(text);
                    return false;
                }
                complete &= g.wait == COLLECTIVE && g.mask == f.mask && g.line == f.line;
            }
            if (!complete) continue;
            uint64_t values[32] = {};
            for (int other = 0; other < 32; ++other)
                if (mask >> other & 1u) values[other] = state.fibers[warp * 32 + other].posted;
            for (int other = 0; other < 32; ++other) {
                if (!(mask >> other & 1u)) continue;
                Fiber& g = state.fibers[warp * 32 + other];
                std::memcpy(g.result, values, sizeof values);
                g.wait = RUNNABLE;
            }
            released = true;
        }
    }
    for (int t = 0; t < state.n_threads; ++t)
        if (state.fibers[t].wait == YIELD) { state.fibers[t].wait = RUNNABLE; released = true; }
    if (!released && live) deadlock("no thread can go on");
    return released;
}

inline void fiber_entry(int index) {
    state.body(state.body_arg);
    state.fibers[index].wait = DONE;
}

inline int run_block() {
    if (__start_emu_shared != __stop_emu_shared)
        std::memset(__start_emu_shared, 0xff, __stop_emu_shared - __start_emu_shared);
    std::memset(state.dynamic_shared, 0xff, state.shared_bytes);
    for (int t = 0; t < state.n_threads; ++t) {
        Fiber& f = state.fibers[t];
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack;
        f.context.uc_stack.ss_size = STACK_BYTES;
        f.context.uc_link = &state.scheduler;
        makecontext(&f.context, reinterpret_cast<void (*)()>(fiber_entry), 1, t);
        f.tid = dim3(t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
        f.wait = RUNNABLE;
    }
    for (;;) {
        for (int t = 0; t < state.n_threads; ++t) {
            if (state.fibers[t].wait != RUNNABLE) continue;
            state.current = t;
            threadIdx = state.fibers[t].tid;
            swapcontext(&state.scheduler, &state.fibers[t].context);
            if (state.error[0]) return 1;
        }
        // every thread now waits or has returned
        bool all_done = true;
        for (int t = 0; t < state.n_threads; ++t) all_done &= state.fibers[t].wait == DONE;
        if (all_done) return 0;
        if (!release() || state.error[0]) return 1;
    }
}

inline int launch_body(const unsigned* dims, unsigned shared_bytes, void (*body)(void*), void* arg) {
    state.error[0] = 0;
    gridDim = dim3(dims[0], dims[1], dims[2]);
    blockDim = dim3(dims[3], dims[4], dims[5]);
    const long long threads = 1LL * blockDim.x * blockDim.y * blockDim.z;
    if (threads < 1 || threads > MAX_THREADS || shared_bytes > MAX_DYNAMIC_SHARED) {
        std::snprintf(state.error, sizeof state.error, "a block of %lld threads with %u bytes of dynamic shared memory: "
                      "at most %d threads and %zu bytes", threads, shared_bytes, MAX_THREADS, MAX_DYNAMIC_SHARED);
        return 1;
    }
    state.n_threads = static_cast<int>(threads);
    state.shared_bytes = shared_bytes;
    state.body = body;
    state.body_arg = arg;
    for (int t = 0; t < state.n_threads; ++t)
        if (!state.fibers[t].stack) state.fibers[t].stack = static_cast<char*>(std::malloc(STACK_BYTES));
    for (unsigned z = 0; z < gridDim.z; ++z)
        for (unsigned y = 0; y < gridDim.y; ++y)
            for (unsigned x = 0; x < gridDim.x; ++x) {
                blockIdx = dim3(x, y, z);
                if (run_block()) return 1;
            }
    return 0;
}

template <class... P, size_t... I>
inline void call(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);
}

template <class... P>
struct Call {
    void (*kernel)(P...);
    void** args;
    static void run(void* self) {
        auto* c = static_cast<Call*>(self);
        call(c->kernel, c->args, std::index_sequence_for<P...>{});
    }
};

// Launch `kernel` on the grid dims[0..2] of blocks dims[3..5]; args[i] points at parameter i.
template <class... P>
inline int launch(void (*kernel)(P...), const unsigned* dims, unsigned shared_bytes, void** args) {
    Call<P...> c{kernel, args};
    return launch_body(dims, shared_bytes, &Call<P...>::run, &c);
}

inline void* dynamic_shared() { return state.dynamic_shared; }

template <class T>
inline uint64_t bits_of(T v) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}

template <class T>
inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

template <class T>
inline T shuffle(unsigned mask, T var, int source, int width, const char* what, int line) {
    const int lane = lane_of(state.current);
    const uint64_t* values = collective(mask, bits_of(var), what, line);
    if (width < 1 || width > 32 || (width & (width - 1))) {
        fail("a shuffle width must be a power of two from 1 to 32");
        return var;
    }
    if (!(mask >> source & 1u)) {
        char text[256];
        std::snprintf(text, sizeof text, "line %d: lane %d reads lane %d in %s, but the mask 0x%08x leaves lane %d out "
                      "(undefined on a GPU)", line, lane, source, what, mask, source);
        fail(text);
        return var;
    }
    return from_bits<T>(values[source]);
}

}  // namespace emu

// ---- block and warp synchronisation ----------------------------------------------------------
inline void __syncthreads(int line = __builtin_LINE()) { emu::switch_out(emu::BARRIER, "__syncthreads()", line); }
inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
    emu::collective(mask, 0, "__syncwarp", line);
}
inline void __nanosleep(unsigned) { emu::switch_out(emu::YIELD, "__nanosleep", 0); }
inline unsigned __activemask() {
    const int warp = emu::warp_of(emu::state.current);
    unsigned bits = 0;
    for (int lane = 0; lane < emu::lanes_in_warp(warp); ++lane)
        if (emu::state.fibers[warp * 32 + lane].wait != emu::DONE) bits |= 1u << lane;
    return bits;
}

template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, int line = __builtin_LINE()) {
    const int lane = emu::lane_of(emu::state.current);
    int source = lane ^ lane_mask;
    if (source / width > lane / width) source = lane;   // a later group of `width` lanes: its own value
    return emu::shuffle(mask, var, source & 31, width, "__shfl_xor_sync", line);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, int line = __builtin_LINE()) {
    const int lane = emu::lane_of(emu::state.current);
    const int source = (lane % width) + (int)delta < width ? lane + (int)delta : lane;
    return emu::shuffle(mask, var, source, width, "__shfl_down_sync", line);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, int line = __builtin_LINE()) {
    const int lane = emu::lane_of(emu::state.current);
    const int source = (lane % width) >= (int)delta ? lane - (int)delta : lane;
    return emu::shuffle(mask, var, source, width, "__shfl_up_sync", line);
}
template <class T>
inline T __shfl_sync(unsigned mask, T var, int source_lane, int width = 32, int line = __builtin_LINE()) {
    const int lane = emu::lane_of(emu::state.current);
    const int source = (lane / width) * width + ((source_lane % width) + width) % width;
    return emu::shuffle(mask, var, source, width, "__shfl_sync", line);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
    const uint64_t* values = emu::collective(mask, predicate != 0, "__ballot_sync", line);
    unsigned bits = 0;
    for (int lane = 0; lane < 32; ++lane)
        if ((mask >> lane & 1u) && values[lane]) bits |= 1u << lane;
    return bits;
}
inline int __any_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
    return __ballot_sync(mask, predicate, line) != 0;
}
inline int __all_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
    return __ballot_sync(mask, predicate, line) == (mask & emu::lane_bits(emu::warp_of(emu::state.current)));
}

// The wrapper cpu_emulator.py writes: one EMU_EXPORT per kernel entry, and EMU_ERROR once.
// Everything else is hidden (built with -fvisibility=hidden): each library keeps its own state.
#define EMU_EXPORT(entry)                                                                            \
    extern "C" __attribute__((visibility("default")))                                                \
    int emu_launch__##entry(const unsigned* dims, unsigned shared_bytes, void** args) {              \
        return emu::launch(entry, dims, shared_bytes, args);                                         \
    }
#define EMU_ERROR extern "C" __attribute__((visibility("default"))) const char* emu_error() { return emu::state.error; }
