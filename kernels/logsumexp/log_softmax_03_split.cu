// log_softmax_03_split — y = (x - m) - log l for a few long rows: each row split over C blocks,
//                        one state per chunk, then an output launch in which every chunk's block
//                        merges its row's C states and writes its chunk.
//
// Changed from log_softmax_01_online: a row is no longer one group's. With fewer rows than SMs,
//               a group per row leaves most SMs idle, so each row is cut into C chunks (the
//               chunks of logsumexp_03_split, split_states.cuh). The states launch writes one
//               (m, l) per chunk to `partials`; in the output launch, a programmatic dependent
//               launch (launch_order.cuh), block b takes chunk b % C of row b / C again: its
//               thread t takes the row's state t (the identity past C), the block's reduction
//               gives the row's (m, l), and the block writes its chunk (log_softmax_rows.cuh:
//               16-byte loads and, where y has x's alignment, 16-byte stores). Every block of a
//               row merges the same C states in the same order, so they agree on (m, l) bit for
//               bit. Entries per dtype: log_softmax_03_split_states_<tag> and
//               log_softmax_03_split_output_<tag> (tag f32, f16, bf16); y in x's dtype.
// Launch:       both: grid = n_rows * C; states: block = the chunk's group (a power of two, 32 ..
//               1024); output: block = max(that group, C rounded up to a power of two);
//               partials: n_rows * C states (8 B each); static shared memory 32 states (256 B).
// Traffic:      2 reads + 1 write per element (the output launch reads its chunk again: from L2
//               when the rows fit it), plus 8 B per chunk written once and read C times.
// Limits:       x and y float32, float16 or bfloat16 (the same dtype); 1 <= C <= 1024, every chunk
//               non-empty; rows strided (unit column stride), any start. A row of all -inf, or
//               holding NaN or +inf, gives NaN; an element -inf gives -inf (as log_softmax_01).
//               Every GPU the _01 kernels run on; the programmatic launch needs sm_90 (below
//               it the two launches are ordinary, stream-ordered ones).
#include "log_softmax_rows.cuh"
#include "split_states.cuh"

template <class Row>
__device__ __forceinline__ void split_output(const typename Row::Elem* __restrict__ x,
                                             typename Row::Elem* __restrict__ y,
                                             const OnlineState* __restrict__ partials, int n_cols,
                                             long long x_row_stride, long long y_row_stride, int n_chunks,
                                             int chunk_elems) {
    __shared__ OnlineState scratch[32];
    const ChunkSpan c = chunk_span(n_cols, n_chunks, chunk_elems);
    wait_for_prerequisite_grid();  // the states launch has finished and its partials are visible
    const OnlineState whole = split_row_state(partials, c.row, n_chunks, scratch);
    row_log_softmax_output<Row>(x + c.row * x_row_stride + c.start, y + c.row * y_row_stride + c.start, c.length,
                                static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), whole.m, logf(whole.l));
}

#define LOG_SOFTMAX_03(TAG, ROW)                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) log_softmax_03_split_states_##TAG(               \
        const ROW::Elem* __restrict__ x, OnlineState* __restrict__ partials, int n_cols,                 \
        long long x_row_stride, int n_chunks, int chunk_elems) {                                         \
        split_states<ROW>(x, partials, n_cols, x_row_stride, n_chunks, chunk_elems);                     \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(1024) log_softmax_03_split_output_##TAG(               \
        const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ y, const OnlineState* __restrict__ partials, \
        int n_cols, long long x_row_stride, long long y_row_stride, int n_chunks, int chunk_elems) {     \
        split_output<ROW>(x, y, partials, n_cols, x_row_stride, y_row_stride, n_chunks, chunk_elems);    \
    }

LOG_SOFTMAX_03(f32, F32Row) LOG_SOFTMAX_03(f16, F16Row) LOG_SOFTMAX_03(bf16, BF16Row)
