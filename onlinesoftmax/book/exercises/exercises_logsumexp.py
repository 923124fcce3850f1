"""Graders for the exercises of the chapter "Log-sum-exp, and the merge that leads to attention".

Each `check_<exercise>(fn)` runs `fn` on a small readable case and then awkward ones (grading.py:
the call, the answer's form, then its values), prints "passed" or the first problem (yours vs
expected, with the input row) and returns True or False; `fn` may return numpy or cupy arrays.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, merge, reference
from onlinesoftmax.book.exercises.grading import Case, Tolerance, far_below, grade, to_numpy, width_not_shown

NEG_INF = -np.inf


def state_logsumexp(x):
    """The exercise's answer: the state's m + log l, so a row holding +inf gives NaN (its state is
    (+inf, NaN), as a row holding NaN); onlinesoftmax.logsumexp reads such a row again and gives +inf."""
    lse = reference.logsumexp(x)
    return np.where(lse == np.inf, np.nan, lse)


# --- exercise: log-sum-exp of each row -----------------------------------------------------------

def logsumexp_cases():
    rng = np.random.default_rng(5)
    big = (rng.standard_normal((3, 500)) + 1000.0).astype(np.float32)   # e^x overflows fp32
    small = (rng.standard_normal((3, 500)) - 1000.0).astype(np.float32)  # e^x underflows to 0
    special, _ = checks.special_rows(np, 64)
    sizes = [Case(f"3 rows of {n}", (checks.random_rows(np, 3, n, seed=n),)) for n in (2, 3, 31, 33, 100, 257, 4097)]
    return [Case("the row [1, 2, 3]", (np.array([[1.0, 2.0, 3.0]], np.float32),)),
            Case("random rows", (checks.random_rows(np, 7, 1000, seed=1),)), *sizes, Case("logits near +1000", (big,)),
            Case("logits near -1000", (small,)), Case("one column", (checks.random_rows(np, 4, 1, seed=2),)),
            Case("rows with -inf, all -inf (-> -inf), +inf and NaN (-> NaN)", (special,)),
            Case("rows below -1e30 (below any finite starting state), one mixed with -inf", (far_below(rng),))]


def hidden_logsumexp_cases(rng):
    """Rows from the grading's own seed: any width, any offset, some -inf."""
    cases, shown = [], {case.args[0].shape[1] for case in logsumexp_cases()}
    for _ in range(3):
        n_cols = width_not_shown(rng, 1, 3000, shown)
        x = (rng.standard_normal((4, n_cols)) * rng.uniform(0.1, 30) + rng.uniform(-2000, 2000)).astype(np.float32)
        x[rng.random(x.shape) < 0.1] = NEG_INF
        cases.append(Case(f"4 random rows of {n_cols}", (x,)))
    cases.append(Case("rows below -1e30", (far_below(rng, int(rng.integers(1, 500))),)))
    return cases


def _logsumexp_tolerance(x) -> Tolerance:
    """4 + 2 sqrt(N) float32 ulps of max(|LSE|, 1): the float32 sum of e^(x - m), which errs more as it
    runs over more columns (in any order), and one log."""
    ulps = 4 + 2 * np.sqrt(np.shape(x)[-1])
    eps = float(np.finfo(np.float32).eps)
    return Tolerance(rtol=ulps * eps, atol=ulps * eps)


def _either_convention(fn):
    """fn, with +inf read as NaN in the rows whose maximum is +inf and that hold no NaN: there the state
    gives NaN and torch +inf, and the exercise accepts both (nothing else changes)."""
    def answer(x):
        lse = fn(x)
        try:
            rows = np.isposinf(np.asarray(x, np.float64)).any(axis=1) & ~np.isnan(np.asarray(x, np.float64)).any(axis=1)
            host = to_numpy(lse)   # (a CuPy answer too)
            if isinstance(host, np.ndarray) and host.shape == rows.shape:
                lse = np.where(rows & np.isposinf(host), np.nan, host).astype(host.dtype)
        except (TypeError, ValueError):
            pass    # a malformed answer is described by the grader as it is
        return lse
    return answer


def check_logsumexp_rows(fn, quiet: bool = False) -> bool:
    """fn(x) -> log sum_j e^(x_ij) per row of float32 x, shape (n_rows,). A row holding +inf (no NaN)
    may give NaN (the state's m + log l) or +inf (torch's logsumexp)."""
    return grade("logsumexp_rows", _either_convention(fn), logsumexp_cases(), state_logsumexp, ("lse",),
                 _logsumexp_tolerance, quiet=quiet, hidden=hidden_logsumexp_cases)


# --- exercise: the split log-sum-exp (launch 1's chunk states, launch 2's merge) ----------------

def split_cases():
    """Rows of the log-sum-exp exercise, each with a chunk count: 1 chunk, fewer chunks than
    columns, more chunks than columns, and the page's 8."""
    rows = logsumexp_cases()
    counts = (8, 1, 3, 8, 64, 2, 5, 8, 16, 8, 4, 8, 8, 8, 8)
    return [Case(f"{case.name}, blocks_per_row={b}", (case.args[0], b)) for case, b in zip(rows, counts)]


def hidden_split_cases(rng):
    return [Case(f"{case.name}, blocks_per_row={b}", (case.args[0], b))
            for case, b in zip(hidden_logsumexp_cases(rng), rng.integers(2, 40, 4))]


def _split_answer(fn, record):
    """fn(x, b), with the split kernel's two models watched while it runs: what
    launch 1's model returned and what launch 2's model was given go into `record`."""
    from onlinesoftmax.kernels.softmax import split_merge as km
    partial, merge_ = km.partial_states, km.merge_states

    def watched_partial(x, blocks_per_row=None):
        states = partial(x, blocks_per_row)
        record.append(("partial", blocks_per_row, np.array(states[0]), np.array(states[1]),
                       np.array(x, np.float32)))
        return states

    def watched_merge(m, l):
        record.append(("merge", None, np.array(m), np.array(l), None))
        return merge_(m, l)

    def answer(x, b):
        record.clear()
        km.partial_states, km.merge_states = watched_partial, watched_merge
        try:
            return _either_convention(lambda rows: fn(rows, b))(x)   # (by position: any name for it)
        finally:
            km.partial_states, km.merge_states = partial, merge_
    return answer


def _split_used(record):
    """A problem, or None: launch 1's model ran on the rows given, with the case's chunk count, and
    launch 2's model merged exactly the states it returned."""
    def problem(given):
        rows, b = np.asarray(given[0], np.float32), int(given[1])
        partials = [r for r in record if r[0] == "partial"]
        if not partials:
            return "km.partial_states was never called: the exercise asks for launch 1's chunk states"
        if not any(r[1] is not None and int(r[1]) == b for r in partials):
            return (f"km.partial_states was called with blocks_per_row={[r[1] for r in partials]}, "
                    f"not the {b} your function was given")
        partials = [r for r in partials if r[1] is not None and int(r[1]) == b and r[4].shape == rows.shape
                    and np.array_equal(r[4], rows, equal_nan=True)]
        merged = [r for r in record if r[0] == "merge"]
        if not any(np.array_equal(mr[2], pr[2], equal_nan=True) and np.array_equal(mr[3], pr[3], equal_nan=True)
                   for mr in merged for pr in partials):
            return "km.merge_states never merged the states km.partial_states returned (launch 2 merges launch 1's)"
        return None
    return problem


def check_split_logsumexp(fn, quiet: bool = False) -> bool:
    """fn(x, blocks_per_row) -> log sum_j e^(x_ij) per row, made as the split kernel would: launch 1's
    chunk states from km.partial_states(x, blocks_per_row), merged by km.merge_states. The grader
    watches both calls, so a log-sum-exp of the whole row, however right, does not pass."""
    record: list = []
    return grade("split_logsumexp", _split_answer(fn, record), split_cases(), lambda x, b: state_logsumexp(x),
                 ("lse",), lambda x, b: _logsumexp_tolerance(x), quiet=quiet, hidden=hidden_split_cases,
                 require=_split_used(record))


# --- exercise: merge two (m, l, u) states --------------------------------------------------------

def merge_cases():
    rng = np.random.default_rng(9)
    a = merge.block_state(rng.standard_normal(5) * 3, rng.standard_normal((5, 4)))
    b = merge.block_state(rng.standard_normal(7) * 3 + 2, rng.standard_normal((7, 4)))
    empty = (NEG_INF, 0.0, np.zeros(4))
    far = merge.block_state(np.array([500.0, 499.0]), rng.standard_normal((2, 4)))
    example_a = merge.block_state([1.0, 2.0], [[10.0], [0.0]])
    example_b = merge.block_state([3.0], [[-10.0]])
    pairs = [("the worked example: logits [1, 2] and [3], values [10, 0] and [-10]", example_a, example_b),
             ("two random blocks", a, b), ("the same, in the other order", b, a),
             ("a masked block on the right", a, empty), ("a masked block on the left", empty, b),
             ("two masked blocks", empty, empty), ("a block 500 above the other", a, far),
             ("two blocks below -1e30 (below a finite starting state of -1e30)",
              merge.block_state(np.array([-2e30, -2.5e30]), rng.standard_normal((2, 4))),
              merge.block_state(np.array([-3e30]), rng.standard_normal((1, 4))))]
    return [Case(name, (left, right), rows_arg=None) for name, left, right in pairs]


def hidden_merge_cases(rng):
    d = int(rng.integers(1, 9))
    blocks = []
    for shift in rng.uniform(-1e3, 1e3, 2):
        n = int(rng.integers(1, 20))
        blocks.append(merge.block_state(rng.standard_normal(n) * 5 + shift, rng.standard_normal((n, d))))
    low = [merge.block_state(-rng.uniform(2e30, 1e35, n) , rng.standard_normal((n, d))) for n in rng.integers(1, 5, 2)]
    return [Case("two random blocks", (blocks[0], blocks[1]), rows_arg=None),
            Case("two random blocks below -1e30", (low[0], low[1]), rows_arg=None)]


def check_merge_attention(fn, quiet: bool = False) -> bool:
    """fn(a, b) -> (m, l, u): the merged state of two blocks, each (m, l, u) with u of shape (d_v,)."""
    return grade("merge_attention", fn, merge_cases(), merge.merge, ("m", "l", "u"), Tolerance(rtol=1e-12),
                 quiet=quiet, hidden=hidden_merge_cases)


# --- exercise: probabilities again from the saved LSE (the backward pass's trick) ---------------

def probabilities_reference(scores, lse):
    """P = e^(scores - lse) with the lse given: the answer must use it, not recompute it."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp(np.asarray(scores, np.float64) - np.asarray(lse, np.float64)[:, None])


def _shifted(scores, rng):
    """The rows' own LSE, each moved by a number in +-[0.5, 3]: an answer that ignores lse fails."""
    shift = rng.uniform(0.5, 3.0, scores.shape[0]) * rng.choice([-1.0, 1.0], scores.shape[0])
    return state_logsumexp(scores) + shift


def probabilities_cases():
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((6, 300)) * 4 + rng.uniform(-50, 50, size=(6, 1))
    masked = scores.copy()
    masked[2, 100:] = NEG_INF  # a causal-style mask
    readable = np.array([[1.0, 2.0, 3.0]])
    return [Case("the row [1, 2, 3]", (readable, state_logsumexp(readable))),
            Case("random score rows", (scores, state_logsumexp(scores))),
            Case("a partly masked row", (masked, state_logsumexp(masked))),
            Case("random score rows with an lse that is not theirs", (scores, _shifted(scores, rng)))]


def hidden_probabilities_cases(rng):
    n_rows, n_cols = int(rng.integers(1, 8)), int(rng.integers(1, 500))
    scores = rng.standard_normal((n_rows, n_cols)) * rng.uniform(0.5, 10) + rng.uniform(-100, 100, (n_rows, 1))
    return [Case(f"{n_rows} random rows of {n_cols} with a shifted lse", (scores, _shifted(scores, rng)))]


def check_probabilities_from_lse(fn, quiet: bool = False) -> bool:
    """fn(scores, lse) -> P with P_ij = e^(scores_ij - lse_i), from the row's saved log-sum-exp
    alone (softmax(scores_i)_j when lse is the row's own; the grader also passes an lse that is
    not, as a backward pass may be handed one that is stale, so only an answer that uses it passes)."""
    passed = grade("probabilities_from_lse", fn, probabilities_cases(), probabilities_reference, ("P",),
                   Tolerance(rtol=1e-10), quiet=quiet, hidden=hidden_probabilities_cases)
    if not passed and not quiet:
        try:   # the usual slip: the softmax recomputed from the scores, the lse unread
            scores, lse = probabilities_cases()[-1].args
            with np.errstate(all="ignore"):
                yours = np.asarray(fn(scores.copy(), lse.copy()), np.float64)
            recomputed = yours.shape == scores.shape and np.allclose(yours, reference.softmax(scores), rtol=1e-8)
        except Exception:   # the failure itself was reported already
            recomputed = False
        if recomputed:
            print("  hint: yours is the softmax of the scores; the exercise wants e^(scores - lse) with the lse "
                  "given (the grader shifts it from the rows' own log-sum-exp, so a recomputed softmax fails)")
    return passed
