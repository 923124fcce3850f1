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

What a grader guards against, beyond a wrong formula:

- answers that know the visible cases: `hidden(rng)` adds cases drawn from a fresh seed at every
  grading (the seed is printed with a failure, so it can be replayed);
- answers that reach the expected values: they are computed from a private copy of the arguments
  before the reader's function runs, and the function gets its own fresh copy each case;
- answers that change their inputs in place: the arguments are compared with a pristine copy after
  the call;
- answers of the wrong dtype (a float64 computation where float32 was asked): `dtypes`;
- answers that are nearly zero: `Tolerance.row_rtol` scales the allowed error by each row's largest
  expected value, so a row of small probabilities is not passed by a row of zeros;
- answers that skip what the exercise is about (the tiles, the chunks): `require(args)` inspects the
  (instrumented) arguments after the call and returns a problem or None.
"""
from __future__ import annotations

import copy
import secrets
from dataclasses import dataclass
from typing import Callable

import numpy as np

# The difficulty of every Python exercise, by the name its grader prints.
WARM_UP, CORE, CHALLENGE = "warm-up", "core", "challenge"
DIFFICULTY = {
    "overflow_logit": WARM_UP,
    "stream_state": CORE, "stream_argmax": CORE,
    "merge_partials": CORE, "split_softmax": CHALLENGE,
    "logsumexp_rows": WARM_UP, "merge_attention": CORE, "probabilities_from_lse": WARM_UP,
    "merge_topk": CHALLENGE,
    "attention_memory": WARM_UP, "fa2_row": CORE, "decode_splits": CHALLENGE,
    "c_owner": WARM_UP, "p_fragment": CORE, "swizzle": CHALLENGE,
    "shard_statistics": CORE, "merge_records": CORE, "fix_merge": WARM_UP, "exchanged_bytes": CORE,
    "torch_dispatch": CORE, "copy_fraction": WARM_UP,
    "gumbel_pick": WARM_UP, "nucleus_threshold": CORE, "gather_keys": WARM_UP,
    "row_backward": CORE, "softmax_backward": CORE, "log_softmax_backward": WARM_UP,
    "split_logsumexp": CORE,
}


def far_below(rng, n_cols: int = 200):
    """float32 rows whose every value lies below -1e30, the finite stand-in for -inf that kernels often
    start from (a state started there keeps it as the maximum and loses the row): near -2e30, the
    same with -inf mixed in, and near -2e38."""
    scale = np.array([[-2e30], [-2e30], [-2e38]])
    rows = (scale * (1 + 0.01 * np.abs(rng.standard_normal((3, n_cols))))).astype(np.float32)
    rows[1, ::3] = -np.inf
    return rows


def width_not_shown(rng, low: int, high: int, shown) -> int:
    """A row width in [low, high) drawn from rng, none of the visible cases' widths (`shown`): an answer
    that looks up what it was shown cannot pass a hidden case by luck."""
    while (n := int(rng.integers(low, high))) in shown:
        pass
    return n


def fresh_seed() -> int:
    """A seed nobody has seen: the hidden cases differ at every grading."""
    return secrets.randbits(32)


@dataclass(frozen=True)
class Case:
    """One input of an exercise: a description, the arguments, and (optionally) which argument
    holds the rows to quote when a row of the answer is wrong."""
    name: str
    args: tuple
    rows_arg: int | None = 0


@dataclass(frozen=True)
class Kinds:
    """A dtype asked by kind, for `grade(dtypes=...)`: Kinds("iu", "integers") takes any integer dtype."""
    kinds: str
    name: str


@dataclass(frozen=True)
class Tolerance:
    """Finite values pass when |yours - expected| <= rtol * |expected| + atol + row_rtol * scale,
    scale being the largest finite |expected| of the value's row (its last axis)."""
    rtol: float = 1e-12
    atol: float = 1e-300
    row_rtol: float = 0.0


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
        bound = tolerance.rtol * np.abs(expected) + tolerance.atol
        if tolerance.row_rtol:
            bound = bound + tolerance.row_rtol * _row_scale(expected)
        close = ~finite | (np.abs(yours - expected) <= bound)
    bad = ~(nan_ok & inf_ok & close)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.argwhere(bad)[0])


def _row_scale(expected):
    """The largest finite |value| of each row (last axis), broadcastable against expected."""
    magnitude = np.where(np.isfinite(expected), np.abs(expected), 0.0)
    if magnitude.ndim == 0 or magnitude.shape[-1] == 0:
        return magnitude
    return magnitude.max(axis=-1, keepdims=True)


def differing(yours: float, expected: float) -> tuple[str, str]:
    """The two numbers printed to the first digit where they differ (9 to 17 significant digits),
    so a mismatch never reads "1.0, expected 1.0"."""
    for digits in range(9, 18):
        a, b = f"{yours:.{digits}g}", f"{expected:.{digits}g}"
        if a != b:
            return a, b
    return repr(yours), repr(expected)


def describe(value) -> str:
    """A short, true description of what a function returned (for messages about its form)."""
    if value is None:
        return "None"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} value{'s' * (len(value) != 1)}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"a {type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _changed(args, pristine) -> int | None:
    """The position of the first argument (or array inside a tuple argument) that the reader's
    function changed in place, or None."""
    def same(a, b) -> bool:
        if isinstance(b, np.ndarray):
            return isinstance(a, np.ndarray) and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
        if isinstance(b, (tuple, list)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return True
    for position, (a, b) in enumerate(zip(args, pristine)):
        if not same(a, b):
            return position
    return None


def _fmt(a) -> str:
    return np.array2string(np.asarray(a, dtype=np.float64), precision=7, threshold=10, edgeitems=3)


def not_answered(exercise: str) -> str:
    """The message for a stub the reader has not filled in yet (it returns None)."""
    return f"{exercise}: not answered yet (your function returns None: write its body and `return` the answer)"


def grade(exercise: str, fn: Callable, cases, expected_of: Callable, names: tuple[str, ...],
          tolerance=Tolerance(), copy_args: bool = True, quiet: bool = False, hidden: Callable | None = None,
          dtypes: tuple | None = None, require: Callable | None = None, wrap: Callable | None = None,
          last: Callable | None = None) -> bool:
    """Run `fn(*case.args)` on every case and compare with `expected_of(*case.args)` (a tuple, one
    value per name). `tolerance`: a Tolerance, or a function of the case's arguments returning one.
    Prints "<exercise>: passed" or the first problem; returns True or False. A function that
    returns None on the first case is the reader's untouched stub: "not answered yet".

    hidden(rng) -> more cases, drawn from a fresh seed per grading; dtypes: the dtype each value must
    have (None: any); wrap(args) -> the arguments fn is given (instrumented copies), and
    require(wrapped args) -> a problem or None, asked after the call; last() -> a problem (with the
    case it came from) or None, asked once every case has passed."""
    def say(text):
        if not quiet:
            print(text)

    cases = list(cases)
    if hidden is not None:
        seed = fresh_seed()
        cases += [Case(f"{case.name} (a hidden case, seed {seed})", case.args, case.rows_arg)
                  for case in hidden(np.random.default_rng(seed))]
    for number, case in enumerate(cases):
        pristine = copy.deepcopy(case.args) if copy_args else case.args
        # made after the call from the pristine copy, so that an answer cannot find them on the stack;
        # before it for arguments the answer consumes (copy_args=False: a stream is read once)
        expected = None if copy_args else expected_of(*case.args)
        args = copy.deepcopy(case.args) if copy_args else case.args
        given = wrap(args) if wrap is not None else args
        try:
            with np.errstate(all="ignore"):
                yours = fn(*given)
        except Exception as error:  # the reader's bug, reported with what it was given
            shapes = ", ".join(str(np.shape(a)) if hasattr(a, "shape") else type(a).__name__ for a in case.args)
            say(f"{exercise}: FAILED on {case.name}: your function raised "
                f"{type(error).__name__}: {error} (arguments of shape {shapes})")
            return False
        expected = expected_of(*copy.deepcopy(pristine)) if copy_args else expected
        expected = expected if isinstance(expected, tuple) else (expected,)
        expected = tuple(np.array(e, copy=True) if isinstance(e, np.ndarray) else e for e in expected)
        if yours is None and number == 0:
            say(not_answered(exercise))
            return False
        if copy_args:
            position = _changed(args, pristine)
            if position is not None:
                say(f"{exercise}: FAILED on {case.name}: your function changed its argument {position + 1} in "
                    "place; leave the inputs as they are and return new arrays")
                return False
        problem = form_problem(yours, expected, names)
        if problem is None and dtypes is not None:
            values = (yours,) if len(names) == 1 and not isinstance(yours, tuple) else tuple(yours)
            for name, value, dtype in zip(names, values, dtypes):
                got = to_numpy(value)
                if isinstance(dtype, Kinds):
                    if np.asarray(got).dtype.kind not in dtype.kinds:
                        problem = f"{name} has dtype {np.asarray(got).dtype}; the exercise asks for {dtype.name}"
                        break
                elif dtype is not None and np.asarray(got).dtype != np.dtype(dtype):
                    problem = (f"{name} has dtype {np.asarray(got).dtype}; the exercise asks for "
                               f"{np.dtype(dtype).name} (compute in {np.dtype(dtype).name}, as the kernel does)")
                    break
        if problem is None and require is not None:
            problem = require(given)
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
            mine, theirs = differing(float(value[index]), float(want[index]))
            say(f"{exercise}: FAILED on {case.name}: {where} is {mine}, expected {theirs}")
            if index:
                row = index[0]
                if value.ndim >= 2:
                    say(f"  yours:    {_fmt(value[row])}")
                    say(f"  expected: {_fmt(want[row])}")
                rows = case.args[case.rows_arg] if case.rows_arg is not None else None
                if rows is not None and np.ndim(rows) >= 2 and row < len(rows):
                    say(f"  input row {row}: {_fmt(np.asarray(rows)[row])}")
            return False
    problem = last() if last is not None else None
    if problem is not None:
        say(f"{exercise}: FAILED on {problem}")
        return False
    say(f"{exercise}: passed")
    return True
