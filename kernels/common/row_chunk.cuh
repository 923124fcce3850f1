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
// Rows at any start (softmax_09 .. 12, V > 1): row_parts splits a row where its first 16-byte
// boundary falls — head (< V elements), whole V-element vectors, tail (< V) — and only the vector
// part is chunked, cached and prefetched. The head belongs to chunk 0 and the tail to the last
// chunk: there thread t < head (t < tail) folds element t into its (m, l) after the chunk's
// vectors with the same one-step rescale and exponent form (edge_push), and writes it with the
// vectors' formula (edge_output). y is indexed like x, so x and y rows must have the same phase
// (x_row % 16 == y_row % 16; the host checks). V = 1 builds: no head, no tail.
// An all -inf row has M = -inf: x - M = NaN, so NaN everywhere; a NaN or +inf gives L = NaN.
#pragma once
#include "online_state.cuh"
#include "vec_io.cuh"
#include "async_copy.cuh"

#ifndef CHUNK_UNROLL
#define CHUNK_UNROLL 4
#endif

// A 16-byte vector of x from global memory. x is never written while a kernel runs, and its loads
// say so (ld.global.nc, LDG.E.128.CONSTANT): nvcc stops proving it by itself once x's address is
// turned into an integer, as row_parts does to find a row's 16-byte boundary.
template <typename T, int V>
__device__ __forceinline__ typename Io<T, V>::raw_t load_x(const T* __restrict__ p) {
    if constexpr (V > 1) return __ldg(reinterpret_cast<const uint4*>(p));
    else return Io<T, V>::load_raw(p);
}

template <typename T, int V, bool FromCache = false, bool AllCached = false>
__device__ __forceinline__ OnlineState chunk_state(const T* __restrict__ cx, int chunk_elems, int cache_elems,
                                                   typename Io<T, V>::raw_t* cache) {
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
                raw[u] = FromCache && (AllCached || i * V < cache_elems) ? cache[i] : load_x<T, V>(cx + i * V);
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
        const float b = online_base(m_new);
        float l = s.l * ex2((s.m - b) * LOG2E_F);
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int j = 0; j < V; ++j) l += exp_sub(v[u][j], b);
        s = {m_new, l};
    }
    return s;
}

// `next` (softmax_12): the next row's chunk, `next_elems` elements (-1: as many as this chunk); its
// cached vectors are copied into the slots this thread owns. The two rows' heads may differ, so the
// next chunk may hold one vector more than this one: the thread's slots past this chunk follow.
template <typename T, int V, bool AllCached = false, bool UnsplitStore = false>
__device__ __forceinline__ void chunk_output(const T* __restrict__ cx, T* __restrict__ cy, int chunk_elems,
                                             int cache_elems, typename Io<T, V>::raw_t* cache,
                                             OnlineState row, const T* __restrict__ next = nullptr,
                                             int next_elems = -1) {
    const int n_vec = chunk_elems / V;
    const float shift = row.m;
    const float inv_l = 1.0f / row.l;
    const int next_cached = min(cache_elems, next_elems < 0 ? chunk_elems : next_elems);
#pragma unroll 4
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
        const typename Io<T, V>::raw_t raw =
            AllCached || i * V < cache_elems ? cache[i] : load_x<T, V>(cx + i * V);
        float v[V];
        Io<T, V>::unpack(raw, v);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = exp_sub(v[j], shift) * inv_l;
        if constexpr (UnsplitStore) Io<T, V>::store_unsplit(cy + i * V, Io<T, V>::pack(v));  // row loops
        else Io<T, V>::store_raw(cy + i * V, Io<T, V>::pack(v));
        if (next != nullptr && i * V < next_cached) cp_async_16(&cache[i], next + i * V);  // raw was used above
    }
    if (next != nullptr) {  // this thread's slots n_vec <= i < next_cached / V (none when the lengths agree)
        const int t = static_cast<int>(threadIdx.x), step = static_cast<int>(blockDim.x);
        for (int i = t < n_vec ? t + (n_vec - t + step - 1) / step * step : t; i * V < next_cached; i += step)
            cp_async_16(&cache[i], next + i * V);
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

// ---- rows at any start: head, vectors, tail ------------------------------------------------

struct RowParts {
    int head;       // elements before the row's first 16-byte boundary (< V; 0 for V = 1)
    int vec_elems;  // elements of the whole vectors after it (a multiple of V)
    int tail;       // elements after the vectors (< V)
};

template <typename T, int V>
__device__ __forceinline__ RowParts row_parts(const T* row, int n_cols) {
    if constexpr (V == 1) {
        return {0, n_cols, 0};
    } else {
        const unsigned int offset = static_cast<unsigned int>(reinterpret_cast<unsigned long long>(row) & 15ull);
        const int head = min(static_cast<int>(((16u - offset) & 15u) / sizeof(T)), n_cols);
        const int vec_elems = (n_cols - head) / V * V;
        return {head, vec_elems, n_cols - head - vec_elems};
    }
}

// Elements of the vector part in the chunk starting at `start` (0 past its end).
__device__ __forceinline__ int chunk_length(int vec_elems, long long start, int chunk_elems) {
    return static_cast<int>(max(0LL, min(static_cast<long long>(chunk_elems), vec_elems - start)));
}

// One element folded in as chunk_state folds a step: m' = max(m, x), b' = base(m'),
// l' = l e^(m - b') + e^(x - b'), with the kernels' exponent form.
template <typename T>
__device__ __forceinline__ void chunk_push(OnlineState& s, float x) {
    const float m_new = fmaxf(s.m, x);
    const float b = online_base(m_new);
    s.l = s.l * ex2((s.m - b) * LOG2E_F) + exp_sub(x, b);
    s.m = m_new;
}

// The head (in the row's first chunk) and the tail (in its last): thread t < head folds row[t],
// thread t < tail folds row[head + vec_elems + t], after its vectors.
template <typename T, int V>
__device__ __forceinline__ void edge_push(OnlineState& s, const T* __restrict__ row, RowParts parts,
                                          bool first_chunk, bool last_chunk) {
    if constexpr (V > 1) {
        const int t = static_cast<int>(threadIdx.x);
        if (first_chunk && t < parts.head) chunk_push<T>(s, Elem<T>::load(row + t));
        if (last_chunk && t < parts.tail) chunk_push<T>(s, Elem<T>::load(row + parts.head + parts.vec_elems + t));
    }
}

// Their outputs, by the same threads, y = e^(x - M) / L in chunk_output's form (the same rounding).
template <typename T, int V>
__device__ __forceinline__ void edge_output(const T* __restrict__ row_x, T* __restrict__ row_y, RowParts parts,
                                            bool first_chunk, bool last_chunk, OnlineState row) {
    if constexpr (V > 1) {
        const int t = static_cast<int>(threadIdx.x);
        const float shift = row.m;
        const float inv_l = 1.0f / row.l;
        if (first_chunk && t < parts.head)
            Elem<T>::store(row_y + t, exp_sub(Elem<T>::load(row_x + t), shift) * inv_l);
        const int k = parts.head + parts.vec_elems + t;
        if (last_chunk && t < parts.tail)
            Elem<T>::store(row_y + k, exp_sub(Elem<T>::load(row_x + k), shift) * inv_l);
    }
}
