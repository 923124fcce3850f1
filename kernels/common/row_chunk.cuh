// row_chunk.cuh — a block's pass over one contiguous chunk of a row, cached in shared memory.
//
// chunk_state: the block's threads stride over the chunk's V-element vectors (vector i is
// owned by thread i mod T), U vectors per thread per step, all U loads issued before any is
// used. Each step folds the U vectors into the thread's (m, l) with one rescale:
//     m' = max(m, max of the U V values),  l' = l e^(m - b') + sum e^(x - b'),  b' = base(m')
// (the guard of online_state.cuh: b' = 0 while m' = -inf). The raw input bits of the first
// `cache_elems` elements go to shared memory on the way; the rest of the chunk (if any) is
// read again from global memory by chunk_output (L2 when it is still there).
// chunk_output: y = e^(x - M) / L from shared memory (or global), the row's (M, L) known.
// Pipelined use (softmax_12): chunk_state<T, V, true> reads the cached part from shared memory
// that chunk_prefetch filled with cp.async, and chunk_output given `next` refills each
// cached vector with the next row's vector right after it has been used (same thread, same
// slot), so the next row's loads are in flight while this row's stores drain.
// UnsplitStore = true (the persistent row loops of softmax_12 / 13): st.global.v4 (vec_io.cuh).
// AllCached = true (softmax_13): the caller guarantees cache_elems >= chunk_elems, so the
// per-vector test "cached or not" disappears from both loops at compile time.
// An all -inf row has M = -inf: x - M = NaN, so NaN everywhere; a NaN or +inf gives L = NaN.
#pragma once
#include "online_state.cuh"
#include "vec_io.cuh"
#include "async_copy.cuh"

#ifndef CHUNK_UNROLL
#define CHUNK_UNROLL 4
#endif

template <typename T, int V, bool FromCache = false, bool AllCached = false>
__device__ __forceinline__ OnlineState chunk_state(const T* __restrict__ cx, int chunk_elems, int cache_elems,
                                                   typename Io<T, V>::raw_t* cache) {
    constexpr bool Folded = FoldExp<T>::value;
    constexpr int U = CHUNK_UNROLL;
    const int n_vec = chunk_elems / V;
    const int step = static_cast<int>(blockDim.x);
    OnlineState s = online_identity();
    for (int first = threadIdx.x; first < n_vec; first += U * step) {
        typename Io<T, V>::raw_t raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = first + u * step;
            if (i < n_vec)
                raw[u] = FromCache && (AllCached || i * V < cache_elems) ? cache[i] : Io<T, V>::load_raw(cx + i * V);
        }
        float v[U][V];
        float batch_max = neg_inf();
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = first + u * step;
            if (i < n_vec) {
                if (!FromCache && (AllCached || i * V < cache_elems)) cache[i] = raw[u];
                Io<T, V>::unpack(raw[u], v[u]);
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) v[u][j] = neg_inf();
            }
#pragma unroll
            for (int j = 0; j < V; ++j) batch_max = fmaxf(batch_max, v[u][j]);
        }
        const float m_new = fmaxf(s.m, batch_max);
        const ExpShift b = exp_shift(online_base(m_new));
        float l = s.l * ex2((s.m - b.m) * LOG2E_F);
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int j = 0; j < V; ++j) l += exp_sub<Folded>(v[u][j], b);
        s = {m_new, l};
    }
    return s;
}

template <typename T, int V, bool AllCached = false, bool UnsplitStore = false>
__device__ __forceinline__ void chunk_output(const T* __restrict__ cx, T* __restrict__ cy, int chunk_elems,
                                             int cache_elems, typename Io<T, V>::raw_t* cache,
                                             OnlineState row, const T* __restrict__ next = nullptr) {
    constexpr bool Folded = FoldExp<T>::value;
    const int n_vec = chunk_elems / V;
    const ExpShift shift = exp_shift(row.m);
    const float inv_l = 1.0f / row.l;
#pragma unroll 4
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
        const typename Io<T, V>::raw_t raw =
            AllCached || i * V < cache_elems ? cache[i] : Io<T, V>::load_raw(cx + i * V);
        float v[V];
        Io<T, V>::unpack(raw, v);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = exp_sub<Folded>(v[j], shift) * inv_l;
        if constexpr (UnsplitStore) Io<T, V>::store_unsplit(cy + i * V, Io<T, V>::pack(v));  // row loops
        else Io<T, V>::store_raw(cy + i * V, Io<T, V>::pack(v));
        if (next != nullptr && i * V < cache_elems) cp_async_16(&cache[i], next + i * V);  // raw was used above
    }
}

// The cached part of a chunk into shared memory with 16-byte cp.async (V > 1 builds only);
// the caller commits and waits (cp_async_commit / cp_async_wait_all). Thread t copies the
// vectors t, t + T, ... that chunk_state and chunk_output will read in that thread.
template <typename T, int V>
__device__ __forceinline__ void chunk_prefetch(const T* __restrict__ cx, int chunk_elems, int cache_elems,
                                               typename Io<T, V>::raw_t* cache) {
    static_assert(sizeof(typename Io<T, V>::raw_t) == 16, "cp.async moves 16-byte vectors here");
    const int n_vec = min(chunk_elems, cache_elems) / V;
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) cp_async_16(&cache[i], cx + i * V);
}
