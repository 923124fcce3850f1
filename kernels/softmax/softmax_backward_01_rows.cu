// softmax_backward_01_rows — the gradient of softmax: dx = y * (dy - sum_j y_j dy_j) per row.
//
// Reads y (the forward's output) and dy, never x: one row reduction, then one output pass
// (kernels/common/backward_rows.cuh). One entry per dtype, dx in y's dtype, all arithmetic fp32:
// softmax_backward_01_rows_f32, _f16 and _bf16.
// Launch:  block = (max(256, group)), grid = (ceil(n_rows / (block / group))); group a power of
//          two in 1 .. 1024 chosen from N by the host; vectors = 1 when every row of y, dy and dx
//          starts on a 16-byte boundary.
// Traffic: 2 reads of y and dy (the second from cache where the rows in flight fit) + 1 write.
// Limits:  1 <= n_cols <= 2^31 - 2^16; rows strided (unit column stride). NaN in y or dy gives a
//          NaN row (the sum is NaN), as torch.
#include "backward_rows.cuh"

extern "C" __global__ void __launch_bounds__(1024)
softmax_backward_01_rows_f32(const F32Row::Elem* __restrict__ y, const F32Row::Elem* __restrict__ dy,
                             F32Row::Elem* __restrict__ dx, int n_rows, int n_cols, long long y_stride,
                             long long dy_stride, long long dx_stride, int group, int vectors) {
    backward_rows<F32Row, false>(y, dy, dx, n_rows, n_cols, y_stride, dy_stride, dx_stride, group, vectors);
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_backward_01_rows_f16(const F16Row::Elem* __restrict__ y, const F16Row::Elem* __restrict__ dy,
                             F16Row::Elem* __restrict__ dx, int n_rows, int n_cols, long long y_stride,
                             long long dy_stride, long long dx_stride, int group, int vectors) {
    backward_rows<F16Row, false>(y, dy, dx, n_rows, n_cols, y_stride, dy_stride, dx_stride, group, vectors);
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_backward_01_rows_bf16(const BF16Row::Elem* __restrict__ y, const BF16Row::Elem* __restrict__ dy,
                              BF16Row::Elem* __restrict__ dx, int n_rows, int n_cols, long long y_stride,
                              long long dy_stride, long long dx_stride, int group, int vectors) {
    backward_rows<BF16Row, false>(y, dy, dx, n_rows, n_cols, y_stride, dy_stride, dx_stride, group, vectors);
}
