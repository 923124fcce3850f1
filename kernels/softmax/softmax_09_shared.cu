// softmax_09_shared — a block per row, the row cached in shared memory: one read, one write.
//
// Changed from softmax_08_registers: rows too long for the register file. The block streams
//               its row once with 16-byte loads (4 per thread in flight), folds them into
//               per-thread (m, l) states (one rescale per 4 vectors, row_chunk.cuh) and keeps
//               the raw input bits in dynamic shared memory (up to ~227 KB after raising the
//               kernel's max_dynamic_shared_size_bytes: 56K fp32 or 113K fp16/bf16 elements).
//               After online_block_reduce, the output is computed from shared memory. Elements
//               past `cache_elems` (rows longer than shared memory) are read a second time.
//               Rows at any start: the 16-byte builds split each row at its first 16-byte
//               boundary (row_parts, row_chunk.cuh): the < V head elements and the < V tail
//               elements are folded in and written by threads 0 .. V-2 from global memory; the
//               vectors between them are streamed and cached as above.
// Launch:       grid = n_rows, block = T threads (128..1024, any multiple of 32), dynamic
//               shared memory = cache_elems * sizeof(T) bytes. Entries softmax_09_shared_<dtype>_v<V>
//               (softmax_09_shared_f32_v4, ..., softmax_09_shared_bf16_v1).
// Traffic:      1 read + 1 write per element while the row fits shared memory; beyond it
//               the uncached part is read twice (from L2 if it is still there).
// Limits:       any n_cols <= 2^31 - 2^16; V > 1 takes rows at any start and of any length as
//               long as x and y rows have the same phase (x_row % 16 == y_row % 16 in every row;
//               else V = 1); fp32 / fp16 / bf16 storage; -inf / NaN as 07.
//               One block per row: fewer rows than SMs leave SMs idle (softmax_10 splits rows).
#include "row_chunk.cuh"

template <typename T, int V>
__device__ __forceinline__ void block_per_row_shared(const T* __restrict__ x, T* __restrict__ y, int n_cols,
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
    edge_output<T, V>(row_x, row_y, parts, true, true, row);
    chunk_output<T, V>(row_x + parts.head, row_y + parts.head, parts.vec_elems, cache_elems, cache, row);
}

#define SOFTMAX_09(TAG, T, V)                                                                     \
    extern "C" __global__ void __launch_bounds__(1024) softmax_09_shared_##TAG##_v##V(             \
        const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,            \
        long long y_row_stride, int cache_elems) {                                                 \
        block_per_row_shared<T, V>(x, y, n_cols, x_row_stride, y_row_stride, cache_elems);       \
    }

SOFTMAX_09(f32, float, 4) SOFTMAX_09(f16, half_bits, 8) SOFTMAX_09(bf16, bf16_bits, 8)
SOFTMAX_09(f32, float, 1) SOFTMAX_09(f16, half_bits, 1) SOFTMAX_09(bf16, bf16_bits, 1)
