// vector_add: c = a + b, one thread per element (chapters/00_first_kernel.md).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // this thread's element
    if (i < n) c[i] = a[i] + b[i];                    // the last block may run past the end
}
