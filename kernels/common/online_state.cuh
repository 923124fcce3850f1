// online_state.cuh — the (m, l) state of online softmax, its combine, and the
// warp / block reductions built on it. Included by every online kernel; never pasted.
//
// A state (m, l) stands for the quantity l * e^m: m is the running maximum and
// l = sum_j e^(x_j - m) is the sum re-based on that maximum. The empty state
// (-inf, 0) is the identity of combine *only* with the guard below.
//
// Guard: when the new maximum is still -inf (every element seen so far is -inf,
// or the thread saw no element at all), e^(m - m_new) would be e^(-inf - -inf)
// = e^NaN. Re-basing on 0 instead of -inf keeps both exponentials at e^-inf = 0,
// and still lets a NaN input poison l (a NaN row stays NaN, as in torch).
// Build with -DONLINE_SOFTMAX_GUARDS=0 to see what the guard prevents.
#pragma once
#include "numeric.cuh"

#ifndef ONLINE_SOFTMAX_GUARDS
#define ONLINE_SOFTMAX_GUARDS 1
#endif

struct OnlineState {
    float m;  // running maximum
    float l;  // sum of e^(x - m) over the elements seen
};

__device__ __forceinline__ OnlineState online_identity() { return {neg_inf(), 0.0f}; }

// The maximum that exponents are re-based on.
__device__ __forceinline__ float online_base(float m_new) {
#if ONLINE_SOFTMAX_GUARDS
    return m_new == neg_inf() ? 0.0f : m_new;
#else
    return m_new;
#endif
}

// Fold one element into a state: the recurrence of Milakov & Gimelshein (2018).
__device__ __forceinline__ void online_push(OnlineState& s, float x) {
    const float m_new = fmaxf(s.m, x);
    const float base = online_base(m_new);
    s.l = s.l * expf(s.m - base) + expf(x - base);
    s.m = m_new;
}

// combine((m1, l1), (m2, l2)) = (M, l1 e^(m1 - M) + l2 e^(m2 - M)), M = max(m1, m2).
__device__ __forceinline__ OnlineState online_combine(OnlineState a, OnlineState b) {
    const float m_new = fmaxf(a.m, b.m);
    const float base = online_base(m_new);
    return {m_new, a.l * expf(a.m - base) + b.l * expf(b.m - base)};
}

// Butterfly over the lanes: afterwards lanes 0 .. width-1 hold the combined state
// of lanes 0 .. width-1 (width = 32: the whole warp). Only offsets below `width`
// are taken; `width` is the same in every lane, so all 32 lanes still execute each
// shuffle, as the full mask 0xffffffff promises. Pairs of lanes combine in opposite
// orders, which is why combine must commute.
__device__ __forceinline__ OnlineState online_warp_reduce(OnlineState s, int width = 32) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        if (offset >= width) continue;
        OnlineState other;
        other.m = __shfl_xor_sync(0xffffffffu, s.m, offset);
        other.l = __shfl_xor_sync(0xffffffffu, s.l, offset);
        s = online_combine(s, other);
    }
    return s;
}

// Block-wide combine; every thread gets the row's state. `scratch` holds 32 states.
// Warp 0 reads one state per warp (8 for a 256-thread block); lanes past the last
// warp hold the identity (-inf, 0), and the butterfly runs over offsets below the
// warp count (4, 2, 1 for 8 warps).
__device__ __forceinline__ OnlineState online_block_reduce(OnlineState s, OnlineState* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n_warps = (blockDim.x + 31) >> 5;
    s = online_warp_reduce(s);
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < n_warps ? scratch[lane] : online_identity();
        s = online_warp_reduce(s, n_warps);
        if (lane == 0) scratch[0] = s;
    }
    __syncthreads();
    const OnlineState row = scratch[0];
    __syncthreads();  // scratch may be reused right after return
    return row;
}
