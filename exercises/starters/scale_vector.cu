// scale_vector — your first kernel: y = a * x, one thread per element.
// The grader launches it on ceil(n / 256) blocks of 256 threads. Work out which element this thread
// owns from blockIdx.x, blockDim.x and threadIdx.x, and write y for it; the last block may have
// threads past the end of the vector. Grade it: kernel_exercises.grade("scale_vector").
extern "C" __global__ void scale_vector(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    // your code here
}
