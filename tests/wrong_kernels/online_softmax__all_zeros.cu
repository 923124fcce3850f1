// WRONG (for the grader's tests): writes 0 everywhere. On long rows every true output is small (about
// 1 / N), so a fixed absolute tolerance would pass it; the grader's tolerance is scaled to each case's values.
extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                          long long x_row_stride, long long y_row_stride) {
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) y[blockIdx.x * y_row_stride + j] = 0.0f;
}
