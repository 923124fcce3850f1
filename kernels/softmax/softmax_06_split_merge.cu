// softmax_06_split_merge — one row split over several blocks: partial (m, l) states, then a merge.
//
// Changed from softmax_02_online: a row is cut into blocks_per_row chunks of chunk_cols
//               columns, one block each, so a few long rows still fill the GPU. Launch 1
//               (softmax_06_split_merge_partials) folds its chunk into one running state per
//               thread (a plain strided loop, not softmax_02's chunked fold), combines the
//               block's states and writes the chunk's state to partials[row][chunk]. Launch 2
//               (softmax_06_split_merge_normalize) has every block combine its row's
//               partial states — any grouping gives the same state, since combine is
//               associative and commutative — and write its own chunk of the output. A chunk
//               past the end of the row is empty and contributes the identity (-inf, 0).
// Launch:       both: grid = (blocks_per_row, n_rows), block = (256), static shared memory
//               32 states (256 B); partials: n_rows * blocks_per_row states (8 B each).
//               n_rows <= 65535 per launch (grid.y); the launcher splits taller inputs.
// Traffic:      2 reads + 1 write per element (12 B for fp32) vs the ideal 8 B, plus
//               8 B per chunk written once and read by each of the row's blocks_per_row blocks.
// Limits:       fp32 only; 1 <= n_cols <= 2^31 - 2^16; rows may be strided (unit column stride).
//               A row of all -inf gives NaN (0/0), as torch.softmax does.
#include "online_state.cuh"

extern "C" __global__ void softmax_06_split_merge_partials(const float* __restrict__ x,
                                                           OnlineState* __restrict__ partials,
                                                           int n_cols, long long x_row_stride,
                                                           int chunk_cols) {
    __shared__ OnlineState scratch[32];
    const float* row_x = x + blockIdx.y * x_row_stride;
    const long long start = static_cast<long long>(blockIdx.x) * chunk_cols;
    const long long stop = min(start + chunk_cols, static_cast<long long>(n_cols));

    OnlineState s = online_identity();
    for (long long i = start + threadIdx.x; i < stop; i += blockDim.x) online_push(s, row_x[i]);
    s = online_block_reduce(s, scratch);
    if (threadIdx.x == 0) partials[static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x] = s;
}

extern "C" __global__ void softmax_06_split_merge_normalize(const float* __restrict__ x,
                                                            const OnlineState* __restrict__ partials,
                                                            float* __restrict__ y, int n_cols,
                                                            long long x_row_stride,
                                                            long long y_row_stride, int chunk_cols) {
    __shared__ OnlineState scratch[32];
    const float* row_x = x + blockIdx.y * x_row_stride;
    float* row_y = y + blockIdx.y * y_row_stride;
    const OnlineState* row_partials = partials + static_cast<long long>(blockIdx.y) * gridDim.x;

    OnlineState s = online_identity();  // merge: thread t combines chunks t, t + 256, ...
    for (int p = threadIdx.x; p < gridDim.x; p += blockDim.x) s = online_combine(s, row_partials[p]);
    const OnlineState row = online_block_reduce(s, scratch);

    const float inv_l = 1.0f / row.l;  // this block's chunk of the output
    const long long start = static_cast<long long>(blockIdx.x) * chunk_cols;
    const long long stop = min(start + chunk_cols, static_cast<long long>(n_cols));
    for (long long i = start + threadIdx.x; i < stop; i += blockDim.x)
        row_y[i] = expf(row_x[i] - row.m) * inv_l;
}
