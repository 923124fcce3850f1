// softmax_14_registers_masked — softmax_07 / 08 (the row in registers) with softmax_03's masks fused in.
//
// Changed from softmax_07 / 08: each logit is formed as it arrives in registers,
//               v_j = fill            if j >= limit(i)   (causal / padding),
//               v_j = x_ij + mask_ij  otherwise          (additive mask, optional),
//               with limit(i), causal_rows and mask_rows exactly as in softmax_03_online_masked
//               (causal top-left aligned like torch's is_causal; a mask of mask_rows rows used
//               in turn). Then the one-pass register softmax of softmax_07 / 08 runs on v: x and the
//               mask are each read once, y written once. A vector wholly past the limit is not
//               loaded (a causal mask on a square matrix reads about half of x); one that
//               straddles it is loaded and its elements past the limit replaced by `fill`.
//               Columns past N are padding (-inf), never `fill`, so a finite fill on a fully
//               masked row gives the uniform 1/N and fill = -inf gives NaN (0/0), as torch.
//               e^(v - m) takes the subtraction first (vec_io.cuh's exp_sub), so a fill of
//               -FLT_MAX is safe and a 16-bit row gives exactly the fp32 build's result on the
//               widened row, rounded once.
// Launch:       rows up to 1024: softmax_07's layout, a group of G lanes per row, 128 / G rows
//               per block, no shared memory (entries ..._<dtype>_v<V>_n<NV>_g<G>, config_07);
//               longer rows up to 32K: softmax_08's, grid = n_rows, block = T threads, 32
//               states (256 B) of static shared memory (entries ..._<dtype>_v<V>_n<NV>_t<T>,
//               config_08).
// Traffic:      at most 1 read + 1 write per element of x (the ideal; no read past the limit),
//               plus one 4-byte read per kept element of an additive mask of rows x N (a
//               broadcast row is re-read from L2).
// Limits:       n_cols <= NV * T * V (32768); x and y float32, float16 or bfloat16 (the same
//               dtype), the mask and `fill` float32; V > 1 needs x's and y's rows on 16 bytes,
//               n_cols % V == 0 and the mask's rows on 16 bytes (the launcher checks and
//               falls back to V = 1, any alignment). mask == nullptr: no additive mask;
//               valid_lengths == nullptr: no padding; causal_rows == 0: no causal mask.
#include "register_configs.cuh"
#include "row_registers.cuh"

// v[0..V) of one vector at column col: add the mask, then `fill` at and past the limit.
template <int V>
__device__ __forceinline__ void mask_vector(float* v, const float* row_mask, int col, int limit, float fill) {
    if (row_mask != nullptr) {
        float m[V];
        if constexpr (V == 1) {
            m[0] = row_mask[col];
        } else {
#pragma unroll
            for (int q = 0; q < V; q += 4) Io<float, 4>::unpack(Io<float, 4>::load_raw(row_mask + col + q), m + q);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] += m[j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j)
        if (col + j >= limit) v[j] = fill;
}

// Columns [limit, N) of row `row` are masked: causal (row q of each causal_rows x N matrix keeps
// j <= q) and padding (j < valid_lengths[row]).
__device__ __forceinline__ int row_limit(long long row, int n_cols, const int* valid_lengths, int causal_rows) {
    int limit = n_cols;
    if (causal_rows > 0) {
        const long long query = row % causal_rows;
        if (query + 1 < limit) limit = static_cast<int>(query + 1);
    }
    if (valid_lengths != nullptr && valid_lengths[row] < limit) limit = valid_lengths[row];
    return limit;
}

// One vector of a row into registers: x + mask, `fill` past the limit, -inf past N (padding, not a
// column). A vector wholly past the limit is never loaded (its elements all become `fill`); one
// that straddles the limit is loaded and its tail replaced.
template <typename T, int V>
__device__ __forceinline__ void load_masked(float* v, const T* row_x, const float* row_mask, int col, int n_cols,
                                            int limit, float fill) {
    if (col < n_cols) {
        const bool kept = col < limit;
        typename Io<T, V>::raw_t raw{};
        if (kept) raw = Io<T, V>::load_raw(row_x + col);
        Io<T, V>::unpack(raw, v);
        mask_vector<V>(v, kept ? row_mask : nullptr, col, limit, fill);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = neg_inf();
    }
}

// Lane `lane` of the LANES that hold a row owns vectors k LANES + lane (softmax_07 / 08's layout).
template <typename T, int V, int NV, int LANES>
__device__ __forceinline__ void store_scaled(T* row_y, const float* v, float scale, int lane, int n_cols) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * LANES + lane) * V;
        if (col < n_cols) {
            float out[V];
#pragma unroll
            for (int j = 0; j < V; ++j) out[j] = v[k * V + j] * scale;
            Io<T, V>::store_raw(row_y + col, Io<T, V>::pack(out));
        }
    }
}

#define MASK_PARAMS                                                                                  \
    const float *__restrict__ mask, long long mask_row_stride, int mask_rows,                        \
        const int *__restrict__ valid_lengths, int causal_rows, float fill

// Rows up to 32K: a block of THREADS threads per row (softmax_08's layout and block reduction).
template <typename T, int V, int NV, int THREADS>
__device__ __forceinline__ void block_per_row_registers_masked(
    const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride, long long y_row_stride,
    MASK_PARAMS) {
    __shared__ OnlineState scratch[32];
    const long long row = blockIdx.x;
    const float* row_mask = mask != nullptr ? mask + (row % mask_rows) * mask_row_stride : nullptr;
    const int limit = row_limit(row, n_cols, valid_lengths, causal_rows);
    const int lane = static_cast<int>(threadIdx.x);
    float v[V * NV];
#pragma unroll
    for (int k = 0; k < NV; ++k)
        load_masked<T, V>(v + k * V, x + row * x_row_stride, row_mask, (k * THREADS + lane) * V, n_cols, limit, fill);
    const OnlineState mine = registers_state(v);
    const OnlineState whole = online_block_reduce(mine, scratch);
    store_scaled<T, V, NV, THREADS>(y + row * y_row_stride, v, registers_scale(mine.m, whole), lane, n_cols);
}

// Rows up to 1024: a group of G lanes per row, 128 / G rows per block (softmax_07's layout, the
// butterfly restricted to the group; a group past the last row runs it on padding).
template <typename T, int V, int NV, int G>
__device__ __forceinline__ void group_per_row_registers_masked(
    const T* __restrict__ x, T* __restrict__ y, int n_rows, int n_cols, long long x_row_stride,
    long long y_row_stride, MASK_PARAMS) {
    const int lane = static_cast<int>(threadIdx.x) % G;
    const long long row = static_cast<long long>(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
    const bool active = row < n_rows;
    const long long r = active ? row : 0;
    const float* row_mask = mask != nullptr ? mask + (r % mask_rows) * mask_row_stride : nullptr;
    const int limit = active ? row_limit(r, n_cols, valid_lengths, causal_rows) : 0;
    const int cols = active ? n_cols : 0;  // an inactive group holds padding only
    float v[V * NV];
#pragma unroll
    for (int k = 0; k < NV; ++k)
        load_masked<T, V>(v + k * V, x + r * x_row_stride, row_mask, (k * G + lane) * V, cols, limit, fill);
    const OnlineState mine = registers_state(v);
    const OnlineState whole = online_warp_reduce(mine, G);
    store_scaled<T, V, NV, G>(y + r * y_row_stride, v, registers_scale(mine.m, whole), lane, cols);
}

#define SOFTMAX_14(TAG, T, V, NV, THREADS)                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS)                                           \
        softmax_14_registers_masked_##TAG##_v##V##_n##NV##_t##THREADS(                              \
            const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,          \
            long long y_row_stride, MASK_PARAMS) {                                                   \
        block_per_row_registers_masked<T, V, NV, THREADS>(x, y, n_cols, x_row_stride, y_row_stride,  \
                                                          mask, mask_row_stride, mask_rows,          \
                                                          valid_lengths, causal_rows, fill);         \
    }

#define SOFTMAX_14_G(TAG, T, V, NV, G)                                                              \
    extern "C" __global__ void __launch_bounds__(128) softmax_14_registers_masked_##TAG##_v##V##_n##NV##_g##G( \
        const T* __restrict__ x, T* __restrict__ y, int n_rows, int n_cols, long long x_row_stride,  \
        long long y_row_stride, MASK_PARAMS) {                                                       \
        group_per_row_registers_masked<T, V, NV, G>(x, y, n_rows, n_cols, x_row_stride, y_row_stride, \
                                                    mask, mask_row_stride, mask_rows, valid_lengths,  \
                                                    causal_rows, fill);                               \
    }

// The builds of softmax_07 and softmax_08 (register_configs.cuh).
REGISTER_GROUP_CONFIGS(SOFTMAX_14_G)
REGISTER_BLOCK_CONFIGS(SOFTMAX_14)
