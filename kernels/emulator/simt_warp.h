// simt_warp.h — the warp-level instructions of simt.h: shuffles, votes and __syncwarp by CUDA's
// rules; mma.sync m16n8k16 (bf16, fp16), ldmatrix.x4 (.trans) and cp.async for the tensor-core
// kernels (kernels/common/mma.cuh calls the simt_* functions). Included by simt.h only.
#pragma once

namespace simt {

// Wait in the warp collective `what` (at `line`) with the lanes of `mask`, until every one of them
// has posted its part; complete() has then filled in this lane's results.
SIMT_UNCHECKED inline void collective(int op, unsigned mask, Post& mine, const char* what, int line) {
    const int lane = lane_of(state.current);
    if (!(mask >> lane & 1u))
        fail("line %d: lane %d of warp %d calls %s with mask 0x%08x, which does not name the lane itself", line, lane,
             warp_of(state.current), what, mask);
    Fiber& f = state.fibers[state.current];
    f.post = &mine;
    f.op = op;
    switch_out(COLLECTIVE, what, line, mask);
}

// ---- the fragments of mma.m16n8k16 with floating-point types (PTX ISA), element by element ------
// A (16 x 16): element i (register i / 2, half i % 2) of a lane; B (16 x 8, k x n): element i;
// C and D (16 x 8, fp32): register i. g = lane / 4, t = lane % 4.
inline void a_position(int lane, int i, int& row, int& col) {
    const int g = lane >> 2, t = lane & 3;
    row = (i < 2 || (4 <= i && i < 6)) ? g : g + 8;
    col = 2 * t + (i & 1) + (i < 4 ? 0 : 8);
}
inline void b_position(int lane, int i, int& row, int& col) {
    const int g = lane >> 2, t = lane & 3;
    row = 2 * t + (i & 1) + (i < 2 ? 0 : 8);
    col = g;
}
inline void c_position(int lane, int i, int& row, int& col) {
    const int g = lane >> 2, t = lane & 3;
    row = i < 2 ? g : g + 8;
    col = 2 * t + (i & 1);
}

// Where element `index` of `operand` (0 A, 1 B, 2 C) of `lane` sits in its matrix; 0, or 1 for an
// operand or index that does not exist (what simt_fragment_map exports for the tests).
inline int fragment_position(int operand, int lane, int index, int& row, int& col) {
    const int count[3] = {8, 4, 4};
    if (operand < 0 || operand > 2 || lane < 0 || lane > 31 || index < 0 || index >= count[operand]) return 1;
    (operand == 0 ? a_position : operand == 1 ? b_position : c_position)(lane, index, row, col);
    return 0;
}

}  // namespace simt

// ---- 16-bit conversions (round to nearest even, as cvt.rn) -------------------------------------
inline float simt_bf16_to_float(unsigned short h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }
inline unsigned short simt_float_to_bf16(float f) {
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);   // NaN stays NaN
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

inline float element(int op, u32 reg, int half) {
    const unsigned short h = static_cast<unsigned short>(half ? reg >> 16 : reg & 0xffffu);
    return op == OP_MMA_BF16 ? simt_bf16_to_float(h) : simt_f16_to_float(h);
}

// D = A B + C for the warp, from every lane's fragments; products and sums in double, rounded to
// fp32 once (the tensor cores' order of summation is not specified).
SIMT_UNCHECKED inline void compute_mma(int op, Post* const* lanes) {
    double A[16][16], B[16][8], C[16][8];
    int row, col;
    for (int lane = 0; lane < 32; ++lane) {
        for (int i = 0; i < 8; ++i) a_position(lane, i, row, col), A[row][col] = element(op, lanes[lane]->a[i / 2], i % 2);
        for (int i = 0; i < 4; ++i) b_position(lane, i, row, col), B[row][col] = element(op, lanes[lane]->b[i / 2], i % 2);
        for (int i = 0; i < 4; ++i) c_position(lane, i, row, col), C[row][col] = lanes[lane]->c[i];
    }
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
            c_position(lane, i, row, col);
            double sum = C[row][col];
            for (int kk = 0; kk < 16; ++kk) sum += A[row][kk] * B[kk][col];
            lanes[lane]->c[i] = static_cast<float>(sum);
        }
}

// ldmatrix.m8n8.x4(.trans).b16: lanes 8i .. 8i+7 give the rows of matrix i; register i of a lane
// gets row g, columns 2t and 2t + 1 of matrix i (with .trans, of its transpose).
SIMT_UNCHECKED inline void compute_ldmatrix(int op, Post* const* lanes) {
    unsigned short M[4][8][8];
    for (int lane = 0; lane < 32; ++lane) std::memcpy(M[lane / 8][lane % 8], lanes[lane]->address, 16);
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; ++i) {
            const bool trans = op == OP_LDMATRIX_TRANS;
            const unsigned short lo = trans ? M[i][2 * t][g] : M[i][g][2 * t];
            const unsigned short hi = trans ? M[i][2 * t + 1][g] : M[i][g][2 * t + 1];
            lanes[lane]->r[i] = lo | (u32(hi) << 16);
        }
    }
}

inline void retire_wgmma(Post* const* posts);   // simt_wgmma.h

SIMT_UNCHECKED inline void complete(int op, Post* const* posts) {
    if (op == OP_MMA_BF16 || op == OP_MMA_F16) return compute_mma(op, posts);
    if (op == OP_WGMMA_WAIT) return retire_wgmma(posts);
    if (op == OP_LDMATRIX || op == OP_LDMATRIX_TRANS) return compute_ldmatrix(op, posts);
    uint64_t values[32] = {};   // OP_VALUES: every lane of the mask gets every lane's value
    for (int lane = 0; lane < 32; ++lane)
        if (posts[lane]) values[lane] = posts[lane]->value;
    for (int lane = 0; lane < 32; ++lane)
        if (posts[lane]) std::memcpy(posts[lane]->values, values, sizeof values);
}

// The 32 values the lanes of `mask` posted (0 for lanes outside it).
inline const uint64_t* exchange(unsigned mask, uint64_t mine, Post& post, const char* what, int line) {
    post.value = mine;
    collective(OP_VALUES, mask, post, what, line);
    return post.values;
}

template <class T>
inline T shuffle(unsigned mask, T var, int source, int width, const char* what, int line) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    const int lane = lane_of(state.current);
    if (width < 1 || width > 32 || (width & (width - 1))) fail("line %d: a shuffle width must be a power of two from 1 to 32", line);
    if (!(mask >> source & 1u))
        fail("line %d: lane %d reads lane %d in %s, but the mask 0x%08x leaves lane %d out (undefined on a GPU)", line,
             lane, source, what, mask, source);
    uint64_t bits = 0;
    std::memcpy(&bits, &var, sizeof(T));
    Post post;
    const uint64_t* values = exchange(mask, bits, post, what, line);
    T result;
    std::memcpy(&result, &values[source], sizeof(T));
    return result;
}

// A whole warp of 32 threads, every lane in the mask: what mma.sync and ldmatrix (.aligned) need.
inline void whole_warp(const char* what, int line) {
    const int warp = warp_of(state.current);
    if (lanes_in_warp(warp) != 32)
        fail("line %d: %s needs a whole warp, but warp %d of this block of %d threads has %d lanes", line, what, warp,
             state.n_threads, lanes_in_warp(warp));
}

}  // namespace simt

// ---- what the kernels call: shuffles, votes, warp synchronisation ----------------------------------
inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
    simt::Post post;
    simt::exchange(mask, 0, post, "__syncwarp", line);
}
inline unsigned __activemask() {
    const int warp = simt::warp_of(simt::state.current);
    unsigned bits = 0;
    for (int lane = 0; lane < simt::lanes_in_warp(warp); ++lane)
        if (simt::state.wait[warp * 32 + lane] != simt::DONE) bits |= 1u << lane;
    return bits;
}

template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, int line = __builtin_LINE()) {
    const int lane = simt::lane_of(simt::state.current);
    int source = lane ^ lane_mask;
    if (source / width > lane / width) source = lane;   // a later group of `width` lanes: its own value
    return simt::shuffle(mask, var, source & 31, width, "__shfl_xor_sync", line);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, int line = __builtin_LINE()) {
    const int lane = simt::lane_of(simt::state.current);
    const int source = (lane % width) + (int)delta < width ? lane + (int)delta : lane;
    return simt::shuffle(mask, var, source, width, "__shfl_down_sync", line);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, int line = __builtin_LINE()) {
    const int lane = simt::lane_of(simt::state.current);
    const int source = (lane % width) >= (int)delta ? lane - (int)delta : lane;
    return simt::shuffle(mask, var, source, width, "__shfl_up_sync", line);
}
template <class T>
inline T __shfl_sync(unsigned mask, T var, int source_lane, int width = 32, int line = __builtin_LINE()) {
    const int lane = simt::lane_of(simt::state.current);
    const int source = (lane / width) * width + ((source_lane % width) + width) % width;
    return simt::shuffle(mask, var, source, width, "__shfl_sync", line);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
    simt::Post post;
    const uint64_t* values = simt::exchange(mask, predicate != 0, post, "__ballot_sync", line);
    unsigned bits = 0;
    for (int lane = 0; lane < 32; ++lane)
        if ((mask >> lane & 1u) && values[lane]) bits |= 1u << lane;
    return bits;
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned value, int line = __builtin_LINE()) {
    simt::Post post;
    const uint64_t* values = simt::exchange(mask, value, post, "__reduce_add_sync", line);
    unsigned sum = 0;   // wraps modulo 2^32, as the instruction does
    for (int lane = 0; lane < 32; ++lane)
        if (mask >> lane & 1u) sum += static_cast<unsigned>(values[lane]);
    return sum;
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned value, int line = __builtin_LINE()) {
    simt::Post post;
    const uint64_t* values = simt::exchange(mask, value, post, "__reduce_max_sync", line);
    unsigned most = 0;
    for (int lane = 0; lane < 32; ++lane)
        if ((mask >> lane & 1u) && static_cast<unsigned>(values[lane]) > most) most = static_cast<unsigned>(values[lane]);
    return most;
}
inline int __any_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
    return __ballot_sync(mask, predicate, line) != 0;
}
inline int __all_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
    return __ballot_sync(mask, predicate, line) == (mask & simt::lane_bits(simt::warp_of(simt::state.current)));
}

// ---- what kernels/common/mma.cuh calls in place of inline PTX ------------------------------------
inline void simt_mma_m16n8k16(bool bf16, float c[4], const u32 a[4], const u32 b[2], int line = __builtin_LINE()) {
    simt::whole_warp("mma.sync", line);
    simt::Post mine;
    std::memcpy(mine.a, a, sizeof mine.a);
    std::memcpy(mine.b, b, sizeof mine.b);
    std::memcpy(mine.c, c, sizeof mine.c);
    simt::collective(bf16 ? simt::OP_MMA_BF16 : simt::OP_MMA_F16, 0xffffffffu, mine, "mma.sync", line);
    std::memcpy(c, mine.c, sizeof mine.c);
}

__attribute__((noinline, no_sanitize_address)) inline void simt_ldmatrix_x4(u32 r[4], const void* address, bool trans,
                                                                           int line = __builtin_LINE()) {
    const char* what = trans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
    simt::whole_warp(what, line);
    if (!simt::in_shared(address, 16))
        simt::fail("line %d: %s: lane %d's row address is outside the block's shared memory", line, what,
                   simt::lane_of(simt::state.current));
    if (reinterpret_cast<uintptr_t>(address) % 16)
        simt::fail("line %d: %s: lane %d's row address is not 16-byte aligned", line, what,
                   simt::lane_of(simt::state.current));
    simt::access(reinterpret_cast<uintptr_t>(address), 16, false, false, SIMT_PC);
    simt::Post mine;
    mine.address = address;
    simt::collective(trans ? simt::OP_LDMATRIX_TRANS : simt::OP_LDMATRIX, 0xffffffffu, mine, what, line);
    std::memcpy(r, mine.r, sizeof mine.r);
}

// 16 bytes from global memory (read now; nothing read and zeros when src_bytes is 0) that land in
// shared memory when this thread waits. The hardware may write them at any moment from the issue to
// the wait, so the destination counts as written at the issue too: another thread's access to it
// before the next barrier is a race (a copy issued into a tile still being read).
__attribute__((noinline, no_sanitize_address)) inline void simt_cp_async_16(void* shared_dst, const void* global_src,
                                                                           int src_bytes, int line = __builtin_LINE()) {
    if (!simt::in_shared(shared_dst, 16))
        simt::fail("line %d: cp.async destination outside the block's shared memory", line);
    if (reinterpret_cast<uintptr_t>(shared_dst) % 16 || reinterpret_cast<uintptr_t>(global_src) % 16)
        simt::fail("line %d: cp.async addresses not 16-byte aligned", line);
    simt::access(reinterpret_cast<uintptr_t>(shared_dst), 16, true, false, SIMT_PC);
    simt::Copy copy{shared_dst, {}, SIMT_PC};
    if (src_bytes) {
        simt::access(reinterpret_cast<uintptr_t>(global_src), 16, false, false, SIMT_PC);
        if (!simt::state.error[0]) std::memcpy(copy.bytes, global_src, 16);
    }
    simt::state.fibers[simt::state.current].pending.push_back(copy);
}

__attribute__((noinline, no_sanitize_address)) inline void simt_cp_async_wait_all(int line = __builtin_LINE()) {
    simt::Fiber& me = simt::state.fibers[simt::state.current];
    for (const simt::Copy& copy : me.pending) {   // the shared writes, as at the cp.async that issued them
        simt::access(reinterpret_cast<uintptr_t>(copy.dst), 16, true, false, copy.pc);
        std::memcpy(copy.dst, copy.bytes, 16);
    }
    me.pending.clear();
    if (simt::state.random) simt::switch_out(simt::RUNNABLE, "cp.async.wait_all", line);   // let another thread in
}
