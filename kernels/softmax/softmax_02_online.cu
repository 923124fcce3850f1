// softmax_02_online — online softmax: max and sum in one pass, then normalize.
//
// Changed from softmax_01_safe: passes 1 and 2 merge into one. Each thread keeps a
//               state (m, l) over its strided slice (online_push); the block combines
//               the 256 states with a warp butterfly and a second butterfly in warp 0
//               (online_block_reduce). The guards in online_state.cuh keep empty
//               states (-inf, 0) from turning into NaN; build with
//               -DONLINE_SOFTMAX_GUARDS=0 for the unguarded teaching variant.
//               Each thread folds its slice in chunks of 16 columns, each into a fresh state,
//               and merges the chunks' states pairwise with online_combine (thread_fold.cuh,
//               as softmax_01_safe adds its sum): no state takes more than 16 pushes and about
//               log2(N / 4096) merges up to N = 2^20 (above it the counter's top level chains
//               groups of 128 chunks), where one running state would take N / 256 pushes.
//               -DTHREAD_FOLD_SEQUENTIAL=1 builds the one-running-state schedule.
// Launch:       grid = (n_rows), block = (256), at most 64 registers (__launch_bounds__(256, 4):
//               4 blocks share an SM): a whole chunk's 16 loads are held in registers, so all
//               16 are in flight before its first push (behind 32 registers the compiler put
//               one load before each push, a memory latency per element); static shared memory 32 states (256 B).
// Traffic:      2 reads + 1 write per element (12 B for fp32) vs the ideal 8 B.
// Limits:       fp32 only; 1 <= n_cols <= 2^31 - 2^16; rows may be strided (unit column stride).
//               A row of all -inf gives NaN (0/0), as torch.softmax does.
#include "online_state.cuh"
#include "thread_fold.cuh"

extern "C" __global__ void __launch_bounds__(256, 4)
softmax_02_online(const float* __restrict__ x, float* __restrict__ y,
                  int n_cols, long long x_row_stride, long long y_row_stride) {
    __shared__ OnlineState scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;

    const OnlineState s = thread_fold(  // pass 1: statistics
        n_cols, online_identity(), [&](int i) { return row_x[i]; },
        [](OnlineState& state, float v) { online_push(state, v); },
        [](OnlineState a, OnlineState b) { return online_combine(a, b); });
    const OnlineState row = online_block_reduce(s, scratch);

    const float inv_l = 1.0f / row.l;  // pass 2: the output
    for (int i = threadIdx.x; i < n_cols; i += blockDim.x)
        row_y[i] = expf(row_x[i] - row.m) * inv_l;
}
