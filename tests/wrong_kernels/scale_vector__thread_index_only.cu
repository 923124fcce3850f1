// WRONG (for the grader's tests): i = threadIdx.x: every block writes the first 256 elements.
extern "C" __global__ void scale_vector(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    const int i = threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
