// simt_checks.h — what the emulator checks on every memory access of a kernel: shared-memory races,
// accesses outside the global arrays, misaligned accesses, and the design counters. Included by
// simt.h only.
//
// g++ builds the kernel with -fsanitize=kernel-address and outline instrumentation: every load and
// store calls one of the __asan_* functions below with its address (and size). Those of a type
// whose alignment equals its size (a float, a float2, a float4, a uint4 ...) call the sized ones
// (__asan_load8_noabort ...); an aggregate of smaller alignment calls the N ones. Nothing of the
// address sanitizer's runtime is linked: these functions are the whole of it. An access made
// while no thread runs (the scheduler's own), or on a fiber's stack, is not looked at, and the
// emulator's own functions (SIMT_UNCHECKED) are not instrumented.
//   - Shared memory: every byte keeps, for the current barrier interval, its last writer and up
//     to two readers, with the warp's collective count at the access. A read of a byte another
//     thread wrote, a write of a byte another thread read or wrote, in the same interval, is a
//     race unless both threads are lanes of one warp and a collective of that warp (__syncwarp, a
//     shuffle, a vote, mma.sync, ldmatrix) completed between the two. Atomics are not recorded.
//   - Global arrays: emulator.py registers each array argument with the bytes around it (guard
//     regions, inaccessible pages beyond); an access that touches a guard region is out of bounds,
//     named with the argument and the element offset.
//   - Alignment: a sized access at an address that is not a multiple of its size faults, as
//     on a GPU.
//   - Counters (when asked): reads and writes of each element of each array, the elements each
//     block read, the most shared-memory bytes one block touched.
// Source lines: a message carries "@pc:<offset>@" (the offset of the access in the library);
// emulator.py turns it into file:line with addr2line.
#pragma once

#include <dlfcn.h>

namespace simt {

struct Array {
    uintptr_t start, end;      // the array's bytes
    uintptr_t low, high;       // with its guard regions
    int arg;                   // its index among the kernel's arguments
    int itemsize;
    long long* reads = nullptr;   // per element, when counting
    long long* writes = nullptr;
    std::vector<int> stamp;    // per element: the last block (serial) that read it
};

constexpr unsigned short NOBODY = 0xffff;

struct Shadow {                // one byte of shared memory
    u32 epoch;                 // the barrier interval the rest describes
    u32 touched;               // the block serial that last touched it
    unsigned short writer, reader[2];
    u32 writer_warp_epoch, reader_warp_epoch[2];
    uintptr_t writer_pc, reader_pc[2];
};

struct Checks {
    bool races = true;
    bool counting = false;
    std::vector<Array> arrays;
    uintptr_t arrays_low = UINTPTR_MAX, arrays_high = 0;   // the span of every array's guarded bytes
    std::vector<Shadow> shadow;   // the static __shared__ section, then the dynamic array and its guard
    size_t block_bytes = 0;       // shared bytes touched by the running block
    size_t max_block_bytes = 0;
    std::vector<long long> block_reads;   // (block, arg, element) triples, when counting
    uintptr_t library_base = 0;
};
inline Checks checks;
inline bool inside_check = false;   // the checks' own accesses (a library function not inlined) are not checked;
                                    // reset at every block (a fault leaves its fiber inside)

SIMT_UNCHECKED inline size_t static_shared_bytes() { return __stop_simt_shared - __start_simt_shared; }

SIMT_UNCHECKED inline uintptr_t pc_offset(uintptr_t pc) {
    if (!checks.library_base) {
        Dl_info info;
        if (dladdr(reinterpret_cast<void*>(&pc_offset), &info)) checks.library_base = reinterpret_cast<uintptr_t>(info.dli_fbase);
    }
    return pc - 1 - checks.library_base;   // the call itself, not the instruction after it
}

SIMT_UNCHECKED inline void begin_block_checks() {
    inside_check = false;
    ++state.epoch;
    ++state.block_serial;
    checks.block_bytes = 0;
    if ((checks.races || checks.counting) && checks.shadow.empty()) {
        checks.shadow.resize(static_shared_bytes() + SIMT_SHARED_CAPACITY + SIMT_SHARED_GUARD);
        for (Shadow& s : checks.shadow) s.epoch = 0, s.touched = 0;
    }
}
SIMT_UNCHECKED inline void end_block_checks() { checks.max_block_bytes = std::max(checks.max_block_bytes, checks.block_bytes); }

// Where shared byte `index` of the shadow lies, for a message.
SIMT_UNCHECKED inline void describe_shared(char* out, size_t size, size_t index) {
    const size_t s = static_shared_bytes();
    if (index < s)
        std::snprintf(out, size, "static __shared__ byte %zu", index);
    else
        std::snprintf(out, size, "dynamic shared memory byte %zu (extern __shared__ offset %zu)", index - s, index - s);
}

SIMT_UNCHECKED inline void thread_name(char* out, size_t size, int t) {
    const Fiber& f = state.fibers[t];
    std::snprintf(out, size, "thread %d (threadIdx %u,%u,%u; warp %d lane %d)", t, f.tid.x, f.tid.y, f.tid.z,
                  warp_of(t), lane_of(t));
}

SIMT_UNCHECKED inline bool ordered(int me, int other, u32 other_warp_epoch) {
    return warp_of(me) == warp_of(other) && state.warp_epoch[warp_of(me)] != other_warp_epoch;
}

SIMT_UNCHECKED inline void race(const char* kind, size_t index, int first, uintptr_t first_pc, const char* first_did, int second,
                 uintptr_t second_pc, const char* second_did) {
    char where[128], a[96], b[96];
    describe_shared(where, sizeof where, index);
    thread_name(a, sizeof a, first);
    thread_name(b, sizeof b, second);
    fail("shared-memory race (%s) on %s: %s %s it at @pc:%zx@, then %s %s it at @pc:%zx@, with no __syncthreads "
         "between (nor, within one warp, a __syncwarp or a warp collective)",
         kind, where, a, first_did, (size_t)pc_offset(first_pc), b, second_did, (size_t)pc_offset(second_pc));
}

SIMT_UNCHECKED inline void shared_access(size_t index, size_t size, bool write, uintptr_t pc) {
    const int me = state.current;
    const u32 we = state.warp_epoch[warp_of(me)];
    for (size_t i = index; i < index + size && i < checks.shadow.size(); ++i) {
        Shadow& s = checks.shadow[i];
        if (s.touched != state.block_serial) s.touched = state.block_serial, ++checks.block_bytes;
        if (!checks.races) continue;
        if (s.epoch != state.epoch) {
            s.epoch = state.epoch;
            s.writer = s.reader[0] = s.reader[1] = NOBODY;
        }
        if (s.writer != NOBODY && s.writer != me && !ordered(me, s.writer, s.writer_warp_epoch))
            return race(write ? "write-after-write" : "read-after-write", i, s.writer, s.writer_pc, "wrote", me, pc,
                        write ? "wrote" : "read");
        if (write) {
            for (int r = 0; r < 2; ++r)
                if (s.reader[r] != NOBODY && s.reader[r] != me && !ordered(me, s.reader[r], s.reader_warp_epoch[r]))
                    return race("write-after-read", i, s.reader[r], s.reader_pc[r], "read", me, pc, "wrote");
            s.writer = me, s.writer_warp_epoch = we, s.writer_pc = pc;
            s.reader[0] = s.reader[1] = NOBODY;
        } else {
            const int r = (s.reader[0] == NOBODY || s.reader[0] == me) ? 0 : 1;
            s.reader[r] = me, s.reader_warp_epoch[r] = we, s.reader_pc[r] = pc;
        }
    }
}

SIMT_UNCHECKED inline void global_access(Array& a, uintptr_t address, size_t size, bool write, uintptr_t pc) {
    if (address < a.start || address + size > a.end) {
        const long long n = (long long)((a.end - a.start) / a.itemsize);
        const long long offset = (long long)(address - a.start);   // bytes; negative before the array
        const long long item = a.itemsize;
        // the first element the access touches outside the array
        const long long element = offset < 0 ? -((-offset + item - 1) / item) : std::max(offset / item, n);
        fail("out-of-bounds %s of argument %d at @pc:%zx@: element offset %lld of an array of %lld elements "
             "(a %zu-byte access at byte offset %lld)",
             write ? "write" : "read", a.arg, (size_t)pc_offset(pc), element, n, size, offset);
        return;
    }
    if (!checks.counting) return;
    const size_t first = (address - a.start) / a.itemsize, last = (address + size - 1 - a.start) / a.itemsize;
    for (size_t e = first; e <= last; ++e) {
        if (write) {
            ++a.writes[e];
        } else {
            ++a.reads[e];
            if (a.stamp[e] != (int)state.block_serial) {
                a.stamp[e] = (int)state.block_serial;
                checks.block_reads.insert(checks.block_reads.end(), {state.block_linear, a.arg, (long long)e});
            }
        }
    }
}

// Every access of the kernel: alignment (sized accesses), shared memory, the global arrays.
SIMT_UNCHECKED inline void access(uintptr_t address, size_t size, bool write, bool sized, uintptr_t pc, bool atomic = false) {
    if (state.current < 0 || state.error[0] || inside_check) return;
    struct Inside {
        Inside() { inside_check = true; }
        ~Inside() { inside_check = false; }
    } inside;
    if (sized && address % size) {
        fail("misaligned %zu-byte %s at @pc:%zx@: address 0x%zx is not a multiple of %zu (a GPU faults)", size,
             write ? "store" : "load", (size_t)pc_offset(pc), (size_t)address, size);
        return;
    }
    // Most accesses are a thread's own locals: on its fiber's stack, in no array and not shared.
    const uintptr_t stack = reinterpret_cast<uintptr_t>(state.fibers[state.current].stack);
    if (address - stack < STACK_BYTES) return;
    const char* c = reinterpret_cast<const char*>(address);
    const char* dynamic = reinterpret_cast<const char*>(simt_dynamic_shared);
    if (!checks.shadow.empty() && !atomic) {
        if (c >= __start_simt_shared && c < __stop_simt_shared)
            return shared_access(c - __start_simt_shared, size, write, pc);
        if (c >= dynamic && c < dynamic + SIMT_SHARED_CAPACITY + SIMT_SHARED_GUARD)
            return shared_access(static_shared_bytes() + (c - dynamic), size, write, pc);
    }
    if (address + size <= checks.arrays_low || address >= checks.arrays_high) return;
    for (Array *a = checks.arrays.data(), *end = a + checks.arrays.size(); a != end; ++a)
        if (address + size > a->low && address < a->high) return global_access(*a, address, size, write, pc);
}

}  // namespace simt

#define SIMT_PC reinterpret_cast<uintptr_t>(__builtin_return_address(0))
#define SIMT_SIZED(n)                                                                                     \
    extern "C" SIMT_UNCHECKED void __asan_load##n##_noabort(uintptr_t a) { \
        simt::access(a, n, false, n > 1, SIMT_PC);                                                        \
    }                                                                                                     \
    extern "C" SIMT_UNCHECKED void __asan_store##n##_noabort(uintptr_t a) { \
        simt::access(a, n, true, n > 1, SIMT_PC);                                                         \
    }
SIMT_SIZED(1)
SIMT_SIZED(2)
SIMT_SIZED(4)
SIMT_SIZED(8)
SIMT_SIZED(16)
#undef SIMT_SIZED
extern "C" SIMT_UNCHECKED void __asan_loadN_noabort(uintptr_t a, size_t n) {
    simt::access(a, n, false, false, SIMT_PC);
}
extern "C" SIMT_UNCHECKED void __asan_storeN_noabort(uintptr_t a, size_t n) {
    simt::access(a, n, true, false, SIMT_PC);
}
__attribute__((noinline, no_sanitize_address)) void simt_vector_alignment(const void* from, const void* to,
                                                                        unsigned bytes) {
    if (simt::state.current < 0 || simt::state.error[0]) return;
    const uintptr_t f = reinterpret_cast<uintptr_t>(from), t = reinterpret_cast<uintptr_t>(to);
    if (f % bytes) simt::access(f, bytes, false, true, SIMT_PC);
    else if (t % bytes) simt::access(t, bytes, true, true, SIMT_PC);
}
extern "C" void __asan_handle_no_return() {}
extern "C" void __asan_before_dynamic_init(const char*) {}
extern "C" void __asan_after_dynamic_init() {}
// More static __shared__ storage than the emulator's arena holds (simt.h): an error of the launch.
__attribute__((noinline)) void simt_static_shared_full(unsigned long bytes) {
    simt::fail("the kernels' static __shared__ variables need %lu bytes, more than the emulator's %d "
               "(SIMT_STATIC_SHARED_CAPACITY in kernels/emulator/simt.h)", bytes, SIMT_STATIC_SHARED_CAPACITY);
}
