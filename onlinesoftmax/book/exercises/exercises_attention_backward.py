"""Graders for the exercises of the page "The backward of attention".

`check_row_backward(fn)`: fn(q, K, V, dout, lse, scale) -> (dq, dK, dV) of one query row: q (d,), keys
K and values V (n, d), the upstream gradient dout (d,) of the row's output, the LSE the forward
saved; dK and dV (n, d) are the row's contributions. float64. Prints "passed" or the first problem
(grading.py) and returns True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade


def expected_row_backward(q, K, V, dout, lse, scale):
    s = scale * (K @ q)
    p = np.where(np.isneginf(s), 0.0, np.exp(s - lse))
    out = p @ V
    ds = p * (V @ dout - dout @ out)
    return scale * (ds @ K), scale * np.outer(ds, q), np.outer(p, dout)


def _case(name, rng, n, d, shift=0.0, mask=None, score=None, spread=None):
    q, dout = rng.standard_normal(d), rng.standard_normal(d)
    K, V = rng.standard_normal((n, d)) + shift, rng.standard_normal((n, d))
    scale = 1 / np.sqrt(d)
    if score is not None:                  # move every key along q: each score rises by `score`
        K = K + (score / scale) * q / (q @ q)
    if spread is not None:                 # key j's score falls by up to `spread`: P down to e^-spread
        K = K + (np.linspace(0, -spread, n)[:, None] / scale) * q / (q @ q)
    s = scale * (K @ q)
    if mask is not None:
        K[mask] = 0.0
        s = scale * (K @ q)
    lse = float(np.log(np.exp(s - s.max()).sum()) + s.max())
    return Case(name, (q, K, V, dout, lse, scale), rows_arg=None)


def row_cases():
    rng = np.random.default_rng(11)
    return [_case("one query, 3 keys of d = 2", rng, 3, 2), _case("one query, 50 keys of d = 16", rng, 50, 16),
            _case("keys that make scores near 800 (e^s overflows in float64)", rng, 20, 8, score=800.0),
            _case("a single key", rng, 1, 4),
            _case("scores falling by up to 30 across 60 keys (P from about 1 down to 1e-13)", rng, 60, 32, spread=30.0)]


def hidden_row_cases(rng):
    """A random row whose scores fall by 50 to 70 (P down to e^-70: no term is negligible), and the
    same row with its lse rounded to float32, as a kernel saves it: P from that lse differs from a
    fresh softmax by 1e-7, so an answer that touches lse but normalizes again fails."""
    n, d = int(rng.integers(2, 400)), int(rng.choice([24, 32, 64]))   # never a visible case's shape
    case = _case(f"one query, {n} keys of d = {d}, scores falling by up to 70", rng, n, d,
                 shift=float(rng.uniform(-5, 30)), spread=float(rng.uniform(50, 70)))
    q, K, V, dout, lse, scale = case.args
    return [case, Case(case.name + ", lse saved in float32", (q, K, V, dout, float(np.float32(lse)), scale),
                       rows_arg=None)]


def check_row_backward(fn, quiet: bool = False) -> bool:
    """fn(q, K, V, dout, lse, scale) -> (dq, dK, dV) of one query row, float64."""
    return grade("row_backward", fn, row_cases(), expected_row_backward, ("dq", "dK", "dV"),
                 Tolerance(rtol=1e-9, atol=1e-300, row_rtol=1e-9), quiet=quiet, hidden=hidden_row_cases,
                 wrap=_watch_lse, require=_lse_read)


class _Watched(np.ndarray):
    """A 0-d float64 array that notes whether arithmetic (or float()) read it."""
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self.read[0] = True
        inputs = tuple(np.asarray(i) if isinstance(i, _Watched) else i for i in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __float__(self):
        self.read[0] = True
        return float(np.asarray(self))


def _watch_lse(args):
    q, K, V, dout, lse, scale = args
    watched = np.asarray(float(lse)).view(_Watched)
    watched.read = [False]
    return q, K, V, dout, watched, scale


def _lse_read(given):
    return None if given[4].read[0] else ("your function never used lse: recompute P from the saved LSE "
                                          "(P = e^(s - lse)), not by a second softmax")


def row_backward(q, K, V, dout, lse, scale):
    """The exercise's answer: P from the saved LSE, then D, dS and the three products."""
    p = np.exp(scale * (K @ q) - lse)
    delta = dout @ (p @ V)                 # D = dO . O
    ds = p * (V @ dout - delta)
    return scale * (ds @ K), scale * np.outer(ds, q), np.outer(p, dout)


# --- fix a causal backward that forgets the mask ------------------------------------------------
# `check_causal_backward(fn)`: fn(Q, K, V, dO, lse, scale) -> (dQ, dK, dV) of a block of n_q queries
# against n_k keys under the bottom-right causal mask (query i sees keys j <= i + n_k - n_q), Q and dO
# (n_q, d), K and V (n_k, d), lse (n_q,) from the masked forward (-inf for a query that sees no key).

def visible(n_q: int, n_k: int) -> np.ndarray:
    """(n_q, n_k) booleans: key j is visible to query i (bottom-right causal)."""
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + n_k - n_q


def expected_causal_backward(Q, K, V, dO, lse, scale):
    seen = visible(Q.shape[0], K.shape[0]) & np.isfinite(lse)[:, None]
    p = np.where(seen, np.exp(np.where(seen, scale * (Q @ K.T) - lse[:, None], 0.0)), 0.0)
    ds = p * (dO @ V.T - (dO * (p @ V)).sum(axis=1, keepdims=True))
    return scale * (ds @ K), scale * (ds.T @ Q), p.T @ dO


def _causal_case(name, rng, n_q, n_k, d):
    Q, dO = rng.standard_normal((n_q, d)), rng.standard_normal((n_q, d))
    K, V = rng.standard_normal((n_k, d)), rng.standard_normal((n_k, d))
    scale = 1 / np.sqrt(d)
    s = np.where(visible(n_q, n_k), scale * (Q @ K.T), -np.inf)
    top = s.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        lse = np.where(np.isfinite(top[:, 0]), top[:, 0] + np.log(np.exp(s - np.where(np.isfinite(top), top, 0))
                                                                     .sum(axis=1)), -np.inf)
    return Case(name, (Q, K, V, dO, lse, scale), rows_arg=None)


def causal_cases():
    rng = np.random.default_rng(12)
    return [_causal_case("4 queries, 4 keys, d = 2 (square)", rng, 4, 4, 2),
            _causal_case("3 queries at the end of 10 keys, d = 8", rng, 3, 10, 8),
            _causal_case("9 queries, 5 keys, d = 4: the first 4 queries see no key", rng, 9, 5, 4),
            _causal_case("70 queries at the end of 200 keys, d = 8 (tiles of keys past a query's start)",
                         rng, 70, 200, 8)]


def hidden_causal_cases(rng):
    """Any shape, and one with more keys than queries by 65 or more: a blocked answer that skips key
    tiles by the top-left rule (a tile past the query tile's last row) drops visible keys there, at
    any tile size up to 64."""
    n_q, n_k, d = int(rng.integers(11, 60)), int(rng.integers(11, 60)), int(rng.choice([12, 24]))
    long_q = int(rng.integers(11, 60))
    long_k = long_q + int(rng.integers(65, 140))
    return [_causal_case(f"{n_q} queries, {n_k} keys, d = {d}", rng, n_q, n_k, d),
            _causal_case(f"{long_q} queries at the end of {long_k} keys, d = {d}", rng, long_q, long_k, d)]


def check_causal_backward(fn, quiet: bool = False) -> bool:
    """fn(Q, K, V, dO, lse, scale) -> (dQ, dK, dV), bottom-right causal, float64."""
    with np.errstate(all="ignore"):
        return grade("causal_backward", fn, causal_cases(), expected_causal_backward, ("dQ", "dK", "dV"),
                     Tolerance(rtol=1e-9, atol=1e-12, row_rtol=1e-9), quiet=quiet, hidden=hidden_causal_cases)


def causal_backward_unmasked(Q, K, V, dO, lse, scale):
    """The exercise's starting point: P recomputed for every key, the mask forgotten."""
    p = np.exp(scale * (Q @ K.T) - lse[:, None])
    ds = p * (dO @ V.T - (dO * (p @ V)).sum(axis=1, keepdims=True))
    return scale * (ds @ K), scale * (ds.T @ Q), p.T @ dO


def causal_backward(Q, K, V, dO, lse, scale):
    """The exercise's answer: P set to 0 wherever the forward never looked (masked keys, blind rows)."""
    seen = visible(Q.shape[0], K.shape[0]) & np.isfinite(lse)[:, None]
    p = np.where(seen, np.exp(np.where(seen, scale * (Q @ K.T) - lse[:, None], 0.0)), 0.0)
    ds = p * (dO @ V.T - (dO * (p @ V)).sum(axis=1, keepdims=True))
    return scale * (ds @ K), scale * (ds.T @ Q), p.T @ dO
