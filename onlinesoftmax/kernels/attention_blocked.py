"""The blocked attention forward (FlashAttention-2 loop order): its NumPy model, tile by tile.

For each (batch, head) and each tile of BLOCK_Q query rows, the key/value tiles of BLOCK_K rows go
by; the state is the chapter 05 triple per query row — m (running maximum of the scaled scores),
l (sum of e^(s - m)) and O (the unnormalized output, sum of e^(s - m) v) — updated per tile:

    m' = max(m, rowmax S);  P = e^(S - m');  l' = l e^(m - m') + rowsum P;  O' = O e^(m - m') + P V

and divided by l once at the end (FA2: one division per row, not one per tile). With causal
masking a key tile entirely past a query tile's last visible key is skipped. Arithmetic in
float32 (inputs widened exactly), output rounded once to q's dtype; LSE = m + ln l in float32.
A query row that sees no key keeps l = 0: its output is 0 and its LSE -inf (as flash-attention).
The CUDA kernel that this models is not written yet.
"""
from __future__ import annotations

import numpy as np

NAME = "attention_01_blocked"
BLOCK_Q, BLOCK_K = 64, 64
F32 = np.float32


def visible_limit(n_q: int, n_k: int) -> np.ndarray:
    """Causal, bottom-right aligned: query i sees keys j < i + 1 + n_k - n_q."""
    return np.arange(n_q) + 1 + n_k - n_q


def simulate(q, k, v, causal: bool = False, scale: float | None = None):
    """(out in q's dtype, lse float32) of shapes (batch, heads, n_q, d) and (batch, heads, n_q)."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = F32(1.0 / np.sqrt(d) if scale is None else scale)
    q32, k32, v32 = (np.asarray(a, dtype=F32) for a in (q, k, v))
    out = np.zeros((batch, heads, n_q, d), F32)
    lse = np.empty((batch, heads, n_q), F32)
    limit = visible_limit(n_q, n_k) if causal else np.full(n_q, n_k)
    with np.errstate(all="ignore"):
        for b in range(batch):
            for h in range(heads):
                kh = h // group
                for q0 in range(0, n_q, BLOCK_Q):
                    rows = slice(q0, min(q0 + BLOCK_Q, n_q))
                    qt = q32[b, h, rows]
                    m = np.full(qt.shape[0], -np.inf, F32)
                    l = np.zeros(qt.shape[0], F32)
                    o = np.zeros((qt.shape[0], d), F32)
                    last = int(limit[rows].max())          # keys past it are masked for every row of the tile
                    for k0 in range(0, min(n_k, max(last, 0)), BLOCK_K):
                        cols = np.arange(k0, min(k0 + BLOCK_K, n_k))
                        s = (qt @ k32[b, kh, cols].T).astype(F32) * scale
                        s = np.where(cols[None, :] < limit[rows][:, None], s, F32(-np.inf)).astype(F32)
                        m_new = np.fmax(m, s.max(axis=1))
                        base = np.where(m_new == -np.inf, F32(0), m_new).astype(F32)
                        p = np.exp(s - base[:, None]).astype(F32)
                        rescale = np.exp(m - base).astype(F32)
                        l = (l * rescale + p.sum(axis=1, dtype=F32)).astype(F32)
                        o = (o * rescale[:, None] + (p @ v32[b, kh, cols]).astype(F32)).astype(F32)
                        m = m_new
                    inv = np.where(l > 0, F32(1) / l, F32(0)).astype(F32)
                    out[b, h, rows] = o * inv[:, None]
                    lse[b, h, rows] = np.where(l > 0, m + np.log(l), -np.inf)
    return (out if q.dtype == np.float32 else out.astype(q.dtype)), lse


def reference(q, k, v, causal: bool = False, scale: float | None = None):
    """float64 attention over the whole score matrix: (out, lse) with the same conventions."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    q64, k64, v64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    k64, v64 = np.repeat(k64, heads // kv_heads, axis=1), np.repeat(v64, heads // kv_heads, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q64, k64) * scale
    if causal:
        s = np.where(np.arange(n_k)[None, :] < visible_limit(n_q, n_k)[:, None], s, -np.inf)
    with np.errstate(all="ignore"):
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0))
        l = e.sum(axis=-1, keepdims=True)
        out = np.where(l > 0, np.einsum("bhqk,bhkd->bhqd", e, v64) / np.where(l > 0, l, 1), 0.0)
        lse = np.where(l[..., 0] > 0, m[..., 0] + np.log(l[..., 0]), -np.inf)
    return out, lse
