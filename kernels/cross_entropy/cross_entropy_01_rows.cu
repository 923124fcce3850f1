// cross_entropy_01_rows — cross-entropy from logits, one block per row: the loss and the LSE from
// one online pass over the row, and, when asked, the gradient from a second pass.
//
// For a row of logits x (V of them) with target t, in fp32 (x widened exactly as it is loaded):
//   s_j     = c tanh(x_j / c) with soft-capping (c = softcap > 0), else x_j
//   lse     = log sum_j e^{s_j}                  (the online (m, l) of online_state.cuh)
//   loss    = lse - (1 - eps) s_t - (eps / V) sum_j s_j + z lse^2
//           = log l + (1 - eps) (m - s_t) - (eps / V) sum_j (s_j - m) + z lse^2    (as computed: smooth_sum.cuh)
//   dx_j    = scale (p_j (1 + 2 z lse) - (1 - eps) [j = t] - eps / V) (1 - (s_j / c)^2 if capped)
// with p_j = e^{s_j - m} / l (= e^{s_j - lse}), eps the label smoothing, z the z-loss weight and scale = *grad_scale
// (1 / the number of counted rows for a mean, 1 for a sum; read from device memory, so that the
// count never comes to the host). A row whose target is ignore_index has loss 0 and dx = 0; its
// LSE is still written. The loss of row i is written to loss[i] and its LSE to lse[i] (fp32).
// dx may be x itself (the gradient written over the logits): each element is read and written by
// the same thread, and the target's logit is read before the block's barriers (x and dx are not
// __restrict__, for they may alias).
//
// Launch:  grid = (n_rows), block = (T), T a multiple of 32 up to 1024 chosen by the host from V;
//          vectors = 1 when every row of x and of dx starts on a 16-byte boundary (then V / VEC
//          16-byte vectors and a scalar tail; else scalar loads throughout).
// Traffic: x read twice (the second read from L2 while the rows in flight fit in it), dx written
//          once; without dx (grad_scale == nullptr) x is read once. 8 bytes of loss and LSE per row.
// Limits:  1 <= V <= 2^31 - 2^16; x and dx float32, float16 or bfloat16 (the same dtype), rows
//          strided (unit column stride); targets int64, each in [0, V) or ignore_index (the host
//          checks them). NaN in a row gives a NaN loss and a NaN gradient row, as torch.
#include "online_rows.cuh"
#include "smooth_sum.cuh"

__device__ __forceinline__ float capped(float x, float softcap) {
    return softcap > 0.0f ? softcap * tanhf(x / softcap) : x;
}

template <class Row>
__device__ __forceinline__ void cross_entropy_row(
    const typename Row::Elem* x, typename Row::Elem* dx, const long long* __restrict__ targets,
    float* __restrict__ loss, float* __restrict__ lse_out, const float* __restrict__ grad_scale, int n_cols,
    long long x_stride, long long dx_stride, int vectors, long long ignore_index, float label_smoothing,
    float z_loss, float softcap) {
    constexpr int VEC = Row::VEC;
    __shared__ OnlineState states[32];
    __shared__ float sums[32];   // (the smoothing sum's block reduction)
    const long long row = blockIdx.x;
    const typename Row::Elem* row_x = x + row * x_stride;
    const int n_vec = vectors ? n_cols / VEC : 0;
    const int tail = n_vec * VEC;
    const bool smoothing = label_smoothing != 0.0f;

    // pass 1: the online state and, with label smoothing, the sum of the (capped) logits less their maximum
    OnlineState s = online_identity();
    SmoothSum smooth;
    const typename Row::Vec* vec_x = reinterpret_cast<const typename Row::Vec*>(row_x);
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
        float v[VEC];
        Row::unpack(vec_x[i], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = capped(v[k], softcap);
        if (smoothing) smooth.push<VEC>(v);
        online_push_exp2<VEC>(s, v);
    }
    for (int j = tail + threadIdx.x; j < n_cols; j += blockDim.x) {
        const float v = capped(Row::load1(row_x + j), softcap);
        if (smoothing) smooth.push<1>(&v);
        online_push_exp2(s, v);
    }
    // the target's logit, read before the barriers below: after them, pass 2 may overwrite it
    const long long target = targets[row];
    const bool ignored = target == ignore_index;
    const float s_t = threadIdx.x == 0 && !ignored ? capped(Row::load1(row_x + target), softcap) : 0.0f;
    const OnlineState whole = online_block_reduce(s, states);
    const float below = smoothing ? block_reduce<false>(smooth.below(whole.m), sums) : 0.0f;   // sum of (s_j - m)
    const float lse = whole.m + logf(whole.l);   // -inf + log 0 only for an all -inf row: -inf

    if (threadIdx.x == 0) {
        // lse - (1 - eps) s_t - eps mean(s), written around m: (m - s_t) keeps the digits that
        // m + log l would round away when |m| is near the dtype's largest value.
        const float value = logf(whole.l) + (1.0f - label_smoothing) * (whole.m - s_t)
                            - (smoothing ? label_smoothing * (below / n_cols) : 0.0f) + z_loss * lse * lse;
        loss[row] = ignored ? 0.0f : value;
        lse_out[row] = lse;
    }
    if (grad_scale == nullptr) return;

    // pass 2: the gradient, written in place of x or to its own buffer
    typename Row::Elem* row_dx = dx + row * dx_stride;
    const float scale = ignored ? 0.0f : *grad_scale;
    // p_j = e^{s_j - m} / l, from the state rather than e^{s_j - lse}: where |m| is so large that
    // lse = m + log l rounds back to m (rows of -3e38), e^{s_j - lse} would sum to l, not 1.
    const float p_scale = scale * (1.0f + 2.0f * z_loss * lse) / whole.l;
    const float uniform = scale * label_smoothing / n_cols;
    const float hit = scale * (1.0f - label_smoothing);
    auto gradient = [&](float x_j, int j) {
        const float s_j = capped(x_j, softcap);
        float g = p_scale * expf(s_j - whole.m) - uniform - (j == target ? hit : 0.0f);
        if (softcap > 0.0f) g *= 1.0f - (s_j / softcap) * (s_j / softcap);
        return ignored ? 0.0f : g;   // 0, never 0 * NaN, on an ignored row
    };
    typename Row::Vec* vec_dx = reinterpret_cast<typename Row::Vec*>(row_dx);
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
        float v[VEC];
        Row::unpack(vec_x[i], v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = gradient(v[k], i * VEC + k);
        vec_dx[i] = Row::pack(v);
    }
    for (int j = tail + threadIdx.x; j < n_cols; j += blockDim.x)
        row_dx[j] = Row::from_float(gradient(Row::load1(row_x + j), j));
}

#define CROSS_ENTROPY_ARGS(ROW)                                                                         \
    const ROW::Elem *x, ROW::Elem *dx, const long long *__restrict__ targets,              \
        float *__restrict__ loss, float *__restrict__ lse, const float *__restrict__ grad_scale, int n_cols, \
        long long x_stride, long long dx_stride, int vectors, long long ignore_index, float label_smoothing, \
        float z_loss, float softcap

extern "C" __global__ void __launch_bounds__(1024) cross_entropy_01_rows_f32(CROSS_ENTROPY_ARGS(F32Row)) {
    cross_entropy_row<F32Row>(x, dx, targets, loss, lse, grad_scale, n_cols, x_stride, dx_stride, vectors,
                              ignore_index, label_smoothing, z_loss, softcap);
}

extern "C" __global__ void __launch_bounds__(1024) cross_entropy_01_rows_f16(CROSS_ENTROPY_ARGS(F16Row)) {
    cross_entropy_row<F16Row>(x, dx, targets, loss, lse, grad_scale, n_cols, x_stride, dx_stride, vectors,
                              ignore_index, label_smoothing, z_loss, softcap);
}

extern "C" __global__ void __launch_bounds__(1024) cross_entropy_01_rows_bf16(CROSS_ENTROPY_ARGS(BF16Row)) {
    cross_entropy_row<BF16Row>(x, dx, targets, loss, lse, grad_scale, n_cols, x_stride, dx_stride, vectors,
                               ignore_index, label_smoothing, z_loss, softcap);
}

// The public call's two steps around the row kernel (this one or cross_entropy_02_cluster), one block
// of up to 1024 threads each, so that the targets and the loss never cost a host round trip or a
// string of small launches (onlinesoftmax/loss.py launches them).
//
// _targets: clean[i] = targets[i], or ignore_index where targets[i] is outside [0, V) and is not
// ignore_index (that row then counts as ignored: no loss, no gradient); counts[0] = the rows with a
// target in [0, V), counts[1] = 1 if some target was outside, else 0; grad_scale = 1 / max(counts[0], 1)
// for a mean (mean = 1), else 1.
extern "C" __global__ void __launch_bounds__(1024) cross_entropy_01_rows_targets(
    const long long* __restrict__ targets, long long* __restrict__ clean, long long n_rows, long long n_cols,
    long long ignore_index, int mean, long long* __restrict__ counts, float* __restrict__ grad_scale) {
    __shared__ long long warp_counts[32];
    long long counted = 0;
    int outside = 0;
    for (long long i = threadIdx.x; i < n_rows; i += blockDim.x) {
        const long long t = targets[i];
        const bool bad = t != ignore_index && (t < 0 || t >= n_cols);
        clean[i] = bad ? ignore_index : t;
        counted += (!bad && t != ignore_index) ? 1 : 0;
        outside |= bad;
    }
    for (int offset = 16; offset > 0; offset /= 2)
        counted += __shfl_xor_sync(0xffffffffu, counted, offset);
    if (threadIdx.x % 32 == 0)
        warp_counts[threadIdx.x / 32] = counted;
    outside = __syncthreads_or(outside);
    if (threadIdx.x == 0) {
        long long total = 0;
        for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w)   // in warp order: the same sum every launch
            total += warp_counts[w];
        counts[0] = total;
        counts[1] = outside ? 1 : 0;
        *grad_scale = mean ? 1.0f / (float)(total > 1 ? total : 1) : 1.0f;
    }
}

// _reduce: the loss from the rows' losses. With mark_outside, a row whose target was outside [0, V)
// (and not ignore_index) gets a NaN loss, written back to rows (so a sum or a mean over it is NaN,
// never a silently smaller loss). With reduce (1 for a sum, 2 for a mean), *loss = the rows' sum,
// taken in double in a fixed order (per thread, then per warp, then over the warps), divided by
// counts[0] for a mean (0 / 0 = NaN when no row counted, as torch's mean).
extern "C" __global__ void __launch_bounds__(1024) cross_entropy_01_rows_reduce(
    float* __restrict__ rows, const long long* __restrict__ targets, long long n_rows, long long n_cols,
    long long ignore_index, int mark_outside, int reduce, const long long* __restrict__ counts,
    float* __restrict__ loss) {
    __shared__ double warp_sums[32];
    double sum = 0.0;
    for (long long i = threadIdx.x; i < n_rows; i += blockDim.x) {
        float value = rows[i];
        if (mark_outside) {
            const long long t = targets[i];
            if (t != ignore_index && (t < 0 || t >= n_cols)) {
                value = __int_as_float(0x7fc00000);   // NaN
                rows[i] = value;
            }
        }
        sum += (double)value;
    }
    if (!reduce)
        return;
    for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0)
        warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w)
            total += warp_sums[w];
        *loss = (float)(reduce == 2 ? total / (double)counts[0] : total);
    }
}
