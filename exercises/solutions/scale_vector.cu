// scale_vector (solution) — your first kernel: y = a * x, one thread per element. Thread i of the
// grid is blockIdx.x * blockDim.x + threadIdx.x; the grid has ceil(n / 256) blocks of 256 threads,
// so the last block may have threads past the end of the vector: they write nothing.
extern "C" __global__ void scale_vector(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
