// log_softmax_04_shared — log-softmax of rows too long for registers, read from global memory once:
//                         the row cached in shared memory as softmax_09_shared caches it.
//
// Changed from log_softmax_01_online: the second read of the row comes from shared memory. A
//               block per row streams its row once with 16-byte loads (4 per thread in flight),
//               folds them into per-thread (m, l) states and keeps the raw input bits in dynamic
//               shared memory (row_chunk.cuh's chunk_state, as softmax_09); after
//               online_block_reduce every thread writes y = (x - m) - log l for the vectors it
//               cached, m subtracted first as in log_softmax_01. Elements past `cache_elems` (rows
//               longer than shared memory: 56K fp32 or 113K fp16/bf16 elements) are read a second
//               time. Rows at any start: the < V head and tail elements around the 16-byte
//               vectors are folded in and written by threads 0 .. V-2 (row_parts, edge_push).
// Launch:       grid = n_rows, block = T threads (128..1024, a multiple of 32; softmax_09's plan),
//               dynamic shared memory = cache_elems * sizeof(T) bytes. Entries
//               log_softmax_04_shared_<dtype>_v<V> (log_softmax_04_shared_f32_v4, ..., _bf16_v1).
// Traffic:      1 read + 1 write per element while the row fits shared memory (log_softmax_01
//               reads twice); beyond it the uncached part is read twice (from L2 if still there).
// Limits:       any n_cols <= 2^31 - 2^16; V > 1 takes rows at any start as long as x and y rows
//               have the same phase (x_row % 16 == y_row % 16; else V = 1); fp32 / fp16 / bf16
//               storage, y in x's dtype, fp32 math, one rounding per output. A row of all -inf
//               gives NaN (-inf - -inf, as torch); a row holding NaN or +inf gives NaN; an element
//               -inf gives -inf. One block per row: fewer rows than SMs leave SMs idle.
#include "log_softmax_chunk.cuh"

template <typename T, int V>
__device__ __forceinline__ void log_softmax_shared_row(const T* __restrict__ x, T* __restrict__ y, int n_cols,
                                                       long long x_row_stride, long long y_row_stride,
                                                       int cache_elems) {
    extern __shared__ uint4 shared_cache[];
    __shared__ OnlineState scratch[32];
    typedef typename Io<T, V>::raw_t raw_t;
    raw_t* cache = reinterpret_cast<raw_t*>(shared_cache);
    const T* row_x = x + blockIdx.x * x_row_stride;
    T* row_y = y + blockIdx.x * y_row_stride;
    const RowParts parts = row_parts<T, V>(row_x, n_cols);  // aligned rows (and V = 1): {0, n_cols, 0}
    OnlineState mine = chunk_state<T, V>(row_x + parts.head, parts.vec_elems, cache_elems, cache);
    edge_push<T, V>(mine, row_x, parts, true, true);
    const OnlineState row = online_block_reduce(mine, scratch);  // its barriers also publish the cache
    const float log_l = logf(row.l);
    log_edge_output<T, V>(row_x, row_y, parts, true, true, row.m, log_l);
    log_chunk_output<T, V>(row_x + parts.head, row_y + parts.head, parts.vec_elems, cache_elems, cache, row.m, log_l);
}

#define LOG_SOFTMAX_04(TAG, T, V)                                                                  \
    extern "C" __global__ void __launch_bounds__(1024) log_softmax_04_shared_##TAG##_v##V(          \
        const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,             \
        long long y_row_stride, int cache_elems) {                                                  \
        log_softmax_shared_row<T, V>(x, y, n_cols, x_row_stride, y_row_stride, cache_elems);       \
    }

LOG_SOFTMAX_04(f32, float, 4) LOG_SOFTMAX_04(f16, half_bits, 8) LOG_SOFTMAX_04(bf16, bf16_bits, 8)
LOG_SOFTMAX_04(f32, float, 1) LOG_SOFTMAX_04(f16, half_bits, 1) LOG_SOFTMAX_04(bf16, bf16_bits, 1)
