// simt_machine.h — the machine of simt.h: fibers, the two schedules, barriers, the release of warp
// collectives, shared memory, errors and the launch. Included by simt.h only.
#pragma once

// The dynamic shared memory (an `extern __shared__` array of the kernel names it) and its guard band.
#define SIMT_SHARED_CAPACITY (227 * 1024)   // the H200's most dynamic shared memory per block
#define SIMT_SHARED_GUARD 4096
extern "C" {
alignas(1024) unsigned char simt_dynamic_shared[SIMT_SHARED_CAPACITY + SIMT_SHARED_GUARD];
}
// The linker marks where the section of the static __shared__ variables starts and ends (hidden:
// each library its own).
extern char __start_simt_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_simt_shared[] __attribute__((weak, visibility("hidden")));

namespace simt {

constexpr int MAX_THREADS = 1024;
constexpr size_t STACK_BYTES = 256 * 1024;

enum Wait : unsigned char { RUNNABLE, BARRIER, COLLECTIVE, YIELD, DONE };
enum Op { OP_VALUES, OP_MMA_BF16, OP_MMA_F16, OP_LDMATRIX, OP_LDMATRIX_TRANS, OP_WGMMA_WAIT };

// What a lane brings to a warp collective, and what it takes away (it lives on the lane's stack
// while the lane waits).
struct Post {
    uint64_t value;          // a shuffle's or a vote's
    uint64_t values[32];     // OP_VALUES: every lane's value, once the collective completes
    const void* address;     // ldmatrix: this lane's row
    u32 a[4], b[2], r[4];    // mma operands; ldmatrix results
    float c[4];              // mma accumulators, in and out
    int thread;              // wgmma.wait_group: the waiting thread (its wgmma list) and the groups it may keep
    int keep;
};

struct Copy { void* dst; unsigned char bytes[16]; uintptr_t pc; };   // a cp.async on its way (and where it was issued)

// A wgmma on its way (simt_wgmma.h): computed when a wait retires its group, from the shared memory
// and the A registers of that moment.
struct Wgmma {
    float* d;                // the issuing thread's accumulators
    int n;                   // the instruction's N
    bool bf16, a_in_registers, transpose_b, accumulate;
    const u32* a;            // A from registers: the issuing thread's four, read at the wait
    uint64_t a_desc, b_desc;
    int group;               // -1 until committed
    int line;
    uint64_t issued = 0;     // a hash of the operands this thread's rows read, taken at the issue
};

struct Fiber {
    ucontext_t context;        // where it starts (fiber_entry on its own stack)
    jmp_buf resume;            // where it waits, once started
    bool started = false;
    char* stack = nullptr;
    dim3 tid;
    int op = OP_VALUES;        // the collective it waits in, with its mask, line and name
    unsigned mask = 0;
    int line = 0;
    const char* what = "";
    Post* post = nullptr;
    std::vector<Copy> pending;
    std::vector<Wgmma> wgmma;
    int wgmma_groups = 0;      // groups committed so far
};

struct State {
    Fiber fibers[MAX_THREADS];
    Wait wait[MAX_THREADS];    // each fiber's, apart from the rest: the scheduler counts them often
    int n_threads = 0;
    int current = -1;          // the fiber running; -1 while the scheduler runs
    jmp_buf scheduler;         // run_fiber, where a thread returns when it waits
    size_t shared_bytes = 0;
    bool random = false;       // the schedule (simt_configure)
    unsigned seed = 0;
    std::mt19937 rng;
    void (*body)(void*) = nullptr;
    void* body_arg = nullptr;
    char error[4096] = "";
    u32 epoch = 0;             // the barrier interval: a new one at every block and every open barrier
    u32 warp_epoch[MAX_THREADS / 32] = {};   // per warp: a new one at every completed collective
    u32 block_serial = 0;      // a new one at every block
    int votes[2] = {};         // __syncthreads_or: the OR of the predicates, by the barrier interval's parity
    long long block_linear = 0;   // the running block's index, x fastest
};
inline State state;
SIMT_UNCHECKED inline Wait& wait_of(const Fiber& f) { return state.wait[&f - state.fibers]; }

// A complete warp collective: compute every lane's result (simt_warp.h).
inline void complete(int op, Post* const* posts);

inline int lane_of(int thread) { return thread & 31; }
inline int warp_of(int thread) { return thread >> 5; }
inline int lanes_in_warp(int warp) { return std::min(32, state.n_threads - 32 * warp); }
inline unsigned lane_bits(int warp) {
    const int n = lanes_in_warp(warp);
    return n >= 32 ? 0xffffffffu : ((1u << n) - 1u);
}

// Record the first error. From a thread, the thread stops there: the scheduler sees the error and
// ends the launch. The message gets the block (and the thread) appended.
SIMT_UNCHECKED __attribute__((format(printf, 1, 2))) inline void fail(const char* format, ...) {
    if (!state.error[0]) {
        va_list args;
        va_start(args, format);
        int used = std::vsnprintf(state.error, sizeof state.error, format, args);
        va_end(args);
        used = std::min<int>(used, sizeof state.error - 1);
        if (state.current >= 0)
            std::snprintf(state.error + used, sizeof state.error - used, " (block %u,%u,%u, thread %d)", blockIdx.x,
                          blockIdx.y, blockIdx.z, state.current);
        else
            std::snprintf(state.error + used, sizeof state.error - used, " (block %u,%u,%u)", blockIdx.x, blockIdx.y,
                          blockIdx.z);
    }
    if (state.current >= 0) _longjmp(state.scheduler, 1);   // the thread is never resumed
}

SIMT_UNCHECKED inline void switch_out(Wait wait, const char* what, int line, unsigned mask = 0) {
    Fiber& f = state.fibers[state.current];
    wait_of(f) = wait;
    f.what = what;
    f.line = line;
    f.mask = mask;
    if (!_setjmp(f.resume)) _longjmp(state.scheduler, 1);
}

// Shared memory: a static __shared__ variable, or the dynamic array up to the launch's size.
SIMT_UNCHECKED inline bool in_shared(const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    if (__start_simt_shared != __stop_simt_shared && c >= __start_simt_shared && c + bytes <= __stop_simt_shared)
        return true;
    const char* dynamic = reinterpret_cast<const char*>(simt_dynamic_shared);
    return c >= dynamic && c + bytes <= dynamic + state.shared_bytes;
}

// ---- why no thread can go on: the threads grouped by where they stand ----------------------------

SIMT_UNCHECKED inline void describe(char* out, size_t size, int first, int last, const Fiber& f) {
    if (wait_of(f) == DONE)
        std::snprintf(out, size, "threads %d-%d returned", first, last);
    else if (wait_of(f) == BARRIER)
        std::snprintf(out, size, "threads %d-%d wait at %s (line %d)", first, last, f.what, f.line);
    else
        std::snprintf(out, size, "threads %d-%d wait in %s (mask 0x%08x, line %d)", first, last, f.what, f.mask, f.line);
}

SIMT_UNCHECKED inline bool same_wait(const Fiber& a, const Fiber& b) {
    return wait_of(a) == wait_of(b) && (wait_of(a) == DONE || (a.line == b.line && a.mask == b.mask && a.what == b.what));
}

SIMT_UNCHECKED inline void deadlock(const char* headline) {
    char text[3500];
    int used = std::snprintf(text, sizeof text, "%s:", headline);
    for (int t = 0; t < state.n_threads && used < (int)sizeof text - 200;) {
        int u = t;
        while (u + 1 < state.n_threads && same_wait(state.fibers[u + 1], state.fibers[t])) ++u;
        char part[256];
        describe(part, sizeof part, t, u, state.fibers[t]);
        used += std::snprintf(text + used, sizeof text - used, "%s %s", t ? ";" : "", part);
        t = u + 1;
    }
    fail("%s", text);
}

// The waits read eight at a time: the scheduler asks how many threads wait in each way after
// every wait of every thread (the random schedule), 1024 threads a block.
// A byte of the result has its high bit set where the byte of `word` equals `value`.
SIMT_UNCHECKED inline uint64_t bytes_equal(uint64_t word, unsigned char value) {
    constexpr uint64_t low7 = 0x7f7f7f7f7f7f7f7full;
    word ^= 0x0101010101010101ull * value;
    return ~(((word & low7) + low7) | word | low7);
}
SIMT_UNCHECKED inline int count_flags(uint64_t flags) { return static_cast<int>(((flags >> 7) * 0x0101010101010101ull) >> 56); }

// The flags of the waits t .. t + 7 equal to `w` (none past the block's last thread).
SIMT_UNCHECKED inline uint64_t wait_flags(int t, Wait w) {
    uint64_t word;
    std::memcpy(&word, state.wait + t, 8);
    uint64_t flags = bytes_equal(word, w);
    if (state.n_threads - t < 8) flags &= (1ull << (8 * (state.n_threads - t))) - 1;
    return flags;
}

// How many of the block's threads wait as `w`.
SIMT_UNCHECKED inline int count_waits(Wait w) {
    int n = 0;
    for (int t = 0; t < state.n_threads; t += 8) n += count_flags(wait_flags(t, w));
    return n;
}

// The lanes of `warp` that wait as `w`, a bit a lane.
SIMT_UNCHECKED inline unsigned warp_lanes(int warp, Wait w) {
    unsigned bits = 0;
    for (int i = 0; i < 4 && warp * 32 + 8 * i < state.n_threads; ++i)
        bits |= static_cast<unsigned>(((wait_flags(warp * 32 + 8 * i, w) >> 7) * 0x0102040810204080ull) >> 56) << (8 * i);
    return bits;
}

// The k-th runnable thread, in thread order (k < count_waits(RUNNABLE)).
SIMT_UNCHECKED inline int runnable_thread(int k) {
    for (int t = 0;; t += 8) {
        uint64_t flags = wait_flags(t, RUNNABLE);
        const int here = count_flags(flags);
        if (k < here) {
            for (; k > 0; --k) flags &= flags - 1;
            return t + __builtin_ctzll(flags) / 8;
        }
        k -= here;
    }
}

// ---- releasing waits ------------------------------------------------------------------------------

// A barrier that every live thread has reached opens; one that returned threads never reach is an error.
SIMT_UNCHECKED inline bool open_barrier() {
    const int at_barrier = count_waits(BARRIER);
    if (!at_barrier) return false;
    const int done = count_waits(DONE), live = state.n_threads - done;
    if (at_barrier != live) return false;
    if (done) {
        deadlock("__syncthreads() reached by only some of the block's threads: the others returned before it "
                 "(a barrier in divergent code: undefined in CUDA)");
        return false;
    }
    for (int t = 0; t < state.n_threads; ++t) state.wait[t] = RUNNABLE;
    state.votes[(state.epoch + 1) & 1] = 0;   // the next interval's slot (its threads read this one's first)
    ++state.epoch;
    return true;
}

// Complete the collectives of `warp` that every lane of their mask has joined: 1 if one was,
// 0 if none, -1 on an error (a lane of the mask returned before it).
SIMT_UNCHECKED inline int release_warp(int warp) {
    unsigned waiting = warp_lanes(warp, COLLECTIVE);
    if (!waiting) return 0;
    const unsigned done = warp_lanes(warp, DONE);
    int released = 0;
    for (int lane = 0; lane < lanes_in_warp(warp); ++lane) {
        if (!(waiting >> lane & 1u)) continue;
        const Fiber& f = state.fibers[warp * 32 + lane];
        const unsigned mask = f.mask & lane_bits(warp);
        if (mask & done) {
            fail("line %d: lane %d of warp %d calls %s with mask 0x%08x, but lane %d returned before it", f.line,
                 lane, warp, f.what, f.mask, __builtin_ctz(mask & done));
            return -1;
        }
        if (mask & ~waiting) continue;   // a lane of the mask has not joined yet
        bool whole = true;
        for (int other = 0; other < 32; ++other) {
            if (!(mask >> other & 1u)) continue;
            const Fiber& g = state.fibers[warp * 32 + other];
            whole &= g.mask == f.mask && g.line == f.line && g.op == f.op && g.what == f.what;
        }
        if (!whole) continue;
        Post* posts[32] = {};
        for (int other = 0; other < 32; ++other)
            if (mask >> other & 1u) posts[other] = state.fibers[warp * 32 + other].post;
        complete(f.op, posts);
        ++state.warp_epoch[warp];
        for (int other = 0; other < 32; ++other)
            if (mask >> other & 1u) state.wait[warp * 32 + other] = RUNNABLE;
        waiting &= ~mask;
        released = 1;
    }
    return released;
}

// Release what can be released once no thread runs: a barrier, complete collectives, the threads
// that yielded. False when nothing could be (with the error that says why the launch cannot go on).
SIMT_UNCHECKED inline bool release() {
    if (open_barrier()) return true;
    if (state.error[0]) return false;
    bool released = false, live = false;
    for (int warp = 0; warp * 32 < state.n_threads; ++warp) {
        const int r = release_warp(warp);
        if (r < 0) return false;
        released |= r > 0;
    }
    for (int t = 0; t < state.n_threads; ++t) {
        Fiber& f = state.fibers[t];
        if (wait_of(f) == YIELD) wait_of(f) = RUNNABLE;
        released |= wait_of(f) == RUNNABLE;
        live |= wait_of(f) != DONE;
    }
    if (!released && live) deadlock("no thread can go on");
    return released;
}

// The random schedule releases as soon as a thread's wait completes something.
SIMT_UNCHECKED inline void settle(int thread, Wait wait) {
    if (wait == BARRIER || wait == DONE) open_barrier();
    if (!state.error[0] && (wait == COLLECTIVE || wait == DONE)) release_warp(warp_of(thread));
}

// ---- running a block ------------------------------------------------------------------------------

SIMT_UNCHECKED inline void fiber_entry(int index) {
    state.body(state.body_arg);
    Fiber& f = state.fibers[index];
    if (!f.pending.empty()) fail("a thread ended with cp.async copies it never waited for");
    if (!f.wgmma.empty()) fail("a thread ended with wgmma instructions it never waited for (line %d)", f.wgmma[0].line);
    wait_of(f) = DONE;
    _longjmp(state.scheduler, 1);
}

SIMT_UNCHECKED inline void run_fiber(int t) {
    state.current = t;
    Fiber& f = state.fibers[t];
    threadIdx = f.tid;
    // Switches between threads are _setjmp/_longjmp (no system call, unlike swapcontext, which sets
    // the signal mask each time); a thread's first run enters its context once.
    if (!_setjmp(state.scheduler)) {
        if (f.started) _longjmp(f.resume, 1);
        f.started = true;
        setcontext(&f.context);
    }
    state.current = -1;
}

inline void begin_block_checks();
inline void end_block_checks();
inline void reset_async_state();   // simt_tma.h: the block's mbarriers

SIMT_UNCHECKED inline int run_block() {
    begin_block_checks();
    state.votes[0] = state.votes[1] = 0;
    reset_async_state();
    if (__start_simt_shared != __stop_simt_shared)
        std::memset(__start_simt_shared, 0xff, __stop_simt_shared - __start_simt_shared);
    std::memset(simt_dynamic_shared, 0xff, state.shared_bytes + SIMT_SHARED_GUARD);
    for (int t = 0; t < state.n_threads; ++t) {
        Fiber& f = state.fibers[t];
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack;
        f.context.uc_stack.ss_size = STACK_BYTES;
        f.context.uc_link = nullptr;   // fiber_entry never returns
        f.started = false;
        makecontext(&f.context, reinterpret_cast<void (*)()>(fiber_entry), 1, t);
        f.tid = dim3(t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
        wait_of(f) = RUNNABLE;
        f.pending.clear();
        f.wgmma.clear();
        f.wgmma_groups = 0;
    }
    for (;;) {
        if (state.random) {   // one random runnable thread until it waits
            const int n = count_waits(RUNNABLE);
            if (n) {
                const int t = runnable_thread(static_cast<int>(state.rng() % n));
                run_fiber(t);
                if (!state.error[0]) settle(t, state.wait[t]);
                if (state.error[0]) return 1;
                continue;
            }
        } else {              // every runnable thread in order, each until it waits
            for (int t = 0; t < state.n_threads; ++t) {
                if (state.wait[t] != RUNNABLE) continue;
                run_fiber(t);
                if (state.error[0]) return 1;
            }
        }
        bool all_done = true;
        for (int t = 0; t < state.n_threads; ++t) all_done &= state.wait[t] == DONE;
        if (all_done) break;
        if (!release() || state.error[0]) return 1;
    }
    for (size_t i = 0; i < SIMT_SHARED_GUARD; ++i)
        if (simt_dynamic_shared[state.shared_bytes + i] != 0xff) {
            fail("shared memory written past the dynamic size (%zu bytes): %zu bytes after it", state.shared_bytes, i);
            return 1;
        }
    end_block_checks();
    return state.error[0] ? 1 : 0;
}

SIMT_UNCHECKED inline int launch_body(const unsigned* dims, unsigned shared_bytes, void (*body)(void*), void* arg) {
    state.error[0] = 0;
    state.current = -1;
    gridDim = dim3(dims[0], dims[1], dims[2]);
    blockDim = dim3(dims[3], dims[4], dims[5]);
    blockIdx = dim3(0, 0, 0);
    const long long threads = 1LL * blockDim.x * blockDim.y * blockDim.z;
    if (threads < 1 || threads > MAX_THREADS || shared_bytes > SIMT_SHARED_CAPACITY) {
        fail("a block of %lld threads with %u bytes of dynamic shared memory: at most %d threads and %d bytes", threads,
             shared_bytes, MAX_THREADS, SIMT_SHARED_CAPACITY);
        return 1;
    }
    state.n_threads = static_cast<int>(threads);
    state.shared_bytes = shared_bytes;
    state.body = body;
    state.body_arg = arg;
    state.rng.seed(state.seed);
    for (int t = 0; t < state.n_threads; ++t)
        if (!state.fibers[t].stack) state.fibers[t].stack = static_cast<char*>(std::malloc(STACK_BYTES));
    std::vector<dim3> blocks;
    for (unsigned z = 0; z < gridDim.z; ++z)
        for (unsigned y = 0; y < gridDim.y; ++y)
            for (unsigned x = 0; x < gridDim.x; ++x) blocks.emplace_back(x, y, z);
    if (state.random) std::shuffle(blocks.begin(), blocks.end(), state.rng);
    for (const dim3& block : blocks) {
        blockIdx = block;
        state.block_linear = block.x + 1LL * gridDim.x * (block.y + 1LL * gridDim.y * block.z);
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

}  // namespace simt

// ---- block synchronisation ------------------------------------------------------------------------
inline void __syncthreads(int line = __builtin_LINE()) { simt::switch_out(simt::BARRIER, "__syncthreads()", line); }
// A barrier that also returns whether any thread's predicate was non-zero: each thread ORs its
// predicate into the slot of the interval it ends, and reads the slot once the barrier opens.
inline int __syncthreads_or(int predicate, int line = __builtin_LINE()) {
    int& vote = simt::state.votes[simt::state.epoch & 1];
    vote |= predicate != 0;
    simt::switch_out(simt::BARRIER, "__syncthreads_or()", line);
    return vote;
}
inline void __nanosleep(unsigned) { simt::switch_out(simt::YIELD, "__nanosleep", 0); }
