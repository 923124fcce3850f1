// grid_states.cuh — blocks of one grid exchanging (m, l) states through global memory.
//
// A cluster (cluster.cuh) gives at most 16 co-scheduled blocks and a hardware barrier. Past
// that, blocks can still meet in global memory if every one of them is resident at once —
// which a *cooperative* launch guarantees (it fails with an error instead of launching a grid
// that cannot all be resident, so a waiting block never waits on a block that is not running).
//
// The flag is the data: each state has its own 8-byte slot, filled with the bytes 0xff before
// the launch. Those bits read as m = NaN, and a published m is never NaN (fmaxf drops NaN), so
// "m is not that NaN" means "published". A slot is written once with one 64-bit store and
// polled with 64-bit loads — both single-copy atomic, so a reader sees the empty pattern or the
// whole state, never half of it. Nothing else is guarded by the slot, so relaxed (.gpu scope)
// accesses suffice: no fence, no atomic counter, no L1 invalidation on the critical path
// (the first version, with __threadfence + atomicAdd + an acquire poll, is measured in the suite
// softmax-fast-cooperative-split-stores; the change did not make softmax_13 win, chapter 06).
#pragma once
#include "online_state.cuh"

#define EMPTY_STATE_BITS 0xffffffffu   // the low word (m) of an unpublished slot

__device__ __forceinline__ void publish_state(OnlineState* slot, OnlineState s) {
    const unsigned long long bits =
        static_cast<unsigned long long>(__float_as_uint(s.l)) << 32 | __float_as_uint(s.m);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(__cvta_generic_to_global(slot)), "l"(bits) : "memory");
}

// Poll a slot until it holds a state (backing off with __nanosleep), then return it.
__device__ __forceinline__ OnlineState wait_for_state(const OnlineState* slot) {
    unsigned long long bits;
    for (;;) {
        asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(bits) : "l"(__cvta_generic_to_global(slot)) : "memory");
        if (static_cast<unsigned int>(bits) != EMPTY_STATE_BITS) break;
        __nanosleep(32);
    }
    return {__uint_as_float(static_cast<unsigned int>(bits)), __uint_as_float(static_cast<unsigned int>(bits >> 32))};
}
