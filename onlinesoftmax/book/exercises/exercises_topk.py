"""Grader for the exercise of the chapter "Fused softmax + top-k": merge two (m, l, list) states.

A state of a part of a row is (m, l, values, columns): the part's online state (m, l) and its k best
(value, column) pairs in the kernels' order (NaN first, larger first, equal values by the lower
column), best first, as 1-D arrays (shorter than k when the part holds fewer elements; empty for
an empty part, whose state is (-inf, 0)). `check_merge_topk(fn)` runs fn(a, b, k) on a small
readable case and then awkward ones (grading.py), prints "passed" or the first problem, and
returns True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import reference
from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade
from onlinesoftmax.kernels.topk.softmax_topk import order

NEG_INF = -np.inf


def state_of(x, first_column: int, k: int):
    """The (m, l, values, columns) state of the part x of a row that starts at column first_column."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return NEG_INF, 0.0, np.zeros(0), np.zeros(0, np.int64)
    m, l = reference.row_stats(x[None, :])
    if m[0] == NEG_INF:   # a part of only -inf holds no mass: the empty state's l = 0 (not 0 * e^nan)
        l[0] = 0.0
    keep = order(x[None, :])[0, :k]
    return float(m[0]), float(l[0]), x[keep], (keep + first_column).astype(np.int64)


def solution_merge_topk(a, b, k):
    """(m, l, values, columns) of the union of two parts: the (m, l) combine, and the two lists
    merged in the kernels' order, cut to k."""
    (m_a, l_a, values_a, columns_a), (m_b, l_b, values_b, columns_b) = a, b
    m, l = reference.combine((m_a, l_a), (m_b, l_b))
    values = np.concatenate([values_a, values_b]).astype(np.float64)
    columns = np.concatenate([columns_a, columns_b]).astype(np.int64)
    # NaN first, then the larger value, then the lower column (a column is in one part only)
    keep = sorted(range(values.size), key=lambda i: (not np.isnan(values[i]),
                                                     0.0 if np.isnan(values[i]) else -values[i], columns[i]))
    keep = np.array(keep[:k], dtype=np.int64)
    return m, l, values[keep], columns[keep]


def merge_topk_reference(a, b, k):
    """The expected answer, by another road than the solution: a lexicographic sort of all the
    kept pairs (tests/test_exercises_topk.py checks both against the state of the whole row)."""
    (m_a, l_a, values_a, columns_a), (m_b, l_b, values_b, columns_b) = a, b
    m, l = reference.combine((m_a, l_a), (m_b, l_b))
    values = np.concatenate([values_a, values_b]).astype(np.float64)
    columns = np.concatenate([columns_a, columns_b]).astype(np.int64)
    nan = np.isnan(values)
    keep = np.lexsort((columns, np.where(nan, -np.inf, -values), ~nan))[:k]
    return m, l, values[keep], columns[keep]


def merge_topk_cases():
    rng = np.random.default_rng(7)
    row = rng.standard_normal(300) * 3
    row[rng.integers(0, 300, 40)] = 2.5                       # many ties across both parts
    row[[5, 200]] = NEG_INF
    ties = np.array([4.0, 4.0, 1.0, 4.0, 4.0, 0.0])
    return [
        Case("x = [1, 5] | [3, 5, 2], k = 2", (state_of([1, 5], 0, 2), state_of([3, 5, 2], 2, 2), 2), None),
        Case("equal values, the second state holds the lower columns",
             (state_of(ties[3:], 3, 3), state_of(ties[:3], 0, 3), 3), None),
        Case("an empty part, then [2, 7, 7]", (state_of([], 0, 2), state_of([2, 7, 7], 0, 2), 2), None),
        Case("two empty parts", (state_of([], 0, 4), state_of([], 4, 4), 4), None),
        Case("k larger than both parts together: [3] | [1, 3]", (state_of([3], 0, 5), state_of([1, 3], 1, 5), 5),
             None),
        Case("parts of -inf: [-inf, -inf] | [-inf, 0]",
             (state_of([NEG_INF, NEG_INF], 0, 2), state_of([NEG_INF, 0.0], 2, 2), 2), None),
        Case("a row of 300 with ties and -inf, split at 123, k = 16",
             (state_of(row[:123], 0, 16), state_of(row[123:], 123, 16), 16), None),
        Case("NaN in both parts: [1, nan, 3] | [nan, 5], k = 3",
             (state_of([1, np.nan, 3], 0, 3), state_of([np.nan, 5], 3, 3), 3), None),
        Case("logits near 1000: [1000, 999] | [1001]", (state_of([1000, 999], 0, 2), state_of([1001], 2, 2), 2),
             None),
    ]


def hidden_merge_topk_cases(rng):
    n, k = int(rng.integers(2, 400)), int(rng.integers(1, 40))
    row = np.round(rng.standard_normal(n) * 3, int(rng.integers(0, 3))) + rng.uniform(-1e3, 1e3)   # ties
    row[rng.random(n) < 0.1] = NEG_INF
    cut = int(rng.integers(0, n + 1))
    first, second = state_of(row[:cut], 0, k), state_of(row[cut:], cut, k)
    pair = (first, second) if rng.random() < 0.5 else (second, first)
    return [Case(f"a random row of {n} split at {cut}, k = {k}", (*pair, k), None)]


def check_merge_topk(fn, quiet: bool = False) -> bool:
    """fn(a, b, k) -> (m, l, values, columns) of the union of the parts a and b, each a state
    (m, l, values, columns); values and columns hold min(k, elements of both parts) entries."""
    return grade("merge_topk", fn, merge_topk_cases(), merge_topk_reference, ("m", "l", "values", "columns"),
                 Tolerance(rtol=1e-12), quiet=quiet, hidden=hidden_merge_topk_cases)
