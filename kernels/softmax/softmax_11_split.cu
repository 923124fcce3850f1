// softmax_11_split — the row split over C blocks without clusters: partial states, then merge.
//
// Changed from softmax_10_cluster: the same split of a row into C chunks, but the blocks of a
//               row exchange their states through global memory, in two launches (a launch
//               boundary is the only grid-wide barrier that needs no co-residency guarantee):
//               softmax_11_split_stats writes one (m, l) per chunk to `partials`;
//               softmax_11_split_output combines the row's C partials (block butterfly, the
//               identity past C) and reads its chunk again to write the output. C is not
//               limited by the cluster size, so a single row can use every SM. The output
//               launch is a programmatic dependent launch (launch_order.cuh): its blocks start
//               while the stats kernel runs and wait for it in hardware, which hides most of the
//               second launch's latency — what a single row of 1M mostly measures. Rows at any
//               start as softmax_10: the vector part is chunked; chunk 0's block takes the head,
//               the last chunk's block the tail (in both launches).
// Launch:       both: grid = n_rows * C, no dynamic shared memory; stats: block = T threads;
//               output: block = max(T, C rounded up to a power of two, 32) threads, so every
//               partial has a thread in the merge; partials: n_rows * C states (8 B each).
//               Entries softmax_11_split_{stats,output}_<dtype>_v<V>
//               (e.g. softmax_11_split_stats_f32_v4 and softmax_11_split_output_f32_v4).
// Traffic:      2 reads + 1 write per element from the kernels' point of view; the second read
//               comes from L2 when the input fits it (H200: ~60 MB), so small batches of long
//               rows still move about 1 read + 1 write through DRAM.
// Limits:       C <= 1024 (one state per thread in the merge); any n_cols; V as softmax_10 (rows at
//               any start when x and y rows have the same phase, x_row % 16 == y_row % 16).
//               sm_80 or newer; the programmatic launch needs sm_90 (below it griddepcontrol
//               compiles to nothing and the two launches are ordinary, stream-ordered ones).
#include "launch_order.cuh"
#include "row_chunk.cuh"

template <typename T, int V>
__device__ __forceinline__ void split_stats(const T* __restrict__ x, OnlineState* __restrict__ partials,
                                            int n_cols, long long x_row_stride, int n_chunks,
                                            int chunk_elems) {
    __shared__ OnlineState scratch[32];
    dependents_may_launch();  // the output kernel's blocks may take free SM slots now (they wait below)
    const long long row = blockIdx.x / n_chunks;
    const int chunk = static_cast<int>(blockIdx.x % n_chunks);
    const T* row_x = x + row * x_row_stride;
    const RowParts parts = row_parts<T, V>(row_x, n_cols);  // aligned rows (and V = 1): {0, n_cols, 0}
    const long long start = static_cast<long long>(chunk) * chunk_elems;
    const int length = chunk_length(parts.vec_elems, start, chunk_elems);
    OnlineState s = chunk_state<T, V>(row_x + parts.head + start, length, 0, nullptr);
    edge_push<T, V>(s, row_x, parts, chunk == 0, chunk == n_chunks - 1);
    s = online_block_reduce(s, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

template <typename T, int V>
__device__ __forceinline__ void split_output(const T* __restrict__ x, T* __restrict__ y,
                                             const OnlineState* __restrict__ partials, int n_cols,
                                             long long x_row_stride, long long y_row_stride, int n_chunks,
                                             int chunk_elems) {
    __shared__ OnlineState scratch[32];
    const long long row = blockIdx.x / n_chunks;
    const int chunk = static_cast<int>(blockIdx.x % n_chunks);
    const T* row_x = x + row * x_row_stride;
    T* row_y = y + row * y_row_stride;
    const RowParts parts = row_parts<T, V>(row_x, n_cols);
    const long long start = static_cast<long long>(chunk) * chunk_elems;
    const int length = chunk_length(parts.vec_elems, start, chunk_elems);
    wait_for_prerequisite_grid();  // the stats kernel has finished and its partials are visible
    const OnlineState mine = static_cast<int>(threadIdx.x) < n_chunks ? partials[row * n_chunks + threadIdx.x]
                                                                      : online_identity();
    const OnlineState whole = online_block_reduce(mine, scratch);
    edge_output<T, V>(row_x, row_y, parts, chunk == 0, chunk == n_chunks - 1, whole);
    chunk_output<T, V>(row_x + parts.head + start, row_y + parts.head + start, length, 0, nullptr, whole);
}

#define SOFTMAX_11(TAG, T, V)                                                                       \
    extern "C" __global__ void __launch_bounds__(1024) softmax_11_split_stats_##TAG##_v##V(          \
        const T* __restrict__ x, OnlineState* __restrict__ partials, int n_cols,                     \
        long long x_row_stride, int n_chunks, int chunk_elems) {                                     \
        split_stats<T, V>(x, partials, n_cols, x_row_stride, n_chunks, chunk_elems);                 \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(1024) softmax_11_split_output_##TAG##_v##V(         \
        const T* __restrict__ x, T* __restrict__ y, const OnlineState* __restrict__ partials,        \
        int n_cols, long long x_row_stride, long long y_row_stride, int n_chunks, int chunk_elems) { \
        split_output<T, V>(x, y, partials, n_cols, x_row_stride, y_row_stride, n_chunks, chunk_elems); \
    }

SOFTMAX_11(f32, float, 4) SOFTMAX_11(f16, half_bits, 8) SOFTMAX_11(bf16, bf16_bits, 8)
SOFTMAX_11(f32, float, 1) SOFTMAX_11(f16, half_bits, 1) SOFTMAX_11(bf16, bf16_bits, 1)
