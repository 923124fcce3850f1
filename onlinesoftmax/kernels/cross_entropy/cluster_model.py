"""The NumPy model of cross_entropy_02_cluster chunk by chunk (kernels/cross_entropy/cross_entropy_02_cluster.cu):
each chunk of a row, as the cluster splits it, folded into its (m, l) and sum in float32, the chunks'
states combined as warp 0 of every block combines the cluster's states, then cross_entropy_01_rows'
formulas for the loss, the LSE and the gradient. The registered model (the CPU tier's output for NumPy
inputs) is 01's, the same arithmetic over the whole row; this one checks the split and the combine.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.kernels.cross_entropy import rows


def simulate(x, targets, grad_scale=None, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=0.0,
             n_chunks: int | None = None):
    """The kernel's results for NumPy logits (loss per row, lse per row, dx or None), the row split into
    chunks as the cluster splits it (n_chunks: the plan's for an aligned row, or as given) and every
    chunk's state and sum combined in float32; dx in x's dtype, scaled by grad_scale."""
    from onlinesoftmax.simulate import NEG_INF, online_base, online_combine

    from onlinesoftmax.kernels.cross_entropy.cluster import chunks

    x = np.asarray(x)
    f32 = np.float32
    s = x.astype(f32)
    t = np.asarray(targets).reshape(-1)
    n_rows, n_cols = s.shape
    piece = rows.VEC[x.dtype.name]
    if n_chunks is None:
        n_chunks = max(1, chunks(n_cols, x.dtype.name, piece)[0])
    width = -(-(n_cols // piece) // n_chunks) * piece   # elements per chunk; the last also takes the tail
    with np.errstate(all="ignore"):
        if softcap:
            s = (f32(softcap) * np.tanh(s / f32(softcap))).astype(f32)
        state, parts = (np.full(n_rows, NEG_INF, f32), np.zeros(n_rows, f32)), []
        for c in range(n_chunks):
            part = s[:, c * width:(c + 1) * width if c < n_chunks - 1 else n_cols]
            m = np.fmax.reduce(part, axis=1, initial=NEG_INF).astype(f32)   # fmaxf: a NaN is passed over
            base = online_base(m, True)
            chunk_state = (m, np.exp(part - base[:, None]).sum(axis=1, dtype=f32).astype(f32))
            state = online_combine(state, chunk_state)
            parts.append(part)
        m, l = state
        # the label smoothing's sum of (s_j - m), chunk by chunk for the row's m (smooth_sum.cuh)
        total = sum(((part - m[:, None]).sum(axis=1, dtype=f32) for part in parts), np.zeros(n_rows, f32)).astype(f32)
        lse = (m + np.log(l)).astype(f32)
        ignored = t == ignore_index
        at = np.where(ignored, 0, t)
        s_t = np.where(ignored, f32(0), s[np.arange(n_rows), at])
        eps = f32(label_smoothing)
        value = np.log(l) + (1 - eps) * (m - s_t) - (eps * (total / f32(n_cols)) if eps else 0) + \
            f32(z_loss) * lse * lse
        loss = np.where(ignored, f32(0), value).astype(f32)
        if grad_scale is None:
            return loss, lse, None
        scale = np.where(ignored, f32(0), f32(grad_scale))
        p_scale = scale * (1 + 2 * f32(z_loss) * lse) / l
        g = p_scale[:, None] * np.exp(s - m[:, None]) - (scale * eps / f32(n_cols))[:, None]
        g[np.arange(n_rows), at] -= scale * (1 - eps)
        if softcap:
            g = g * (1 - (s / f32(softcap)) ** 2)
        g[ignored] = 0
    return loss, lse, g.astype(f32).astype(x.dtype)
