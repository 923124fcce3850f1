// log_softmax_01_online — y = x - LSE(x) = (x - m) - log l per row: statistics, then output.
//
// Changed from logsumexp_01_online: a second pass writes every element. The statistics pass
//               is the same (online_rows.cuh); the output pass reads the row again with
//               16-byte loads and writes (x - m) - log l, subtracting m first so that x - m
//               is exact near the maximum. Stores are 16-byte vectors when y has the same
//               alignment as x within 16 bytes, else scalar stores. One body, three entries,
//               one per dtype, y in x's dtype: log_softmax_01_online_f32, _f16 and _bf16
//               (fp16 / bf16 as 16-bit words, converted with PTX cvt in half.cuh, 8 per
//               16-byte vector; all arithmetic in fp32, one rounding per output).
// Launch:       as logsumexp_01_online: block = (max(256, group)),
//               grid = (ceil(n_rows / (block / group))); static shared memory 32 states.
// Traffic:      2 reads + 1 write per element (12 B fp32, 6 B fp16 / bf16) vs the ideal 1 + 1.
// Limits:       x and y float32, float16 or bfloat16 (the same dtype); 1 <= n_cols <=
//               2^31 - 2^16; rows strided (unit column stride), any start; group a power of
//               two in 1 .. 1024. A row of all -inf gives NaN (-inf - -inf, as torch); a row
//               holding NaN or +inf gives NaN; an element -inf gives -inf. bf16 rounds with
//               cvt.rn.bf16x2 on sm_80+, with the same rounding on the bits below (half.cuh).
#include "online_rows.cuh"

template <class Row>
__device__ __forceinline__ void log_softmax_rows(const typename Row::Elem* __restrict__ x,
                                                 typename Row::Elem* __restrict__ y, int n_rows,
                                                 int n_cols, long long x_row_stride,
                                                 long long y_row_stride, int group) {
    constexpr int VEC = Row::VEC, UNROLL = Row::UNROLL;
    __shared__ OnlineState scratch[32];
    const int lane = threadIdx.x & (group - 1);
    const long long row =
        static_cast<long long>(blockIdx.x) * (blockDim.x / group) + threadIdx.x / group;
    const bool active = row < n_rows;
    const typename Row::Elem* row_x = x + (active ? row : 0) * x_row_stride;
    typename Row::Elem* row_y = y + (active ? row : 0) * y_row_stride;

    OnlineState s = online_identity();  // pass 1: statistics
    if (active) s = row_online_state<Row>(row_x, n_cols, lane, group);
    s = online_group_reduce(s, group, scratch);
    if (!active) return;  // after the last barrier

    const float m = s.m, log_l = logf(s.l);  // pass 2: the output
    const RowSplit split = row_split<Row>(row_x, n_cols);
    const bool y_vector = Row::to_alignment(row_y) == Row::to_alignment(row_x);
    const typename Row::Vec* x_vec = reinterpret_cast<const typename Row::Vec*>(row_x + split.head);
    for (int i = lane; i < split.head; i += group)
        row_y[i] = Row::from_float((Row::load1(row_x + i) - m) - log_l);
    for (int first = lane; first < split.n_vec; first += group * UNROLL) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (first + u * group < split.n_vec) Row::unpack(x_vec[first + u * group], v[u]);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int index = first + u * group;
            if (index >= split.n_vec) break;
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[u][k] = (v[u][k] - m) - log_l;
            typename Row::Elem* out = row_y + split.head + static_cast<long long>(index) * VEC;
            if (y_vector) {
                *reinterpret_cast<typename Row::Vec*>(out) = Row::pack(v[u]);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; ++k) out[k] = Row::from_float(v[u][k]);
            }
        }
    }
    for (int i = split.tail + lane; i < n_cols; i += group)
        row_y[i] = Row::from_float((Row::load1(row_x + i) - m) - log_l);
}

extern "C" __global__ void __launch_bounds__(1024)
log_softmax_01_online_f32(const float* __restrict__ x, float* __restrict__ y, int n_rows, int n_cols,
                          long long x_row_stride, long long y_row_stride, int group) {
    log_softmax_rows<F32Row>(x, y, n_rows, n_cols, x_row_stride, y_row_stride, group);
}

extern "C" __global__ void __launch_bounds__(1024)
log_softmax_01_online_f16(const half_bits* __restrict__ x, half_bits* __restrict__ y, int n_rows,
                          int n_cols, long long x_row_stride, long long y_row_stride, int group) {
    log_softmax_rows<F16Row>(x, y, n_rows, n_cols, x_row_stride, y_row_stride, group);
}

extern "C" __global__ void __launch_bounds__(1024)
log_softmax_01_online_bf16(const bfloat16_bits* __restrict__ x, bfloat16_bits* __restrict__ y,
                           int n_rows, int n_cols, long long x_row_stride, long long y_row_stride,
                           int group) {
    log_softmax_rows<BF16Row>(x, y, n_rows, n_cols, x_row_stride, y_row_stride, group);
}
