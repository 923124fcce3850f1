"""The float64 references. Chapters, checkers and tests all use these and nothing else.

Conventions follow torch for softmax and log_softmax: a row of all -inf gives NaN (0/0);
a row holding NaN or +inf gives NaN everywhere. logsumexp departs from torch on one row:
all -inf gives -inf (as torch), but a row holding +inf gives NaN here where
torch.logsumexp gives +inf, because the (m, l) state sees e^(inf - inf) = NaN and cannot
tell it apart from a NaN input without an extra flag. The kernels do the same.
"""
from __future__ import annotations

import numpy as np

NEG_INF = -np.inf


def array_module(x):
    """numpy for host data, cupy for cupy arrays (the reference runs where the data is)."""
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def _as_float64(x):
    xp = array_module(x)
    return xp.asarray(x, dtype=xp.float64)


def row_stats(x) -> tuple[np.ndarray, np.ndarray]:
    """(m, l) per row in float64: m = max, l = sum e^(x - m). Rows of all -inf give (-inf, nan)."""
    x = _as_float64(x)
    x = x.reshape(1, -1) if x.ndim == 1 else x
    with np.errstate(invalid="ignore", over="ignore"):
        # NaN anywhere makes max NaN (np.max propagates NaN), and so the row.
        m = x.max(axis=-1)
        l = np.exp(x - m[:, None]).sum(axis=-1)
    return m, l


def softmax(x) -> np.ndarray:
    """Softmax over the last axis in float64 (same shape as x)."""
    x64 = _as_float64(x)
    xp = array_module(x64)
    x2 = x64.reshape(1, -1) if x64.ndim == 1 else x64
    m, l = row_stats(x2)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y = xp.exp(x2 - m[:, None]) / l[:, None]
    return y.reshape(x64.shape)


def logsumexp(x) -> np.ndarray:
    """log sum_j e^(x_j) per row in float64, as torch.logsumexp and scipy.special.logsumexp: a row of
    all -inf gives -inf, a row holding NaN gives NaN, a row holding +inf (and no NaN) gives +inf."""
    x64 = _as_float64(x)
    xp = array_module(x64)
    m, l = row_stats(x64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = xp.where(m == NEG_INF, NEG_INF, m + xp.log(l))
        out = xp.where((m == xp.inf) & ~xp.isnan(x64).any(axis=-1), xp.inf, out)
    return out if x64.ndim > 1 else out[0]


def log_softmax(x) -> np.ndarray:
    """(x - m) - log sum e^(x - m) per row in float64, as torch: a row of all -inf, or holding +inf or
    NaN, gives NaN everywhere."""
    x64 = _as_float64(x)
    x2 = x64.reshape(1, -1) if x64.ndim == 1 else x64
    m, l = row_stats(x2)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = (x2 - m[:, None]) - np.log(l)[:, None]
    return y.reshape(x64.shape)


def softmax_same_dtype(x):
    """The plain safe softmax computed in x's own dtype: the error baseline for tests.

    A kernel passes when its error against `softmax` is at most twice this one's
    (plus a couple of ulps), the rule flash-attention's tests use.
    """
    xp = array_module(x)
    with np.errstate(invalid="ignore", over="ignore"):
        e = xp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def logsumexp_same_dtype(x):
    """LSE computed in float32 (for fp16 and fp32 input): the error baseline for LSE tests."""
    xp = array_module(x)
    x = x.astype(xp.float32)
    m = x.max(axis=-1)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        lse = m + xp.log(xp.exp(x - m[..., None]).sum(axis=-1))
    return xp.where(m == NEG_INF, m, lse)


def log_softmax_same_dtype(x):
    """(x - m) - log sum e^(x - m) in float32, rounded to x's dtype: the baseline for log-softmax tests.

    This is what a kernel with fp32 arithmetic can deliver (and what torch does for fp16).
    """
    xp = array_module(x)
    x32 = x.astype(xp.float32)
    m = x32.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y = (x32 - m) - xp.log(xp.exp(x32 - m).sum(axis=-1, keepdims=True))
    return y.astype(x.dtype)


def online_steps(x) -> list[dict]:
    """The online recurrence on one vector, step by step, in float64.

    Each step n records x_n, m_n, the rescale factor e^(m_{n-1} - m_n) and l_n.
    """
    m, l = NEG_INF, 0.0
    steps = [{"n": 0, "x": None, "m": m, "rescale": None, "l": l}]
    for n, xn in enumerate(np.asarray(x, dtype=np.float64).ravel(), start=1):
        m_new = max(m, float(xn))
        base = 0.0 if m_new == NEG_INF else m_new  # the -inf guard
        rescale = float(np.exp(m - base))
        l = l * rescale + float(np.exp(xn - base))
        m = m_new
        steps.append({"n": n, "x": float(xn), "m": m, "rescale": rescale, "l": l})
    return steps


def combine(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """combine((m1, l1), (m2, l2)) in float64, with the -inf guard."""
    (m1, l1), (m2, l2) = a, b
    m = max(m1, m2)
    base = 0.0 if m == NEG_INF else m
    return m, l1 * np.exp(m1 - base) + l2 * np.exp(m2 - base)


def topk_order(x) -> np.ndarray:
    """Columns of each row (2-D, host) in the top-k order: NaN first, then larger values, equal
    values (and NaNs among themselves) by the lower column. -0.0 equals +0.0."""
    x = np.asarray(x, dtype=np.float64)
    key = np.where(np.isnan(x), -np.inf, -x)          # ascending: NaN and large values first
    not_nan = ~np.isnan(x)                             # False (NaN) sorts before True
    columns = np.broadcast_to(np.arange(x.shape[1]), x.shape)
    return np.lexsort((columns, key, not_nan), axis=-1)


def softmax_topk(x, k: int, renormalize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, columns) of the k largest softmax probabilities of each row of x (2-D, host),
    in float64: the columns of topk_order, softmax(x) at them, or with renormalize the kept
    e^(x - max) over their own sum. Rows whose softmax is NaN (NaN, +inf, all -inf) give NaN."""
    x64 = np.asarray(x, dtype=np.float64)
    columns = topk_order(x64)[:, :k]
    if not renormalize:
        return np.take_along_axis(softmax(x64), columns, axis=1), columns
    with np.errstate(all="ignore"):
        m = x64.max(axis=1, keepdims=True)
        e = np.take_along_axis(np.exp(x64 - m), columns, axis=1)
        return e / e.sum(axis=1, keepdims=True), columns
