"""Graders for the exercises of the chapter "Softmax and overflow".

`check_overflow_logit(fn)` runs the reader's prediction on a few (dtype, N) pairs (grading.py:
the call, the answer's form, then its value), prints "passed" or the first problem with a hint
for the usual slips, and returns True or False. `measured_overflow_logit` finds the same
threshold by running a naive softmax, so the chapter can set the prediction beside a measurement.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade

# A prediction within this many logit units of ln(largest / N) passes: typing ln(65504) as 11.09
# is right, ln(65504 / 1000) read off a table as 4.2 is right, log10 or a missing ln N is not.
ABS_TOLERANCE = 0.01


def overflow_logit_reference(dtype, n_cols: int) -> float:
    """The logit a at which a row of n_cols equal logits a overflows the naive denominator:
    n_cols * e^a = largest finite value of dtype, so a = ln(largest) - ln(n_cols)."""
    return float(np.log(float(np.finfo(dtype).max)) - np.log(n_cols))


def solution_overflow_logit(dtype, n_cols):
    """The solution: N e^a reaches the largest finite value when a = ln(largest) - ln N."""
    largest = float(np.finfo(dtype).max)
    return np.log(largest) - np.log(n_cols)


def overflow_logit_cases():
    return [Case(f"{np.dtype(dtype).name}, N = {n_cols}", (dtype, n_cols), rows_arg=None)
            for dtype, n_cols in ((np.float32, 1), (np.float16, 1), (np.float32, 7), (np.float32, 1000),
                                  (np.float32, 10**6), (np.float16, 1000), (np.float16, 10**6))]


def hidden_overflow_logit_cases(rng):
    """A random N for each format, and always a float16 N past float16's range (N itself overflows
    there) and a small N (where ln N and ln(N - 1) differ by more than the tolerance)."""
    return [Case(f"{np.dtype(dtype).name}, a random N", (dtype, int(10 ** rng.uniform(0, 9))), rows_arg=None)
            for dtype in (np.float32, np.float16)] + [
        Case("float16, a random N above 65504", (np.float16, int(10 ** rng.uniform(np.log10(65505), 9))), rows_arg=None),
        Case("float32, a random N below 100", (np.float32, int(rng.integers(2, 100))), rows_arg=None)]


def _hint(fn) -> str:
    """What a wrong but well-formed answer most likely forgot (read off two cases)."""
    try:
        with np.errstate(all="ignore"):
            one = float(fn(np.float32, 1))
            many = float(fn(np.float32, 1000))
    except Exception:   # the failure itself was reported already
        return ""
    ln_max = overflow_logit_reference(np.float32, 1)
    if np.isclose(one, float(np.finfo(np.float32).max), rtol=1e-3):
        return "hint: that is the largest value itself; the logit is its natural logarithm"
    if np.isclose(one, np.log10(float(np.finfo(np.float32).max)), atol=ABS_TOLERANCE):
        return "hint: that is log10; e^x needs the natural logarithm (np.log)"
    if np.isclose(one, ln_max, atol=ABS_TOLERANCE) and np.isclose(many, ln_max, atol=ABS_TOLERANCE):
        return "hint: right for one logit; with N equal terms the sum N e^a overflows first"
    return ""


def check_overflow_logit(fn, quiet: bool = False) -> bool:
    """fn(dtype, n_cols) -> a: the logit at which the naive softmax of a row of n_cols equal
    logits a overflows its denominator in dtype (np.float32 or np.float16)."""
    cases = overflow_logit_cases()
    passed = grade("overflow_logit", fn, cases, overflow_logit_reference, ("a",),
                   Tolerance(rtol=0.0, atol=ABS_TOLERANCE), quiet=quiet, hidden=hidden_overflow_logit_cases)
    if not passed and not quiet:
        hint = _hint(fn)
        if hint:
            print(f"  {hint}")
    return passed


def measured_overflow_logit(naive, dtype, n_cols: int, steps: int = 40) -> float:
    """The smallest a (to a bisection's precision) at which naive(row of n_cols logits a, in
    dtype) stops giving 1 / n_cols everywhere: a NaN, an inf, or the silent zeros of an
    overflowed sum. `naive(x)` takes a (1, n_cols) array."""
    def broken(a: float) -> bool:
        x = np.full((1, n_cols), a, dtype=dtype)
        with np.errstate(all="ignore"):
            y = np.asarray(naive(x), dtype=np.float64)
        return not (np.isfinite(y).all() and abs(y.sum() - 1.0) < 0.5)

    predicted = overflow_logit_reference(dtype, n_cols)
    low, high = predicted - 2.0, predicted + 2.0
    assert not broken(low) and broken(high), "the naive softmax should break between these logits"
    for _ in range(steps):
        middle = 0.5 * (low + high)
        low, high = (low, middle) if broken(middle) else (middle, high)
    return high
