// row_dot.cuh — D = rowsum(dO * O), the one number per query row that the attention backward
// kernels subtract from dP (dS = P (dP - D)): one warp per row, fp32 sums of any element type.
#pragma once
#include "online_rows.cuh"

// dot: D[row] = dO[row] . O[row], one warp per row.
template <class Row>
__device__ __forceinline__ void attention_backward_dot(const typename Row::Elem* __restrict__ out,
                                                       const typename Row::Elem* __restrict__ dout,
                                                       float* __restrict__ delta, int d) {
    const long long row = blockIdx.x;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < d; i += 32)
        sum = fmaf(Row::load1(out + row * d + i), Row::load1(dout + row * d + i), sum);
    sum = warp_sum(sum);
    if (threadIdx.x == 0) delta[row] = sum;
}
