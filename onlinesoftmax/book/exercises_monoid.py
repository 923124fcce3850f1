"""Graders for the exercises of the chapter "The combine monoid".

Each `check_<exercise>(fn)` runs `fn` on a small readable case and then awkward ones (grading.py:
the call, the answer's form, then its values), prints "passed" or the first problem (yours vs
expected, with the input row), and returns True or False. `fn` may return numpy or cupy arrays,
so a kernel wrapper can be graded the same way.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.book.grading import Case, Tolerance, grade

NEG_INF = -np.inf


# --- exercise: merge the partial states of split rows ------------------------------------------

def merge_partials_reference(m_parts, l_parts):
    """Fold each row's partial states with reference.combine, left to right."""
    m_out, l_out = [], []
    for m_row, l_row in zip(np.asarray(m_parts, float), np.asarray(l_parts, float)):
        state = (NEG_INF, 0.0)
        for part in zip(m_row, l_row):
            state = reference.combine(state, part)
        m_out.append(state[0])
        l_out.append(state[1])
    return np.array(m_out), np.array(l_out)


def merge_partials_cases():
    rng = np.random.default_rng(2024)
    m = rng.uniform(-30, 30, size=(6, 9))
    l = rng.uniform(1, 500, size=(6, 9))
    m[1, 3:] = NEG_INF  # chunks past the end of a short row are empty: (-inf, 0)
    l[1, 3:] = 0.0
    m[2, :] = NEG_INF   # a row with no element at all (or all masked)
    l[2, :] = 0.0
    m[3, 0] = 1e30      # one chunk dominates by far
    m[4, :] = -1e30     # huge negative maxima
    # not square: a forgotten [:, None] must fail to broadcast here, not pass by accident
    readable = (np.array([[1.0, 3.0, 2.0], [5.0, NEG_INF, 4.0]]), np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]]))
    return [Case("two rows of three states: (1, 1) (3, 1) (2, 1); (5, 1) (empty) (4, 1)", readable),
            Case("six rows of nine partial states", (m, l)),
            Case("one chunk per row", (m[:, :1].copy(), l[:, :1].copy())),
            Case("a row of two empty chunks", (np.full((1, 2), NEG_INF), np.zeros((1, 2))))]


def check_merge_partials(fn, quiet: bool = False) -> bool:
    """fn(m_parts, l_parts) -> (m, l): each row's partial states, shape (n_rows, n_chunks), merged
    into one state per row, each of shape (n_rows,)."""
    return grade("merge_partials", fn, merge_partials_cases(), merge_partials_reference, ("m", "l"),
                 Tolerance(rtol=1e-12), quiet=quiet)


# --- exercise: a whole split softmax -------------------------------------------------------------

def split_softmax_cases():
    cases = [Case("one row [1, 5, 3] in 2 chunks", (np.array([[1.0, 5.0, 3.0]], np.float32), 2))]
    for n_cols, blocks_per_row in ((1000, 4), (4097, 3), (5, 8), (1, 2)):
        cases.append(Case(f"{n_cols} columns in {blocks_per_row} chunks",
                          (checks.random_rows(np, 5, n_cols, seed=n_cols), blocks_per_row)))
    special, _ = checks.special_rows(np, 300)
    cases.append(Case("rows with -inf, all -inf, +inf and NaN, in 4 chunks", (special, 4)))
    return cases


def _split_softmax_tolerance(x, blocks_per_row) -> Tolerance:
    """The tests' rule for a float32 softmax: twice the float32 baseline's error plus two ulps."""
    expected = reference.softmax(x)
    base = checks.max_abs_error(reference.softmax_same_dtype(x), expected)
    return Tolerance(rtol=0.0, atol=checks.tolerance(base if np.isfinite(base) else 0.0, expected, np.float32))


def check_split_softmax(fn, quiet: bool = False) -> bool:
    """fn(x, blocks_per_row) -> softmax of each row of float32 x, computed chunk by chunk."""
    return grade("split_softmax", fn, split_softmax_cases(), lambda x, blocks: reference.softmax(x), ("softmax",),
                 _split_softmax_tolerance, quiet=quiet)
