// softmax_14_registers_masked — softmax_08_registers with the masks of softmax_03 fused in.
//
// Changed from softmax_08_registers: each logit is formed as it arrives in registers,
//               v_j = fill            if j >= limit(i)   (causal / padding),
//               v_j = x_ij + mask_ij  otherwise          (additive mask, optional),
//               with limit(i), causal_rows and mask_rows exactly as in softmax_03_online_masked
//               (causal top-left aligned like torch's is_causal; a mask of mask_rows rows used
//               in turn). Then the one-pass register softmax of softmax_08 runs on v: x and the
//               mask are each read once, y written once. A vector wholly past the limit is not
//               loaded (a causal mask on a square matrix reads about half of x); one that
//               straddles it is loaded and its elements past the limit replaced by `fill`.
//               Columns past N are padding (-inf), never `fill`, so a finite fill on a fully
//               masked row gives the uniform 1/N and fill = -inf gives NaN (0/0), as torch.
//               Every dtype takes e^(v - m) with the subtraction first (softmax_08 folds it
//               into one FMA for 16-bit rows): m log2e overflows for a fill of -FLT_MAX, and so
//               a 16-bit row gives exactly the fp32 build's result on the widened row, rounded once.
// Launch:       grid = n_rows, block = T threads, as softmax_08 (config_08: the smallest
//               register footprint that holds the row); 32 states (256 B) of static shared
//               memory. Entries softmax_14_registers_masked_<dtype>_v<V>_n<NV>_t<T>.
// Traffic:      at most 1 read + 1 write per element of x (the ideal; no read past the limit),
//               plus one 4-byte read per kept element of an additive mask of rows x N (a
//               broadcast row is re-read from L2).
// Limits:       n_cols <= NV * T * V (32768); x and y float32, float16 or bfloat16 (the same
//               dtype), the mask and `fill` float32; V > 1 needs x's and y's rows on 16 bytes,
//               n_cols % V == 0 and the mask's rows on 16 bytes (the launcher checks and
//               falls back to V = 1, any alignment). mask == nullptr: no additive mask;
//               valid_lengths == nullptr: no padding; causal_rows == 0: no causal mask.
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

template <typename T, int V, int NV, int THREADS>
__device__ __forceinline__ void block_per_row_registers_masked(
    const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride, long long y_row_stride,
    const float* __restrict__ mask, long long mask_row_stride, int mask_rows, const int* __restrict__ valid_lengths,
    int causal_rows, float fill) {
    constexpr int E = V * NV;
    __shared__ OnlineState scratch[32];
    const long long row = blockIdx.x;
    const T* row_x = x + row * x_row_stride;
    T* row_y = y + row * y_row_stride;
    const float* row_mask = mask != nullptr ? mask + (row % mask_rows) * mask_row_stride : nullptr;
    int limit = n_cols;  // columns [limit, N) are masked
    if (causal_rows > 0) {
        const long long query = row % causal_rows;
        if (query + 1 < limit) limit = static_cast<int>(query + 1);
    }
    if (valid_lengths != nullptr && valid_lengths[row] < limit) limit = valid_lengths[row];

    float v[E];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * THREADS + static_cast<int>(threadIdx.x)) * V;
        if (col < n_cols) {
            // a vector wholly past the limit is never loaded (its elements all become `fill`);
            // one that straddles the limit is loaded and its tail replaced
            const bool kept = col < limit;
            typename Io<T, V>::raw_t raw{};
            if (kept) raw = Io<T, V>::load_raw(row_x + col);
            Io<T, V>::unpack(raw, v + k * V);
            mask_vector<V>(v + k * V, kept ? row_mask : nullptr, col, limit, fill);
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j) v[k * V + j] = neg_inf();  // padding, not a column
        }
    }
    const OnlineState mine = registers_state<false>(v);  // x - m first, every dtype (see the header)
    const OnlineState whole = online_block_reduce(mine, scratch);
    const float scale = registers_scale(mine.m, whole);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * THREADS + static_cast<int>(threadIdx.x)) * V;
        if (col < n_cols) {
            float out[V];
#pragma unroll
            for (int j = 0; j < V; ++j) out[j] = v[k * V + j] * scale;
            Io<T, V>::store_raw(row_y + col, Io<T, V>::pack(out));
        }
    }
}

#define SOFTMAX_14(TAG, T, V, NV, THREADS)                                                               \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                \
        softmax_14_registers_masked_##TAG##_v##V##_n##NV##_t##THREADS(                                   \
            const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,               \
            long long y_row_stride, const float* __restrict__ mask, long long mask_row_stride,            \
            int mask_rows, const int* __restrict__ valid_lengths, int causal_rows, float fill) {          \
        block_per_row_registers_masked<T, V, NV, THREADS>(x, y, n_cols, x_row_stride, y_row_stride, mask, \
                                                          mask_row_stride, mask_rows, valid_lengths,      \
                                                          causal_rows, fill);                             \
    }

// The configurations of softmax_08 (CONFIGS_08 in softmax_fast_configs.py).
#define SOFTMAX_14_LADDER(TAG, T, V, NV)                                                 \
    SOFTMAX_14(TAG, T, V, NV, 128) SOFTMAX_14(TAG, T, V, NV, 256) SOFTMAX_14(TAG, T, V, NV, 512) \
    SOFTMAX_14(TAG, T, V, NV, 1024)

SOFTMAX_14_LADDER(f32, float, 4, 4) SOFTMAX_14(f32, float, 4, 8, 1024)
SOFTMAX_14(f16, half_bits, 8, 2, 128) SOFTMAX_14(f16, half_bits, 8, 4, 128) SOFTMAX_14(f16, half_bits, 8, 4, 256)
SOFTMAX_14(f16, half_bits, 8, 4, 512) SOFTMAX_14(f16, half_bits, 8, 4, 1024)
SOFTMAX_14(bf16, bf16_bits, 8, 2, 128) SOFTMAX_14(bf16, bf16_bits, 8, 4, 128) SOFTMAX_14(bf16, bf16_bits, 8, 4, 256)
SOFTMAX_14(bf16, bf16_bits, 8, 4, 512) SOFTMAX_14(bf16, bf16_bits, 8, 4, 1024)
// Scalar path (any alignment of x, y and the mask).
SOFTMAX_14_LADDER(f32, float, 1, 16) SOFTMAX_14(f32, float, 1, 32, 1024)
SOFTMAX_14_LADDER(f16, half_bits, 1, 16) SOFTMAX_14(f16, half_bits, 1, 32, 1024)
SOFTMAX_14_LADDER(bf16, bf16_bits, 1, 16) SOFTMAX_14(bf16, bf16_bits, 1, 32, 1024)
