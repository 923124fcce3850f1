// row_max: the maximum of each row, one block per row, combined through shared memory and barriers.
extern "C" __global__ void row_max(const float* x, float* out, int n_cols) {
    __shared__ float partial[256];                    // one slot per thread of the block
    const float* row = x + (long long)blockIdx.x * n_cols;
    float m = -3.402823466e38f;                        // the lowest finite float
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) m = fmaxf(m, row[j]);
    partial[threadIdx.x] = m;
    __syncthreads();                                   // every slot written before any is read
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + half]);
        __syncthreads();                               // this step finished before the next reads it
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
