// three_pass_softmax — your kernel. One block of 256 threads per row of x (row i starts at
// x + i * x_row_stride); write softmax of the row to y (row i at y + i * y_row_stride), in three
// passes over the row, each a strided loop j = threadIdx.x, threadIdx.x + 256, ...:
//   1. m = the row's maximum (each thread its slice, then the block: a warp butterfly with
//      __shfl_xor_sync, one value per warp through shared memory, a butterfly over the warps);
//   2. s = the sum of e^(x_j - m), reduced over the block the same way;
//   3. y_j = e^(x_j - m) / s.
// A row of all -inf must give NaN (as torch.softmax); a row with some -inf must not.
// Then compare it with your online_softmax: kernel_exercises.compare("three_pass_softmax", "online_softmax").
// Grade it from the chapter: kernel_exercises.grade("three_pass_softmax").
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void three_pass_softmax(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                              long long x_row_stride, long long y_row_stride) {
    // TODO: your kernel
}
