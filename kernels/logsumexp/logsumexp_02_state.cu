// logsumexp_02_state — the row's online state (m, l) itself, and the logit of a target column,
// for a merge that happens somewhere else (another kernel, another GPU).
//
// Changed from logsumexp_01_online: the same read of the row (online_rows.cuh: 16-byte loads,
//               four in flight per lane, one re-scale per 16 elements, exp2f), but the epilogue
//               writes the state (m, l) instead of m + log l, so that states of pieces of a row
//               held by different GPUs can be merged with the chapter 04 combine and a softmax
//               of the whole row can still subtract the true maximum. With a `targets` array,
//               lane 0 of each row also fetches x[row, targets[row] - vocab_start] when that
//               column lies in this piece of the row, and writes 0 when it does not: the piece
//               that owns the target supplies its logit, the others add nothing to a sum.
//               Three planes of n_rows floats each, `plane_stride` floats apart: m, l, target
//               logit (the third only with targets). One body, three entries, one per input
//               dtype: logsumexp_02_state_f32, _f16 and _bf16.
// Launch:       as logsumexp_01_online: block = (max(256, group)), grid = (ceil(n_rows /
//               (block / group))); static shared memory 32 states (256 B), used when group > 32.
// Traffic:      1 read per element + 8 B per row (12 B with targets, plus one 8-byte target
//               index and one element read per row): the ideal for a reduction.
// Limits:       x float32, float16 or bfloat16, rows strided (unit column stride), 1 <= n_cols <=
//               2^31 - 2^16; targets int64 (any value: outside [vocab_start, vocab_start + n_cols)
//               gives 0); the planes float32. A row of all -inf gives (-inf, 0); a NaN anywhere
//               gives l = NaN (fmaxf ignores it in m); +inf gives (+inf, NaN).
#include "online_rows.cuh"

template <class Row>
__device__ __forceinline__ void state_rows(const typename Row::Elem* __restrict__ x, float* __restrict__ planes,
                                           const long long* __restrict__ targets, long long vocab_start,
                                           int n_rows, int n_cols, long long x_row_stride,
                                           long long plane_stride, int group) {
    __shared__ OnlineState scratch[32];
    const int lane = threadIdx.x & (group - 1);
    const long long row =
        static_cast<long long>(blockIdx.x) * (blockDim.x / group) + threadIdx.x / group;
    const bool active = row < n_rows;  // a block's last groups may have no row; they still reduce

    const typename Row::Elem* x_row = x + row * x_row_stride;
    OnlineState s = online_identity();
    if (active) s = row_online_state<Row>(x_row, n_cols, lane, group);
    s = online_group_reduce(s, group, scratch);
    if (active && lane == 0) {
        planes[row] = s.m;
        planes[plane_stride + row] = s.l;
        if (targets != nullptr) {
            const long long column = targets[row] - vocab_start;   // this piece's own column index
            planes[2 * plane_stride + row] = column >= 0 && column < n_cols ? Row::load1(x_row + column) : 0.0f;
        }
    }
}

extern "C" __global__ void __launch_bounds__(1024)
logsumexp_02_state_f32(const float* __restrict__ x, float* __restrict__ planes, const long long* __restrict__ targets,
                       long long vocab_start, int n_rows, int n_cols, long long x_row_stride,
                       long long plane_stride, int group) {
    state_rows<F32Row>(x, planes, targets, vocab_start, n_rows, n_cols, x_row_stride, plane_stride, group);
}

extern "C" __global__ void __launch_bounds__(1024)
logsumexp_02_state_f16(const half_bits* __restrict__ x, float* __restrict__ planes,
                       const long long* __restrict__ targets, long long vocab_start, int n_rows, int n_cols,
                       long long x_row_stride, long long plane_stride, int group) {
    state_rows<F16Row>(x, planes, targets, vocab_start, n_rows, n_cols, x_row_stride, plane_stride, group);
}

extern "C" __global__ void __launch_bounds__(1024)
logsumexp_02_state_bf16(const bfloat16_bits* __restrict__ x, float* __restrict__ planes,
                        const long long* __restrict__ targets, long long vocab_start, int n_rows, int n_cols,
                        long long x_row_stride, long long plane_stride, int group) {
    state_rows<BF16Row>(x, planes, targets, vocab_start, n_rows, n_cols, x_row_stride, plane_stride, group);
}
