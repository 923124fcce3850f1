"""Graders for the exercises of the chapter "Log-sum-exp, and the merge that leads to attention".

Each `check_<exercise>(fn)` runs `fn` on a small readable case and then awkward ones (grading.py:
the call, the answer's form, then its values), prints "passed" or the first problem (yours vs
expected, with the input row) and returns True or False; `fn` may return numpy or cupy arrays.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, merge, reference
from onlinesoftmax.book.grading import Case, Tolerance, grade

NEG_INF = -np.inf


# --- exercise: log-sum-exp of each row -----------------------------------------------------------

def logsumexp_cases():
    rng = np.random.default_rng(5)
    big = (rng.standard_normal((3, 500)) + 1000.0).astype(np.float32)   # e^x overflows fp32
    small = (rng.standard_normal((3, 500)) - 1000.0).astype(np.float32)  # e^x underflows to 0
    special, _ = checks.special_rows(np, 64)
    sizes = [Case(f"3 rows of {n}", (checks.random_rows(np, 3, n, seed=n),)) for n in (2, 3, 31, 33, 100, 257, 4097)]
    return [Case("the row [1, 2, 3]", (np.array([[1.0, 2.0, 3.0]], np.float32),)),
            Case("random rows", (checks.random_rows(np, 7, 1000, seed=1),)), *sizes, Case("logits near +1000", (big,)),
            Case("logits near -1000", (small,)), Case("one column", (checks.random_rows(np, 4, 1, seed=2),)),
            Case("rows with -inf, all -inf (-> -inf), +inf and NaN (-> NaN)", (special,))]


def _logsumexp_tolerance(x) -> Tolerance:
    """Four float32 ulps of max(|LSE|, 1): the float32 sum of e^(x - m) and one log."""
    eps = float(np.finfo(np.float32).eps)
    return Tolerance(rtol=4 * eps, atol=4 * eps)


def check_logsumexp_rows(fn, quiet: bool = False) -> bool:
    """fn(x) -> log sum_j e^(x_ij) per row of float32 x, shape (n_rows,)."""
    return grade("logsumexp_rows", fn, logsumexp_cases(), reference.logsumexp, ("lse",), _logsumexp_tolerance,
                 quiet=quiet)


# --- exercise: merge two (m, l, u) states --------------------------------------------------------

def merge_cases():
    rng = np.random.default_rng(9)
    a = merge.block_state(rng.standard_normal(5) * 3, rng.standard_normal((5, 4)))
    b = merge.block_state(rng.standard_normal(7) * 3 + 2, rng.standard_normal((7, 4)))
    empty = (NEG_INF, 0.0, np.zeros(4))
    far = merge.block_state(np.array([500.0, 499.0]), rng.standard_normal((2, 4)))
    example_a = merge.block_state([1.0, 2.0], [[10.0], [0.0]])
    example_b = merge.block_state([3.0], [[-10.0]])
    pairs = [("the worked example: logits [1, 2] and [3], values [10, 0] and [-10]", example_a, example_b),
             ("two random blocks", a, b), ("the same, in the other order", b, a),
             ("a masked block on the right", a, empty), ("a masked block on the left", empty, b),
             ("two masked blocks", empty, empty), ("a block 500 above the other", a, far)]
    return [Case(name, (left, right), rows_arg=None) for name, left, right in pairs]


def check_merge_attention(fn, quiet: bool = False) -> bool:
    """fn(a, b) -> (m, l, u): the merged state of two blocks, each (m, l, u) with u of shape (d_v,)."""
    return grade("merge_attention", fn, merge_cases(), merge.merge, ("m", "l", "u"), Tolerance(rtol=1e-12),
                 quiet=quiet)


# --- exercise: probabilities again from the saved LSE (the backward pass's trick) ---------------

def probabilities_cases():
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((6, 300)) * 4 + rng.uniform(-50, 50, size=(6, 1))
    masked = scores.copy()
    masked[2, 100:] = NEG_INF  # a causal-style mask
    readable = np.array([[1.0, 2.0, 3.0]])
    return [Case("the row [1, 2, 3]", (readable, reference.logsumexp(readable))),
            Case("random score rows", (scores, reference.logsumexp(scores))),
            Case("a partly masked row", (masked, reference.logsumexp(masked)))]


def check_probabilities_from_lse(fn, quiet: bool = False) -> bool:
    """fn(scores, lse) -> P with P_ij = softmax(scores_i)_j, from the row's saved log-sum-exp alone."""
    return grade("probabilities_from_lse", fn, probabilities_cases(), lambda scores, lse: reference.softmax(scores),
                 ("P",), Tolerance(rtol=1e-10), quiet=quiet)
