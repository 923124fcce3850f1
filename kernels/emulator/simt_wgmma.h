// simt_wgmma.h — Hopper's wgmma.mma_async for kernels/common/wgmma.cuh: the shared-memory
// descriptor decoded by the PTX ISA's rules for the 128-byte swizzle, the accumulator and A-register
// fragments of a warpgroup, and the instruction's asynchrony. Included by simt.h only.
//
// What it models, and what it catches:
//   - An instruction is recorded when issued and computed when wgmma_wait retires its group, from
//     shared memory and the A registers as they are then: accumulators read before the wait hold
//     their old values, and a tile or an A register overwritten before the wait changes the product,
//     as on the GPU. The wait is a warp collective, so every lane's registers are read while all 32
//     wait (an A register array must live until the wait, as the kernels' do).
//   - Every element it reads goes through the shared-memory checks (bounds, races) as this thread's
//     read at the wait, and at the issue too: the hardware may read the operands at any moment in
//     between, so they must be complete when it is issued (a barrier after the writes of other
//     warps) and unchanged until the wait. The operands a thread's rows read (shared memory and its
//     A registers) are hashed at both moments; a difference is an error.
//   - The warp must be whole and inside a whole warpgroup of the block. A thread that ends with an
//     instruction it never waited for is an error.
//   - A warp's 16 rows depend only on its own A rows and B, so each warp retires its instructions
//     alone; the group's rule that all 4 warps issue the same instructions is not checked. The 32
//     lanes of a warp must have issued the same instructions and wait for the same groups.
// Descriptor addresses are byte offsets into the dynamic shared memory (1024-aligned here), as
// __cvta_generic_to_shared gives offsets into the block's shared window on the GPU.
#pragma once

// The shared-memory address wgmma_descriptor encodes: the offset into the dynamic shared memory.
inline u32 simt_shared_address(const void* p, int line = __builtin_LINE()) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    if (c < simt_dynamic_shared || c >= simt_dynamic_shared + simt::state.shared_bytes)
        simt::fail("line %d: a wgmma descriptor names an address outside the dynamic shared memory", line);
    return static_cast<u32>(c - simt_dynamic_shared);
}

namespace simt {

// The 16 bits of element (mn, k) of the operand a descriptor names: mn a row of A or a column of B,
// k within the instruction's 16; MN-major: 64 consecutive mn per 128-byte row.
__attribute__((no_sanitize_address)) inline unsigned short operand_bits(const Wgmma& op, uint64_t desc, int mn, int k,
                                                                         bool mn_major) {
    const u32 start = static_cast<u32>(desc & 0x3FFFu) << 4, leading = static_cast<u32>((desc >> 16) & 0x3FFFu) << 4;
    const u32 stride = static_cast<u32>((desc >> 32) & 0x3FFFu) << 4;
    if ((desc >> 62) != 1 || ((desc >> 49) & 7u))
        fail("line %d: a wgmma descriptor without the 128-byte swizzle or with a base offset (this emulator knows "
             "only the 128-byte swizzle on 1024-byte aligned atoms)", op.line);
    const u32 linear = mn_major ? start + (mn / 64) * leading + (k / 8) * stride + (k % 8) * 128 + (mn % 64) * 2
                                : start + (mn / 8) * stride + (mn % 8) * 128 + k * 2;
    const u32 address = linear ^ (((linear >> 7) & 7u) << 4);
    if (address + 2 > state.shared_bytes) {
        fail("line %d: wgmma reads byte %u of shared memory, past the dynamic size (%zu bytes)", op.line, address,
             state.shared_bytes);
        return 0;
    }
    const unsigned char* p = simt_dynamic_shared + address;
    access(reinterpret_cast<uintptr_t>(p), 2, false, false, 0);
    unsigned short h;
    std::memcpy(&h, p, 2);
    return h;
}

inline float operand_element(const Wgmma& op, uint64_t desc, int mn, int k, bool mn_major) {
    const unsigned short h = operand_bits(op, desc, mn, k, mn_major);
    return op.bf16 ? simt_bf16_to_float(h) : simt_f16_to_float(h);
}

// A hash (FNV-1a) of what the rows of `thread` read: its two A rows from shared memory or its four
// A registers, and its N / 4 columns of B.
inline uint64_t operand_hash(const Wgmma& op, int thread) {
    const int lane = thread & 31, warp_row = 16 * ((thread >> 5) & 3), g = lane >> 2, t = lane & 3;
    uint64_t hash = 1469598103934665603ull;
    auto mix = [&](uint64_t word) { hash = (hash ^ word) * 1099511628211ull; };
    if (op.a_in_registers) {
        for (int r = 0; r < 4; ++r) mix(op.a[r]);
    } else {
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 16; ++k) mix(operand_bits(op, op.a_desc, warp_row + g + 8 * h, k, false));
    }
    for (int j = 0; j < op.n / 8 && !state.error[0]; ++j)
        for (int c = 0; c < 2; ++c)
            for (int k = 0; k < 16; ++k) mix(operand_bits(op, op.b_desc, 8 * j + 2 * t + c, k, op.transpose_b));
    return hash;
}

// D = A B (+ D) for the accumulators of the thread that issued `op`, whose two A rows (g and g + 8
// of its warp) are `a_rows` when A comes from registers; sums in double, rounded once. The thread's
// N / 4 columns of B are read once (each serves both rows).
inline void compute_wgmma(const Wgmma& op, int thread, const float (*a_rows)[16]) {
    const int lane = thread & 31, warp_row = 16 * ((thread >> 5) & 3), g = lane >> 2, t = lane & 3;
    float a[2][16];
    if (op.a_in_registers) {
        std::memcpy(a, a_rows, sizeof a);
    } else {
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 16; ++k) a[h][k] = operand_element(op, op.a_desc, warp_row + g + 8 * h, k, false);
    }
    float b[2][16];
    for (int j = 0; j < op.n / 8 && !state.error[0]; ++j) {   // columns 8j + 2t and 8j + 2t + 1
        for (int c = 0; c < 2; ++c)
            for (int k = 0; k < 16; ++k) b[c][k] = operand_element(op, op.b_desc, 8 * j + 2 * t + c, k, op.transpose_b);
        for (int e = 0; e < 4; ++e) {
            float& out = op.d[4 * j + e];
            double sum = op.accumulate ? out : 0.0;
            for (int k = 0; k < 16; ++k) sum += static_cast<double>(a[e >> 1][k]) * b[e & 1][k];
            out = static_cast<float>(sum);
        }
    }
}

// wgmma.wait_group for a whole warp (every lane waiting): retire, in issue order, the instructions of
// the groups older than the `keep` newest, reading each lane's A rows from the registers of the 4
// lanes of its quad that hold them (mma.sync's A fragment: rows g and g + 8, k 2t .. 2t + 1 and
// 2t + 8 .. 2t + 9).
SIMT_UNCHECKED inline void retire_wgmma(Post* const* posts) {
    std::vector<Wgmma>* lists[32];
    int retire = -1;
    for (int lane = 0; lane < 32; ++lane) {
        Fiber& f = state.fibers[posts[lane]->thread];
        lists[lane] = &f.wgmma;
        int count = 0;
        for (const Wgmma& op : f.wgmma) count += op.group >= 0 && op.group < f.wgmma_groups - posts[lane]->keep;
        if (retire < 0) retire = count;
        if (count != retire || f.wgmma.size() != lists[0]->size()) {
            fail("line %d: wgmma.wait_group: the lanes of warp %d have issued or committed different wgmma instructions",
                 f.wgmma.empty() ? 0 : f.wgmma[0].line, warp_of(posts[lane]->thread));
            return;
        }
    }
    for (int index = 0; index < retire && !state.error[0]; ++index)
        for (int lane = 0; lane < 32; ++lane) {
            const Wgmma& op = (*lists[lane])[index];
            float a_rows[2][16] = {};
            if (op.a_in_registers) {
                const int g = lane >> 2;
                for (int t = 0; t < 4; ++t) {
                    const u32* regs = (*lists[4 * g + t])[index].a;
                    for (int h = 0; h < 2; ++h)
                        for (int half = 0; half < 2; ++half) {
                            const int kind = op.bf16 ? OP_MMA_BF16 : OP_MMA_F16;
                            a_rows[h][2 * t + half] = element(kind, regs[h], half);
                            a_rows[h][2 * t + 8 + half] = element(kind, regs[2 + h], half);
                        }
                }
            }
            if (operand_hash(op, posts[lane]->thread) != op.issued) {
                fail("line %d: the operands of a wgmma (shared memory, or its A registers) changed between its "
                     "issue and its wait (thread %d): the tensor cores may read them at any moment in between",
                     op.line, posts[lane]->thread);
                return;
            }
            compute_wgmma(op, posts[lane]->thread, a_rows);
        }
    for (int lane = 0; lane < 32; ++lane) lists[lane]->erase(lists[lane]->begin(), lists[lane]->begin() + retire);
}

}  // namespace simt

// ---- what kernels/common/wgmma.cuh calls in place of inline PTX ------------------------------------
inline void simt_wgmma(bool bf16, float* d, int n, const u32* a, uint64_t a_desc, uint64_t b_desc, int transpose_b,
                       int accumulate, int line = __builtin_LINE()) {
    const int thread = simt::state.current, warp = simt::warp_of(thread);
    simt::whole_warp("wgmma", line);
    if ((warp / 4 + 1) * 128 > simt::state.n_threads)
        simt::fail("line %d: wgmma by warp %d, whose warpgroup (warps %d-%d) is not whole in a block of %d threads",
                   line, warp, warp / 4 * 4, warp / 4 * 4 + 3, simt::state.n_threads);
    simt::Wgmma op{d, n, bf16, a != nullptr, transpose_b != 0, accumulate != 0, a, a_desc, b_desc, -1, line};
    op.issued = simt::operand_hash(op, thread);   // what the hardware may read from this moment on
    simt::state.fibers[thread].wgmma.push_back(op);
}

inline void simt_wgmma_commit() {
    simt::Fiber& me = simt::state.fibers[simt::state.current];
    bool any = false;
    for (simt::Wgmma& op : me.wgmma)
        if (op.group < 0) op.group = me.wgmma_groups, any = true;
    if (any) ++me.wgmma_groups;
}

// Retire the oldest committed groups until at most `pending` remain in flight (the whole warp waits).
inline void simt_wgmma_wait(int pending, int line = __builtin_LINE()) {
    simt::whole_warp("wgmma.wait_group", line);
    simt::Post mine;
    mine.thread = simt::state.current;
    mine.keep = pending;
    simt::collective(simt::OP_WGMMA_WAIT, 0xffffffffu, mine, "wgmma.wait_group", line);
}
