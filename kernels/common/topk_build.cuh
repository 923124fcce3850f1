// topk_build.cuh — which entries of a softmax_topk kernel file a build compiles.
//
// A build with no defines compiles every entry (the CI compile check does that). A build with
// -DTOPK_BUILD_ROW=<0 f32, 1 f16, 2 bf16> (and, for the kernels with a list, -DTOPK_BUILD_K=<K>)
// gives every other entry an empty body: the launchers ask for the entry they launch this way,
// so a process compiles what it runs (about a tenth of the time of a whole file) and the entry
// it gets is the same code as in the whole build.
#pragma once
#include "online_rows.cuh"

template <class Row> __host__ __device__ constexpr int row_id();
template <> __host__ __device__ constexpr int row_id<F32Row>() { return 0; }
template <> __host__ __device__ constexpr int row_id<F16Row>() { return 1; }
template <> __host__ __device__ constexpr int row_id<BF16Row>() { return 2; }
template <class Row>
__host__ __device__ constexpr bool topk_builds_row() {
#if defined(TOPK_BUILD_ROW)
    return row_id<Row>() == TOPK_BUILD_ROW;
#else
    return true;
#endif
}
template <class Row, int K>
__host__ __device__ constexpr bool topk_builds() {
#if defined(TOPK_BUILD_K)
    return topk_builds_row<Row>() && K == TOPK_BUILD_K;
#else
    return topk_builds_row<Row>();
#endif
}

