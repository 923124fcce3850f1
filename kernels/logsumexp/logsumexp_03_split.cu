// logsumexp_03_split — LSE(x) per row for a few long rows: each row split over C blocks, one
//                      state per chunk, then a merge launch.
//
// Changed from logsumexp_01_online: a row is no longer one group's. With fewer rows than SMs,
//               one group per row leaves most of the GPU idle (ten rows of 2^20 keep ten SMs
//               busy), so each row is cut into C chunks and each chunk gets a block, which
//               reduces it to its online state (m, l) exactly as logsumexp_01 reduces a row
//               (row_online_state: a scalar head to the chunk's first 16-byte boundary, 16-byte
//               vectors, a scalar tail; exp2 with log2 e folded in). The states go to
//               `partials`; the merge launch gives each row one block, whose thread t takes
//               state t (the identity past C), combines them with the block's reduction and
//               writes m + log l (lse_rows.cuh: a row whose maximum is +inf is read once more,
//               for NaN). The merge is a programmatic dependent launch (launch_order.cuh): its
//               blocks start while the states are computed and wait for them in hardware.
//               Entries per input dtype: logsumexp_03_split_states_<tag> and
//               logsumexp_03_split_merge_<tag> (tag f32, f16, bf16).
// Launch:       states: grid = n_rows * C, block = the chunk's group (a power of two, 32 ..
//               1024); merge: grid = n_rows, block = C rounded up to a power of two (at least
//               32); partials: n_rows * C states (8 B each). Static shared memory 32 states
//               (256 B) in both.
// Traffic:      1 read per element (the chunks), plus 8 B written and read per chunk and 4 B
//               written per row; a row whose maximum is +inf is read a second time.
// Limits:       x float32, float16 or bfloat16; the LSE float32; all arithmetic in fp32.
//               1 <= C <= 1024, every chunk non-empty (chunk_elems * (C - 1) < n_cols); rows
//               strided with unit column stride, starting anywhere. Every GPU the _01 kernels run on; the
//               programmatic launch needs sm_90 (below it the two launches are ordinary,
//               stream-ordered ones).
#include "lse_rows.cuh"
#include "split_states.cuh"

template <class Row>
__device__ __forceinline__ void split_merge(const typename Row::Elem* __restrict__ x,
                                            const OnlineState* __restrict__ partials,
                                            float* __restrict__ lse, int n_cols, long long x_row_stride,
                                            int n_chunks) {
    __shared__ OnlineState scratch[32];
    const long long row = blockIdx.x;
    wait_for_prerequisite_grid();  // the states launch has finished and its partials are visible
    const OnlineState whole = split_row_state(partials, row, n_chunks, scratch);
    const int t = static_cast<int>(threadIdx.x);
    const float value = row_lse<Row>(whole, x + row * x_row_stride, n_cols, t, static_cast<int>(blockDim.x), true,
                                     scratch);
    if (t == 0) lse[row] = value;
}

#define LOGSUMEXP_03(TAG, ROW)                                                                          \
    extern "C" __global__ void __launch_bounds__(1024) logsumexp_03_split_states_##TAG(                 \
        const ROW::Elem* __restrict__ x, OnlineState* __restrict__ partials, int n_cols,                 \
        long long x_row_stride, int n_chunks, int chunk_elems) {                                         \
        split_states<ROW>(x, partials, n_cols, x_row_stride, n_chunks, chunk_elems);                     \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(1024) logsumexp_03_split_merge_##TAG(                  \
        const ROW::Elem* __restrict__ x, const OnlineState* __restrict__ partials,                       \
        float* __restrict__ lse, int n_cols, long long x_row_stride, int n_chunks) {                     \
        split_merge<ROW>(x, partials, lse, n_cols, x_row_stride, n_chunks);                              \
    }

LOGSUMEXP_03(f32, F32Row) LOGSUMEXP_03(f16, F16Row) LOGSUMEXP_03(bf16, BF16Row)
