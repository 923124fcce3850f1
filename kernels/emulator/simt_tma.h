// simt_tma.h — mbarriers and TMA tile copies for kernels/common/tma.cuh. Included by simt.h only.
//
// What it models, and what it catches:
//   - An mbarrier (8 bytes of shared memory) has a phase, the arrivals it expects, those that came
//     and the bytes announced but not yet landed. A phase completes when all arrivals have come and
//     no byte is owed; waiting on a parity returns once that phase has completed.
//   - A TMA copy reads its source when issued (zeros outside the tensor, bounds checked) and writes
//     shared memory, in the 128-byte swizzled layout, only when some thread waits on its barrier:
//     the latest the hardware may deliver. A thread that reads the tile without waiting reads
//     whatever was there before.
//   - A wait that cannot complete yields to the other threads; when every thread still running has
//     waited many times with no arrival, copy or completion in between, the launch stops with a
//     deadlock naming the barrier.
//   - Using a barrier before mbarrier_init, or one outside shared memory, is an error.
// The copies' writes are not seen by the race checks (they are ordered by the barrier, which the
// race checks know nothing of); what the tensor cores read is.
#pragma once

#include <map>

namespace simt {

struct TileCopy { unsigned char* dst; unsigned char bytes[16]; };

struct Mbarrier {
    u32 expected = 0, arrived = 0, phase = 0;
    long long owed = 0;                 // bytes announced and not yet landed
    std::vector<TileCopy> pending;      // copies on their way
};

struct AsyncState {
    std::map<uintptr_t, Mbarrier> barriers;
    long long idle_waits = 0;           // failed waits since the last progress
};
inline AsyncState async_state;

inline void reset_async_state() {
    async_state.barriers.clear();
    async_state.idle_waits = 0;
}

inline Mbarrier& barrier_at(const void* bar, const char* what, int line) {
    static Mbarrier none;
    if (!in_shared(bar, 8) || reinterpret_cast<uintptr_t>(bar) % 8) {
        fail("line %d: %s on an address that is not an 8-byte aligned word of shared memory", line, what);
        return none;
    }
    auto found = async_state.barriers.find(reinterpret_cast<uintptr_t>(bar));
    if (found == async_state.barriers.end()) {
        fail("line %d: %s on a barrier that mbarrier_init has not set up", line, what);
        return none;
    }
    return found->second;
}

inline void try_complete(Mbarrier& b) {
    if (b.arrived >= b.expected && b.owed == 0) {
        b.phase ^= 1u;
        b.arrived = 0;
        async_state.idle_waits = 0;
    }
}

__attribute__((no_sanitize_address)) inline void deliver(Mbarrier& b) {
    for (const TileCopy& copy : b.pending) std::memcpy(copy.dst, copy.bytes, 16);
    b.owed -= 16LL * static_cast<long long>(b.pending.size());
    if (!b.pending.empty()) async_state.idle_waits = 0;
    b.pending.clear();
}

}  // namespace simt

inline void simt_mbarrier_init(unsigned long long* bar, u32 count, int line = __builtin_LINE()) {
    if (!simt::in_shared(bar, 8) || reinterpret_cast<uintptr_t>(bar) % 8)
        simt::fail("line %d: mbarrier_init on an address that is not an 8-byte aligned word of shared memory", line);
    simt::Mbarrier b;
    b.expected = count;
    simt::async_state.barriers[reinterpret_cast<uintptr_t>(bar)] = b;
}

inline void simt_mbarrier_arrive(unsigned long long* bar, u32 bytes, int line = __builtin_LINE()) {
    simt::Mbarrier& b = simt::barrier_at(bar, "mbarrier_arrive", line);
    b.owed += bytes;
    ++b.arrived;
    simt::async_state.idle_waits = 0;
    simt::try_complete(b);
}

// True once the phase of `parity` has completed; else this thread yields and the caller tries again.
inline bool simt_mbarrier_try_wait(unsigned long long* bar, u32 parity, int line = __builtin_LINE()) {
    constexpr long long DEADLOCK_WAITS = 2000000;
    simt::Mbarrier& b = simt::barrier_at(bar, "mbarrier_wait", line);
    simt::deliver(b);
    simt::try_complete(b);
    if ((b.phase & 1u) != (parity & 1u)) return true;
    if (++simt::async_state.idle_waits > DEADLOCK_WAITS) {
        simt::fail("line %d: deadlock: every thread waits on mbarriers and none progresses (this barrier: phase %u, "
                   "%u of %u arrivals, %lld bytes owed)", line, b.phase, b.arrived, b.expected, b.owed);
        return true;
    }
    simt::switch_out(simt::YIELD, "mbarrier_wait", line);
    return false;
}

// The box of 64 columns by `box_rows` rows of head `h`, from column c0 and row r0: its 16-byte chunks
// read now (zeros outside the tensor) and owed to `bar` until a wait delivers them.
__attribute__((no_sanitize_address)) inline void simt_tma_load_3d(void* dst, const unsigned long long* dims,
                                                                  const unsigned long long* strides,
                                                                  unsigned long long box_rows,
                                                                  unsigned long long element_bytes,
                                                                  unsigned long long swizzle_bytes, const void* tensor,
                                                                  int c0, int r0, int h, unsigned long long* bar,
                                                                  int line = __builtin_LINE()) {
    simt::Mbarrier& b = simt::barrier_at(bar, "tma_load_3d", line);
    const u32 base = simt_shared_address(dst);
    if (base % 1024 || swizzle_bytes != 128 || element_bytes != 2)
        simt::fail("line %d: tma_load_3d: this emulator copies 16-bit boxes with the 128-byte swizzle into 1024-byte "
                   "aligned shared memory", line);
    if (base + box_rows * 128 > simt::state.shared_bytes)
        simt::fail("line %d: tma_load_3d writes past the dynamic shared memory", line);
    if (simt::state.error[0]) return;
    const unsigned char* source = static_cast<const unsigned char*>(tensor);
    for (unsigned long long r = 0; r < box_rows; ++r)
        for (int c = 0; c < 8; ++c) {
            const u32 linear = base + static_cast<u32>(r) * 128 + 16 * c;
            simt::TileCopy copy{simt_dynamic_shared + (linear ^ (((linear >> 7) & 7u) << 4)), {}};
            const long long row = r0 + static_cast<long long>(r), col = c0 + 8 * c;
            if (row >= 0 && row < static_cast<long long>(dims[1]) && col >= 0 && col < static_cast<long long>(dims[0]) &&
                h >= 0 && h < static_cast<long long>(dims[2])) {
                const unsigned char* from = source + h * strides[1] + row * strides[0] + col * 2;
                simt::access(reinterpret_cast<uintptr_t>(from), 16, false, false, 0);
                if (simt::state.error[0]) return;
                std::memcpy(copy.bytes, from, 16);
            }
            b.pending.push_back(copy);
        }
}
