// row_max: the same maximum, combined within each warp by shuffles, then across the block's warps.
__device__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));   // all 32 lanes take part
    return v;
}

extern "C" __global__ void row_max(const float* x, float* out, int n_cols) {
    __shared__ float per_warp[32];                      // at most 1024 threads: 32 warps
    const float* row = x + (long long)blockIdx.x * n_cols;
    float m = -3.402823466e38f;
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) m = fmaxf(m, row[j]);
    m = warp_max(m);                                    // every lane: its warp's maximum
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) per_warp[warp] = m;
    __syncthreads();
    if (warp == 0) {                                    // warp 0 combines the warps' maxima
        m = lane < blockDim.x / 32 ? per_warp[lane] : -3.402823466e38f;
        m = warp_max(m);
        if (lane == 0) out[blockIdx.x] = m;
    }
}
