// log_softmax_02_registers — log_softmax_01 with the row held in registers: one read, one write.
//
// Changed from log_softmax_01_online: the row is read once. The row is loaded into registers
//               in softmax_07's layout (a group of G lanes per row, several rows per block)
//               or softmax_08's (a block of T threads per row); each thread computes its state
//               (m_t, l_t) from its registers, the group or block combines the states
//               (online_warp_reduce / online_block_reduce), and each thread writes
//               y = (x - m) - log l from the values it still holds, subtracting m first as
//               log_softmax_01 does. Unlike softmax_07 / 08 the registers keep x (not
//               e^(x - m_t)): the output needs x, and l_t is summed on the side. Every dtype
//               takes e^(x - b) with the subtraction first.
// Launch:       rows up to 1024: block = 128 threads, grid = ceil(n_rows / (128 / G)), no shared
//               memory (entries log_softmax_02_registers_<dtype>_v<V>_n<NV>_g<G>); longer rows up
//               to 32K: grid = n_rows, block = T, 32 states (256 B) of static shared memory
//               (entries ..._<dtype>_v<V>_n<NV>_t<T>). The builds are softmax_07's and 08's
//               (register_configs.cuh), chosen by the same configuration tables, except that
//               scalar rows (V = 1) past 512 columns take the block builds: 32 scalar values
//               per lane, kept to the end, spill in the bf16 build.
// Traffic:      1 read + 1 write per element: the ideal (log_softmax_01 reads twice).
// Limits:       n_cols <= NV * T * V (32768); fp32, fp16, bf16 storage (y in x's dtype), fp32
//               math, one rounding per output. V > 1 needs x's and y's rows on 16 bytes and
//               n_cols % V == 0 (the launcher checks and falls back to V = 1). A row of all
//               -inf gives NaN (-inf - -inf, as torch); a row holding NaN or +inf gives NaN; an
//               element -inf gives -inf.
#include "register_configs.cuh"
#include "row_registers.cuh"

// (m_t, l_t) of E register values, leaving them as they are. Padding must be -inf.
template <int E>
__device__ __forceinline__ OnlineState registers_lse_state(const float (&v)[E]) {
    float m = neg_inf();
#pragma unroll
    for (int i = 0; i < E; ++i) m = fmaxf(m, v[i]);
    const float b = online_base(m);
    float l = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) l += exp_sub(v[i], b);
    return {m, l};
}

// Load one row's share into registers: lane `lane` of LANES owns vectors k LANES + lane; -inf past N.
template <typename T, int V, int NV, int LANES>
__device__ __forceinline__ void load_share(float (&v)[V * NV], const T* row_x, int lane, int n_cols) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * LANES + lane) * V;
        if (col < n_cols) {
            Io<T, V>::unpack(Io<T, V>::load_raw(row_x + col), v + k * V);
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j) v[k * V + j] = neg_inf();
        }
    }
}

// y = (x - m) - log l for the same share.
template <typename T, int V, int NV, int LANES>
__device__ __forceinline__ void store_share(T* row_y, const float (&v)[V * NV], OnlineState row, int lane,
                                            int n_cols) {
    const float log_l = logf(row.l);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int col = (k * LANES + lane) * V;
        if (col < n_cols) {
            float out[V];
#pragma unroll
            for (int j = 0; j < V; ++j) out[j] = (v[k * V + j] - row.m) - log_l;
            Io<T, V>::store_raw(row_y + col, Io<T, V>::pack(out));
        }
    }
}

// Rows up to 1024: G lanes per row, 128 / G rows per block; a group past the last row runs the
// butterfly on padding (full-warp shuffles) and writes nothing.
template <typename T, int V, int NV, int G>
__device__ __forceinline__ void group_per_row_log(const T* __restrict__ x, T* __restrict__ y, int n_rows,
                                                  int n_cols, long long x_row_stride, long long y_row_stride) {
    const int lane = static_cast<int>(threadIdx.x) % G;
    const long long row = static_cast<long long>(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
    const long long r = row < n_rows ? row : 0;
    const int cols = row < n_rows ? n_cols : 0;  // an inactive group holds padding only
    float v[V * NV];
    load_share<T, V, NV, G>(v, x + r * x_row_stride, lane, cols);
    const OnlineState whole = online_warp_reduce(registers_lse_state(v), G);
    store_share<T, V, NV, G>(y + r * y_row_stride, v, whole, lane, cols);
}

// Rows up to 32K: a block of THREADS threads per row.
template <typename T, int V, int NV, int THREADS>
__device__ __forceinline__ void block_per_row_log(const T* __restrict__ x, T* __restrict__ y, int n_cols,
                                                  long long x_row_stride, long long y_row_stride) {
    __shared__ OnlineState scratch[32];
    const long long row = blockIdx.x;
    const int lane = static_cast<int>(threadIdx.x);
    float v[V * NV];
    load_share<T, V, NV, THREADS>(v, x + row * x_row_stride, lane, n_cols);
    const OnlineState whole = online_block_reduce(registers_lse_state(v), scratch);
    store_share<T, V, NV, THREADS>(y + row * y_row_stride, v, whole, lane, n_cols);
}

#define LOG_SOFTMAX_02_G(TAG, T, V, NV, G)                                                           \
    extern "C" __global__ void __launch_bounds__(128) log_softmax_02_registers_##TAG##_v##V##_n##NV##_g##G( \
        const T* __restrict__ x, T* __restrict__ y, int n_rows, int n_cols, long long x_row_stride,  \
        long long y_row_stride) {                                                                    \
        group_per_row_log<T, V, NV, G>(x, y, n_rows, n_cols, x_row_stride, y_row_stride);            \
    }

#define LOG_SOFTMAX_02_T(TAG, T, V, NV, THREADS)                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS)                                            \
        log_softmax_02_registers_##TAG##_v##V##_n##NV##_t##THREADS(                                  \
            const T* __restrict__ x, T* __restrict__ y, int n_cols, long long x_row_stride,           \
            long long y_row_stride) {                                                                \
        block_per_row_log<T, V, NV, THREADS>(x, y, n_cols, x_row_stride, y_row_stride);              \
    }

// The builds of softmax_07 (without its scalar 32-per-lane builds) and softmax_08 (register_configs.cuh).
REGISTER_GROUP_CONFIGS_SCALAR_16(LOG_SOFTMAX_02_G)
REGISTER_BLOCK_CONFIGS(LOG_SOFTMAX_02_T)
