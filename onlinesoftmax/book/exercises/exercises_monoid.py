"""Graders for the exercises of the chapter "The combine monoid".

Each `check_<exercise>(fn)` runs `fn` on a small readable case and then awkward ones (grading.py:
the call, the answer's form, then its values), prints "passed" or the first problem (yours vs
expected, with the input row), and returns True or False. `fn` may return numpy or cupy arrays,
so a kernel wrapper can be graded the same way.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.book.exercises.grading import Case, Tolerance, far_below, grade

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
            Case("a row of two empty chunks", (np.full((1, 2), NEG_INF), np.zeros((1, 2)))),
            Case("maxima near -1e30, mixed with empty chunks (below any finite starting state)",
                 (np.array([[-1e30, NEG_INF, -2e30], [NEG_INF, -3e30, NEG_INF]]), np.array([[2.0, 0.0, 5.0],
                                                                                           [0.0, 7.0, 0.0]])))]


def hidden_merge_partials_cases(rng):
    n_rows, n_chunks = int(rng.integers(1, 9)), int(rng.integers(1, 17))
    m = rng.uniform(-1, 1, (n_rows, n_chunks)) * 10.0 ** rng.uniform(0, 3)
    l = rng.uniform(1, 1000, (n_rows, n_chunks))
    empty = rng.random((n_rows, n_chunks)) < 0.2
    m[empty], l[empty] = NEG_INF, 0.0
    return [Case(f"{n_rows} random rows of {n_chunks} partial states", (m, l))]


def solution_merge_partials(m_parts, l_parts):
    """Every row's partial states re-based on the row maximum, then summed (chapter 04's solution)."""
    m = m_parts.max(axis=1)
    base = np.where(m == -np.inf, 0.0, m)          # the guard
    return m, (l_parts * np.exp(m_parts - base[:, None])).sum(axis=1)


def check_merge_partials(fn, quiet: bool = False) -> bool:
    """fn(m_parts, l_parts) -> (m, l): each row's partial states, shape (n_rows, n_chunks), merged
    into one state per row, each of shape (n_rows,)."""
    return grade("merge_partials", fn, merge_partials_cases(), merge_partials_reference, ("m", "l"),
                 Tolerance(rtol=1e-12), quiet=quiet, hidden=hidden_merge_partials_cases)


# --- exercise: a whole split softmax -------------------------------------------------------------


def split_softmax_cases():
    cases = [Case("one row [1, 5, 3] in 2 chunks", (np.array([[1.0, 5.0, 3.0]], np.float32), 2))]
    for n_cols, blocks_per_row in ((1000, 4), (4097, 3), (5, 8), (1, 2)):
        cases.append(Case(f"{n_cols} columns in {blocks_per_row} chunks",
                          (checks.random_rows(np, 5, n_cols, seed=n_cols), blocks_per_row)))
    special, _ = checks.special_rows(np, 300)
    cases.append(Case("rows with -inf, all -inf, +inf and NaN, in 4 chunks", (special, 4)))
    cases.append(Case("rows below -1e30, in 3 chunks (below any finite starting state)",
                      (far_below(np.random.default_rng(30), 100), 3)))
    return cases


def hidden_split_softmax_cases(rng):
    n_cols, blocks = int(rng.integers(1, 5000)), int(rng.integers(2, 12))
    x = (rng.standard_normal((4, n_cols)) * rng.uniform(0.5, 20) + rng.uniform(-500, 500)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = NEG_INF
    return [Case(f"4 random rows of {n_cols} in {blocks} chunks", (x, blocks)),
            Case(f"rows below -1e30 in {blocks} chunks", (far_below(rng, int(rng.integers(1, 300))), blocks))]


def split_softmax_tolerance(x, blocks_per_row=None) -> Tolerance:
    """A float32 softmax errs by a few ulps of the row's largest value, more as a float32 sum runs
    over more columns (about their square root, summed in any order: 16 + 2 sqrt(N) ulps); a row of
    zeros is off by the whole row, which an absolute tolerance would pass for long rows (every value
    ~1/N)."""
    eps = float(np.finfo(np.float32).eps)
    return Tolerance(rtol=0.0, atol=0.0, row_rtol=eps * (16 + 2 * np.sqrt(np.shape(x)[-1])))


def solution_split_softmax(x, blocks_per_row):
    """The two launches of softmax_06_split_merge, in NumPy (chapter 04's solution)."""
    x = np.asarray(x, dtype=np.float32)
    n_rows, n_cols = x.shape
    chunk = -(-n_cols // blocks_per_row)
    m_parts = np.full((n_rows, blocks_per_row), -np.inf)
    l_parts = np.zeros((n_rows, blocks_per_row))
    for k in range(blocks_per_row):                      # launch 1: one state per chunk
        part = x[:, k * chunk:(k + 1) * chunk].astype(np.float64)
        if part.shape[1]:
            m_k = part.max(axis=1)
            base = np.where(m_k == -np.inf, 0.0, m_k)
            m_parts[:, k], l_parts[:, k] = m_k, np.exp(part - base[:, None]).sum(axis=1)
    m, l = solution_merge_partials(m_parts, l_parts)     # launch 2: merge, then normalize
    return (np.exp(x - m[:, None]) / l[:, None]).astype(np.float32)


class CountedChunks(int):
    """blocks_per_row, as an int that notes whether the answer ever used it (an answer that never
    reads the chunk count computed the softmax of the whole row, not chunk by chunk)."""
    used = False

    def _note(name):
        def method(self, *args):
            type(self).used = True
            return getattr(int, name)(self, *args)
        return method

    for _name in ("__index__", "__int__", "__floordiv__", "__rfloordiv__", "__truediv__", "__rtruediv__",
                  "__mul__", "__rmul__", "__add__", "__radd__", "__sub__", "__rsub__", "__mod__", "__rmod__",
                  "__divmod__", "__rdivmod__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__",
                  "__float__", "__hash__", "__neg__", "__pos__", "__abs__", "__bool__", "__pow__", "__rpow__"):
        locals()[_name] = _note(_name)
    del _name, _note


def _counted(args):
    x, blocks_per_row = args
    counted = type("CountedChunks", (CountedChunks,), {"used": False})   # a fresh flag per case
    return x, counted(blocks_per_row)


def _used_the_chunks(args):
    if type(args[1]).used:
        return None
    return ("your function never used blocks_per_row: the exercise computes each row chunk by chunk "
            "(one partial state per chunk, then the merge), not the whole row at once")


def check_split_softmax(fn, quiet: bool = False) -> bool:
    """fn(x, blocks_per_row) -> softmax of each row of float32 x, computed chunk by chunk, in float32."""
    return grade("split_softmax", fn, split_softmax_cases(), lambda x, blocks: reference.softmax(x), ("softmax",),
                 split_softmax_tolerance, quiet=quiet, hidden=hidden_split_softmax_cases, dtypes=(np.float32,),
                 wrap=_counted, require=_used_the_chunks)
