// split_states.cuh — a row cut into C chunks, one block per chunk: each block's online state of its
// chunk, and the merge of a row's C states by one block.
//
// split_chunk_state: block b of the grid takes chunk b % C of row b / C and reduces it exactly as
// logsumexp_01 reduces a row (row_online_state: a scalar head up to the chunk's first 16-byte
// boundary, 16-byte vectors, a scalar tail; the block is one lane group). split_states, the first
// launch's body, writes that state to partials[b]. split_row_state: thread t of a block of at least
// C threads takes state t of the row (the identity past C) and the block's reduction combines them;
// every thread gets the row's (m, l). The second launch is a programmatic dependent launch
// (launch_order.cuh): it calls wait_for_prerequisite_grid before reading the partials.
#pragma once
#include "launch_order.cuh"
#include "online_rows.cuh"

// This block's chunk: row b / C, elements [start, start + length) of it.
struct ChunkSpan {
    long long row, start;
    int length;
};

__device__ __forceinline__ ChunkSpan chunk_span(int n_cols, int n_chunks, int chunk_elems) {
    const long long row = blockIdx.x / n_chunks;
    const long long start = static_cast<long long>(blockIdx.x % n_chunks) * chunk_elems;
    return {row, start, static_cast<int>(min(static_cast<long long>(chunk_elems), n_cols - start))};
}

template <class Row>
__device__ __forceinline__ OnlineState split_chunk_state(const typename Row::Elem* __restrict__ x, int n_cols,
                                                         long long x_row_stride, int n_chunks, int chunk_elems,
                                                         OnlineState* scratch) {
    const ChunkSpan c = chunk_span(n_cols, n_chunks, chunk_elems);
    const OnlineState s = row_online_state<Row>(x + c.row * x_row_stride + c.start, c.length,
                                                static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
    return online_group_reduce(s, static_cast<int>(blockDim.x), scratch);
}

__device__ __forceinline__ OnlineState split_row_state(const OnlineState* __restrict__ partials, long long row,
                                                       int n_chunks, OnlineState* scratch) {
    const int t = static_cast<int>(threadIdx.x);
    const OnlineState mine = t < n_chunks ? partials[row * n_chunks + t] : online_identity();
    return online_group_reduce(mine, static_cast<int>(blockDim.x), scratch);
}

template <class Row>
__device__ __forceinline__ void split_states(const typename Row::Elem* __restrict__ x,
                                             OnlineState* __restrict__ partials, int n_cols,
                                             long long x_row_stride, int n_chunks, int chunk_elems) {
    __shared__ OnlineState scratch[32];
    dependents_may_launch();  // the second launch's blocks may take free SM slots now (they wait there)
    const OnlineState s = split_chunk_state<Row>(x, n_cols, x_row_stride, n_chunks, chunk_elems, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}
