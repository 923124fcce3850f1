"""Graders for the exercises of the chapter "The online normalizer".

The reader's function consumes a stream: the grader hands it an iterator over one row's values
(no len(), no indexing, no second pass) and compares what it returns with the float64 two-pass
reference. The cases are the worked example first, then the edge matrix of a stream: random
rows, rows that start with one, two or many -inf (the step that needs the guard), all -inf,
an empty stream, a single value, and logits near +-1000. Each `check_<exercise>(fn)` prints
"passed" or the first problem (grading.py) and returns True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.grading import Case, Tolerance, grade

NEG_INF = -np.inf
TOLERANCE = Tolerance(rtol=1e-10, atol=0.0)   # a float64 fold of at most a few thousand terms


def stream_state_reference(row) -> tuple[float, float]:
    """(m, l) of a row in float64: m = max, l = sum e^(x - m); the empty state (-inf, 0) when
    no value is above -inf."""
    row = np.asarray(row, dtype=np.float64)
    if row.size == 0 or not (row > NEG_INF).any():
        return NEG_INF, 0.0
    m = float(row.max())
    return m, float(np.exp(row - m).sum())


def stream_argmax_reference(row) -> tuple[float, float, int]:
    """(m, l, index of the first maximum); index -1 when no value is above -inf."""
    m, l = stream_state_reference(row)
    row = np.asarray(row, dtype=np.float64)
    index = int(np.argmax(row)) if m > NEG_INF else -1
    return m, l, index


def solution_stream_state(values):
    """The recurrence on a stream: one value at a time, the state (m, l) and nothing else."""
    m, l = -np.inf, 0.0
    for x in values:
        m_new = max(m, x)
        if m_new == -np.inf:      # the guard: -inf - (-inf) is NaN; nothing seen yet, stay empty
            continue
        l = l * np.exp(m - m_new) + np.exp(x - m_new)
        m = m_new
    return m, l


def solution_stream_argmax(values):
    """The same recurrence, with the position of the first maximum carried along."""
    m, l, index = -np.inf, 0.0, -1
    for position, x in enumerate(values):
        if x > m:                 # strictly greater: a tie keeps the first maximum
            index = position
        m_new = max(m, x)
        if m_new == -np.inf:
            continue
        l = l * np.exp(m - m_new) + np.exp(x - m_new)
        m = m_new
    return m, l, index


def stream_cases():
    rng = np.random.default_rng(1805)
    cases = [Case("the stream 3, 1, -inf, 5", (np.array([3.0, 1.0, NEG_INF, 5.0]),)),
             Case("a random stream of 1000 values", (rng.standard_normal(1000) * 3,))]
    for leading in (1, 2, 300):
        row = rng.standard_normal(1000 if leading == 300 else 5)
        row[:leading] = NEG_INF
        cases.append(Case(f"a stream that starts with {leading} x -inf", (row,)))
    cases += [Case("-inf, -inf, 1", (np.array([NEG_INF, NEG_INF, 1.0]),)),
              Case("a stream of only -inf", (np.full(7, NEG_INF),)),
              Case("an empty stream", (np.zeros(0),)),
              Case("a single value", (np.array([2.5]),)),
              Case("logits near +1000", (rng.standard_normal(100) + 1000.0,)),
              Case("logits near -1000", (rng.standard_normal(100) - 1000.0,)),
              Case("a tie for the maximum", (np.array([1.0, 4.0, 2.0, 4.0]),))]
    return cases


def _as_stream(fn):
    """fn, given an iterator over the row's values as Python floats."""
    return lambda row: fn(iter([float(v) for v in row]))


def _check(exercise: str, fn, expected_of, names: tuple[str, ...], quiet: bool) -> bool:
    cases, stream_fn = stream_cases(), _as_stream(fn)
    return grade(exercise, stream_fn, cases, expected_of, names, TOLERANCE, copy_args=False, quiet=quiet)


def check_stream_state(fn, quiet: bool = False) -> bool:
    """fn(values) -> (m, l): the online normalizer of a stream of floats, read once."""
    return _check("stream_state", fn, stream_state_reference, ("m", "l"), quiet)


def check_stream_argmax(fn, quiet: bool = False) -> bool:
    """fn(values) -> (m, l, index): the same, plus the position of the first maximum (-1 when
    the stream has no value above -inf)."""
    return _check("stream_argmax", fn, stream_argmax_reference, ("m", "l", "index"), quiet)
