// softmax_topk_05_warp_rows — fused softmax + top-k for short rows (MoE gating: 8 to 1024
// experts, k up to 8): one warp per row, 8 rows per block, the row held in registers, no shared
// memory, no barrier.
//
// Changed from softmax_topk_04_online_fused: a 128-thread block per row leaves most threads
//               with one or two elements of a 256-element row and pays block-wide barriers
//               for its states and its merge of lists. Here one warp owns a row and keeps all
//               of it in registers: lane t holds E elements (E = 4, 8, 16 or 32, the smallest
//               with 32 E >= N), loaded as 16-byte vectors when every row starts on a 16-byte
//               boundary and N is a multiple of a vector (lane t takes vectors t, t + 32, ...),
//               else as scalars (columns t, t + 32, ...). Each lane folds its elements into
//               (m, l) in that order (online_push), the warp combines the states with the
//               butterfly of softmax_02 (online_warp_reduce). Then k rounds of argmax, with no
//               list: a lane's candidate is its best element not yet taken (its largest key,
//               top_keys.cuh's order: NaN first, ties to the lower column); the warp's best key
//               is two 32-bit maximum reductions (__reduce_max_sync: the value's order bits,
//               then ~column among the lanes holding them); the winning lane marks that element
//               taken and looks over its E registers (kept as order bits) again. Lane r keeps round r's winner and
//               lanes 0 .. k-1 write the probabilities and columns side by side (coalesced).
// Launch:       grid = (ceil(n_rows / 8)), block = (256): warp w of block b takes row 8 b + w;
//               __launch_bounds__(256, 2) (at most 128 registers: left to itself, ptxas gave the
//               fp16 E = 32 build 64 registers and a 16-byte stack).
// Traffic:      1 read per element + 12 B per kept (value, column) pair; the ideal is the read.
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_05_warp_rows_<tag>_e<E> with
//               scalar loads, softmax_topk_05_warp_rows_<tag>_e<E>_vec with 16-byte loads: E = 4
//               (fp32 only for _vec), 8, 16, 32); 1 <= k <= 8, k <= n_cols <= 32 E; rows strided.
//               On GPUs before sm_80 the reductions are 5-step shuffle butterflies.
#include "online_rows.cuh"
#include "top_keys.cuh"
#include "topk_build.cuh"

#define ROWS_PER_BLOCK 8

// The largest 32-bit value among the warp's lanes, in every lane.
__device__ __forceinline__ unsigned int warp_max_u32(unsigned int x) {
#if __CUDA_ARCH__ >= 800
    return __reduce_max_sync(TOP_FULL_MASK, x);
#else
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = max(x, __shfl_xor_sync(TOP_FULL_MASK, x, offset));
    return x;
#endif
}

// Column of this lane's j-th register: vectors t, t + 32, ... (VECTOR) or columns t, t + 32, ...
template <class Row, bool VECTOR>
__device__ __forceinline__ int register_column(int lane, int j) {
    constexpr int VEC = Row::VEC;
    return VECTOR ? (j / VEC) * 32 * VEC + lane * VEC + j % VEC : j * 32 + lane;
}

// Register of this lane that holds `column` (the inverse of register_column for the lane's own columns).
template <class Row, bool VECTOR>
__device__ __forceinline__ int register_index(int column) {
    constexpr int VEC = Row::VEC;
    return VECTOR ? (column / (32 * VEC)) * VEC + column % VEC : column / 32;
}

// This lane's best element not yet taken: (order bits, ~column), (0, 0) when none is left. Columns
// grow with j, so the first of equal order bits has the lower column.
template <class Row, int E, bool VECTOR>
__device__ __forceinline__ void lane_best(const unsigned int (&order)[E], unsigned int taken, int lane,
                                          unsigned int& best_hi, unsigned int& best_lo) {
    best_hi = 0u;
    int best_j = -1;
#pragma unroll
    for (int j = 0; j < E; ++j) {
        if (!((taken >> j) & 1u) && order[j] > best_hi) {
            best_hi = order[j];
            best_j = j;
        }
    }
    best_lo = best_j < 0 ? 0u : ~static_cast<unsigned int>(register_column<Row, VECTOR>(lane, best_j));
}

template <class Row, int E, bool VECTOR>
__device__ __forceinline__ void softmax_topk_warp_row(const typename Row::Elem* __restrict__ x,
                                                      typename Row::Elem* __restrict__ probs,
                                                      long long* __restrict__ columns, float* __restrict__ lse,
                                                      int n_rows, int n_cols, long long x_row_stride, int k,
                                                      int renormalize) {
    constexpr int VEC = Row::VEC;
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= n_rows) return;   // a whole warp leaves: no barrier and no shuffle of other warps follow
    const typename Row::Elem* row_x = x + row * x_row_stride;

    float v[E];
    if constexpr (VECTOR) {
        const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row_x);
#pragma unroll
        for (int u = 0; u < E / VEC; ++u) {
            const int index = u * 32 + lane;
            if (index * VEC < n_cols) {
                Row::unpack(__ldg(vec + index), v + u * VEC);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[u * VEC + e] = neg_inf();
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < E; ++j) v[j] = j * 32 + lane < n_cols ? Row::load1(row_x + j * 32 + lane) : neg_inf();
    }
    OnlineState s = online_identity();
    unsigned int taken = 0u;                             // bit j: register j is taken (or past the row's end)
    unsigned int order[E];                               // the registers as order bits (top_keys.cuh)
#pragma unroll
    for (int j = 0; j < E; ++j) {
        if (register_column<Row, VECTOR>(lane, j) < n_cols) online_push(s, v[j]);
        else taken |= 1u << j;
        order[j] = order_bits(v[j]);
    }
    const OnlineState stats = online_warp_reduce(s);   // every lane holds the row's (m, l)

    unsigned int hi, lo;
    lane_best<Row, E, VECTOR>(order, taken, lane, hi, lo);
    unsigned int mine_hi = 0u, mine_lo = 0u;            // lane r keeps round r's winner
    for (int round = 0; round < k; ++round) {
        const unsigned int best_hi = warp_max_u32(hi);
        const unsigned int best_lo = warp_max_u32(hi == best_hi ? lo : 0u);
        if (lane == round) { mine_hi = best_hi; mine_lo = best_lo; }
        if (hi == best_hi && lo == best_lo) {            // keys are unique: one lane took it
            taken |= 1u << register_index<Row, VECTOR>(static_cast<int>(~best_lo));
            lane_best<Row, E, VECTOR>(order, taken, lane, hi, lo);
        }
    }
    const float value = order_value(mine_hi);
    const float base = online_base(stats.m);
    const float e = lane < k ? expf(value - base) : 0.0f;
    const float total = warp_sum(e);                     // the sum of the k kept, for renormalize
    if (lane < k) {
        probs[row * k + lane] = Row::from_float(e * (renormalize ? 1.0f / total : 1.0f / stats.l));
        columns[row * k + lane] = static_cast<int>(~mine_lo);
    }
    if (lane == 0 && lse != nullptr) lse[row] = stats.m + logf(stats.l);
}

#define SOFTMAX_TOPK_05(TAG, ROW, E, VECTOR, SUFFIX)                                                     \
    extern "C" __global__ void __launch_bounds__(256, 2) softmax_topk_05_warp_rows_##TAG##_e##E##SUFFIX(   \
        const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ probs, long long* __restrict__ columns, \
        float* __restrict__ lse, int n_rows, int n_cols, long long x_row_stride, int k, int renormalize) { \
        if constexpr (topk_builds<ROW, E>() && (!VECTOR || E % ROW::VEC == 0))                           \
            softmax_topk_warp_row<ROW, E, VECTOR>(x, probs, columns, lse, n_rows, n_cols, x_row_stride, k,  \
                                                  renormalize);                                          \
    }
#define SOFTMAX_TOPK_05_ALL_E(TAG, ROW)                                                                \
    SOFTMAX_TOPK_05(TAG, ROW, 4, false, ) SOFTMAX_TOPK_05(TAG, ROW, 8, false, )                        \
    SOFTMAX_TOPK_05(TAG, ROW, 16, false, ) SOFTMAX_TOPK_05(TAG, ROW, 32, false, )                      \
    SOFTMAX_TOPK_05(TAG, ROW, 8, true, _vec) SOFTMAX_TOPK_05(TAG, ROW, 16, true, _vec)                 \
    SOFTMAX_TOPK_05(TAG, ROW, 32, true, _vec)

SOFTMAX_TOPK_05_ALL_E(f32, F32Row)
SOFTMAX_TOPK_05(f32, F32Row, 4, true, _vec)
SOFTMAX_TOPK_05_ALL_E(f16, F16Row)
SOFTMAX_TOPK_05_ALL_E(bf16, BF16Row)
