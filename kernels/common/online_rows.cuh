// online_rows.cuh — the (m, l) statistics of rows owned by groups of lanes, with 16-byte loads.
// Used by logsumexp_01_online and log_softmax_01_online; never pasted. The element policies
// (F32Row, F16Row, BF16Row: storage type, 16-byte vector, conversions to and from fp32) are
// also how softmax_03_online_masked loads and stores its three dtypes.
//
// Layout: a block of `blockDim.x` threads holds blockDim.x / group rows; the `group` lanes
// of one row (group a power of two, 1 .. 1024) are consecutive threads. A short row gets a
// small group, so a warp can own several rows; a long row gets up to 1024 lanes.
//
// A row is split where its first 16-byte boundary falls (the row stride may break the
// alignment, so the split is per row): scalar head [0, head), 16-byte vectors, scalar tail.
// Lane t pushes, in this order: head elements t, t + group, ...; then, per loop step k,
// the UNROLL vectors k * group * UNROLL + u * group + t (u = 0 .. UNROLL-1) — all loads of a
// step are issued before any is used; then tail elements t, t + group, ...
// (the NumPy model in onlinesoftmax/kernels/logsumexp_online.py follows this order).
//
// Exponentials: e^(x - base) = 2^((x - base) * log2 e), one FADD, one FMUL and the MUFU.EX2
// behind exp2f. Subtracting before scaling keeps the terms near the maximum exact, which is
// where the sum's mass is (the fused form x * log2e - base * log2e rounds base * log2e).
// One re-scale per step of UNROLL vectors (16 elements), not one per element.
#pragma once
#include "online_state.cuh"
#include "half.cuh"

#define ONLINE_ROWS_LOG2E 1.4426950408889634f

// Element types: how many elements one 16-byte vector holds, and how they convert.
// fp32 in place; fp16 and bf16 as 16-bit words (half.cuh), widened exactly to fp32 and
// narrowed with round-to-nearest-even. All arithmetic is fp32 in every policy.
struct F32Row {
    typedef float Elem;
    typedef float4 Vec;
    static constexpr int VEC = 4;
    static constexpr int UNROLL = 4;  // 4 x 16 B in flight per lane and step
    static __device__ __forceinline__ float load1(const Elem* p) { return *p; }
    static __device__ __forceinline__ void unpack(Vec v, float* f) {
        f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
    }
    static __device__ __forceinline__ Vec pack(const float* f) {
        return make_float4(f[0], f[1], f[2], f[3]);
    }
    static __device__ __forceinline__ Elem from_float(float f) { return f; }
    // Elements from p to the next 16-byte boundary (float pointers are 4-byte aligned).
    static __device__ __forceinline__ int to_alignment(const Elem* p) {
        const unsigned long long address = reinterpret_cast<unsigned long long>(p);
        return static_cast<int>(((16 - (address & 15)) & 15) >> 2);
    }
};

struct F16Row {
    typedef half_bits Elem;
    typedef int4 Vec;
    static constexpr int VEC = 8;
    static constexpr int UNROLL = 2;  // 2 x 16 B in flight per lane and step: 16 elements
    static __device__ __forceinline__ float load1(const Elem* p) { return half_to_float(*p); }
    static __device__ __forceinline__ void unpack(Vec v, float* f) { unpack_half8(v, f); }
    static __device__ __forceinline__ Vec pack(const float* f) { return pack_half8(f); }
    static __device__ __forceinline__ Elem from_float(float f) { return float_to_half(f); }
    static __device__ __forceinline__ int to_alignment(const Elem* p) {
        return halves_to_alignment(p, 16);
    }
};

struct BF16Row {
    typedef bfloat16_bits Elem;
    typedef int4 Vec;
    static constexpr int VEC = 8;
    static constexpr int UNROLL = 2;  // as F16Row: 2 x 16 B in flight per lane and step
    static __device__ __forceinline__ float load1(const Elem* p) { return bfloat16_to_float(*p); }
    static __device__ __forceinline__ void unpack(Vec v, float* f) { unpack_bfloat16x8(v, f); }
    static __device__ __forceinline__ Vec pack(const float* f) { return pack_bfloat16x8(f); }
    static __device__ __forceinline__ Elem from_float(float f) { return float_to_bfloat16(f); }
    static __device__ __forceinline__ int to_alignment(const Elem* p) {
        return halves_to_alignment(p, 16);
    }
};

// Fold COUNT values into the state with one re-scale: m_new = max(m, max v), then
// l = l * 2^((m - base) log2e) + sum_k 2^((v_k - base) log2e), the sum taken as a tree.
// Padding values of -inf add exactly 0. The -inf guard is online_base (online_state.cuh).
template <int COUNT>
__device__ __forceinline__ void online_push_exp2(OnlineState& s, float (&v)[COUNT]) {
    float chunk_max = v[0];
#pragma unroll
    for (int k = 1; k < COUNT; ++k) chunk_max = fmaxf(chunk_max, v[k]);
    const float m_new = fmaxf(s.m, chunk_max);
    const float base = online_base(m_new);
#pragma unroll
    for (int k = 0; k < COUNT; ++k) v[k] = exp2f((v[k] - base) * ONLINE_ROWS_LOG2E);
#pragma unroll
    for (int width = COUNT / 2; width > 0; width /= 2)  // COUNT is a power of two
#pragma unroll
        for (int k = 0; k < width; ++k) v[k] += v[k + width];
    s.l = s.l * exp2f((s.m - base) * ONLINE_ROWS_LOG2E) + v[0];
    s.m = m_new;
}

__device__ __forceinline__ void online_push_exp2(OnlineState& s, float x) {
    float v[1] = {x};
    online_push_exp2<1>(s, v);
}

// Where a row splits: head = scalar columns before the first 16-byte boundary,
// n_vec whole vectors after it, tail = first column after the vectors.
struct RowSplit {
    int head, n_vec, tail;
};

template <class Row>
__device__ __forceinline__ RowSplit row_split(const typename Row::Elem* row, int n_cols) {
    const int phase = Row::to_alignment(row);
    RowSplit split;
    split.head = phase < n_cols ? phase : n_cols;
    split.n_vec = (n_cols - split.head) / Row::VEC;
    split.tail = split.head + split.n_vec * Row::VEC;
    return split;
}

// This lane's state over its share of one row (see the order at the top of the file).
template <class Row>
__device__ __forceinline__ OnlineState row_online_state(const typename Row::Elem* __restrict__ row,
                                                        int n_cols, int lane, int group) {
    constexpr int VEC = Row::VEC, UNROLL = Row::UNROLL;
    const RowSplit split = row_split<Row>(row, n_cols);
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row + split.head);
    OnlineState s = online_identity();
    for (int i = lane; i < split.head; i += group) online_push_exp2(s, Row::load1(row + i));
    for (int first = lane; first < split.n_vec; first += group * UNROLL) {
        float v[UNROLL * VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int index = first + u * group;
            if (index < split.n_vec) {
                Row::unpack(vec[index], v + u * VEC);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; ++k) v[u * VEC + k] = neg_inf();
            }
        }
        online_push_exp2<UNROLL * VEC>(s, v);
    }
    for (int i = split.tail + lane; i < n_cols; i += group)
        online_push_exp2(s, Row::load1(row + i));
    return s;
}

// Combine the states of each group of `group` consecutive lanes; every lane of the group
// gets its group's state. `group` must be the same in every thread of the block (it
// decides whether the block synchronizes). Up to 32 lanes: one butterfly with width
// `group`, which never crosses a group. More: a full butterfly per warp, one state per
// warp in `scratch` (32 states), then each warp combines the warps of its own group and
// broadcasts the result from its lane 0.
__device__ __forceinline__ OnlineState online_group_reduce(OnlineState s, int group,
                                                           OnlineState* scratch) {
    if (group <= 32) return online_warp_reduce(s, group);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps_per_group = group >> 5;
    const int first_warp = warp & ~(warps_per_group - 1);
    s = online_warp_reduce(s);
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = lane < warps_per_group ? scratch[first_warp + lane] : online_identity();
    s = online_warp_reduce(s, warps_per_group);
    // Only lanes below warps_per_group hold the group's state now (the others combined
    // identities among themselves): hand lane 0's state to every lane.
    s.m = __shfl_sync(0xffffffffu, s.m, 0);
    s.l = __shfl_sync(0xffffffffu, s.l, 0);
    __syncthreads();  // scratch may be reused right after return
    return s;
}
