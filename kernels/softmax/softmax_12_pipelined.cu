// softmax_12_pipelined — softmax_10's cluster per row, made persistent: the next row's loads
//                        are in flight while this row is reduced and written.
//
// Changed from softmax_10_cluster: each cluster loops over rows (row = cluster index, then
//               + number of clusters), and the input reaches shared memory by cp.async
//               (async_copy.cuh) instead of through registers. In the output pass each thread
//               refills the shared slot it has just used with the same vector of the cluster's
//               next row, so the DRAM reads of row k + 1 overlap the stores of row k; softmax_10
//               leaves DRAM idle on an SM between a block's last store and the next block's
//               first load, and during every reduction and cluster barrier. The state pass
//               reads shared memory only (chunk_state<T, V, true>); the per-block states are
//               double-buffered by row parity, so one cluster barrier per row both publishes
//               this row's states and proves the states of two rows ago were read.
//               Rows at any start as softmax_10: the vector part of each row (from its first
//               16-byte boundary, which may differ from row to row) is chunked, prefetched and
//               cached; the < V head / tail elements are read from global memory by the blocks
//               of the first / last chunk. A chunk's vector count may differ by one between
//               rows: the refill copies as many vectors as the next row's chunk holds.
// Launch:       grid = min(n_rows, clusters resident at once) * C blocks (cuOccupancyMaxActiveClusters),
//               cluster = (C, 1, 1), block = T threads, dynamic shared memory = cache_elems * sizeof(T).
//               Entries softmax_12_pipelined_<dtype>_v<V> for the 16-byte builds only
//               (softmax_12_pipelined_f32_v4, _f16_v8, _bf16_v8).
// Traffic:      1 read + 1 write per element while a chunk fits shared memory (as softmax_10);
//               the uncached tail of a chunk is read twice and is not prefetched.
// Limits:       rows at any start and of any length as long as x and y rows have the same
//               phase (x_row % 16 == y_row % 16 in every row; cp.async moves 16 aligned bytes):
//               the launcher sends other rows to softmax_10's scalar builds; chunk_elems a
//               multiple of V with C x chunk_elems >= n_cols; fp32 / fp16 / bf16; -inf / NaN as 07.
//               Same partition and reduction order as softmax_10, so the same NumPy model.
//               sm_90 or newer (clusters, as softmax_10).
// Measured:     first built with the plain 16-byte store of chunk_output, which nvcc splits in
//               this row loop into four 4-byte stores per vector (SASS: STG.E, no STG.E.128; the
//               loads lose .CONSTANT): slower than softmax_10 at every shape (suite
//               softmax-fast-attempts). With the store forced (st.global.v4, store_unsplit in
//               vec_io.cuh; build with -DPIPELINED_UNSPLIT_STORE=0 to see the split again) it is the
//               fastest kernel measured for many fp32 rows of 1M and thousands of 16-bit rows of
//               64K (suite softmax-fast-cooperative), and the dispatcher uses it there.
#include "cluster.cuh"
#include "row_chunk.cuh"

#ifndef PIPELINED_UNSPLIT_STORE
#define PIPELINED_UNSPLIT_STORE 1   // 0: the first build's plain uint4 store, which nvcc splits here
#endif

template <typename T, int V>
__device__ __forceinline__ void pipelined_rows(const T* __restrict__ x, T* __restrict__ y, int n_rows, int n_cols,
                                               long long x_row_stride, long long y_row_stride, int chunk_elems,
                                               int cache_elems) {
    extern __shared__ uint4 shared_cache[];
    __shared__ OnlineState scratch[32];
    __shared__ __align__(8) OnlineState block_state[2];  // by row parity; read by the other blocks
    __shared__ OnlineState row_state;
    typedef typename Io<T, V>::raw_t raw_t;
    raw_t* cache = reinterpret_cast<raw_t*>(shared_cache);

    const unsigned int n_chunks = cluster_size();
    const long long n_clusters = gridDim.x / n_chunks;
    const unsigned int chunk = cluster_rank();
    const bool first = chunk == 0, last = chunk == n_chunks - 1;
    const long long start = static_cast<long long>(chunk) * chunk_elems;  // in the row's vector part
    long long row = blockIdx.x / n_chunks;

    if (row < n_rows) {
        const T* row_x = x + row * x_row_stride;
        const RowParts parts = row_parts<T, V>(row_x, n_cols);
        chunk_prefetch<T, V>(row_x + parts.head + start, chunk_length(parts.vec_elems, start, chunk_elems),
                             cache_elems, cache);
    }
    cp_async_commit();
    for (int k = 0; row < n_rows; ++k, row += n_clusters) {
        const T* row_x = x + row * x_row_stride;
        T* row_y = y + row * y_row_stride;
        const RowParts parts = row_parts<T, V>(row_x, n_cols);  // aligned rows: {0, n_cols, 0}
        const int length = chunk_length(parts.vec_elems, start, chunk_elems);
        const T* chunk_x = row_x + parts.head + start;
        T* chunk_y = row_y + parts.head + start;
        cp_async_wait_all();  // this thread's slots hold this row (each thread reads only its own)
        OnlineState mine = chunk_state<T, V, true>(chunk_x, length, cache_elems, cache);
        edge_push<T, V>(mine, row_x, parts, first, last);
        mine = online_block_reduce(mine, scratch);
        if (threadIdx.x == 0) block_state[k & 1] = mine;
        cluster_sync();  // this row's states visible; every block is done reading row k - 1's
        const OnlineState whole = cluster_reduce_states(&block_state[k & 1], &row_state);
        edge_output<T, V>(row_x, row_y, parts, first, last, whole);
        const long long next = row + n_clusters;
        const T* next_x = nullptr;   // the next row's chunk (its vector part), prefetched during the output
        int next_length = 0;
        if (next < n_rows) {
            const T* next_row_x = x + next * x_row_stride;
            const RowParts next_parts = row_parts<T, V>(next_row_x, n_cols);
            next_x = next_row_x + next_parts.head + start;
            next_length = chunk_length(next_parts.vec_elems, start, chunk_elems);
        }
        chunk_output<T, V, false, PIPELINED_UNSPLIT_STORE>(chunk_x, chunk_y, length, cache_elems, cache, whole,
                                                           next_x, next_length);
        cp_async_commit();
    }
    cluster_sync();  // nobody exits while its last state may still be read
}

#define SOFTMAX_12(TAG, T, V)                                                                     \
    extern "C" __global__ void __launch_bounds__(1024) softmax_12_pipelined_##TAG##_v##V(          \
        const T* __restrict__ x, T* __restrict__ y, int n_rows, int n_cols, long long x_row_stride, \
        long long y_row_stride, int chunk_elems, int cache_elems) {                                \
        pipelined_rows<T, V>(x, y, n_rows, n_cols, x_row_stride, y_row_stride, chunk_elems,        \
                             cache_elems);                                                         \
    }

SOFTMAX_12(f32, float, 4) SOFTMAX_12(f16, half_bits, 8) SOFTMAX_12(bf16, bf16_bits, 8)
