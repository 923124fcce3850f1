"""Graders for the exercises of the chapter "The monoid across GPUs".

Each `check_<exercise>(fn)` runs `fn` on a small readable case and then awkward ones (grading.py:
the call, the answer's form, then its values), prints "passed" or the first problem (yours vs
expected, with the input row), and returns True or False.

- shard_statistics(shard, targets, vocab_start) -> (m, l, t): one rank's record per row;
- merge_records(m, l, t) -> (M, L, T): the ranks' records, shape (ranks, rows) each, merged;
- fix_merge: the same merge, starting from a copy that forgets the maximum;
- exchanged_bytes(schedule, ranks, planes) -> bytes one rank sends per row in a ring.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade

NEG_INF = -np.inf


# --- exercise: one rank's statistics ------------------------------------------------------------

def shard_statistics_reference(shard, targets, vocab_start):
    """(m, l, t) per row in float64: the guard for an all -inf row, t = 0 where the target is elsewhere."""
    x = np.asarray(shard, dtype=np.float64)
    m = x.max(axis=1)
    base = np.where(m == NEG_INF, 0.0, m)
    l = np.exp(x - base[:, None]).sum(axis=1)
    column = np.asarray(targets) - vocab_start
    owned = (column >= 0) & (column < x.shape[1])
    t = np.where(owned, x[np.arange(x.shape[0]), np.clip(column, 0, x.shape[1] - 1)], 0.0)
    return m, l, t


def shard_statistics_cases():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((6, 40)) * 3 + rng.uniform(-20, 20, (6, 1))
    x[1, :] = NEG_INF                                   # a row this rank holds no mass of (masked)
    x[2, ::2] = NEG_INF
    x[3] += 1000.0                                      # e^x overflows without the maximum
    x[4] -= 1000.0                                      # and underflows to 0
    targets = np.array([100, 107, 139, 140, 99, 120])   # this shard holds columns 100 .. 139
    readable = np.array([[1.0, 5.0], [3.0, 2.0]])
    return [Case("the shard [[1, 5], [3, 2]] of columns 4, 5; targets 5 and 0",
                 (readable, np.array([5, 0]), 4)),
            Case("six rows of columns 100 .. 139, targets inside and outside", (x, targets, 100)),
            Case("one column", (x[:, :1].copy(), np.array([0, 1, 0, 0, 0, 0]), 0)),
            Case("rows near -1e30 (below any finite starting state), -inf mixed in",
                 (np.where(np.arange(12).reshape(2, 6) % 4 == 0, NEG_INF, x[:2, :6] * 1e28 - 1e30),
                  np.array([3, 8]), 3))]


def hidden_shard_cases(rng):
    rows, cols, start = int(rng.integers(1, 9)), int(rng.integers(1, 80)), int(rng.integers(0, 5000))
    x = rng.standard_normal((rows, cols)) * rng.uniform(0.5, 10) + rng.uniform(-1e3, 1e3, (rows, 1))
    x[rng.random(x.shape) < 0.1] = NEG_INF
    targets = rng.integers(start - cols, start + 2 * cols, rows)
    return [Case(f"{rows} random rows of columns {start} .. {start + cols - 1}", (x, targets, start))]


def check_shard_statistics(fn, quiet: bool = False) -> bool:
    """fn(shard, targets, vocab_start) -> (m, l, t), each of shape (rows,)."""
    return grade("shard_statistics", fn, shard_statistics_cases(), shard_statistics_reference, ("m", "l", "t"),
                 Tolerance(rtol=1e-12), quiet=quiet, hidden=hidden_shard_cases)


# --- exercise: merge the ranks' records ---------------------------------------------------------

def merge_records_reference(m, l, t):
    """The chapter 04 combine over the ranks (axis 0), t summed."""
    m, l, t = (np.asarray(a, dtype=np.float64) for a in (m, l, t))
    big = m.max(axis=0)
    base = np.where(big == NEG_INF, 0.0, big)
    return big, (l * np.exp(m - base)).sum(axis=0), t.sum(axis=0)


def merge_records_cases():
    rng = np.random.default_rng(11)
    m = rng.uniform(-30, 30, (4, 7))
    l = rng.uniform(1, 1000, (4, 7))
    t = np.zeros((4, 7))
    t[rng.integers(0, 4, 7), np.arange(7)] = rng.standard_normal(7)      # one owner per row
    m[2, 3], l[2, 3] = NEG_INF, 0.0                                      # a rank with nothing of row 3
    m[:, 5], l[:, 5] = NEG_INF, 0.0                                      # a row masked everywhere
    m[0, 6] = 900.0                                                      # one rank dominates by far
    readable = (np.array([[5.0], [3.0]]), np.array([[1.0 + np.exp(-4.0)], [1.0 + np.exp(-1.0)]]),
                np.array([[5.0], [0.0]]))
    return [Case("two ranks: (5, 1 + e^-4, 5) and (3, 1 + e^-1, 0)", readable, rows_arg=None),
            Case("four ranks, seven rows", (m, l, t), rows_arg=None),
            Case("eight ranks, one row each of 1 .. 8", (np.arange(8.0)[:, None], np.ones((8, 1)), np.zeros((8, 1))),
                 rows_arg=None),
            Case("maxima near -1e30 (below any finite starting state), a rank with nothing",
                 (np.array([[-1e30, -3e30], [NEG_INF, -2e30], [-4e30, NEG_INF]]),
                  np.array([[2.0, 1.0], [0.0, 3.0], [5.0, 0.0]]), np.array([[0.0, 0.0], [0.0, -2e30], [-4e30, 0.0]])),
                 rows_arg=None)]


def hidden_merge_records_cases(rng):
    ranks, rows = int(rng.integers(1, 17)), int(rng.integers(1, 9))
    m = rng.uniform(-1, 1, (ranks, rows)) * 10.0 ** rng.uniform(0, 3)
    l = rng.uniform(1, 1000, (ranks, rows))
    empty = rng.random((ranks, rows)) < 0.2
    m[empty], l[empty] = NEG_INF, 0.0
    t = np.zeros((ranks, rows))
    t[rng.integers(0, ranks, rows), np.arange(rows)] = rng.standard_normal(rows)
    return [Case(f"{ranks} random ranks, {rows} rows", (m, l, t), rows_arg=None)]


def check_merge_records(fn, quiet: bool = False, exercise: str = "merge_records") -> bool:
    """fn(m, l, t) -> (M, L, T): the records of every rank, each (ranks, rows), merged per row."""
    return grade(exercise, fn, merge_records_cases(), merge_records_reference, ("M", "L", "T"),
                 Tolerance(rtol=1e-12), quiet=quiet, hidden=hidden_merge_records_cases)


def buggy_merge_records(m, l, t):
    """The fix-the-bug starter: it adds the ranks' sums as they are (and keeps the largest maximum)."""
    return m.max(axis=0), l.sum(axis=0), t.sum(axis=0)


def check_fix_merge(fn, quiet: bool = False) -> bool:
    """fn(m, l, t) -> (M, L, T): the corrected merge (the same grader as merge_records)."""
    return check_merge_records(fn, quiet=quiet, exercise="fix_merge")


# --- exercise: bytes on the wire ------------------------------------------------------------------

def exchanged_bytes_reference(schedule, ranks, planes):
    """Bytes one rank sends per row, ring algorithms, float32 planes: megatron = an all-reduce of m,
    then one of the other planes; allgather = one all-gather of every plane."""
    if schedule == "megatron":   # 2 (R - 1) / R of 4 bytes (m), then of 4 (P - 1) bytes (the rest)
        return 2 * (ranks - 1) / ranks * 4 * 1 + 2 * (ranks - 1) / ranks * 4 * (planes - 1)
    return float((ranks - 1) * 4 * planes)   # R - 1 ring steps, each passing one rank's record on


def exchanged_bytes_cases():
    return [Case(f"{schedule}, {ranks} ranks, {planes} planes", (schedule, ranks, planes), rows_arg=None)
            for schedule in ("megatron", "allgather") for ranks, planes in ((2, 3), (4, 3), (8, 2), (8, 130))]


def hidden_exchanged_bytes_cases(rng):
    return [Case(f"{schedule}, a random ring", (schedule, int(rng.integers(2, 257)), int(rng.integers(2, 300))),
                 rows_arg=None) for schedule in ("megatron", "allgather")]


def check_exchanged_bytes(fn, quiet: bool = False) -> bool:
    """fn(schedule, ranks, planes) -> bytes per row one rank sends (a number)."""
    return grade("exchanged_bytes", fn, exchanged_bytes_cases(), exchanged_bytes_reference, ("bytes",),
                 Tolerance(rtol=1e-12, atol=1e-9), quiet=quiet, hidden=hidden_exchanged_bytes_cases)
