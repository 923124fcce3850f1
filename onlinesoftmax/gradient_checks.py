"""The check of a softmax or log-softmax gradient: dx against the float64 gradient of the same y and dy.

Row by row, the error must stay within twice the error of the same formula computed in float32 and
rounded to dx's dtype (the same-dtype baseline) plus two ulps of the row's own scale: its largest
|dx| plus what rounding the row's sum s can move dx by (max |y| * sum |y dy| for softmax, where
dx = y (dy - s); max e^y * sum |dy| for log-softmax). Never a floor of 1: an all-zero dx, a dx missing
its sum term or of the wrong sign fails unless the gradient is below the rounding of its own sum.
NaN must appear exactly where the float64 gradient has it.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import exact
from onlinesoftmax.checks import EPS, as_float64, rounded_to
from onlinesoftmax.reference import array_module


def _row_errors(got, ref):
    """max |got - ref| per row over the non-NaN entries of ref; inf for a row whose NaNs differ."""
    xp = array_module(ref)
    nan_ref, nan_got = xp.isnan(ref), xp.isnan(got)
    with np.errstate(invalid="ignore"):
        diff = xp.where(nan_ref | (got == ref), 0.0, xp.abs(got - ref))
    diff = xp.where(xp.isnan(diff), xp.inf, diff)
    return xp.where((nan_ref != nan_got).any(axis=-1), xp.inf, diff.max(axis=-1))


def compare_backward(dx, y, dy, function: str) -> tuple[bool, str]:
    """(passed, message) for dx = function's gradient ("softmax_backward" or "log_softmax_backward") of
    2-D (rows, N) y and dy along the last axis."""
    xp = array_module(y)
    dtype = np.dtype(dx.dtype).name
    y64, dy64 = as_float64(y), as_float64(dy)
    ref = exact.backward(function, y64, dy64, -1)
    base32 = exact.backward(function, y64.astype(xp.float32), dy64.astype(xp.float32), -1)
    base = rounded_to(base32, dtype)
    err, base_err = _row_errors(as_float64(dx), ref), _row_errors(base, ref)
    base_err = xp.where(xp.isfinite(base_err), base_err, 0.0)
    with np.errstate(all="ignore"):
        if function == "softmax_backward":
            moved = xp.abs(y64).max(axis=-1) * xp.abs(y64 * dy64).sum(axis=-1)
        else:
            moved = xp.exp(y64).max(axis=-1) * xp.abs(dy64).sum(axis=-1)
    scale = xp.where(xp.isfinite(ref), xp.abs(ref), 0.0).max(axis=-1) + xp.where(xp.isfinite(moved), moved, 0.0)
    eps = EPS.get(dtype) or float(np.finfo(np.float64).eps)
    tol = 2.0 * base_err + 2.0 * eps * scale
    worst = int(xp.argmax(err - tol))
    passed = bool((err <= tol).all())
    return passed, (f"{function} {dtype}: row {worst} error {float(err[worst]):.3e}, baseline "
                    f"{float(base_err[worst]):.3e}, tolerance {float(tol[worst]):.3e}")
