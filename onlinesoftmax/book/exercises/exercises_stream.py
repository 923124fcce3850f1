"""Graders for the exercises of the chapter "The online normalizer".

The reader's function consumes a stream: the grader hands it an iterator over one row's values
(no len(), no indexing, no second pass) and compares what it returns with the float64 two-pass
reference. The cases are the worked example first, then the edge matrix of a stream: random
rows, rows that start with one, two or many -inf (the step that needs the guard), all -inf,
an empty stream, a single value, and logits near +-1000. Each `check_<exercise>(fn)` prints
"passed" or the first problem (grading.py) and returns True or False.
"""
from __future__ import annotations

import tracemalloc

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade

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


class StreamReadTwice(Exception):
    """Raised by a OneShotStream read a second time or gathered whole (not a TypeError: list()
    would take a TypeError from __length_hint__ for "no hint" and go on)."""


class OneShotStream:
    """An iterator over a row's values that can be read once, one value at a time: no len(), no
    indexing, no second pass, and no list()/tuple()/sorted()/np.fromiter (they ask for a length
    hint first, which raises)."""

    def __init__(self, values):
        self._values = values          # a numpy array, handed out one fresh Python float at a time
        self._next = 0
        self._done = False

    def __iter__(self):
        if self._done:
            raise StreamReadTwice("the stream was read to its end already: a stream has no second pass")
        return self

    def __next__(self):
        if self._done:
            raise StreamReadTwice("the stream was read to its end already: a stream has no second pass")
        if self._next >= len(self._values):
            self._done = True
            raise StopIteration
        self._next += 1
        return float(self._values[self._next - 1])

    def __len__(self):
        raise TypeError("a stream has no len(): read it one value at a time")

    def __length_hint__(self):
        raise StreamReadTwice("the stream was gathered whole (list(), tuple(), sorted() or np.fromiter): "
                              "read it one value at a time and keep only the state")

    def __getitem__(self, index):
        raise TypeError("a stream cannot be indexed: read it one value at a time")


# A stream of this many values read whole holds over a megabyte of floats; the recurrence, a few
# numbers. Answers that gather the stream by any road (a comprehension, a list they append to) fail.
LONG_STREAM = 20_000
MEMORY_LIMIT_BYTES = 256 * 1024


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
              Case("a tie for the maximum", (np.array([1.0, 4.0, 2.0, 4.0]),)),
              Case("every value near -1e30 (below any finite starting state)",
                   (rng.standard_normal(50) * 1e28 - 1e30,)),
              Case("-inf and values near -1e30, mixed", (np.array([NEG_INF, -1e30, NEG_INF, -3e30, -2e30]),))]
    return cases


def hidden_stream_cases(rng):
    """Rows drawn from the grading's own seed: shifts anywhere from -1e30 to +1e3, -inf sprinkled in."""
    cases = []
    for shift in (rng.uniform(-5, 5), rng.uniform(-1e3, 1e3), -10.0 ** rng.uniform(7, 30)):
        row = rng.standard_normal(int(rng.integers(1, 300))) * rng.uniform(0.1, 1e3) + shift
        row[rng.random(row.size) < 0.2] = NEG_INF
        cases.append(Case("a random stream", (row,)))
    return cases


def _as_stream(fn):
    """fn, given a OneShotStream over the row's values (as Python floats)."""
    return lambda row: fn(OneShotStream(np.asarray(row, dtype=np.float64)))


def gathered_bytes(fn) -> int:
    """The most memory fn allocates at once while it reads a long stream (tracemalloc)."""
    row = np.random.default_rng().standard_normal(LONG_STREAM)
    stream = OneShotStream(row)
    tracemalloc.start()
    try:
        with np.errstate(all="ignore"):
            fn(stream)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _check(exercise: str, fn, expected_of, names: tuple[str, ...], quiet: bool) -> bool:
    def memory_problem():
        try:
            peak = gathered_bytes(fn)
        except Exception as error:
            return f"a stream of {LONG_STREAM} values: your function raised {type(error).__name__}: {error}"
        if peak > MEMORY_LIMIT_BYTES:
            return (f"a stream of {LONG_STREAM} values: your function held {peak / 1024:.0f} KiB at once (the "
                    "values gathered in a list?); the online state is a few numbers")
        return None

    return grade(exercise, _as_stream(fn), stream_cases(), expected_of, names, TOLERANCE, copy_args=False,
                 quiet=quiet, hidden=hidden_stream_cases, last=memory_problem)


def check_stream_state(fn, quiet: bool = False) -> bool:
    """fn(values) -> (m, l): the online normalizer of a stream of floats, read once."""
    return _check("stream_state", fn, stream_state_reference, ("m", "l"), quiet)


def check_stream_argmax(fn, quiet: bool = False) -> bool:
    """fn(values) -> (m, l, index): the same, plus the position of the first maximum (-1 when
    the stream has no value above -inf)."""
    return _check("stream_argmax", fn, stream_argmax_reference, ("m", "l", "index"), quiet)
