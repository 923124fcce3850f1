// simt.h — a CPU emulator of as much of the CUDA execution model as the tensor-core attention
// kernels use, so that their unchanged source runs on a machine without a GPU.
//
// One fiber (ucontext) per thread of a block; blocks run one after another. __syncthreads is a
// barrier of all the block's fibers. A warp-collective instruction (__shfl_xor_sync, mma.sync,
// ldmatrix) waits until all 32 lanes of the warp have reached it, checks that they reached the
// same instruction, and then computes every lane's result from the PTX ISA's definition, written
// here independently of the kernels' own index maps (onlinesoftmax/kernels/mma_fragments.py is a
// third, NumPy, copy; tests/test_attention_emulated.py checks that the two agree).
// The scheduler runs a random runnable fiber next (seeded), so warps interleave differently on
// every run and a missing barrier shows up as a wrong answer. cp.async copies land only when the
// issuing thread waits (the latest moment the hardware may deliver them); shared memory starts
// every block filled with 0xff bytes (NaN in fp16 and bf16), with a guard band after it that must
// stay untouched. Any violation prints "simt error: ..." and exits with status 3.
//
// The kernels see ONLINESOFTMAX_HOST_EMULATION and call the simt_* functions below instead of
// inline PTX (kernels/common/mma.cuh).
#pragma once
#define ONLINESOFTMAX_HOST_EMULATION 1

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__

typedef unsigned int u32;
struct simt_dim3 { unsigned x, y, z; };
inline simt_dim3 threadIdx, blockIdx, blockDim, gridDim;
struct alignas(16) int4 { int x, y, z, w; };
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }

[[noreturn]] inline void simt_fail(const char* what) {
    std::fprintf(stderr, "simt error: %s (block %u %u %u, thread %u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z,
                 threadIdx.x);
    std::fflush(stderr);
    std::_Exit(3);   // not exit(): static destructors would free the fiber stack we run on
}

// ---- 16-bit conversions (round to nearest even, as cvt.rn) --------------------------------------
inline float simt_bf16_to_float(unsigned short h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }
inline unsigned short simt_float_to_bf16(float f) {
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);
    return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float simt_f16_to_float(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return static_cast<float>(x); }
inline unsigned short simt_float_to_f16(float f) {
    const _Float16 x = static_cast<_Float16>(f);
    unsigned short h;
    std::memcpy(&h, &x, 2);
    return h;
}
inline u32 simt_pack_bf16x2(float lo, float hi) { return simt_float_to_bf16(lo) | (u32(simt_float_to_bf16(hi)) << 16); }
inline u32 simt_pack_f16x2(float lo, float hi) { return simt_float_to_f16(lo) | (u32(simt_float_to_f16(hi)) << 16); }

namespace simt {

enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };
enum Op { OP_NONE, OP_SHFL_XOR, OP_MMA_BF16, OP_MMA_F16, OP_LDMATRIX, OP_LDMATRIX_TRANS };

struct Copy { void* dst; unsigned char bytes[16]; };

struct Lane {   // what a lane brings to a warp collective, and what it takes away
    int op;
    float value;
    int lane_mask;
    u32 a[4], b[2];
    float c[4];
    const void* address;
    u32 r[4];
};

struct Fiber {
    ucontext_t context;
    std::vector<char> stack;
    unsigned thread;
    State state;
    std::vector<Copy> pending;
};

struct Machine {
    std::vector<Fiber> fibers;
    ucontext_t scheduler;
    int current = 0;
    int at_barrier = 0;
    std::vector<int> warp_arrived;
    std::vector<Lane> lanes;   // 32 per warp
    std::mt19937 rng{12345};
    std::function<void()> entry;
    unsigned char* shared = nullptr;
    size_t shared_bytes = 0;
};

inline Machine machine;
constexpr size_t SHARED_CAPACITY = 227 * 1024, SHARED_GUARD = 4096;
}  // namespace simt

// The block's dynamic shared memory: the kernels declare it as `extern __shared__ int4 shared_raw[]`.
alignas(128) inline int4 shared_raw[(simt::SHARED_CAPACITY + simt::SHARED_GUARD) / 16];

namespace simt {
inline unsigned char* const shared_memory = reinterpret_cast<unsigned char*>(shared_raw);

inline void yield() {
    Fiber& me = machine.fibers[machine.current];
    swapcontext(&me.context, &machine.scheduler);
}

inline void trampoline() {
    machine.entry();
    Fiber& me = machine.fibers[machine.current];
    if (!me.pending.empty()) simt_fail("a thread ended with cp.async copies it never waited for");
    me.state = DONE;
    // returning goes to uc_link: the scheduler
}

// Run one warp-collective instruction: every lane stores its operands; the last to arrive
// computes all results; each lane then reads its own.
inline void collective(Lane& mine, void (*compute)(Lane*)) {
    const int me = machine.current, warp = me / 32, lane = me % 32;
    Lane* lanes = &machine.lanes[32 * warp];
    lanes[lane] = mine;
    if (++machine.warp_arrived[warp] == 32) {
        for (int i = 0; i < 32; ++i)
            if (lanes[i].op != mine.op) simt_fail("the lanes of a warp reached different collective instructions");
        compute(lanes);
        machine.warp_arrived[warp] = 0;
        for (int i = 0; i < 32; ++i) machine.fibers[32 * warp + i].state = RUNNABLE;
    } else {
        machine.fibers[me].state = AT_WARP;
    }
    yield();   // also after completing: let another fiber run in between
    mine = lanes[lane];
}

inline float element(int op, u32 reg, int half) {
    const unsigned short h = static_cast<unsigned short>(half ? reg >> 16 : reg & 0xffffu);
    return op == OP_MMA_BF16 ? simt_bf16_to_float(h) : simt_f16_to_float(h);
}

// mma.m16n8k16, floating point: the fragment formulas of the PTX ISA, element by element.
inline void compute_mma(Lane* lanes) {
    double A[16][16], B[16][8], C[16][8];
    const int op = lanes[0].op;
    for (int lane = 0; lane < 32; ++lane) {
        const int group = lane >> 2, in_group = lane % 4;
        for (int i = 0; i < 8; ++i) {
            const int row = (i < 2 || (4 <= i && i < 6)) ? group : group + 8;
            const int col = i < 4 ? in_group * 2 + (i & 1) : in_group * 2 + (i & 1) + 8;
            A[row][col] = element(op, lanes[lane].a[i / 2], i % 2);
        }
        for (int i = 0; i < 4; ++i) {
            const int row = i < 2 ? in_group * 2 + (i & 1) : in_group * 2 + (i & 1) + 8;
            B[row][group] = element(op, lanes[lane].b[i / 2], i % 2);
        }
        for (int i = 0; i < 4; ++i) C[i < 2 ? group : group + 8][in_group * 2 + (i & 1)] = lanes[lane].c[i];
    }
    for (int lane = 0; lane < 32; ++lane) {
        const int group = lane >> 2, in_group = lane % 4;
        for (int i = 0; i < 4; ++i) {
            const int row = i < 2 ? group : group + 8, col = in_group * 2 + (i & 1);
            double sum = C[row][col];
            for (int kk = 0; kk < 16; ++kk) sum += A[row][kk] * B[kk][col];
            lanes[lane].c[i] = static_cast<float>(sum);
        }
    }
}

// ldmatrix.m8n8.x4(.trans).b16: lanes 8i .. 8i+7 give the rows of matrix i.
inline void compute_ldmatrix(Lane* lanes) {
    unsigned short M[4][8][8];
    for (int lane = 0; lane < 32; ++lane) {
        const unsigned char* p = static_cast<const unsigned char*>(lanes[lane].address);
        if (p < machine.shared || p + 16 > machine.shared + machine.shared_bytes)
            simt_fail("ldmatrix row address outside the block's shared memory");
        if ((p - machine.shared) % 16) simt_fail("ldmatrix row address not 16-byte aligned");
        std::memcpy(M[lane / 8][lane % 8], p, 16);
    }
    for (int lane = 0; lane < 32; ++lane) {
        const int group = lane >> 2, in_group = lane % 4;
        for (int i = 0; i < 4; ++i) {
            unsigned short lo, hi;
            if (lanes[0].op == OP_LDMATRIX_TRANS) {
                lo = M[i][2 * in_group][group];
                hi = M[i][2 * in_group + 1][group];
            } else {
                lo = M[i][group][2 * in_group];
                hi = M[i][group][2 * in_group + 1];
            }
            lanes[lane].r[i] = lo | (u32(hi) << 16);
        }
    }
}

inline void compute_shfl_xor(Lane* lanes) {
    float values[32];
    for (int i = 0; i < 32; ++i) {
        if (lanes[i].lane_mask != lanes[0].lane_mask) simt_fail("__shfl_xor_sync with different lane masks");
        values[i] = lanes[i].value;
    }
    for (int i = 0; i < 32; ++i) lanes[i].value = values[i ^ lanes[0].lane_mask];
}

// Launch `kernel` (a callable taking no arguments that calls the entry) on a grid, block by block.
inline void launch(simt_dim3 grid, unsigned threads, size_t shared_bytes, const std::function<void()>& kernel,
                   unsigned seed) {
    if (shared_bytes > SHARED_CAPACITY) simt_fail("dynamic shared memory above the H200's 227 KiB");
    if (threads % 32) simt_fail("block size not a multiple of 32");
    std::mt19937 order(seed);
    std::vector<simt_dim3> blocks;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
    std::shuffle(blocks.begin(), blocks.end(), order);
    gridDim = grid;
    blockDim = {threads, 1, 1};
    machine.rng.seed(seed);
    machine.entry = kernel;
    machine.shared = shared_memory;
    machine.shared_bytes = shared_bytes;
    for (const simt_dim3& block : blocks) {
        blockIdx = block;
        std::memset(shared_memory, 0xff, SHARED_CAPACITY + SHARED_GUARD);
        machine.fibers.assign(threads, Fiber{});
        machine.warp_arrived.assign(threads / 32, 0);
        machine.lanes.assign(threads, Lane{});
        machine.at_barrier = 0;
        for (unsigned t = 0; t < threads; ++t) {
            Fiber& f = machine.fibers[t];
            f.stack.resize(256 * 1024);
            f.thread = t;
            f.state = RUNNABLE;
            getcontext(&f.context);
            f.context.uc_stack.ss_sp = f.stack.data();
            f.context.uc_stack.ss_size = f.stack.size();
            f.context.uc_link = &machine.scheduler;
            makecontext(&f.context, trampoline, 0);
        }
        std::vector<int> runnable;
        for (;;) {
            runnable.clear();
            int done = 0;
            for (unsigned t = 0; t < threads; ++t) {
                if (machine.fibers[t].state == RUNNABLE) runnable.push_back(t);
                done += machine.fibers[t].state == DONE;
            }
            if (runnable.empty()) {
                if (done == static_cast<int>(threads)) break;
                simt_fail(done ? "some threads ended while others wait at a barrier or a warp collective"
                               : "deadlock: every thread waits");
            }
            machine.current = runnable[machine.rng() % runnable.size()];
            threadIdx = {machine.fibers[machine.current].thread, 0, 0};
            swapcontext(&machine.scheduler, &machine.fibers[machine.current].context);
        }
        for (size_t i = 0; i < SHARED_GUARD; ++i)
            if (shared_memory[shared_bytes + i] != 0xff) simt_fail("shared memory written past the dynamic size");
    }
}

}  // namespace simt

// ---- what the kernels call ---------------------------------------------------------------------

inline void __syncthreads() {
    using namespace simt;
    Fiber& me = machine.fibers[machine.current];
    me.state = AT_BARRIER;
    if (++machine.at_barrier == static_cast<int>(machine.fibers.size())) {
        machine.at_barrier = 0;
        for (Fiber& f : machine.fibers) f.state = RUNNABLE;
    }
    yield();
}

inline float __shfl_xor_sync(unsigned mask, float value, int lane_mask) {
    if (mask != 0xffffffffu) simt_fail("__shfl_xor_sync with a partial mask");
    simt::Lane mine{};
    mine.op = simt::OP_SHFL_XOR;
    mine.value = value;
    mine.lane_mask = lane_mask;
    simt::collective(mine, simt::compute_shfl_xor);
    return mine.value;
}

inline void simt_mma_m16n8k16(bool bf16, float c[4], const u32 a[4], const u32 b[2]) {
    simt::Lane mine{};
    mine.op = bf16 ? simt::OP_MMA_BF16 : simt::OP_MMA_F16;
    std::memcpy(mine.a, a, sizeof mine.a);
    std::memcpy(mine.b, b, sizeof mine.b);
    std::memcpy(mine.c, c, sizeof mine.c);
    simt::collective(mine, simt::compute_mma);
    std::memcpy(c, mine.c, sizeof mine.c);
}

inline void simt_ldmatrix_x4(u32 r[4], const void* address, bool trans) {
    simt::Lane mine{};
    mine.op = trans ? simt::OP_LDMATRIX_TRANS : simt::OP_LDMATRIX;
    mine.address = address;
    simt::collective(mine, simt::compute_ldmatrix);
    std::memcpy(r, mine.r, sizeof mine.r);
}

inline void simt_cp_async_16(void* shared_dst, const void* global_src, int src_bytes) {
    using namespace simt;
    unsigned char* d = static_cast<unsigned char*>(shared_dst);
    if (d < machine.shared || d + 16 > machine.shared + machine.shared_bytes)
        simt_fail("cp.async destination outside the block's shared memory");
    if ((d - machine.shared) % 16 || reinterpret_cast<uintptr_t>(global_src) % 16)
        simt_fail("cp.async addresses not 16-byte aligned");
    Copy copy{d, {}};
    if (src_bytes) std::memcpy(copy.bytes, global_src, 16);   // read now, land at the wait
    machine.fibers[machine.current].pending.push_back(copy);
}

inline void simt_cp_async_wait_all() {
    simt::Fiber& me = simt::machine.fibers[simt::machine.current];
    for (const simt::Copy& copy : me.pending) std::memcpy(copy.dst, copy.bytes, 16);
    me.pending.clear();
    simt::yield();
}
