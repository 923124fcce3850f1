"""The one grader library of the book's exercises.

A grader runs the reader's function on cases (a small readable one first, then awkward ones),
and for each case checks, in this order, and stops at the first problem:

1. the call itself: an exception raised by the reader's function is reported with the case and
   the shapes it was given (a forgotten `[:, None]` shows up here as a broadcast error);
2. the answer's form: None ("did you forget `return`?"), the number of values (a tuple of two
   where three were asked), each value's type (numpy or cupy array, or a number) and shape, with
   a hint for a (n, 1) column where (n,) was asked and for a transposed result;
3. the values: NaN and infinity where the reference has them, finite values within the
   exercise's tolerance; the first mismatch is printed as "yours vs expected" with its index
   and the input row it came from.

`grade(exercise, fn, cases, expected_of, names, tolerance)` prints "<exercise>: passed" or the
problem and returns True or False. The exercises' own modules (exercises_monoid.py,
exercises_logsumexp.py) hold the cases and references.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Case:
    """One input of an exercise: a description, the arguments, and (optionally) which argument
    holds the rows to quote when a row of the answer is wrong."""
    name: str
    args: tuple
    rows_arg: int | None = 0


@dataclass(frozen=True)
class Tolerance:
    """Finite values pass when |yours - expected| <= rtol * |expected| + atol."""
    rtol: float = 1e-12
    atol: float = 1e-300


def to_numpy(a):
    """numpy view of a numpy or cupy array (or number); other objects unchanged."""
    if hasattr(a, "get") and not isinstance(a, np.ndarray):
        return a.get()
    if isinstance(a, (np.ndarray, np.generic, int, float)):
        return np.asarray(a)
    return a


def _shape_hint(got: tuple, want: tuple) -> str:
    if got == want + (1,) or got == want[:-1] + (1,) + want[-1:]:
        return " (an extra axis of length 1: index with [:, 0] or use .reshape)"
    if len(want) >= 2 and got == want[::-1]:
        return " (transposed?)"
    if len(got) == len(want) + 1 and got[:len(want)] == want:
        return " (one value per row was asked, not a row of values)"
    return ""


def form_problem(yours, expected: tuple, names: tuple[str, ...]) -> str | None:
    """What is wrong with the form of an answer (None when its form is right).

    `expected` holds the reference values (a tuple, one per name)."""
    if yours is None:
        return "your function returned None: did you forget `return`?"
    single = len(names) == 1
    values = (yours,) if single and not isinstance(yours, tuple) else yours
    if not isinstance(values, (tuple, list)):
        return (f"expected {len(names)} values ({', '.join(names)}) as a tuple, "
                f"got one {type(yours).__name__}")
    if len(values) != len(names):
        return (f"expected {len(names)} value{'s' * (len(names) > 1)} ({', '.join(names)}), "
                f"got {len(values)}")
    for name, value, want in zip(names, values, expected):
        value = to_numpy(value)
        if not isinstance(value, np.ndarray):
            return f"{name} should be a numpy or cupy array or a number, got {type(value).__name__}"
        if value.dtype.kind not in "fiu":
            return f"{name} should hold numbers, got dtype {value.dtype}"
        want = np.asarray(want)
        if value.shape != want.shape:
            return f"{name} has shape {value.shape}, expected {want.shape}{_shape_hint(value.shape, want.shape)}"
    return None


def first_mismatch(yours, expected, tolerance: Tolerance):
    """Index of the first entry that differs (NaN/inf pattern, then tolerance), or None."""
    yours, expected = np.asarray(yours, np.float64), np.asarray(expected, np.float64)
    with np.errstate(invalid="ignore"):
        nan_ok = np.isnan(yours) == np.isnan(expected)
        inf = np.isinf(expected)
        inf_ok = ~inf | (yours == expected)
        finite = np.isfinite(expected)
        close = ~finite | (np.abs(yours - expected) <= tolerance.rtol * np.abs(expected) + tolerance.atol)
    bad = ~(nan_ok & inf_ok & close)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.argwhere(bad)[0])


def _fmt(a) -> str:
    return np.array2string(np.asarray(a, dtype=np.float64), precision=7, threshold=10, edgeitems=3)


def not_answered(exercise: str) -> str:
    """The message for a stub the reader has not filled in yet (it returns None)."""
    return f"{exercise}: not answered yet (your function returns None: write its body and `return` the answer)"


def grade(exercise: str, fn: Callable, cases, expected_of: Callable, names: tuple[str, ...],
          tolerance=Tolerance(), copy_args: bool = True, quiet: bool = False) -> bool:
    """Run `fn(*case.args)` on every case and compare with `expected_of(*case.args)` (a tuple, one
    value per name). `tolerance`: a Tolerance, or a function of the case's arguments returning one.
    Prints "<exercise>: passed" or the first problem; returns True or False. A function that
    returns None on the first case is the reader's untouched stub: "not answered yet"."""
    def say(text):
        if not quiet:
            print(text)

    for number, case in enumerate(cases):
        args = tuple(np.array(a, copy=True) if copy_args and isinstance(a, np.ndarray) else a for a in case.args)
        expected = expected_of(*case.args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        try:
            with np.errstate(all="ignore"):
                yours = fn(*args)
        except Exception as error:  # the reader's bug, reported with what it was given
            shapes = ", ".join(str(np.shape(a)) if hasattr(a, "shape") else type(a).__name__ for a in case.args)
            say(f"{exercise}: FAILED on {case.name}: your function raised "
                f"{type(error).__name__}: {error} (arguments of shape {shapes})")
            return False
        if yours is None and number == 0:
            say(not_answered(exercise))
            return False
        problem = form_problem(yours, expected, names)
        if problem is not None:
            say(f"{exercise}: FAILED on {case.name}: {problem}")
            return False
        values = (yours,) if len(names) == 1 and not isinstance(yours, tuple) else tuple(yours)
        rule = tolerance(*case.args) if callable(tolerance) else tolerance
        for name, value, want in zip(names, values, expected):
            index = first_mismatch(to_numpy(value), want, rule)
            if index is None:
                continue
            value, want = np.asarray(to_numpy(value), np.float64), np.asarray(want, np.float64)
            where = f"{name}[{', '.join(map(str, index))}]" if index else name
            say(f"{exercise}: FAILED on {case.name}: {where} is {float(value[index]):.9g}, "
                f"expected {float(want[index]):.9g}")
            if index:
                row = index[0]
                if value.ndim >= 2:
                    say(f"  yours:    {_fmt(value[row])}")
                    say(f"  expected: {_fmt(want[row])}")
                rows = case.args[case.rows_arg] if case.rows_arg is not None else None
                if rows is not None and np.ndim(rows) >= 2:
                    say(f"  input row {row}: {_fmt(np.asarray(rows)[row])}")
            return False
    say(f"{exercise}: passed")
    return True
