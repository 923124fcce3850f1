// lse_rows.cuh — a row's log-sum-exp from its online state, with torch's and SciPy's answer for +inf.
//
// A row holding +inf has m = +inf and l = NaN (its +inf term is e^(inf - inf)), exactly as a row
// holding both +inf and NaN has (fmaxf drops the NaN from m); torch.logsumexp and SciPy give +inf
// for the first and NaN for the second. So a row whose maximum is +inf is read once more, for NaN,
// by its group of lanes. Only a block that holds such a row takes that branch (__syncthreads_or:
// the whole block or none of it, so the group reduction's barriers are safe); other blocks pay one
// barrier.
#pragma once
#include "online_rows.cuh"

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// Every thread of the block calls it (inactive ones with active = false); the result is the row's
// LSE in every lane of an active group.
template <class Row>
__device__ __forceinline__ float row_lse(OnlineState s, const typename Row::Elem* __restrict__ row, int n_cols,
                                         int lane, int group, bool active, OnlineState* scratch) {
    const bool inf_row = active && s.m == pos_inf();
    if (__syncthreads_or(inf_row)) {
        float nan_seen = 0.0f;
        if (inf_row)
            for (int c = lane; c < n_cols; c += group) {
                const float v = Row::load1(row + c);
                if (v != v) nan_seen = 1.0f;
            }
        // the count of the group's lanes that saw a NaN, through the states' reduction: base 0, so
        // combining (0, a) and (0, b) gives (0, a + b)
        const OnlineState seen = online_group_reduce(OnlineState{0.0f, nan_seen}, group, scratch);
        if (inf_row) return seen.l > 0.0f ? __int_as_float(0x7fffffff) : pos_inf();
    }
    return s.m + logf(s.l);  // all -inf: -inf + log 0 = -inf; a NaN: l is NaN
}
