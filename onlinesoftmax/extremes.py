"""The extreme-row matrix: rows whose magnitudes break a kernel that scales before it subtracts, and
+-inf / NaN rows, in every dtype (tests/test_extreme_rows.py); the long peaked row with a masked run;
and a float64 reference as a dtype can hold it."""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks


# Magnitudes that overflow a kernel's exponent arithmetic if it scales before it subtracts (m log2e past
# FLT_MAX, or rounded by hundreds): near +-1e10 (fp16: +-6e4, its largest), near finfo.max, finfo.min, -1e30.
EXTREME_ROWS = ("near +1e10", "near -1e10", "near finfo.max", "all finfo.min", "finfo.min and one finfo.max",
                "-1e30 + noise", "one +inf", "all -inf but one", "one NaN", "+inf and NaN")
FINFO_MAX = {"float32": float(np.finfo(np.float32).max), "float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def extreme_rows(xp, n_cols: int, dtype="float32", seed: int = 5):
    """The extreme-row matrix of one dtype: one row per name of EXTREME_ROWS (in that order), rounded
    once to `dtype` (fp16 holds neither 1e10 nor 1e30: its rows sit at +-6e4 instead). Every value is
    finite in `dtype` except the +inf, -inf and NaN that a row's name announces. The expected outputs
    are the float64 reference's (torch's and scipy's conventions): softmax and log_softmax NaN for a
    row holding +inf or NaN, logsumexp +inf for +inf without NaN."""
    rng = np.random.default_rng(seed)
    big = FINFO_MAX[dtype]
    ten = 6.0e4 if dtype == "float16" else 1.0e10
    thirty = -6.0e4 if dtype == "float16" else -1.0e30
    noise = rng.standard_normal((len(EXTREME_ROWS), n_cols))
    x = np.empty((len(EXTREME_ROWS), n_cols))
    x[0] = ten * (1 - 0.01 * np.abs(noise[0]))
    x[1] = -ten * (1 + 0.01 * np.abs(noise[1]))
    x[2] = big * (1 - 0.01 * np.abs(noise[2]))
    x[3] = -big
    x[4] = -big
    x[4, rng.integers(n_cols)] = big
    x[5] = thirty * (1 + 0.01 * np.abs(noise[5]))
    x[6] = 3 * noise[6]
    x[6, rng.integers(n_cols)] = np.inf
    x[7] = -np.inf
    x[7, rng.integers(n_cols)] = 2.5
    x[8] = 3 * noise[8]
    x[8, rng.integers(n_cols)] = np.nan
    x[9] = 3 * noise[9]
    x[9, rng.integers(n_cols)] = np.inf
    x[9, rng.integers(n_cols)] = np.nan
    with np.errstate(over="ignore"):
        return checks.on_device(xp, checks.to_dtype(x.astype(np.float32), dtype))


def saturated(ref, dtype: str):
    """The float64 reference as `dtype` can hold it: values past the dtype's largest finite value (their
    rounding) become +-inf, as any result stored in that dtype must (log_softmax of finfo.min beside
    finfo.max is -6.8e38 in float64, -inf in float32)."""
    xp = checks.array_module(ref)
    # the largest finite value plus half its ulp rounds (to even) to inf
    threshold = FINFO_MAX[dtype] + 2.0 ** np.floor(np.log2(FINFO_MAX[dtype])) * checks.EPS[dtype] / 2
    return xp.where(xp.abs(ref) >= threshold, xp.sign(ref) * xp.inf, ref)


def peaked_row_with_a_masked_run(n_cols: int | None = None, first: int = 100_000, length: int = 10_000):
    """One long peaked row (the first of peaked_rows) with columns [first, first + length) set to -inf,
    the peak kept outside them. The run spans whole chunks of thread_fold.cuh (4096 columns at 256
    threads), so every thread starts a fresh state on -inf there: without the -inf guard the row is
    NaN, although no thread's slice starts with -inf."""
    n_cols = checks.LONG_PEAKED_COLS[0] if n_cols is None else n_cols
    x = checks.peaked_rows(np, n_cols)[:1].copy()
    peak = int(np.argmax(x[0]))
    if first <= peak < first + length:   # move the peak out of the run
        x[0, first - 1] = x[0, peak]
    x[0, first:first + length] = -np.inf
    return x
