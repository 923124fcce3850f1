// log_softmax_chunk.cuh — the output of a log-softmax over a chunk that row_chunk.cuh's chunk_state
// cached in shared memory, the row's (m, l) known: y = (x - m) - log l, m subtracted first so that
// x - m is exact near the maximum, fp32 math, one rounding per output. log_chunk_output is
// chunk_output's loop (cached vectors from shared memory, the rest from global memory);
// log_edge_output writes the < V head and tail elements around the vectors (row_parts, edge_push),
// the head in the row's first chunk, the tail in its last.
#pragma once
#include "row_chunk.cuh"

// y = (x - m) - log l over a chunk's vectors, cached ones from shared memory (chunk_output's loop).
template <typename T, int V>
__device__ __forceinline__ void log_chunk_output(const T* __restrict__ cx, T* __restrict__ cy, int chunk_elems,
                                                 int cache_elems, const typename Io<T, V>::raw_t* cache, float m,
                                                 float log_l) {
    const int n_vec = chunk_elems / V;
#pragma unroll 4
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
        const typename Io<T, V>::raw_t raw = i * V < cache_elems ? cache[i] : load_x<T, V>(cx + i * V);
        float v[V];
        Io<T, V>::unpack(raw, v);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = (v[j] - m) - log_l;
        Io<T, V>::store_raw(cy + i * V, Io<T, V>::pack(v));
    }
}

// The head and tail elements (V > 1 builds), by the threads that folded them in (edge_push).
template <typename T, int V>
__device__ __forceinline__ void log_edge_output(const T* __restrict__ row_x, T* __restrict__ row_y, RowParts parts,
                                                bool first_chunk, bool last_chunk, float m, float log_l) {
    if constexpr (V > 1) {
        const int t = static_cast<int>(threadIdx.x);
        if (first_chunk && t < parts.head) Elem<T>::store(row_y + t, (Elem<T>::load(row_x + t) - m) - log_l);
        const int k = parts.head + parts.vec_elems + t;
        if (last_chunk && t < parts.tail) Elem<T>::store(row_y + k, (Elem<T>::load(row_x + k) - m) - log_l);
    }
}
