// log_softmax_rows.cuh — the output pass of a log-softmax over one stretch of a row, the row's (m, l)
// known: y = (x - m) - log l, m subtracted first so that x - m is exact near the maximum.
//
// The stretch (a row, or a chunk of one) is read as row_online_state reads it: a scalar head up to
// its first 16-byte boundary, 16-byte vectors (UNROLL loads in flight per lane before any is used),
// a scalar tail; lane `lane` of a group of `group` lanes takes vectors lane, lane + group, ... Stores
// are 16-byte vectors when y has x's alignment within 16 bytes, else scalar stores. All arithmetic
// in fp32, one rounding per output. (log_softmax_01_online holds the same loop inline.)
#pragma once
#include "online_rows.cuh"

template <class Row>
__device__ __forceinline__ void row_log_softmax_output(const typename Row::Elem* __restrict__ row_x,
                                                       typename Row::Elem* __restrict__ row_y, int n_cols,
                                                       int lane, int group, float m, float log_l) {
    constexpr int VEC = Row::VEC, UNROLL = Row::UNROLL;
    const RowSplit split = row_split<Row>(row_x, n_cols);
    const bool y_vector = Row::to_alignment(row_y) == Row::to_alignment(row_x);
    const typename Row::Vec* x_vec = reinterpret_cast<const typename Row::Vec*>(row_x + split.head);
    for (int i = lane; i < split.head; i += group) row_y[i] = Row::from_float((Row::load1(row_x + i) - m) - log_l);
    for (int first = lane; first < split.n_vec; first += group * UNROLL) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (first + u * group < split.n_vec) Row::unpack(x_vec[first + u * group], v[u]);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int index = first + u * group;
            if (index >= split.n_vec) break;
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[u][k] = (v[u][k] - m) - log_l;
            typename Row::Elem* out = row_y + split.head + static_cast<long long>(index) * VEC;
            if (y_vector) {
                *reinterpret_cast<typename Row::Vec*>(out) = Row::pack(v[u]);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; ++k) out[k] = Row::from_float(v[u][k]);
            }
        }
    }
    for (int i = split.tail + lane; i < n_cols; i += group)
        row_y[i] = Row::from_float((Row::load1(row_x + i) - m) - log_l);
}
