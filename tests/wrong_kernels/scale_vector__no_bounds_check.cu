// WRONG (for the grader's tests): no check of i < n: the last block's extra threads write past the end of y.
extern "C" __global__ void scale_vector(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = a * x[i];
}
