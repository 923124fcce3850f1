// logsumexp_01_online — LSE(x) = m + log l per row, from the online state, in one read.
//
// Changed from softmax_02_online: no output pass — the row's (m, l) is the answer, so each
//               element is read once and one float per row is written. The kernel is built
//               to run at the read bandwidth: 16-byte loads (per-row scalar head and tail,
//               so any row start and stride work), four loads in flight per lane before any
//               is used, one re-scale per 16 elements and exp2f with log2 e folded in
//               (online_rows.cuh). Rows are owned by groups of `group` lanes chosen from N
//               by the launcher: a few lanes for short rows (many rows per block), up to
//               1024 for long rows. One body, three entries, one per input dtype:
//               logsumexp_01_online_f32, _f16 and _bf16 (fp16 / bf16 widened exactly to
//               fp32 as they are loaded, 8 per 16-byte vector, 2 vectors in flight per step).
// Launch:       block = (max(256, group)), grid = (ceil(n_rows / (block / group))); static
//               shared memory 32 states (256 B), used only when group > 32.
// Traffic:      1 read per element + 1 write per row (4 B per element for fp32, 2 B for fp16
//               and bf16, plus 4 B per row): the ideal.
// Limits:       x float32, float16 or bfloat16; the LSE always float32 (one value per row,
//               contiguous), whatever x's dtype; all arithmetic in fp32. 1 <= n_cols <=
//               2^31 - 2^16; rows may be strided (unit column stride) and start at any
//               element; group a power of two in 1 .. 1024. A row of all -inf gives -inf
//               (log 0), a row holding NaN gives NaN, and one holding +inf but no NaN gives
//               +inf (lse_rows.cuh: such a row is read a second time), as torch and SciPy do.
#include "lse_rows.cuh"

template <class Row>
__device__ __forceinline__ void logsumexp_rows(const typename Row::Elem* __restrict__ x,
                                               float* __restrict__ lse, int n_rows, int n_cols,
                                               long long x_row_stride, int group) {
    __shared__ OnlineState scratch[32];
    const int lane = threadIdx.x & (group - 1);
    const long long row =
        static_cast<long long>(blockIdx.x) * (blockDim.x / group) + threadIdx.x / group;
    const bool active = row < n_rows;  // a block's last groups may have no row; they still reduce

    OnlineState s = online_identity();
    if (active) s = row_online_state<Row>(x + row * x_row_stride, n_cols, lane, group);
    s = online_group_reduce(s, group, scratch);
    const float row_value = row_lse<Row>(s, x + row * x_row_stride, n_cols, lane, group, active, scratch);
    if (active && lane == 0) lse[row] = row_value;
}

extern "C" __global__ void __launch_bounds__(1024)
logsumexp_01_online_f32(const float* __restrict__ x, float* __restrict__ lse, int n_rows, int n_cols,
                        long long x_row_stride, int group) {
    logsumexp_rows<F32Row>(x, lse, n_rows, n_cols, x_row_stride, group);
}

extern "C" __global__ void __launch_bounds__(1024)
logsumexp_01_online_f16(const half_bits* __restrict__ x, float* __restrict__ lse, int n_rows,
                        int n_cols, long long x_row_stride, int group) {
    logsumexp_rows<F16Row>(x, lse, n_rows, n_cols, x_row_stride, group);
}

extern "C" __global__ void __launch_bounds__(1024)
logsumexp_01_online_bf16(const bfloat16_bits* __restrict__ x, float* __restrict__ lse, int n_rows,
                         int n_cols, long long x_row_stride, int group) {
    logsumexp_rows<BF16Row>(x, lse, n_rows, n_cols, x_row_stride, group);
}
