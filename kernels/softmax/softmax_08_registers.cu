// softmax_08_registers — a block per row, the row cached in registers: one read, one write.
//
// Changed from softmax_07_warp_per_row: rows longer than a warp can hold. A block of T
//               threads owns a row; thread t loads its NV 16-byte vectors (vector index
//               k T + t, so every load instruction of a warp covers 512 contiguous bytes)
//               into registers, all before the first use, computes its state from them
//               (row_registers.cuh), the block combines the states with online_block_reduce
//               (butterfly per warp, then warp 0), and the thread writes y = e * s from the
//               registers it already holds. Nothing is read twice.
// Launch:       grid = n_rows, block = T threads, 32 states (256 B) of static shared memory.
//               Entries softmax_08_registers_<dtype>_v<V>_n<NV>_t<T>
//               (e.g. softmax_08_registers_f32_v4_n8_t1024: fp32 rows of up to 32768).
// Traffic:      1 read + 1 write per element: the ideal.
// Limits:       n_cols <= NV * T * V (32768 in the registered builds; the row must fit the
//               register file with room for a second block). V > 1 needs the row start
//               16-byte aligned and n_cols % V == 0 (else the launcher picks V = 1).
//               fp32, fp16, bf16 storage, fp32 math; -inf / NaN as softmax_07.
#include "register_configs.cuh"
#include "row_registers.cuh"

template <typename T, int V, int NV, int THREADS>
__device__ __forceinline__ void block_per_row_registers(const T* __restrict__ x, T* __restrict__ y,
                                                        int n_cols, long long x_row_stride,
                                                        long long y_row_stride) {
    constexpr int E = V * NV;
    __shared__ OnlineState scratch[32];
    const T* row_x = x + blockIdx.x * x_row_stride;
    T* row_y = y + blockIdx.x * y_row_stride;

    float v[E];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * THREADS + static_cast<int>(threadIdx.x)) * V;
        if (col < n_cols) {
            Io<T, V>::unpack(Io<T, V>::load_raw(row_x + col), v + k * V);
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j) v[k * V + j] = neg_inf();
        }
    }
    const OnlineState mine = registers_state(v);
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

#define SOFTMAX_08(TAG, T, V, NV, THREADS)                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS)                                          \
        softmax_08_registers_##TAG##_v##V##_n##NV##_t##THREADS(                                    \
            const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,         \
            long long y_row_stride) {                                                              \
        block_per_row_registers<T, V, NV, THREADS>(x, y, n_cols, x_row_stride, y_row_stride);     \
    }

// The builds: REGISTER_BLOCK_CONFIGS (register_configs.cuh), shared with softmax_14.
REGISTER_BLOCK_CONFIGS(SOFTMAX_08)
