// numeric.cuh — constants and plain (max, sum) reductions shared by the kernels.
// NVRTC has no math.h, so INFINITY is not defined: build -inf from its bits.
#pragma once

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// xor butterflies over offsets below `width` (see online_warp_reduce).
__device__ __forceinline__ float warp_max(float v, int width = 32) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        if (offset < width) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v, int width = 32) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        if (offset < width) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Same layout as online_block_reduce: butterfly per warp, one value per warp in
// `scratch` (32 floats), warp 0 finishes with the identity in the unused lanes.
template <bool IsMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n_warps = (blockDim.x + 31) >> 5;
    v = IsMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? scratch[lane] : (IsMax ? neg_inf() : 0.0f);
        v = IsMax ? warp_max(v, n_warps) : warp_sum(v, n_warps);
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    const float row = scratch[0];
    __syncthreads();  // scratch may be reused right after return
    return row;
}

__device__ __forceinline__ float block_max(float v, float* scratch) { return block_reduce<true>(v, scratch); }
__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_reduce<false>(v, scratch); }
