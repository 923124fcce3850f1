"""Shared checking tools: the edge matrix, input makers, poison, and the error-based tolerance.

Used by the CPU and GPU test tiers and by the chapters' graders alike.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.reference import array_module

EDGE_COLS = (1, 2, 3, 31, 33, 100, 255, 256, 257, 1000, 4096, 4097, 65536)
EDGE_ROWS = (1, 7, 4000)
HUGE_COLS = (1_048_576, 1_000_003)   # "a few rows of 1M"
POISON = 1.2345e30                   # finite: an unwritten element cannot pass as NaN or as a probability


def random_rows(xp, n_rows: int, n_cols: int, dtype="float32", seed: int = 0, outliers: bool = True,
                max_offset: float = 30.0):
    """Rows with a random offset and scale each, plus a few large outliers."""
    rng = np.random.default_rng(seed)
    offset = rng.uniform(-max_offset, max_offset, size=(n_rows, 1))
    scale = rng.choice([0.1, 1.0, 8.0], size=(n_rows, 1))
    x = offset + scale * rng.standard_normal((n_rows, n_cols))
    if outliers and n_cols > 4:
        hits = rng.random((n_rows, n_cols)) < 0.002
        x = np.where(hits, x + rng.uniform(10, 20, size=x.shape) * scale, x)
    return xp.asarray(x.astype(dtype))


def special_rows(xp, n_cols: int, dtype="float32", seed: int = 1):
    """Rows with -inf entries, all -inf, one +inf, one NaN, and a normal row.

    Returns (x, nan_rows): the rows whose every output must be NaN.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, n_cols)) * 3
    x[0, rng.random(n_cols) < 0.5] = -np.inf            # some -inf (at least one finite kept below)
    x[0, rng.integers(n_cols)] = 1.0
    x[1, :] = -np.inf                                   # fully masked: NaN, as torch
    x[2, rng.integers(n_cols)] = np.inf                 # +inf: NaN row
    x[3, rng.integers(n_cols)] = np.nan                 # NaN: NaN row
    x[4, : min(n_cols - 1, 300)] = -np.inf              # a leading run of -inf
    nan_rows = np.array([False, True, True, True, False, False])
    return xp.asarray(x.astype(dtype)), nan_rows


def short_row():
    """The guard case N = 100 < 256 threads: threads 100..255 never see an element."""
    return np.random.default_rng(3).standard_normal((1, 100)).astype(np.float32)


def leading_neg_inf_row():
    """The guard case whose first 300 of 1000 elements are -inf: threads 0..43 start on -inf."""
    x = np.random.default_rng(4).standard_normal((1, 1000)).astype(np.float32)
    x[0, :300] = -np.inf
    return x


# The two rows that come out all NaN without the -inf guards (chapter 03, tests, guards-gpu suite).
GUARD_ROWS = {"N=100": short_row, "first 300 are -inf": leading_neg_inf_row}


def poisoned_like(x, dtype=None):
    xp = array_module(x)
    return xp.full(x.shape, POISON, dtype=dtype or x.dtype)


def max_abs_error(y, ref) -> float:
    """max |y - ref| over the non-NaN reference entries; inf if the NaN patterns differ."""
    xp = array_module(y)
    y = y.astype(xp.float64)
    ref = xp.asarray(ref, dtype=xp.float64)
    ref_nan, y_nan = xp.isnan(ref), xp.isnan(y)
    if bool((ref_nan != y_nan).any()):
        return float("inf")
    finite = ~ref_nan
    if not bool(finite.any()):
        return 0.0
    with np.errstate(invalid="ignore"):
        diff = xp.abs(y - ref)
    diff = xp.where(finite, diff, 0.0)
    same_inf = (y == ref)  # -inf == -inf (log-softmax) counts as no error
    return float(xp.where(same_inf, 0.0, diff).max())


def tolerance(base_error: float, ref, dtype) -> float:
    """Error-based tolerance: twice the same-dtype baseline's error plus two ulps of the largest |ref|."""
    xp = array_module(ref)
    finite = xp.abs(ref[xp.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 1.0
    return 2.0 * base_error + 2.0 * float(np.finfo(dtype).eps) * max(scale, 1.0)


def compare(y, ref, baseline, dtype) -> tuple[bool, str]:
    """(passed, message) for output `y` against the float64 `ref` and a same-dtype `baseline`."""
    err = max_abs_error(y, ref)
    base_err = max_abs_error(baseline, ref)
    if not np.isfinite(base_err):  # the baseline itself disagrees on NaN; judge on ulps alone
        base_err = 0.0
    tol = tolerance(base_err, ref, dtype)
    passed = bool(err <= tol)
    return passed, f"error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def unwritten(y) -> int:
    """How many outputs still hold the poison value."""
    xp = array_module(y)
    return int((y.astype(xp.float64) == np.float64(np.float32(POISON))).sum())
