// softmax_13_cooperative — P blocks per row on a persistent cooperative grid; (m, l) met in global memory.
//
// Changed from softmax_10_cluster: a row is split into P chunks as before, but P is no longer
//               capped at a cluster's 16 blocks, and blocks never wait to be scheduled. The grid
//               is launched cooperatively (every block resident at once, or a launch error) and
//               is made of G groups of P blocks; group g handles rows g, g + G, g + 2G, ...
//               Per row, each block caches its chunk in shared memory while folding it into a
//               state (row_chunk.cuh, the whole chunk cached), publishes the state in its slot of
//               `partials` (grid_states.cuh: the slot's bits are the flag), then thread t waits
//               for and folds slots t, t + T, ... of the row, online_block_reduce combines the
//               threads, and the block writes its chunk from shared memory (P = 1: no exchange).
//               A block waiting on its row leaves the SM to the other resident blocks, and the
//               16-byte builds have already started loading their group's next row into a second
//               buffer (cp.async, async_copy.cuh): the exchange hides behind DRAM traffic.
//               Build with -DCOOPERATIVE_PREFETCH=0 for the version without the second buffer.
// Launch:       grid = G * P blocks (G * P <= the blocks resident at once, G <= n_rows),
//               block = T threads, dynamic shared memory = 2 * chunk_elems * sizeof(T) (16-byte
//               builds: two buffers; scalar builds and COOPERATIVE_PREFETCH=0: chunk_elems * sizeof(T)),
//               cooperative (cuLaunchKernelEx, CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
//               partials: n_rows * P states of 8 bytes, every byte 0xff before the launch.
//               Entries softmax_13_cooperative_<dtype>_v<V>
//               (softmax_13_cooperative_f32_v4, ..., softmax_13_cooperative_bf16_v1).
// Traffic:      1 read + 1 write per element, for any N whose chunks fit the resident blocks'
//               shared memory (about 132 SMs x 227 KB on the H200), plus 8 B written and
//               P x 8 B polled per chunk.
// Limits:       the buffers fit 227 KB; chunk_elems a multiple of V; P <= blocks resident at
//               once; V > 1 needs 16-byte aligned rows and n_cols % V == 0; fp32 / fp16 / bf16;
//               -inf / NaN as softmax_07. sm_80 or newer (cp.async; no cluster or sm_90 feature).
// Measured:     an attempt, not adopted (suite softmax-fast-cooperative, chapter 06): correct for
//               any P, but below softmax_10 / 12 at batch 4000, and at few rows sometimes ahead of
//               the dispatcher's choice, sometimes behind. Its first build published with
//               __threadfence + atomicAdd + an acquire poll and stored in 4-byte pieces (suite
//               softmax-fast-cooperative-split-stores); fixing both did not change the verdict.
#include "async_copy.cuh"
#include "grid_states.cuh"
#include "row_chunk.cuh"

#ifndef COOPERATIVE_PREFETCH
#define COOPERATIVE_PREFETCH 1
#endif

template <typename T, int V>
__device__ __forceinline__ void cooperative_rows(const T* __restrict__ x, T* __restrict__ y,
                                                 OnlineState* partials, int n_rows,
                                                 int n_cols, long long x_row_stride, long long y_row_stride,
                                                 int n_chunks, int chunk_elems) {
    // The 16-byte builds prefetch the group's next row into a second buffer with cp.async while
    // this row is exchanged and written; the scalar builds (any alignment) load as they go.
    constexpr bool Prefetch = COOPERATIVE_PREFETCH && V > 1;
    extern __shared__ uint4 shared_cache[];
    __shared__ OnlineState scratch[32];
    typedef typename Io<T, V>::raw_t raw_t;
    raw_t* const first_buffer = reinterpret_cast<raw_t*>(shared_cache);
    const int second_offset = Prefetch ? chunk_elems / V : 0;  // no pointer array: it would live in local memory

    const int n_groups = static_cast<int>(gridDim.x) / n_chunks;
    const int chunk = static_cast<int>(blockIdx.x) % n_chunks;
    const long long start = static_cast<long long>(chunk) * chunk_elems;
    const int length = static_cast<int>(max(0LL, min(static_cast<long long>(chunk_elems), n_cols - start)));
    long long row = blockIdx.x / n_chunks;
    if constexpr (Prefetch) {
        if (row < n_rows) {
            chunk_prefetch<T, V>(x + row * x_row_stride + start, length, length, first_buffer);
            cp_async_commit();
        }
    }
    for (int k = 0; row < n_rows; row += n_groups, ++k) {
        const T* chunk_x = x + row * x_row_stride + start;
        T* chunk_y = y + row * y_row_stride + start;
        raw_t* cache = first_buffer + (k & 1) * second_offset;
        // Thread t caches (or prefetches) and later reads the same slots t, t + T, ...: no barrier
        // between rows; the prefetch below refills the buffer this thread finished with a row ago.
        if constexpr (Prefetch) cp_async_wait_all();
        const OnlineState mine =
            online_block_reduce(chunk_state<T, V, Prefetch, true>(chunk_x, length, length, cache), scratch);
        if constexpr (Prefetch) {
            if (row + n_groups < n_rows) {
                chunk_prefetch<T, V>(x + (row + n_groups) * x_row_stride + start, length, length,
                                     first_buffer + ((k + 1) & 1) * second_offset);
                cp_async_commit();
            }
        }
        OnlineState whole = mine;
        if (n_chunks > 1) {
            OnlineState* row_partials = partials + row * n_chunks;
            if (threadIdx.x == 0) publish_state(row_partials + chunk, mine);
            OnlineState s = online_identity();
            for (int i = threadIdx.x; i < n_chunks; i += blockDim.x) s = online_combine(s, wait_for_state(row_partials + i));
            whole = online_block_reduce(s, scratch);
        }
        chunk_output<T, V, true, true>(chunk_x, chunk_y, length, length, cache, whole);
    }
}

#define SOFTMAX_13(TAG, T, V)                                                                          \
    extern "C" __global__ void __launch_bounds__(1024) softmax_13_cooperative_##TAG##_v##V(             \
        const T* __restrict__ x, T* __restrict__ y, OnlineState* partials, int n_rows, int n_cols,      \
        long long x_row_stride, long long y_row_stride, int n_chunks, int chunk_elems) {                \
        cooperative_rows<T, V>(x, y, partials, n_rows, n_cols, x_row_stride, y_row_stride, n_chunks,   \
                               chunk_elems);                                                            \
    }

SOFTMAX_13(f32, float, 4) SOFTMAX_13(f16, half_bits, 8) SOFTMAX_13(bf16, bf16_bits, 8)
SOFTMAX_13(f32, float, 1) SOFTMAX_13(f16, half_bits, 1) SOFTMAX_13(bf16, bf16_bits, 1)
