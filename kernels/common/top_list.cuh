// top_list.cuh — the top-k pieces of the fused softmax + top-k kernels: the order of candidates,
// a sorted list of the K best kept in registers, and the warp-wide best candidate.
//
// Order: larger logit first; equal logits by the lower column; NaN ranks above every number (as
// torch.topk ranks it). A list is K (value, column) pairs, best first; an empty slot holds
// (-inf, column -1) and ranks last. K is a compile-time constant so the list stays in registers
// (every loop over it unrolls; no stack).
#pragma once
#include "numeric.cuh"

struct Candidate { float value; long long column; };   // column -1: none

// Is (a, ia) ahead of (b, ib) in the order: NaN first, then larger, then the lower column?
__device__ __forceinline__ bool ahead(float a, long long ia, float b, long long ib) {
    const bool a_nan = a != a, b_nan = b != b;
    if (a_nan != b_nan) return a_nan;
    if (!a_nan && a != b) return a > b;
    return ia < ib;
}

template <int K>
struct TopList {   // sorted, best first; empty slots hold (-inf, column -1) and rank last
    float value[K];
    long long column[K];
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int i = 0; i < K; ++i) { value[i] = neg_inf(); column[i] = -1; }
    }
    __device__ __forceinline__ bool holds(int i) const { return column[i] >= 0; }
    // Insert (v, c) when it is ahead of the last entry or a slot is free: a chain of
    // compare-and-swap steps down the list (no early exit, so it unrolls and stays in registers).
    __device__ __forceinline__ void push(float v, long long c) {
        if (holds(K - 1) && !ahead(v, c, value[K - 1], column[K - 1])) return;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            if (c >= 0 && (!holds(i) || ahead(v, c, value[i], column[i]))) {
                const float tv = value[i];
                const long long tc = column[i];
                value[i] = v; column[i] = c;
                v = tv; c = tc;
            }
        }
    }
    __device__ __forceinline__ void pop() {
#pragma unroll
        for (int i = 0; i < K - 1; ++i) { value[i] = value[i + 1]; column[i] = column[i + 1]; }
        value[K - 1] = neg_inf(); column[K - 1] = -1;
    }
};

// The candidate ahead of all others in the warp (a butterfly: every lane ends with it).
__device__ __forceinline__ Candidate warp_best(Candidate c) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        Candidate o{__shfl_xor_sync(0xffffffffu, c.value, offset), __shfl_xor_sync(0xffffffffu, c.column, offset)};
        if (o.column >= 0 && (c.column < 0 || ahead(o.value, o.column, c.value, c.column))) c = o;
    }
    return c;
}
