"""Graders for the exercises of the chapter "The combine monoid".

Each `check_<exercise>(fn)` runs `fn` on a fixed set of awkward cases, prints "passed" or the
first case where yours differs from the reference (yours vs expected), and returns True or
False. `fn` may return numpy or cupy arrays, so a kernel wrapper can be graded the same way.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, reference

NEG_INF = -np.inf


def to_numpy(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def report(exercise: str, case: str, yours, expected) -> bool:
    print(f"{exercise}: FAILED on {case}")
    print(f"  yours:    {np.array2string(np.asarray(yours), precision=6, threshold=12)}")
    print(f"  expected: {np.array2string(np.asarray(expected), precision=6, threshold=12)}")
    return False


def same(yours, expected, rtol: float) -> bool:
    """Equal NaN and inf patterns, finite entries within rtol (relative) or 1e-300 (absolute)."""
    yours, expected = np.asarray(yours, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if yours.shape != expected.shape:
        return False
    if not (np.isnan(yours) == np.isnan(expected)).all():
        return False
    finite = np.isfinite(expected)
    if not (yours[~finite & ~np.isnan(expected)] == expected[~finite & ~np.isnan(expected)]).all():
        return False
    return bool(np.allclose(yours[finite], expected[finite], rtol=rtol, atol=1e-300))


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
    cases = [("six rows of nine partial states", m, l),
             ("one chunk per row", m[:, :1].copy(), l[:, :1].copy())]
    both_empty = (np.full((1, 2), NEG_INF), np.zeros((1, 2)))
    cases.append(("a row of two empty chunks", *both_empty))
    return cases


def check_merge_partials(fn) -> bool:
    """fn(m_parts, l_parts) -> (m, l): each row's partial states, shape (n_rows, n_chunks), merged."""
    for case, m_parts, l_parts in merge_partials_cases():
        expected = merge_partials_reference(m_parts, l_parts)
        with np.errstate(all="ignore"):
            yours = tuple(to_numpy(a) for a in fn(m_parts.copy(), l_parts.copy()))
        for name, y, e in zip(("m", "l"), yours, expected):
            if not same(y, e, rtol=1e-12):
                return report("merge_partials", f"{case} ({name})", y, e)
    print("merge_partials: passed")
    return True


# --- exercise: a whole split softmax -------------------------------------------------------------

def split_softmax_cases():
    cases = []
    for n_cols, blocks_per_row in ((1000, 4), (4097, 3), (5, 8), (1, 2)):
        cases.append((f"{n_cols} columns in {blocks_per_row} chunks",
                      checks.random_rows(np, 5, n_cols, seed=n_cols), blocks_per_row))
    special, _ = checks.special_rows(np, 300)
    cases.append(("rows with -inf, all -inf, +inf and NaN, in 4 chunks", special, 4))
    return cases


def check_split_softmax(fn) -> bool:
    """fn(x, blocks_per_row) -> softmax of each row of float32 x, computed chunk by chunk."""
    for case, x, blocks_per_row in split_softmax_cases():
        with np.errstate(all="ignore"):
            yours = to_numpy(fn(x.copy(), blocks_per_row))
        expected = reference.softmax(x)
        if yours.shape != x.shape:
            return report("split_softmax", f"{case} (shape {yours.shape})", yours, expected)
        passed, _ = checks.compare(yours, expected, reference.softmax_same_dtype(x), np.float32)
        if not passed:
            bad = int(np.argmax(~np.isclose(yours, expected, rtol=1e-4, atol=1e-7, equal_nan=True).all(axis=1)))
            return report("split_softmax", f"{case}, row {bad}", yours[bad], expected[bad])
    print("split_softmax: passed")
    return True
