// softmax_07_warp_per_row — short rows: a group of G lanes owns a row, held in registers.
//
// Changed from softmax_02_online: the row is read once. A group of G lanes (G = 1, 2, ..., 32,
//               the largest power of two that the row needs) loads the row with 16-byte
//               vector loads straight into registers; each lane computes its own state from
//               its registers (row_registers.cuh: one exp per element), the group combines
//               the states with the xor butterfly of online_warp_reduce restricted to
//               offsets below G (the groups are aligned inside the warp), and each lane writes
//               y = e * s from the same registers. Several rows per block (128 / G), no
//               shared memory, no barrier.
// Launch:       block = 128 threads, grid = ceil(n_rows / (128 / G)); no shared memory.
//               Entries softmax_07_warp_per_row_<dtype>_v<V>_n<NV>_g<G>: storage dtype,
//               V elements per access (16 bytes, or 1 for the scalar path), NV accesses
//               per lane, G lanes per row (e.g. softmax_07_warp_per_row_f32_v4_n8_g32: fp32 rows
//               of up to 1024). A lane owns columns (k G + lane) V + j.
// Traffic:      1 read + 1 write per element: the ideal (8 B fp32, 4 B fp16 / bf16).
// Limits:       n_cols <= NV * G * V (1024 in the registered builds); V > 1 needs the row
//               start 16-byte aligned and n_cols % V == 0 (the launcher checks and falls
//               back to V = 1). fp32, fp16, bf16 storage; fp32 math. All -inf row -> NaN;
//               NaN or +inf in a row -> NaN row.
#include "register_configs.cuh"
#include "row_registers.cuh"

template <typename T, int V, int NV, int G>
__device__ __forceinline__ void warp_per_row(const T* __restrict__ x, T* __restrict__ y, int n_rows,
                                             int n_cols, long long x_row_stride, long long y_row_stride) {
    constexpr int E = V * NV;
    const int lane = threadIdx.x % G;
    const long long row = static_cast<long long>(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
    // A group past the last row still runs the shuffles (full-warp masks), on -inf padding.
    const bool active = row < n_rows;
    const T* row_x = x + (active ? row : 0) * x_row_stride;
    T* row_y = y + (active ? row : 0) * y_row_stride;

    float v[E];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * G + lane) * V;
        if (active && col < n_cols) {
            Io<T, V>::unpack(Io<T, V>::load_raw(row_x + col), v + k * V);
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j) v[k * V + j] = neg_inf();
        }
    }
    const OnlineState mine = registers_state(v);
    const OnlineState whole = online_warp_reduce(mine, G);
    const float scale = registers_scale(mine.m, whole);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * G + lane) * V;
        if (active && col < n_cols) {
            float out[V];
#pragma unroll
            for (int j = 0; j < V; ++j) out[j] = v[k * V + j] * scale;
            Io<T, V>::store_raw(row_y + col, Io<T, V>::pack(out));
        }
    }
}

#define SOFTMAX_07(TAG, T, V, NV, G)                                                              \
    extern "C" __global__ void __launch_bounds__(128) softmax_07_warp_per_row_##TAG##_v##V##_n##NV##_g##G( \
        const T* __restrict__ x, T* __restrict__ y, int n_rows, int n_cols, long long x_row_stride,        \
        long long y_row_stride) {                                                                  \
        warp_per_row<T, V, NV, G>(x, y, n_rows, n_cols, x_row_stride, y_row_stride);             \
    }

// The builds: REGISTER_GROUP_CONFIGS (register_configs.cuh), shared with softmax_14.
REGISTER_GROUP_CONFIGS(SOFTMAX_07)
