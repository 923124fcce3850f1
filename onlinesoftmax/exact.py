"""The inputs the kernels do not take, computed exactly: float64 arrays and empty arrays.

float64 runs the float64 reference (`onlinesoftmax.reference`) with the array's own module, NumPy or
CuPy (CuPy's element-wise and reduction kernels, not the book's); the result is float64, as torch
and NumPy keep it. An empty array gives an empty result of the right shape, and the log-sum-exp of
an empty axis is -inf (the log of an empty sum), as torch.logsumexp and scipy.special.logsumexp.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import reference
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
