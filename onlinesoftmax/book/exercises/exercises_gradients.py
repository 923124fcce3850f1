"""Graders for the exercises of the page "The gradient from the output, and the kernels in PyTorch".

`check_softmax_backward(fn)`: fn(y, dy) -> dx, the gradient of softmax's input from its output
y = softmax(x) and the upstream gradient dy, for float64 rows (rows, N): dx = y (dy - sum(y dy)).
`check_log_softmax_backward(fn)`: fn(z, dy) -> dx from log-softmax's output z = log_softmax(x):
dx = dy - e^z sum(dy).

Both print "passed" or the first problem (grading.py) and return True or False. Beyond the values,
they watch the memory the answer holds at once (tracemalloc, which sees numpy's arrays): the point
of the page is that dx needs one number per row, so an answer that builds the N x N Jacobian of a
row fails on the rows of 2048 with a message that says so.
"""
from __future__ import annotations

import tracemalloc

import numpy as np

from onlinesoftmax import reference
from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade, width_not_shown

EPS = float(np.finfo(np.float64).eps)
NEG_INF = -np.inf


def expected_softmax_backward(y, dy):
    y, dy = np.asarray(y, np.float64), np.asarray(dy, np.float64)
    return (y * (dy - (y * dy).sum(axis=1, keepdims=True)),)


def expected_log_softmax_backward(z, dy):
    z, dy = np.asarray(z, np.float64), np.asarray(dy, np.float64)
    return (dy - np.exp(z) * dy.sum(axis=1, keepdims=True),)


def _tolerance(weight, dy, own) -> Tolerance:
    """A few float64 roundings of each term, entry by entry: 16 ulps of the row's sum (N times the
    largest |dy|: its error grows with the row) times the entry's probability `weight` (y or e^z,
    at most 1), plus 16 ulps of the entry's own term `own`; and 1e-12 of each value. Nothing is
    relative to the row's largest: an entry of probability 1e-13 is held to its own size, and set
    to zero it fails."""
    dy = np.asarray(dy, np.float64)
    n_cols = dy.shape[-1]
    scale = float(np.abs(dy[np.isfinite(dy)]).max(initial=0.0))
    return Tolerance(rtol=1e-12, atol=16 * EPS * (weight * (n_cols + 4) * scale + own) + 1e-300, row_rtol=0.0)


def tolerance_softmax(y, dy) -> Tolerance:
    y = np.asarray(y, np.float64)
    return _tolerance(y, dy, y * np.abs(np.asarray(dy, np.float64)))


def tolerance_log_softmax(z, dy) -> Tolerance:
    return _tolerance(np.exp(np.asarray(z, np.float64)), dy, np.abs(np.asarray(dy, np.float64)))


# --- the cases: the output of the forward, and an upstream gradient ------------------------------

def _rows(rng, n_rows, n_cols, spread=3.0, masked=0.0):
    """Logits of n_rows x n_cols, a share `masked` of them -inf (never the first column)."""
    x = rng.standard_normal((n_rows, n_cols)) * spread
    if masked:
        hole = rng.random(x.shape) < masked
        hole[:, 0] = False
        x[hole] = NEG_INF
    return x


def _cases(forward, name_of_output, rng, big_cols=2048):
    """The same logits and gradients for both exercises; `forward` makes y or z from the logits."""
    one = np.array([[1.0, 2.0, 3.0]])
    masked = _rows(rng, 3, 40, masked=0.3)
    masked[2, 1:] = NEG_INF                                         # a row with one logit left
    peaked = np.zeros((2, 30))
    peaked[0, 7], peaked[1, 29] = 1000.0, 1000.0                    # the softmax is one-hot: e^-1000 = 0
    shifted = rng.standard_normal((4, 60))
    out = forward
    return [
        Case(f"one row: {name_of_output} of [1, 2, 3], dy = [0, 0, 1]", (out(one), np.array([[0.0, 0.0, 1.0]]))),
        Case("8 random rows of 50", (out(_rows(rng, 8, 50)), rng.standard_normal((8, 50)))),
        Case("rows with -inf logits (the softmax is 0 there), one with a single logit left",
             (out(masked), rng.standard_normal((3, 40)))),
        Case("one logit 1000 above the rest (the softmax is one-hot)", (out(peaked), rng.standard_normal((2, 30)))),
        Case("one column", (out(rng.standard_normal((5, 1))), rng.standard_normal((5, 1)))),
        Case("dy the same along each row", (out(_rows(rng, 3, 20)), np.repeat(rng.standard_normal((3, 1)), 20, 1))),
        Case("dy = 1e6 plus a little noise (the sum cancels)",
             (out(shifted), 1e6 + rng.standard_normal((4, 60)))),
        Case(f"2 rows of {big_cols} (a row's Jacobian would be {big_cols} x {big_cols})",
             (out(_rows(rng, 2, big_cols)), rng.standard_normal((2, big_cols)))),
    ]


def _hidden(forward):
    def cases(rng):
        shown = {case.args[0].shape[1] for case in softmax_backward_cases()}   # both exercises' widths
        n_rows, n_cols = int(rng.integers(2, 9)), width_not_shown(rng, 2, 3000, shown)
        x = _rows(rng, n_rows, n_cols, spread=float(rng.uniform(0.1, 20)), masked=float(rng.choice([0.0, 0.1])))
        dy = rng.standard_normal((n_rows, n_cols)) * rng.uniform(0.01, 100) + rng.uniform(-10, 10)
        # and a row whose logits fall by 60: probabilities from 1 down to e^-60, none of them negligible
        wide = np.linspace(0.0, -60.0, n_cols)[None, :] + rng.standard_normal((1, n_cols)) * 0.1
        return [Case(f"{n_rows} random rows of {n_cols}", (forward(x), dy)),
                Case(f"a row of {n_cols} whose logits fall by 60", (forward(wide), rng.standard_normal((1, n_cols))))]
    return cases


def softmax_backward_cases():
    return _cases(reference.softmax, "y = softmax", np.random.default_rng(110))


def log_softmax_backward_cases():
    return _cases(reference.log_softmax, "z = log_softmax", np.random.default_rng(111))


# --- the memory an answer holds at once -----------------------------------------------------------

class _Peak:
    """fn, run under tracemalloc: `require` then reads the most memory it held at once."""

    def __init__(self, fn):
        self.fn, self.peak = fn, 0

    def __call__(self, *args):
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        try:
            return self.fn(*args)
        finally:
            self.peak = tracemalloc.get_traced_memory()[1] - before
            if started:
                tracemalloc.stop()

    def problem(self, args):
        """An answer may hold a few copies of its rows; the Jacobian of one row of N holds N of them."""
        out = np.asarray(args[0])
        allowed = 32 * out.nbytes + (1 << 20)
        if self.peak <= allowed:
            return None
        return (f"your function held {self.peak / 2**20:.0f} MiB at once for {out.shape[0]} rows of "
                f"{out.shape[1]} ({out.nbytes / 2**10:.0f} KiB of input): did it build the {out.shape[1]} x "
                f"{out.shape[1]} Jacobian? dx needs one number per row, then one element-wise pass")


def _check(exercise, fn, cases, expected_of, hidden, quiet):
    watched = _Peak(fn)
    tolerance = tolerance_softmax if exercise == "softmax_backward" else tolerance_log_softmax
    return grade(exercise, watched, cases, expected_of, ("dx",), tolerance, quiet=quiet, hidden=hidden,
                 dtypes=(np.float64,), require=watched.problem)


def check_softmax_backward(fn, quiet: bool = False) -> bool:
    """fn(y, dy) -> dx = y (dy - sum_j y_j dy_j), float64 rows, without an N x N matrix."""
    return _check("softmax_backward", fn, softmax_backward_cases(), expected_softmax_backward,
                  _hidden(reference.softmax), quiet)


def check_log_softmax_backward(fn, quiet: bool = False) -> bool:
    """fn(z, dy) -> dx = dy - e^z sum_j dy_j, float64 rows, without an N x N matrix."""
    return _check("log_softmax_backward", fn, log_softmax_backward_cases(), expected_log_softmax_backward,
                  _hidden(reference.log_softmax), quiet)


# --- the answers ------------------------------------------------------------------------------------

def solution_softmax_backward(y, dy):
    """One dot product per row, then one element-wise pass."""
    s = (y * dy).sum(axis=1, keepdims=True)
    return y * (dy - s)


def solution_log_softmax_backward(z, dy):
    """The softmax is e^z; the row's number is the sum of dy alone."""
    return dy - np.exp(z) * dy.sum(axis=1, keepdims=True)


def jacobian_softmax_backward(y, dy):
    """Right values, built the slow way: J = diag(y) - y y^T for each row, then J^T dy."""
    return np.stack([(np.diag(row) - np.outer(row, row)).T @ d for row, d in zip(y, dy)])


def jacobian_log_softmax_backward(z, dy):
    """Right values, built the slow way: J = I - 1 e^z^T for each row, then J^T dy."""
    return np.stack([(np.eye(len(row)) - np.outer(np.ones(len(row)), np.exp(row))).T @ d for row, d in zip(z, dy)])
