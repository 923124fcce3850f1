// backward_rows.cuh — the gradients of softmax and log-softmax, one row reduction each.
//
//   softmax:      y = softmax(x),      dx = y * (dy - s),        s = sum_j y_j dy_j
//   log-softmax:  y = log_softmax(x),  dx = dy - e^y * s,        s = sum_j dy_j
//
// Both read y and dy, reduce one number per row, then read them again and write dx. The second
// read of a row is saved where the row fits the group's registers (up to BACKWARD_CACHE vectors of y and
// of dy per lane), else it follows the first at once and is served from L1/L2 where the rows in
// flight fit. Layout as online_rows.cuh: the `group` lanes of a row (a power of two,
// 1 .. 1024) are consecutive threads, a block holds blockDim.x / group rows. With `vectors` set
// (every row of y, dy and dx starts on a 16-byte boundary; the host checks the addresses and
// strides) the rows move in 16-byte vectors with a scalar tail, else element by element.
// Lane t takes vectors t, t + group, ... then tail elements t, t + group, ...; its partial sum is
// fp32 in that order (each product rounded, then added: never fused, as the NumPy model rounds), then an xor butterfly in the warp and, for groups above 32, a sum over the
// group's warps in shared memory (in warp order): the same order for every launch.
#pragma once
#include "online_rows.cuh"

#define BACKWARD_CACHE 4  // 16-byte vectors of y and of dy a lane keeps in registers (backward.py: CACHED)

__device__ __forceinline__ float backward_group_sum(float s, int group, float* partial) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        if (offset < group) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (group > 32) {
        const int warp = threadIdx.x >> 5, warps = group >> 5;
        if ((threadIdx.x & 31) == 0) partial[warp] = s;
        __syncthreads();
        const int first = (warp / warps) * warps;
        s = 0.0f;
        for (int w = 0; w < warps; ++w) s += partial[first + w];
    }
    return s;
}

// One element of dx from y (a), dy (b) and the row's sum s, rounded at each step as written (no fused
// multiply-add: the NumPy model rounds the product and the difference each once).
template <bool LOG>
__device__ __forceinline__ float backward_element(float a, float b, float s) {
    return LOG ? __fadd_rn(b, -__fmul_rn(expf(a), s)) : __fmul_rn(a, __fadd_rn(b, -s));
}

// LOG = false: softmax's gradient; LOG = true: log-softmax's.
template <class Row, bool LOG>
__device__ __forceinline__ void backward_rows(const typename Row::Elem* __restrict__ y,
                                              const typename Row::Elem* __restrict__ dy,
                                              typename Row::Elem* __restrict__ dx, int n_rows, int n_cols,
                                              long long y_stride, long long dy_stride, long long dx_stride,
                                              int group, int vectors) {
    using Vec = typename Row::Vec;
    constexpr int VEC = Row::VEC;
    __shared__ float partial[32];
    const int lane = threadIdx.x & (group - 1);
    const long long row =
        static_cast<long long>(blockIdx.x) * (blockDim.x / group) + threadIdx.x / group;
    const bool active = row < n_rows;
    const long long r = active ? row : 0;
    const typename Row::Elem* row_y = y + r * y_stride;
    const typename Row::Elem* row_dy = dy + r * dy_stride;
    typename Row::Elem* row_dx = dx + r * dx_stride;
    const int n_vec = vectors ? n_cols / VEC : 0;
    const int tail = n_vec * VEC;
    const Vec* y_vec = reinterpret_cast<const Vec*>(row_y);
    const Vec* dy_vec = reinterpret_cast<const Vec*>(row_dy);

    // A lane with at most BACKWARD_CACHE vectors keeps them in registers between the passes (the
    // host sizes the group for it where it can: rows up to 4 * 1024 vectors); else pass 2 reads again.
    const bool cached = n_vec <= BACKWARD_CACHE * group;
    Vec y_kept[BACKWARD_CACHE], dy_kept[BACKWARD_CACHE];
    float s = 0.0f;  // pass 1: the row's sum
    if (active) {
        if (cached) {
#pragma unroll
            for (int c = 0; c < BACKWARD_CACHE; ++c) {
                const int i = lane + c * group;
                if (i < n_vec) y_kept[c] = y_vec[i], dy_kept[c] = dy_vec[i];
            }
#pragma unroll
            for (int c = 0; c < BACKWARD_CACHE; ++c) {
                if (lane + c * group >= n_vec) break;
                float a[VEC], b[VEC];
                Row::unpack(y_kept[c], a);
                Row::unpack(dy_kept[c], b);
#pragma unroll
                for (int k = 0; k < VEC; ++k) s = __fadd_rn(s, LOG ? b[k] : __fmul_rn(a[k], b[k]));
            }
        } else {
#pragma unroll 4
            for (int i = lane; i < n_vec; i += group) {
                float a[VEC], b[VEC];
                Row::unpack(y_vec[i], a);
                Row::unpack(dy_vec[i], b);
#pragma unroll
                for (int k = 0; k < VEC; ++k) s = __fadd_rn(s, LOG ? b[k] : __fmul_rn(a[k], b[k]));
            }
        }
        for (int i = tail + lane; i < n_cols; i += group)
            s = __fadd_rn(s, LOG ? Row::load1(row_dy + i) : __fmul_rn(Row::load1(row_y + i), Row::load1(row_dy + i)));
    }
    s = backward_group_sum(s, group, partial);
    if (!active) return;  // after the last barrier

    Vec* dx_vec = reinterpret_cast<Vec*>(row_dx);  // pass 2: dx
    if (cached) {
#pragma unroll
        for (int c = 0; c < BACKWARD_CACHE; ++c) {
            const int i = lane + c * group;
            if (i >= n_vec) break;
            float a[VEC], b[VEC];
            Row::unpack(y_kept[c], a);
            Row::unpack(dy_kept[c], b);
#pragma unroll
            for (int k = 0; k < VEC; ++k) a[k] = backward_element<LOG>(a[k], b[k], s);
            dx_vec[i] = Row::pack(a);
        }
    } else {
#pragma unroll(LOG ? 2 : 4)  // e^y: fewer vectors in flight, no spills
        for (int i = lane; i < n_vec; i += group) {
            float a[VEC], b[VEC];
            Row::unpack(y_vec[i], a);
            Row::unpack(dy_vec[i], b);
#pragma unroll
            for (int k = 0; k < VEC; ++k) a[k] = backward_element<LOG>(a[k], b[k], s);
            dx_vec[i] = Row::pack(a);
        }
    }
    for (int i = tail + lane; i < n_cols; i += group) {
        const float a = Row::load1(row_y + i), b = Row::load1(row_dy + i);
        row_dx[i] = Row::from_float(backward_element<LOG>(a, b, s));
    }
}
