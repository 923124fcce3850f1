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
from onlinesoftmax.checks import host as checks_host
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


def compare_cross_entropy(rows, lse, dx, x, targets, scale: float = 1.0, **options) -> tuple[bool, str]:
    """(passed, message) for cross_entropy_01_rows' loss per row, LSE per row and gradient dx (None:
    not checked; scaled by `scale`) of logits x against the float64 truth (kernels/cross_entropy/rows.py).

    Loss and LSE: within twice the error of the same formulas in float32 plus four float32 ulps of
    max(1, |value|). dx, row by row: twice the same-dtype baseline's error (float32, rounded to dx's
    dtype) plus a few ulps of the row's largest |gradient| or probability term (the target's p_t before
    1 - eps is taken from it): two in float16 and bfloat16, where rounding to the dtype dominates; four
    in float32, where the baseline's exp and tanh (NumPy's, within an ulp) are sharper than a GPU's
    (CUDA's expf and tanhf: within 2 ulps each, and a soft cap's slope 1 - tanh^2 doubles tanh's error);
    never a floor of 1: a zero gradient fails.
    NaN exactly where the truth has it; an ignored row must be 0 exactly."""
    from onlinesoftmax.kernels.cross_entropy import rows as kce

    t = checks_host(targets).reshape(-1)
    x64 = as_float64(checks_host(x)).reshape(t.size, -1)
    host = [None if a is None else checks_host(a) for a in (rows, lse, dx)]   # bfloat16 through its 16-bit words
    ref_rows, ref_lse, ref_grad = kce.reference(x64, t, **options)
    f32 = kce.terms(x64.astype(np.float32), t, options.get("ignore_index", -100), options.get("label_smoothing", 0.0),
                     options.get("z_loss", 0.0), options.get("softcap", 0.0), np, np.float32)
    for name, got, ref, base in (("loss", host[0], ref_rows, f32[0]), ("lse", host[1], ref_lse, f32[1])):
        got = np.asarray(got, np.float64).reshape(ref.shape)
        if not np.array_equal(np.isnan(got), np.isnan(ref)):
            return False, f"{name}: NaN where the float64 {name} has none (or the reverse), rows {np.flatnonzero(np.isnan(got) != np.isnan(ref))[:5]}"
        finite = np.isfinite(ref)
        if not np.array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)]):
            return False, f"{name}: an infinite {name} differs"
        err = np.abs(got - ref)[finite]
        tol = 2 * np.abs(base.astype(np.float64) - ref)[finite].max(initial=0) + \
            4 * EPS["float32"] * np.maximum(1, np.abs(ref[finite]))
        if (err > tol).any():
            i = int(np.argmax(err - tol))
            return False, f"{name}: error {err[i]:.3e} > tolerance {tol[i]:.3e} at row {np.flatnonzero(finite)[i]}"
    ignored = t == options.get("ignore_index", -100)
    if (np.asarray(host[0], np.float64).reshape(-1)[ignored] != 0).any():
        return False, "loss: an ignored row is not 0"
    if host[2] is None:
        return True, "loss and lse within twice a float32 baseline's error against float64"
    dtype = host[2].dtype.name if host[2].dtype.name in EPS else "bfloat16"
    got = as_float64(host[2]).reshape(ref_grad.shape)
    ref = ref_grad * scale
    baseline = as_float64(rounded_to((f32[2] * np.float32(scale)).astype(np.float32), dtype))
    errors, base_errors = _row_errors(got, ref), _row_errors(baseline, ref)
    # The row's scale: its largest |gradient|, or the largest probability term p_j before the target's
    # (1 - eps) is subtracted from it (p_t - 1 near 0 carries the rounding of p_t ~ 1, not of the difference).
    hit = np.zeros_like(ref)
    counted = ~ignored
    hit[np.flatnonzero(counted), t[counted]] = (1 - options.get("label_smoothing", 0.0)) * scale
    with np.errstate(invalid="ignore"):
        scale_row = np.nanmax(np.where(np.isfinite(ref), np.maximum(np.abs(ref), np.abs(ref + hit)), 0), axis=-1,
                              initial=0)
    tol = 2 * base_errors + (4 if dtype == "float32" else 2) * EPS[dtype] * scale_row
    if (got[ignored] != 0).any():
        return False, "dx: an ignored row is not 0"
    if (errors > tol).any():
        i = int(np.argmax(errors - tol))
        return False, f"dx: row {i} error {errors[i]:.3e} > tolerance {tol[i]:.3e} (baseline {base_errors[i]:.3e})"
    return True, "loss, lse and dx within twice a float32 baseline's error against float64"
