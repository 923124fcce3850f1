// simt_wgmma.h — Hopper's wgmma.mma_async for kernels/common/wgmma.cuh: the shared-memory
// descriptor decoded by the PTX ISA's rules for the 128-byte swizzle, the accumulator and A-register
// fragments of a warpgroup, and the instruction's asynchrony. Included by simt.h only.
//
// What it models, and what it catches:
//   - An instruction is recorded when issued (with the A registers of that moment, gathered from
//     the warp's lanes) and computed when wgmma_wait retires its group, from shared memory as it is
//     then: accumulators read before the wait hold their old values, and a tile overwritten before
//     the wait changes the product, as on the GPU.
//   - Every element it reads goes through the shared-memory checks (bounds, races) as this thread's
//     read at the wait.
//   - The warp must be whole and inside a whole warpgroup of the block. A thread that ends with an
//     instruction it never waited for is an error.
//   - Each thread computes its own accumulators: a warp's 16 rows depend only on its own A rows and
//     B, so the 4 warps of a group need not meet. The group's rule that all 4 issue the same
//     instruction is not checked.
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

// The element (mn, k) of the operand a descriptor names: mn a row of A or a column of B, k within
// the instruction's 16; MN-major: 64 consecutive mn per 128-byte row.
__attribute__((no_sanitize_address)) inline float operand_element(const Wgmma& op, uint64_t desc, int mn, int k,
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
        return 0.0f;
    }
    const unsigned char* p = simt_dynamic_shared + address;
    access(reinterpret_cast<uintptr_t>(p), 2, false, false, 0);
    unsigned short h;
    std::memcpy(&h, p, 2);
    return op.bf16 ? simt_bf16_to_float(h) : simt_f16_to_float(h);
}

// D = A B (+ D) for the accumulators of the thread that issued `op`; sums in double, rounded once.
// The thread's N / 4 columns of B are read once (each serves its rows g and g + 8).
inline void compute_wgmma(const Wgmma& op, int thread) {
    const int lane = thread & 31, warp_row = 16 * ((thread >> 5) & 3), g = lane >> 2, t = lane & 3;
    float a[2][16];
    if (op.a_in_registers) {
        std::memcpy(a, op.a, sizeof a);
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

}  // namespace simt

// ---- what kernels/common/wgmma.cuh calls in place of inline PTX ------------------------------------
inline void simt_wgmma(bool bf16, float* d, int n, const u32* a, uint64_t a_desc, uint64_t b_desc, int transpose_b,
                       int accumulate, int line = __builtin_LINE()) {
    const int thread = simt::state.current, warp = simt::warp_of(thread);
    simt::whole_warp("wgmma", line);
    if ((warp / 4 + 1) * 128 > simt::state.n_threads)
        simt::fail("line %d: wgmma by warp %d, whose warpgroup (warps %d-%d) is not whole in a block of %d threads",
                   line, warp, warp / 4 * 4, warp / 4 * 4 + 3, simt::state.n_threads);
    simt::Wgmma op{d, n, bf16, a != nullptr, transpose_b != 0, accumulate != 0, {}, a_desc, b_desc, -1, line};
    if (a) {   // the warp's A fragments: rows g (registers 0, 2) and g + 8 (1, 3) of 4 lanes each
        simt::Post first, second;
        const uint64_t* low = simt::exchange(0xffffffffu, a[0] | (uint64_t(a[1]) << 32), first, "wgmma", line);
        const uint64_t* high = simt::exchange(0xffffffffu, a[2] | (uint64_t(a[3]) << 32), second, "wgmma", line);
        const int g = (thread & 31) >> 2;
        for (int t = 0; t < 4; ++t)
            for (int h = 0; h < 2; ++h)
                for (int half = 0; half < 2; ++half) {
                    const u32 lo_reg = static_cast<u32>(low[4 * g + t] >> (32 * h));
                    const u32 hi_reg = static_cast<u32>(high[4 * g + t] >> (32 * h));
                    op.a[h][2 * t + half] = simt::element(bf16 ? simt::OP_MMA_BF16 : simt::OP_MMA_F16, lo_reg, half);
                    op.a[h][2 * t + 8 + half] = simt::element(bf16 ? simt::OP_MMA_BF16 : simt::OP_MMA_F16, hi_reg, half);
                }
    }
    simt::state.fibers[thread].wgmma.push_back(op);
}

inline void simt_wgmma_commit() {
    simt::Fiber& me = simt::state.fibers[simt::state.current];
    bool any = false;
    for (simt::Wgmma& op : me.wgmma)
        if (op.group < 0) op.group = me.wgmma_groups, any = true;
    if (any) ++me.wgmma_groups;
}

// Retire the oldest committed groups until at most `pending` remain in flight.
inline void simt_wgmma_wait(int pending) {
    simt::Fiber& me = simt::state.fibers[simt::state.current];
    const int newest_kept = me.wgmma_groups - pending;   // groups below this one complete now
    std::vector<simt::Wgmma> still;
    for (const simt::Wgmma& op : me.wgmma) {
        if (op.group >= 0 && op.group < newest_kept)
            simt::compute_wgmma(op, simt::state.current);
        else
            still.push_back(op);
    }
    me.wgmma.swap(still);
    if (simt::state.random) simt::switch_out(simt::RUNNABLE, "wgmma.wait_group", 0);   // let another thread in
}
