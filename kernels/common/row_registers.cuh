// row_registers.cuh — the register-cached single pass shared by softmax_07 and softmax_08.
//
// A thread holds its E elements of a row in registers (fp32, whatever the storage type).
// It computes its own state (m_t, l_t) from them, leaves e_i = e^(x_i - b_t) in the same
// registers (b_t = m_t, or 0 when m_t = -inf: the guard of online_state.cuh), and, once the
// row's state (M, L) is known, writes y_i = e_i * s_t with
//     s_t = e^(m_t - M) / L   (0 / L when m_t = -inf).
// One exp per element, one per thread: the online combine at the granularity of a thread.
//
// -inf / NaN: a thread whose elements are all -inf (or padding) has m_t = -inf, l_t = 0 and
// s_t = 0 * (1 / L): finite rows get 0 there; an all -inf row has L = 0, so 0 * inf = NaN
// everywhere. A NaN or +inf element makes l_t NaN (e^NaN, e^(inf - inf)), and the row's L
// NaN. fmaxf ignores NaN, so m_t is never NaN.
#pragma once
#include "online_state.cuh"
#include "vec_io.cuh"

// State of E register values; replaces v[i] by e^(v[i] - b_t). Padding must be -inf.
template <int E>
__device__ __forceinline__ OnlineState registers_state(float (&v)[E]) {
    float m = neg_inf();
#pragma unroll
    for (int i = 0; i < E; ++i) m = fmaxf(m, v[i]);
    const float b = online_base(m);
    float l = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
        v[i] = exp_sub(v[i], b);
        l += v[i];
    }
    return {m, l};
}

// s_t = e^(m_t - M) / L, with 0 for an empty thread (m_t = -inf).
__device__ __forceinline__ float registers_scale(float m_thread, OnlineState row) {
    const float inv_l = 1.0f / row.l;
    const float rebase = m_thread == neg_inf() ? 0.0f : ex2((m_thread - row.m) * LOG2E_F);
    return rebase * inv_l;
}
