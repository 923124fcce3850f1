// cross_entropy_03_from_lse — the gradient of cross-entropy over a block of each row's columns, from
// statistics of the whole row saved earlier: one pass that reads the block's logits and writes their
// gradient over them.
//
// x holds columns first .. first + n_cols - 1 of rows of V logits (V known to the host only through
// uniform). For row i, m[i] is the largest (capped) logit of the whole row and log_l[i] the log of
// l = sum_j e^{s_j - m} over the whole row. In fp32 (x widened exactly as it is loaded):
//   s_j  = c tanh(x_j / c) with soft-capping (c = softcap > 0), else x_j
//   p_j  = e^{(s_j - m) - log l}                     (s_j - m first: near 0 for the large terms)
//   dx_j = scale (p_j (1 + 2 z lse) - uniform - hit [first + j = t]) (1 - tanh(x_j / c)^2 if capped)
// with lse = m + log l, z the z-loss weight, uniform = eps / V and hit = 1 - eps (eps the label
// smoothing), scale the reduction's (1 / the counted rows for a mean). A row whose target is
// ignore_index gets dx = 0 (never 0 * NaN). The products are taken in that order, each rounded in fp32,
// then dx is rounded once to x's dtype.
//
// Launch:  grid = (n_rows), block = (T), T a multiple of 32 up to 1024 chosen by the host from n_cols;
//          vectors = 1 when every row starts on a 16-byte boundary (then n_cols / VEC 16-byte vectors
//          and a scalar tail; else scalar throughout). Each element is read and written by one thread.
// Traffic: x read once and written once; m, log l and the target once per row.
// Limits:  1 <= n_cols <= 2^31 - 2^16; x float32, float16 or bfloat16, rows strided (unit column stride);
//          targets int64 (any value: only equality with first + j and with ignore_index is tested).
#include "online_rows.cuh"

template <class Row>
__device__ __forceinline__ void gradient_from_lse(
    typename Row::Elem* x, long long stride, int n_cols, const float* __restrict__ m_rows,
    const float* __restrict__ log_l_rows, const long long* __restrict__ targets, long long first,
    long long ignore_index, int vectors, float scale, float uniform, float hit, float z_loss, float softcap) {
    constexpr int VEC = Row::VEC, U = Row::UNROLL;
    const long long row = blockIdx.x;
    typename Row::Elem* row_x = x + row * stride;
    const long long target = targets[row];
    const bool ignored = target == ignore_index;
    const long long target_col = ignored ? -1 : target - first;   // outside [0, n_cols): not in this block
    const float m = m_rows[row], log_l = log_l_rows[row];
    const float lse_factor = 1.0f + 2.0f * z_loss * (m + log_l);
    auto gradient = [&](float x_j, int j) {
        float s_j = x_j, slope = 1.0f;
        if (softcap > 0.0f) {
            const float t = tanhf(x_j / softcap);
            s_j = softcap * t;
            slope = 1.0f - t * t;
        }
        float g = expf((s_j - m) - log_l);
        if (z_loss != 0.0f) g *= lse_factor;
        g -= uniform;
        if (j == target_col) g -= hit;
        if (softcap > 0.0f) g *= slope;
        return ignored ? 0.0f : g * scale;
    };
    const int n_vec = vectors ? n_cols / VEC : 0;
    typename Row::Vec* vec_x = reinterpret_cast<typename Row::Vec*>(row_x);
    // U vectors in flight per thread before any is used (the pass has nothing else to hide latency with)
    for (int begin = threadIdx.x; begin < n_vec; begin += blockDim.x * U) {
        typename Row::Vec raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (begin + u * blockDim.x < n_vec) raw[u] = vec_x[begin + u * blockDim.x];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = begin + u * blockDim.x;
            if (i < n_vec) {
                float v[VEC];
                Row::unpack(raw[u], v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) v[k] = gradient(v[k], i * VEC + k);
                vec_x[i] = Row::pack(v);
            }
        }
    }
    for (int j = n_vec * VEC + threadIdx.x; j < n_cols; j += blockDim.x)
        row_x[j] = Row::from_float(gradient(Row::load1(row_x + j), j));
}

#define FROM_LSE_ARGS(ROW)                                                                                \
    ROW::Elem *x, long long stride, int n_cols, const float *__restrict__ m, const float *__restrict__ log_l, \
        const long long *__restrict__ targets, long long first, long long ignore_index, int vectors, float scale, \
        float uniform, float hit, float z_loss, float softcap
#define FROM_LSE_CALL x, stride, n_cols, m, log_l, targets, first, ignore_index, vectors, scale, uniform, hit, z_loss, softcap

extern "C" __global__ void __launch_bounds__(1024) cross_entropy_03_from_lse_f32(FROM_LSE_ARGS(F32Row)) {
    gradient_from_lse<F32Row>(FROM_LSE_CALL);
}

extern "C" __global__ void __launch_bounds__(1024) cross_entropy_03_from_lse_f16(FROM_LSE_ARGS(F16Row)) {
    gradient_from_lse<F16Row>(FROM_LSE_CALL);
}

extern "C" __global__ void __launch_bounds__(1024) cross_entropy_03_from_lse_bf16(FROM_LSE_ARGS(BF16Row)) {
    gradient_from_lse<BF16Row>(FROM_LSE_CALL);
}
