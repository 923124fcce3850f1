// topk_rows.cuh — a block's passes over one row for the softmax + top-k kernels of one row per
// block (softmax_topk_01 .. 04): the maximum pass, the pass that keeps each thread's list of the K
// best (with, as the kernel needs, nothing else, the sum for a known maximum, or the online
// state), and the output written by warp 0.
//
// Order of a row's elements: the split of online_rows.cuh (a scalar head up to the row's first
// 16-byte boundary, 16-byte vectors, a scalar tail). Thread t takes head element t, then per loop
// step the UNROLL vectors first + u * T (u = 0 .. UNROLL-1; first = t + step * T * UNROLL), then
// tail elements t, t + T, ... The vector loop runs the same number of steps in every lane of a
// warp (past the row's end a lane pads with -inf and pushes nothing), because each step ends with
// the warp's share of the block threshold (top_keys.cuh: share_threshold).
// An element enters the thread's list only when it is not below the threshold's value (!(v < t):
// NaN always enters); the list keeps the K best of what entered. Since the threshold never exceeds
// the row's k-th best, every element of the row's k best enters its thread's list and stays.
// Pushes are deferred to the end of a step: a mask of the step's entering elements, then one push
// site that reads each entering value again (from L1) after the values were folded into the state.
// The NumPy model (onlinesoftmax/kernels/topk/rows_model.py) replays this order.
#pragma once
#include "online_rows.cuh"
#include "top_keys.cuh"
#include "topk_build.cuh"

// Threads per row: 128 by default, rather than 256: at 4000 x 32768 fp32, k = 5 the H200 read 0.54 of
// its read bandwidth with 128, 0.42 with 256 and 0.29 with 512 (the same kernel built each way and
// timed in one run): a row's closing merge and the wait for its first loads are paid per block, and
// with more, smaller blocks per SM more of them overlap other blocks' reading. The launchers build
// and launch 64 or 32 for many rows (-DTOPK_THREADS, and for 32 -DTOPK_MIN_BLOCKS_<K>=16: see
// block_threads in onlinesoftmax/kernels/softmax_topk.py).
#ifndef TOPK_THREADS
#define TOPK_THREADS 128
#endif
// Blocks per SM the compiler is asked to fit (__launch_bounds__' second argument), by list length:
// 7 blocks of 128 threads (up to 72 registers) for K <= 4, 6 for K = 8 (80), 5 for K = 16 (102);
// K = 32 needs about 130 (the list alone is 64) and gets 3: where the register list stops paying.
// Without a second argument ptxas spilled a predicate register in a 32-register build.
// (One name per bucket, TOPK_MIN_BLOCKS_<K>, so a kernel's declaration holds no nested parentheses.)
#ifndef TOPK_MIN_BLOCKS_1
#define TOPK_MIN_BLOCKS_1 7
#endif
#ifndef TOPK_MIN_BLOCKS_4
#define TOPK_MIN_BLOCKS_4 7
#endif
#ifndef TOPK_MIN_BLOCKS_8
#define TOPK_MIN_BLOCKS_8 6
#endif
#ifndef TOPK_MIN_BLOCKS_16
#define TOPK_MIN_BLOCKS_16 5
#endif
#ifndef TOPK_MIN_BLOCKS_32
#define TOPK_MIN_BLOCKS_32 3
#endif

#define TOPK_ONLY 0     // the list alone
#define TOPK_SAFE 1     // the list and l = sum e^(x - base) for a known base
#define TOPK_ONLINE 2   // the list and the online (m, l)

// This thread's maximum over its share of the row (fmaxf: NaN is ignored, as block_max does).
template <class Row>
__device__ __forceinline__ float row_max_pass(const typename Row::Elem* __restrict__ row, int n_cols) {
    constexpr int VEC = Row::VEC, UNROLL = Row::UNROLL;
    const int threads = blockDim.x;
    const RowSplit split = row_split<Row>(row, n_cols);
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row + split.head);
    float m = neg_inf();
    for (int i = threadIdx.x; i < split.head; i += threads) m = fmaxf(m, Row::load1(row + i));
    for (int first = threadIdx.x; first < split.n_vec; first += threads * UNROLL) {
        float v[UNROLL * VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int index = first + u * threads;
            if (index < split.n_vec) {
                Row::unpack(__ldg(vec + index), v + u * VEC);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[u * VEC + e] = neg_inf();
            }
        }
#pragma unroll
        for (int e = 0; e < UNROLL * VEC; ++e) m = fmaxf(m, v[e]);
    }
    for (int i = split.tail + threadIdx.x; i < n_cols; i += threads) m = fmaxf(m, Row::load1(row + i));
    return m;
}

// The UNROLL vectors of the step that starts at vector `first` (those past n_vec are not loaded).
template <class Row>
__device__ __forceinline__ void load_step(const typename Row::Vec* __restrict__ vec, int first, int n_vec, int threads,
                                          typename Row::Vec (&raw)[Row::UNROLL]) {
#pragma unroll
    for (int u = 0; u < Row::UNROLL; ++u) {
        const int index = first + u * threads;
        if (index < n_vec) raw[u] = __ldg(vec + index);
        else raw[u] = typename Row::Vec{};   // never read: the step pads these slots with -inf
    }
}

// Fold a step's values into the state of the pass (Mode), after they went through the list.
template <int Mode, int COUNT>
__device__ __forceinline__ void fold_values(OnlineState& s, float (&v)[COUNT], float base) {
    if (Mode == TOPK_ONLINE) {
        online_push_exp2<COUNT>(s, v);
    } else if (Mode == TOPK_SAFE) {
#pragma unroll
        for (int e = 0; e < COUNT; ++e) v[e] = exp2f((v[e] - base) * ONLINE_ROWS_LOG2E);
#pragma unroll
        for (int width = COUNT / 2; width > 0; width /= 2)   // COUNT is a power of two
#pragma unroll
            for (int e = 0; e < width; ++e) v[e] += v[e + width];
        s.l += v[0];
    }
}

// This thread's list of the K best of its share of the row (and, by Mode, its state), with the
// block threshold in shared memory (`threshold`, zeroed before the call, behind a barrier).
template <class Row, int K, int Mode>
__device__ __forceinline__ OnlineState row_top_pass(const typename Row::Elem* __restrict__ row, int n_cols, int k,
                                                    float base, KeyList<K>& list, TopKey* threshold) {
    constexpr int VEC = Row::VEC, UNROLL = Row::UNROLL, STEP = VEC * UNROLL;
    const int threads = blockDim.x, lane = threadIdx.x & 31;
    const RowSplit split = row_split<Row>(row, n_cols);
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row + split.head);
    OnlineState s = online_identity();
    if (Mode == TOPK_SAFE) s.m = base;
    TopKey thr = 0ull;
    float thr_value = neg_inf();
    for (int i = threadIdx.x; i < split.head; i += threads) {
        float v[1] = {Row::load1(row + i)};
        list.push(top_key(v[0], i));
        fold_values<Mode, 1>(s, v, base);
    }
    // A step's vectors are loaded while the step before is processed (a second set of 16-byte
    // registers; 1-3 % faster at 128 threads than loading them at the top of their step, same runs).
    typename Row::Vec raw[UNROLL];
    load_step<Row>(vec, threadIdx.x, split.n_vec, threads, raw);
    for (int warp_first = threadIdx.x - lane; warp_first < split.n_vec; warp_first += threads * UNROLL) {
        const int first = warp_first + lane;
        float v[STEP];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (first + u * threads < split.n_vec) {
                Row::unpack(raw[u], v + u * VEC);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[u * VEC + e] = neg_inf();
            }
        }
        load_step<Row>(vec, first + threads * UNROLL, split.n_vec, threads, raw);   // the next step's
        unsigned int entering = 0u;   // bit j: element j of the step enters the list
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const bool here = first + u * threads < split.n_vec;
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                if (here && !(v[u * VEC + e] < thr_value)) entering |= 1u << (u * VEC + e);
        }
        const bool pushed = entering != 0u;
        fold_values<Mode, STEP>(s, v, base);   // v is dead from here on (it may hold exponentials now)
        // One push site for the step, not one per element: the warp walks a list as many times as its
        // busiest lane pushes, the code holds one chain of K compare-and-swaps, and the value of an
        // entering element is read again (from L1: its line was just loaded) instead of being kept.
        while (entering != 0u) {
            const int j = __ffs(entering) - 1;
            entering &= entering - 1u;
            const int column = split.head + (first + (j / VEC) * threads) * VEC + j % VEC;
            list.push(top_key(Row::load1(row + column), column));
        }
        share_threshold<K>(list, k, pushed, threshold, thr, thr_value);
    }
    for (int i = split.tail + threadIdx.x; i < n_cols; i += threads) {
        float v[1] = {Row::load1(row + i)};
        if (!(v[0] < thr_value)) list.push(top_key(v[0], i));
        fold_values<Mode, 1>(s, v, base);
    }
    return s;
}

// Warp 0 writes the row's k results (k <= 32): lane r < k holds the r-th best key (block_top_keys).
// Probabilities e^(v - base) / l, or over the sum of the k kept (renormalize), in the output dtype;
// columns as int64; the LSE m + log l when asked.
template <class Row>
__device__ __forceinline__ void write_top_probabilities(TopKey mine, int k, OnlineState stats, int renormalize,
                                                        typename Row::Elem* __restrict__ probs,
                                                        long long* __restrict__ columns, float* __restrict__ lse) {
    const int lane = threadIdx.x & 31;
    const float base = online_base(stats.m);
    const float e = lane < k ? expf(key_value(mine) - base) : 0.0f;
    const float total = warp_sum(e);   // the sum of the k kept, for renormalize
    if (lane < k) {
        probs[lane] = Row::from_float(e * (renormalize ? 1.0f / total : 1.0f / stats.l));
        columns[lane] = key_column(mine);
    }
    if (lane == 0 && lse != nullptr) lse[0] = stats.m + logf(stats.l);
}
