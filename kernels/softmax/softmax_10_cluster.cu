// softmax_10_cluster — a cluster of C blocks per row; (m, l) exchanged in distributed shared memory.
//
// Changed from softmax_09_shared: a row is split into C contiguous chunks (C = 1..16, a power
//               of two), one block each, and the C blocks of a row form a Hopper thread-block
//               cluster (launched with a cluster dimension of C, so they are co-scheduled on
//               one GPC). Each block caches its chunk in its own shared memory and reduces it
//               to one state; the blocks meet at a cluster barrier, warp 0 of every block
//               reads the C states from the other blocks' shared memory (mapa +
//               ld.shared::cluster, cluster.cuh) and combines them with the xor butterfly,
//               and each block writes its chunk's output from its cache. A second cluster
//               barrier, waited on only at the very end, keeps every block's shared memory
//               alive until the others have read its state. Few rows x long N now fill the GPU
//               (rows x C blocks) and a row of up to C x 227 KB is read from DRAM once.
//               Rows at any start (16-byte builds): what is chunked is the row's vector part,
//               from its first 16-byte boundary (row_parts, row_chunk.cuh); the < V head
//               elements are folded in and written by the block of chunk 0, the < V tail
//               elements by the block of the last chunk (threads 0 .. V-2, from global memory).
// Launch:       grid = n_rows * C blocks (row = blockIdx.x / C, chunk = cluster rank),
//               cluster = (C, 1, 1), block = T threads, dynamic shared memory = cache_elems *
//               sizeof(T). C = 16 needs the non-portable cluster size attribute.
//               Entries softmax_10_cluster_<dtype>_v<V>
//               (softmax_10_cluster_f32_v4, ..., softmax_10_cluster_bf16_v1).
// Traffic:      1 read + 1 write per element while a chunk fits shared memory; otherwise the
//               uncached tail of each chunk is read twice.
// Limits:       any n_cols <= 2^31 - 2^16; chunk_elems a multiple of V with C x chunk_elems >=
//               n_cols; V > 1 takes rows at any start and of any length as long as x and y rows
//               have the same phase (x_row % 16 == y_row % 16 in every row; else V = 1);
//               fp32 / fp16 / bf16 storage; -inf / NaN as 07.
//               Launched without a cluster (C = 1) it is softmax_09 with two extra barriers.
//               sm_90 or newer (clusters; cluster.cuh stops an older build with #error).
#include "cluster.cuh"
#include "row_chunk.cuh"

template <typename T, int V>
__device__ __forceinline__ void cluster_per_row(const T* __restrict__ x, T* __restrict__ y, int n_cols,
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
    const T* chunk_x = row_x + start;
    T* chunk_y = row_y + start;

    OnlineState mine = chunk_state<T, V>(chunk_x, length, cache_elems, cache);
    edge_push<T, V>(mine, row_x, parts, first, last);
    mine = online_block_reduce(mine, scratch);
    if (threadIdx.x == 0) block_state = mine;
    cluster_sync();                                    // every block's state is visible
    const OnlineState whole = cluster_reduce_states(&block_state, &row_state);
    cluster_arrive();                                  // done reading the others' shared memory
    edge_output<T, V>(row_x, row_y, parts, first, last, whole);
    chunk_output<T, V>(chunk_x, chunk_y, length, cache_elems, cache, whole);
    cluster_wait();                                    // nobody exits while its state may be read
}

#define SOFTMAX_10(TAG, T, V)                                                                     \
    extern "C" __global__ void __launch_bounds__(1024) softmax_10_cluster_##TAG##_v##V(            \
        const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,            \
        long long y_row_stride, int chunk_elems, int cache_elems) {                                \
        cluster_per_row<T, V>(x, y, n_cols, x_row_stride, y_row_stride, chunk_elems, cache_elems); \
    }

SOFTMAX_10(f32, float, 4) SOFTMAX_10(f16, half_bits, 8) SOFTMAX_10(bf16, bf16_bits, 8)
SOFTMAX_10(f32, float, 1) SOFTMAX_10(f16, half_bits, 1) SOFTMAX_10(bf16, bf16_bits, 1)

// Launch check for the host side: each block writes (cluster rank, cluster size).
extern "C" __global__ void softmax_10_cluster_probe(int* out) {
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = static_cast<int>(cluster_rank());
        out[2 * blockIdx.x + 1] = static_cast<int>(cluster_size());
    }
    cluster_sync();
}
