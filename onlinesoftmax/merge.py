"""The online state with a value accumulator, (m, l, u), and blocked single-query attention.

For scores s_j and value vectors v_j of one block, the state is
    m = max_j s_j,   l = sum_j e^(s_j - m),   u = sum_j e^(s_j - m) v_j,
and the block's attention output is u / l. Two states merge like (m, l) do: both are
re-based on the larger maximum, and u is re-scaled by the same factors as l.
Float64 NumPy models for the chapters and tests (the kernels come in later chapters).
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import reference

NEG_INF = -np.inf


def block_state(scores: np.ndarray, values: np.ndarray):
    """(m, l, u) of one block: scores shape (B,), values shape (B, d_v). A fully masked block is (-inf, 0, 0)."""
    scores = np.asarray(scores, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64).reshape(len(scores), -1)
    m = float(scores.max())
    base = 0.0 if m == NEG_INF else m  # the -inf guard, as in combine
    weights = np.exp(scores - base)
    return m, float(weights.sum()), weights @ values


def merge(a, b):
    """Merge two (m, l, u) states: re-base both on M = max(m_a, m_b)."""
    (m_a, l_a, u_a), (m_b, l_b, u_b) = a, b
    m = max(m_a, m_b)
    base = 0.0 if m == NEG_INF else m
    alpha, beta = np.exp(m_a - base), np.exp(m_b - base)
    return m, alpha * l_a + beta * l_b, alpha * u_a + beta * u_b


def attention_reference(q, K, V, scale=None):
    """softmax(scale * q K^T) V for one query q (d,), keys K (N, d), values V (N, d_v), float64."""
    q, K, V = (np.asarray(a, dtype=np.float64) for a in (q, K, V))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    return reference.softmax(scale * (K @ q)) @ V


def attention_blocked(q, K, V, block: int, scale=None):
    """One query over K/V in blocks of `block` keys: each block's own state, merged into the running one."""
    q, K, V = (np.asarray(a, dtype=np.float64) for a in (q, K, V))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    state = (NEG_INF, 0.0, np.zeros(V.shape[1]))
    for start in range(0, K.shape[0], block):
        scores = scale * (K[start:start + block] @ q)
        state = merge(state, block_state(scores, V[start:start + block]))
    m, l, u = state
    return u / l


def attention_blocked_running_max(q, K, V, block: int, scale=None):
    """The same loop, re-based directly on the new running maximum (FlashAttention-2's form).

    The block's weights are e^(s - m_new), so only the running sums need a factor
    e^(m_old - m_new); the block-local maximum and its factor (beta above) disappear.
    """
    q, K, V = (np.asarray(a, dtype=np.float64) for a in (q, K, V))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    m, l, u = NEG_INF, 0.0, np.zeros(V.shape[1])
    for start in range(0, K.shape[0], block):
        scores = scale * (K[start:start + block] @ q)
        m_new = max(m, float(scores.max()))
        base = 0.0 if m_new == NEG_INF else m_new
        rescale = np.exp(m - base)
        weights = np.exp(scores - base)
        l = rescale * l + weights.sum()
        u = rescale * u + weights @ V[start:start + block]
        m = m_new
    return u / l
