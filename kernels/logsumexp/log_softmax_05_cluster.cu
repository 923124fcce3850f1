// log_softmax_05_cluster — log-softmax of a few long rows, each read from global memory once: a
//                          cluster of C blocks per row, as softmax_10_cluster splits a row.
//
// Changed from log_softmax_04_shared: a row is split into C contiguous chunks (C = 1..16, a power of
//               two), one block each, the C blocks of a row one thread-block cluster. Each block caches
//               its chunk in its own shared memory and reduces it to one state (chunk_state); the
//               blocks meet at a cluster barrier, warp 0 of every block combines the C states read
//               from the others' shared memory (cluster.cuh), and each block writes
//               y = (x - m) - log l over its chunk from its cache (log_softmax_chunk.cuh). A second
//               cluster barrier, waited on only at the end, keeps every block's shared memory alive
//               until the others have read its state. softmax_10's pass and plan with the log
//               output: rows of up to C x 227 KB read once, few rows filling the GPU (rows x C
//               blocks). Rows at any start: the < V head elements are folded in and written by the
//               block of chunk 0, the < V tail elements by the block of the last chunk.
// Launch:       grid = n_rows * C blocks (row = blockIdx.x / C, chunk = cluster rank), cluster =
//               (C, 1, 1), block = T threads, dynamic shared memory = cache_elems * sizeof(T); C = 16
//               needs the non-portable cluster size attribute. Entries log_softmax_05_cluster_<dtype>_v<V>
//               (log_softmax_05_cluster_f32_v4, ..., _bf16_v1).
// Traffic:      1 read + 1 write per element while a chunk fits shared memory; otherwise the uncached
//               tail of each chunk is read twice.
// Limits:       any n_cols <= 2^31 - 2^16; chunk_elems a multiple of V with C x chunk_elems >= n_cols;
//               V > 1 takes rows at any start as long as x and y rows have the same phase (else
//               V = 1); fp32 / fp16 / bf16 storage, y in x's dtype, fp32 math. A row of all -inf
//               gives NaN (-inf - -inf, as torch); a row holding NaN or +inf gives NaN; an element
//               -inf gives -inf. sm_90 or newer (clusters; cluster.cuh stops an older build).
#include "cluster.cuh"
#include "log_softmax_chunk.cuh"

template <typename T, int V>
__device__ __forceinline__ void log_softmax_cluster_row(const T* __restrict__ x, T* __restrict__ y, int n_cols,
                                                        long long x_row_stride, long long y_row_stride,
                                                        int chunk_elems, int cache_elems) {
    extern __shared__ uint4 shared_cache[];
    __shared__ OnlineState scratch[32];
    __shared__ __align__(8) OnlineState block_state;  // read by the other blocks of the cluster
    __shared__ OnlineState row_state;
    typedef typename Io<T, V>::raw_t raw_t;
    raw_t* cache = reinterpret_cast<raw_t*>(shared_cache);

    const unsigned int n_chunks = cluster_size();
    const unsigned int chunk = cluster_rank();
    const long long row = blockIdx.x / n_chunks;
    const T* row_x = x + row * x_row_stride;
    T* row_y = y + row * y_row_stride;
    const RowParts parts = row_parts<T, V>(row_x, n_cols);  // aligned rows (and V = 1): {0, n_cols, 0}
    const bool first = chunk == 0, last = chunk == n_chunks - 1;
    const long long start = parts.head + static_cast<long long>(chunk) * chunk_elems;
    const int length = chunk_length(parts.vec_elems, start - parts.head, chunk_elems);

    OnlineState mine = chunk_state<T, V>(row_x + start, length, cache_elems, cache);
    edge_push<T, V>(mine, row_x, parts, first, last);
    mine = online_block_reduce(mine, scratch);
    if (threadIdx.x == 0) block_state = mine;
    cluster_sync();                                    // every block's state is visible
    const OnlineState whole = cluster_reduce_states(&block_state, &row_state);
    cluster_arrive();                                  // done reading the others' shared memory
    const float log_l = logf(whole.l);
    log_edge_output<T, V>(row_x, row_y, parts, first, last, whole.m, log_l);
    log_chunk_output<T, V>(row_x + start, row_y + start, length, cache_elems, cache, whole.m, log_l);
    // Nobody exits while its state may be read. The loops above end at different trips in a warp's
    // lanes, so this wait is the barrier's form without .aligned, which needs no converged warp
    // (compute-sanitizer's synccheck flagged the .aligned form here in the scalar build).
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

#define LOG_SOFTMAX_05(TAG, T, V)                                                                       \
    extern "C" __global__ void __launch_bounds__(1024) log_softmax_05_cluster_##TAG##_v##V(              \
        const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,                  \
        long long y_row_stride, int chunk_elems, int cache_elems) {                                      \
        log_softmax_cluster_row<T, V>(x, y, n_cols, x_row_stride, y_row_stride, chunk_elems, cache_elems); \
    }

LOG_SOFTMAX_05(f32, float, 4) LOG_SOFTMAX_05(f16, half_bits, 8) LOG_SOFTMAX_05(bf16, bf16_bits, 8)
LOG_SOFTMAX_05(f32, float, 1) LOG_SOFTMAX_05(f16, half_bits, 1) LOG_SOFTMAX_05(bf16, bf16_bits, 1)
