"""Graders for the exercises of the chapter "The loss: cross-entropy from the online normalizer".

`check_cross_entropy_grad(fn)`: fn(x, t, eps) -> the gradient of the summed label-smoothed
cross-entropy of float32 logits x (rows, V) with targets t (rows,), as float32 (rows, V). Printed
"passed" or the first problem (grading.py); returns True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade
from onlinesoftmax.kernels.cross_entropy import rows as kce


def expected_grad(x, t, eps):
    return (kce.reference(np.asarray(x, np.float64), t, label_smoothing=eps)[2],)


def grad_cases():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 50)) * 3).astype(np.float32)
    big = x + np.float32(1000)                  # e^x overflows: the online maximum is needed
    return [Case("the row [1, 2, 3], target 2, no smoothing", (np.array([[1, 2, 3]], np.float32), np.array([2]), 0.0)),
            Case("6 random rows of 50", (x, rng.integers(0, 50, 6), 0.0)),
            Case("the same with label smoothing 0.1", (x, rng.integers(0, 50, 6), 0.1)),
            Case("logits near +1000", (big, rng.integers(0, 50, 6), 0.05)),
            Case("zeros and one logit of 100 (a shift by anything but the maximum overflows)",
                 (np.pad(np.full((2, 1), 100, np.float32), ((0, 0), (7, 12))), np.array([7, 0]), 0.0)),
            Case("one class", (np.ones((3, 1), np.float32), np.zeros(3, np.int64), 0.1)),
            Case("rows near -200, 0 and +200 in one array (each row's own maximum)",
                 (x[:3] + np.array([[-200], [0], [200]], np.float32), np.array([1, 2, 3]), 0.0)),
            Case("logits near -20000 (a maximum started at 0 or -1e4 makes every e^(x - m) zero)",
                 (x[:2] - np.float32(20000), np.array([4, 5]), 0.1))]


def hidden_grad_cases(rng):
    n = int(rng.integers(2, 3000))
    offsets = rng.uniform(-500, 500, (4, 1))   # each row its own, of either sign, one below -200
    offsets[rng.integers(0, 4)] = rng.uniform(-2e4, -200)
    x = (rng.standard_normal((4, n)) * rng.uniform(0.1, 20) + offsets).astype(np.float32)
    return [Case(f"4 random rows of {n}", (x, rng.integers(0, n, 4), float(rng.uniform(0, 0.3))))]


def tolerance(x, t, eps) -> Tolerance:
    """8 float32 ulps of each value and of the row's largest gradient at logits of magnitude up to 1;
    at larger logits as many ulps of the row's own magnitude: e^(x - lse) with a float32 lse (torch's
    way) is off by the rounding of that lse, which grows with it (e^(x - m) / l, the kernel's way, is
    not). Row by row: a far row does not loosen the others."""
    largest = np.abs(expected_grad(x, t, eps)[0]).max(axis=1, keepdims=True, initial=0.0)
    x = np.abs(np.asarray(x, np.float64))
    r = 8 * float(np.finfo(np.float32).eps) * np.maximum(1.0, x.max(axis=1, keepdims=True, initial=0.0))
    return Tolerance(rtol=r, atol=r * largest + 1e-30)


def check_cross_entropy_grad(fn, quiet: bool = False) -> bool:
    """fn(x, t, eps) -> d/dx sum_i loss_i, float32 (rows, V): within tolerance(x, t, eps)."""
    return grade("cross_entropy_grad", fn, grad_cases(), expected_grad, ("dx",), tolerance, quiet=quiet,
                 hidden=hidden_grad_cases, dtypes=(np.float32,))


def solution(x, t, eps):
    """The exercise's answer: softmax(x) - (1 - eps) one_hot(t) - eps / V, in float32."""
    x = np.asarray(x, np.float32)
    m = x.max(axis=1, keepdims=True)
    p = np.exp(x - m)
    p /= p.sum(axis=1, keepdims=True)
    p -= np.float32(eps / x.shape[1])
    p[np.arange(x.shape[0]), t] -= np.float32(1 - eps)
    return p
