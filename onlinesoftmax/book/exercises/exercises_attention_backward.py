"""Graders for the exercises of the page "The backward of attention".

`check_row_backward(fn)`: fn(q, K, V, dout, lse, scale) -> (dq, dK, dV) of one query row: q (d,), keys
K and values V (n, d), the upstream gradient dout (d,) of the row's output, the LSE the forward
saved; dK and dV (n, d) are the row's contributions. float64. Prints "passed" or the first problem
(grading.py) and returns True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade


def expected_row_backward(q, K, V, dout, lse, scale):
    s = scale * (K @ q)
    p = np.where(np.isneginf(s), 0.0, np.exp(s - lse))
    out = p @ V
    ds = p * (V @ dout - dout @ out)
    return scale * (ds @ K), scale * np.outer(ds, q), np.outer(p, dout)


def _case(name, rng, n, d, shift=0.0, mask=None, score=None):
    q, dout = rng.standard_normal(d), rng.standard_normal(d)
    K, V = rng.standard_normal((n, d)) + shift, rng.standard_normal((n, d))
    scale = 1 / np.sqrt(d)
    if score is not None:                  # move every key along q: each score rises by `score`
        K = K + (score / scale) * q / (q @ q)
    s = scale * (K @ q)
    if mask is not None:
        K[mask] = 0.0
        s = scale * (K @ q)
    lse = float(np.log(np.exp(s - s.max()).sum()) + s.max())
    return Case(name, (q, K, V, dout, lse, scale), rows_arg=None)


def row_cases():
    rng = np.random.default_rng(11)
    return [_case("one query, 3 keys of d = 2", rng, 3, 2), _case("one query, 50 keys of d = 16", rng, 50, 16),
            _case("keys that make scores near 800 (e^s overflows in float64)", rng, 20, 8, score=800.0),
            _case("a single key", rng, 1, 4)]


def hidden_row_cases(rng):
    n, d = int(rng.integers(2, 400)), int(rng.choice([24, 32, 64]))   # never a visible case's shape
    return [_case(f"one query, {n} keys of d = {d}", rng, n, d, shift=float(rng.uniform(-5, 30)))]


def check_row_backward(fn, quiet: bool = False) -> bool:
    """fn(q, K, V, dout, lse, scale) -> (dq, dK, dV) of one query row, float64."""
    return grade("row_backward", fn, row_cases(), expected_row_backward, ("dq", "dK", "dV"),
                 Tolerance(rtol=1e-9, atol=1e-12, row_rtol=1e-9), quiet=quiet, hidden=hidden_row_cases)


def row_backward(q, K, V, dout, lse, scale):
    """The exercise's answer: P from the saved LSE, then D, dS and the three products."""
    p = np.exp(scale * (K @ q) - lse)
    delta = dout @ (p @ V)                 # D = dO . O
    ds = p * (V @ dout - delta)
    return scale * (ds @ K), scale * np.outer(ds, q), np.outer(p, dout)
