"""The inputs the kernels do not take, computed exactly: float64 arrays and empty arrays.

float64 runs the float64 reference (`onlinesoftmax.reference`) with the array's own module, NumPy or
CuPy (CuPy's element-wise and reduction kernels, not the book's); the result is float64, as torch
and NumPy keep it. An empty array gives an empty result of the right shape, and the log-sum-exp of
an empty axis is -inf (the log of an empty sum), as torch.logsumexp and scipy.special.logsumexp.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.inputs import as_rows, from_rows

FUNCTIONS = {"softmax": reference.softmax, "log_softmax": reference.log_softmax,
             "logsumexp": reference.logsumexp}


def compute(function: str, x, axis: int):
    """function(x) along `axis` (normalized) for float64 or empty x; the result's dtype is x's for
    float64, and for an empty x what the kernels would have returned (float32 for logsumexp)."""
    xp = reference.array_module(x)
    per_row = function == "logsumexp"
    out_shape = tuple(s for i, s in enumerate(x.shape) if i != axis) if per_row else tuple(x.shape)
    out_dtype = np.dtype(np.float32) if per_row and x.dtype != np.float64 else x.dtype
    if x.size == 0:
        fill = -np.inf if per_row and x.shape[axis] == 0 else 0
        return xp.full(out_shape, fill, dtype=out_dtype)
    rows, _ = as_rows(x, axis)
    return from_rows(FUNCTIONS[function](rows).astype(out_dtype, copy=False), x.shape, axis, per_row)


def masked_softmax(x, options: dict, mask=None):
    """softmax along the last axis with a mask (options as from masks.options) for float64 or empty x:
    the float64 reference of the masked kernels, on the caller's additive mask in float64 (the options
    hold it rounded to float32, as the kernels take it). A fully removed row is NaN, as the kernels'."""
    from onlinesoftmax.kernels.softmax.masked import reference_masked

    xp = reference.array_module(x)
    if x.size == 0:
        return xp.zeros(x.shape, dtype=x.dtype)
    rows, _ = as_rows(x, x.ndim - 1)
    if options.get("mask") is not None and mask is not None and not isinstance(mask, str):
        options = {**options, "mask": xp.asarray(mask, dtype=np.float64).reshape(-1, rows.shape[1])}
    with np.errstate(invalid="ignore"):
        return from_rows(reference_masked(rows, **options).astype(x.dtype, copy=False), x.shape, x.ndim - 1, False)


def backward(function: str, y, dy, axis: int):
    """softmax's or log-softmax's gradient (function "softmax_backward", "log_softmax_backward") in
    float64, or an empty dx for empty y."""
    xp = reference.array_module(y)
    if y.size == 0:
        return xp.empty(y.shape, dtype=y.dtype)
    with np.errstate(all="ignore"):
        if function == "softmax_backward":
            return y * (dy - (y * dy).sum(axis=axis, keepdims=True))
        return dy - xp.exp(y) * dy.sum(axis=axis, keepdims=True)


def topk(x, k: int, axis: int, *, probabilities: bool, renormalize: bool = False, return_lse: bool = False):
    """softmax_topk's (probs, indices[, lse]) (probabilities=True) or topk_logits' (values, indices) for
    a float64 or empty x, or k = 0, as torch.topk shapes them: k replaces `axis` where it was. The order
    and ties are the kernels' (reference.topk_order); values in x's dtype, indices int64; the LSE is
    the kernels' m + log l (NaN for a row holding NaN or +inf, -inf for a row of -inf or no element),
    float32 unless x is float64. Computed on the host (a CuPy x is copied there and back)."""
    xp = reference.array_module(x)
    host = checks.host(x)
    lead = tuple(s for i, s in enumerate(x.shape) if i != axis)
    rows = np.moveaxis(host, axis, -1).reshape(int(np.prod(lead)), x.shape[axis]).astype(np.float64)
    if rows.shape[0] == 0 or k == 0:
        columns = np.zeros((rows.shape[0], k), np.int64)
        values = np.zeros((rows.shape[0], k))
    elif probabilities:
        values, columns = reference.softmax_topk(rows, k, renormalize)
    else:
        columns = reference.topk_order(rows)[:, :k]
        values = np.take_along_axis(rows, columns, axis=1)
    results = [values.astype(x.dtype), columns.astype(np.int64)]
    if probabilities and return_lse:
        m, l = reference.row_stats(rows) if rows.shape[1] else (np.full(rows.shape[0], -np.inf), None)
        with np.errstate(all="ignore"):
            lse = np.where(m == -np.inf, -np.inf, m + np.log(l)) if l is not None else m
        results.append(lse.astype(np.float64 if x.dtype == np.float64 else np.float32).reshape(lead))
    for i in range(2):   # k where the axis was
        results[i] = np.moveaxis(results[i].reshape(lead + (k,)), -1, axis)
    if xp is np:
        return tuple(results)
    with x.device:
        return tuple(checks.on_device(xp, np.ascontiguousarray(r)) for r in results)


def attention(q, k, v, *, causal: bool, scale: float):
    """(out, lse) of softmax(q k^T * scale [+ the causal mask, bottom-right]) v for a float64 or empty
    q, k, v (batch, heads or kv_heads, seq, d; heads a multiple of kv_heads), with the array's own
    module. out in q's dtype; lse (batch, heads, n_q), float64 for float64 q, else float32. A query
    with no key to see (n_k = 0, or all masked) gives zeros and an LSE of -inf, as the kernels."""
    xp = reference.array_module(q)
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    lse_dtype = np.float64 if q.dtype == np.float64 else np.float32
    if q.size == 0 or n_k == 0:
        return xp.zeros(q.shape, q.dtype), xp.full((batch, heads, n_q), -np.inf, lse_dtype)
    from onlinesoftmax.kernels.attention import blocked   # (its float64 reference: the kernels' conventions)

    out, lse = blocked.reference(q, k, v, causal=causal, scale=scale)
    return out.astype(q.dtype), lse.astype(lse_dtype)


def attention_backward(dout, q, k, v, out, lse, *, causal: bool, scale: float):
    """(dq, dk, dv) of attention for float64 or empty arrays, with the array's own module: the formulas
    of the backward kernels in float64 (P = e^(s - LSE) with the causal mask, bottom-right;
    D = rowsum(dout * out); dS = P (dP - D)); dk and dv summed over each kv head's group. A row whose
    LSE is -inf (it saw no key) has P = 0, so no gradient. Each gradient in its input's dtype."""
    xp = reference.array_module(q)
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    if q.size == 0 or k.size == 0:
        return xp.zeros(q.shape, q.dtype), xp.zeros(k.shape, k.dtype), xp.zeros(v.shape, v.dtype)
    group = heads // kv_heads
    kk, vv = xp.repeat(k, group, axis=1), xp.repeat(v, group, axis=1)
    with np.errstate(all="ignore"):
        s = q @ kk.swapaxes(-1, -2) * scale
        row_lse = lse.astype(np.float64)[..., None]
        seen = xp.isfinite(row_lse) | xp.isnan(row_lse)   # (a NaN LSE passes its NaN on)
        if causal:   # query i sees keys j < i + 1 + n_k - n_q
            seen = seen & (xp.arange(n_k)[None, :] < (xp.arange(n_q) + 1 + n_k - n_q)[:, None])
        p = xp.where(seen, xp.exp(s - row_lse), 0.0)
        ds = p * (dout @ vv.swapaxes(-1, -2) - (dout * out).sum(axis=-1, keepdims=True))
        dq = ds @ kk * scale
        dk = (ds.swapaxes(-1, -2) @ q * scale).reshape(batch, kv_heads, group, n_k, d).sum(axis=2)
        dv = (p.swapaxes(-1, -2) @ dout).reshape(batch, kv_heads, group, n_k, d).sum(axis=2)
    return dq.astype(q.dtype, copy=False), dk.astype(k.dtype, copy=False), dv.astype(v.dtype, copy=False)
