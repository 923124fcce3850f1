"""Graders for the exercises of the chapter "Log-sum-exp, and the merge that leads to attention".

Each `check_<exercise>(fn)` prints "passed" or the first case where yours differs from the
reference (yours vs expected) and returns True or False; `fn` may return numpy or cupy arrays.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, merge, reference
from onlinesoftmax.book.exercises_monoid import report, same, to_numpy

NEG_INF = -np.inf


# --- exercise: log-sum-exp of each row -----------------------------------------------------------

def logsumexp_cases():
    rng = np.random.default_rng(5)
    big = (rng.standard_normal((3, 500)) + 1000.0).astype(np.float32)   # e^x overflows fp32
    small = (rng.standard_normal((3, 500)) - 1000.0).astype(np.float32)  # e^x underflows to 0
    special, _ = checks.special_rows(np, 64)
    return [("random rows", checks.random_rows(np, 7, 1000, seed=1)), ("logits near +1000", big),
            ("logits near -1000", small), ("one column", checks.random_rows(np, 4, 1, seed=2)),
            ("rows with -inf, all -inf (-> -inf), +inf and NaN (-> NaN)", special)]


def check_logsumexp_rows(fn) -> bool:
    """fn(x) -> log sum_j e^(x_ij) per row of float32 x, shape (n_rows,)."""
    eps = float(np.finfo(np.float32).eps)
    for case, x in logsumexp_cases():
        with np.errstate(all="ignore"):
            yours = to_numpy(fn(x.copy())).astype(np.float64)
        expected = reference.logsumexp(x)
        if yours.shape != expected.shape:
            return report("logsumexp_rows", f"{case} (shape {yours.shape})", yours, expected)
        finite = np.isfinite(expected)
        tolerance = 4 * eps * np.maximum(np.abs(expected[finite]), 1.0)
        if not same(yours[~finite], expected[~finite], rtol=0) or \
                not (np.abs(yours[finite] - expected[finite]) <= tolerance).all():
            return report("logsumexp_rows", case, yours, expected)
    print("logsumexp_rows: passed")
    return True


# --- exercise: merge two (m, l, u) states --------------------------------------------------------

def merge_cases():
    rng = np.random.default_rng(9)
    a = merge.block_state(rng.standard_normal(5) * 3, rng.standard_normal((5, 4)))
    b = merge.block_state(rng.standard_normal(7) * 3 + 2, rng.standard_normal((7, 4)))
    empty = (NEG_INF, 0.0, np.zeros(4))
    far = merge.block_state(np.array([500.0, 499.0]), rng.standard_normal((2, 4)))
    example_a = merge.block_state([1.0, 2.0], [[10.0], [0.0]])
    example_b = merge.block_state([3.0], [[-10.0]])
    return [("the worked example", example_a, example_b), ("two random blocks", a, b),
            ("the same, in the other order", b, a), ("a masked block on the right", a, empty),
            ("a masked block on the left", empty, b), ("two masked blocks", empty, empty),
            ("a block 500 above the other", a, far)]


def check_merge_attention(fn) -> bool:
    """fn(a, b) -> (m, l, u): the merged state of two blocks, each (m, l, u) with u of shape (d_v,)."""
    for case, a, b in merge_cases():
        expected = merge.merge(a, b)
        with np.errstate(all="ignore"):
            yours = tuple(to_numpy(v) for v in fn(a, b))
        for name, y, e in zip(("m", "l", "u"), yours, expected):
            if not same(y, e, rtol=1e-12):
                return report("merge_attention", f"{case} ({name})", y, e)
    print("merge_attention: passed")
    return True


# --- exercise: probabilities again from the saved LSE (the backward pass's trick) ---------------

def probabilities_cases():
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((6, 300)) * 4 + rng.uniform(-50, 50, size=(6, 1))
    masked = scores.copy()
    masked[2, 100:] = NEG_INF  # a causal-style mask
    return [("random score rows", scores), ("a partly masked row", masked)]


def check_probabilities_from_lse(fn) -> bool:
    """fn(scores, lse) -> P with P_ij = softmax(scores_i)_j, from the row's saved log-sum-exp alone."""
    for case, scores in probabilities_cases():
        lse = reference.logsumexp(scores)
        with np.errstate(all="ignore"):
            yours = to_numpy(fn(scores.copy(), lse.copy()))
        expected = reference.softmax(scores)
        if not same(yours, expected, rtol=1e-10):
            if np.shape(yours) != expected.shape:
                return report("probabilities_from_lse", f"{case} (shape {np.shape(yours)})", yours, expected)
            bad = next(i for i in range(len(expected)) if not same(yours[i], expected[i], rtol=1e-10))
            return report("probabilities_from_lse", f"{case}, row {bad}", yours[bad], expected[bad])
    print("probabilities_from_lse: passed")
    return True
