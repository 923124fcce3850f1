"""Graders for the exercises of the chapter "Sampling: a token from the online normalizer".

`check_gumbel_pick(fn)`: fn(x, u) -> for logits x (rows, n) and uniforms u in (0, 1) of x's shape, the
token each row samples by the Gumbel-max trick, int64 (rows,).
`check_nucleus_threshold(fn)`: fn(x, p) -> for logits x (rows, n) and p in (0, 1], the smallest logit
top-p keeps in each row (rows,), float64.
`check_combine_picks(fn)`: fn(keys, indices) -> for each row's blocks' best (key, index) pairs
(rows, blocks), the row's pair: the largest key, the lowest index among the blocks holding it.
Each prints "passed" or the first problem (grading.py) and returns True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Kinds, Tolerance, grade
from onlinesoftmax.kernels.sampling import rows as ksampling


def expected_pick(x, u):
    return (np.argmax(np.asarray(x, np.float64) - np.log(-np.log(np.asarray(u, np.float64))), axis=1),)


def pick_cases():
    rng = np.random.default_rng(5)
    x = rng.normal(0, 2, (8, 40))
    last_wins = np.zeros((1, 300))
    last_wins[0, 299] = 50.0
    return [Case("the row [0, 1, 2] with u = [0.5, 0.5, 0.5]", (np.array([[0.0, 1.0, 2.0]]), np.full((1, 3), 0.5))),
            Case("the row [2, 1, 0] with u = [0.5, 0.5, 0.5]: the first token wins",
                 (np.array([[2.0, 1.0, 0.0]]), np.full((1, 3), 0.5))),
            Case("a row of 300 whose last token wins", (last_wins, np.full((1, 300), 0.5))),
            Case("the row [0, 1, 2] with u = [0.9, 0.99, 0.2]: noise beats the logit",
                 (np.array([[0.0, 1.0, 2.0]]), np.array([[0.9, 0.99, 0.2]]))),
            Case("8 rows of 40", (x, rng.uniform(1e-6, 1 - 1e-6, x.shape))),
            Case("logits near +1000 (probabilities overflow)", (x + 1000, rng.uniform(1e-6, 1 - 1e-6, x.shape))),
            Case("a -inf logit: never picked", (np.array([[-np.inf, 0.0, -1.0]]), np.array([[0.999999, 0.1, 0.5]]))),
            Case("a logit 12 below the other, with u = 1 - 1e-7: the rare token wins (u is not clipped)",
                 (np.array([[0.0, -12.0]]), np.array([[0.5, 1 - 1e-7]]))),
            Case("a logit 26 below the other, with u = 1 - 1e-12: the rare token wins (u is not clipped)",
                 (np.array([[0.0, -26.0]]), np.array([[0.5, 1 - 1e-12]])))]


def hidden_pick_cases(rng):
    n = int(rng.integers(3, 2000))
    x = rng.normal(rng.uniform(-100, 100), rng.uniform(0.1, 10), (6, n))
    u = rng.uniform(1e-7, 1 - 1e-7, x.shape)
    x[0, 0] = x[0].max() + 100                 # the first token wins row 0, the last wins row 1
    x[1, -1] = x[1].max() + 100
    # Row 2: a token 22 below the row's largest logit wins by its u = 1 - 10^-(11..12) (Gumbel noise
    # 25.3 .. 27.6, the others' u in (0.05, 0.95): at most 2.97); u clipped at 1 - 1e-9 or earlier loses.
    c = int(rng.integers(0, n))
    u[2] = rng.uniform(0.05, 0.95, n)
    x[2, c] = np.delete(x[2], c).max() - 22
    u[2, c] = 1 - 10 ** -rng.uniform(11, 12)
    return [Case(f"6 random rows of {n}", (x, u))]


def check_gumbel_pick(fn, quiet: bool = False) -> bool:
    """fn(x, u) -> argmax_j (x_j + g_j), g_j = -log(-log u_j): exactly the token of each row."""
    return grade("gumbel_pick", fn, pick_cases(), expected_pick, ("tokens",), Tolerance(rtol=0, atol=0),
                 quiet=quiet, hidden=hidden_pick_cases, dtypes=(Kinds("iu", "integers (token ids)"),))


def gumbel_pick(x, u):
    """The exercise's answer."""
    return np.argmax(np.asarray(x) - np.log(-np.log(u)), axis=1)


def expected_threshold(x, p):
    x = np.asarray(x, np.float64)
    keep = ksampling.kept(x, x.max(axis=1), np.zeros(len(x), int), np.full(len(x), p), np.zeros(len(x)))
    return (np.where(keep, x, np.inf).min(axis=1),)


def threshold_cases():
    rng = np.random.default_rng(6)
    x = rng.normal(0, 2, (8, 50))
    probs = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    return [Case("probabilities [0.5, 0.3, 0.15, 0.05], p = 0.7: two tokens", (probs, 0.7)),
            Case("the same, p = 0.5: the first token reaches p exactly", (probs, 0.5)),
            Case("the same, p = 0.8 + 5e-7: three tokens (the first two fall short by 5e-7)", (probs, 0.8 + 5e-7)),
            Case("the same in another order, p = 0.9", (probs[:, ::-1].copy(), 0.9)),
            Case("8 rows of 50, p = 0.9", (x, 0.9)),
            Case("8 rows of 50, p = 0.97", (x, 0.97)),
            Case("a nearly flat row of 100000 distinct logits, p = 0.5 (sums that drift miss the token)",
                 (np.linspace(0.0, 1e-3, 100000)[None, ::-1].copy(), 0.5)),
            Case("logits near +1000, p = 0.6", (x + 1000, 0.6)),
            Case("p = 1: every token", (x[:2], 1.0))]


def hidden_threshold_cases(rng):
    n = int(rng.integers(2, 3000))
    x = rng.normal(rng.uniform(-300, 300), rng.uniform(0.1, 8), (5, n))
    flat = rng.normal(rng.uniform(-300, 300), 0.1, (2, int(rng.integers(4096, 8192))))   # a long tail of mass
    near_one = 1 - 10 ** -rng.uniform(2, 6)
    # A short row and a p 3e-7 above the sum of its first j probabilities (float64): j + 1 tokens. The
    # kernels' fixed-point weights err by under 64 * 2^-32 of the largest: far less than the margin.
    short = rng.normal(0, 2, (1, int(rng.integers(4, 64))))
    w = np.sort(np.exp(short[0] - short.max()))[::-1]
    cumulative = np.cumsum(w / w.sum())
    j = int(rng.integers(0, len(w) - 1))
    return [Case(f"5 random rows of {n}, p = {p:.3f}", (x, p)) for p in (float(rng.uniform(0.05, 0.99)),)] + [
        Case(f"5 random rows of {n}, p = {near_one:.7f}", (x, near_one)),
        Case(f"2 nearly flat rows of {flat.shape[1]}, p = 0.9", (flat, 0.9)),
        Case(f"a row of {short.shape[1]}, p 3e-7 above its {j + 1} largest probabilities",
             (short, float(cumulative[j] + 3e-7)))]


def check_nucleus_threshold(fn, quiet: bool = False) -> bool:
    """fn(x, p) -> the smallest logit of each row's nucleus (the smallest set of largest probabilities
    whose sum reaches p)."""
    return grade("nucleus_threshold", fn, threshold_cases(), expected_threshold, ("threshold",),
                 Tolerance(rtol=0, atol=0), quiet=quiet, hidden=hidden_threshold_cases)


def nucleus_threshold(x, p):
    """The exercise's answer: sort, normalise, accumulate, and stop at the first sum that reaches p."""
    x = np.asarray(x, np.float64)
    ordered = -np.sort(-x, axis=1)
    w = np.exp(ordered - ordered[:, :1])
    cumulative = np.cumsum(w / w.sum(axis=1, keepdims=True), axis=1)
    reached = cumulative >= p
    first = np.where(reached.any(axis=1), np.argmax(reached, axis=1), x.shape[1] - 1)   # p = 1 may round short
    return ordered[np.arange(len(x)), first]


# --- sampling one long row with many blocks: combining the blocks' picks ----------------------------

def expected_combine(keys, indices):
    rows = [(max(k), min(i for kk, i in zip(k, ii) if kk == max(k))) for k, ii in zip(keys.tolist(), indices.tolist())]
    return np.array([k for k, _ in rows]), np.array([i for _, i in rows], np.int64)


def combine_cases():
    rng = np.random.default_rng(7)
    keys = rng.normal(0, 1, (6, 9))
    indices = rng.permutation(6 * 9 * 100)[:54].reshape(6, 9)
    return [Case("one row of three blocks", (np.array([[0.5, 2.0, 1.0]]), np.array([[10, 4, 30]]))),
            Case("two blocks tied, the one with the larger index first", (np.array([[3.0, 3.0, 1.0]]),
                                                                           np.array([[70, 12, 5]]))),
            Case("a block that kept no token (key -inf)", (np.array([[-np.inf, 0.25]]), np.array([[2**31 - 1, 8]]))),
            Case("the best in the first block, token 200000", (np.array([[5.0, 1.0, 2.0]]), np.array([[200000, 3, 4]]))),
            Case("keys one float64 ulp apart: the larger wins, though its index is larger",
                 (np.array([[np.nextafter(1.0, 2.0), 1.0]]), np.array([[9, 3]]))),
            Case("6 rows of 9 blocks, in no order", (keys, indices))]


def hidden_combine_cases(rng):
    blocks = int(rng.integers(3, 300))
    keys = np.round(rng.normal(0, 1, (5, blocks)), 1)          # rounded: ties between blocks are common
    indices = rng.choice(2**31 - 1, 5 * blocks, replace=False).reshape(5, blocks)   # token ids of any size
    keys[0, 0] = keys[0].max() + 1                              # the best in the first block, in the last
    keys[1, -1] = keys[1].max() + 1
    best = int(np.argmax(keys[2]))                              # one ulp below the best, at a lower index
    other = (best + 1) % blocks
    keys[2, other] = np.nextafter(keys[2, best], -np.inf)
    indices[2, [best, other]] = np.sort(indices[2, [best, other]])[::-1]
    return [Case(f"5 rows of {blocks} blocks, in no order", (keys, indices))]


def check_combine_picks(fn, quiet: bool = False) -> bool:
    """fn(keys, indices) -> (key, index) of each row: the largest key over its blocks, and of the blocks
    holding it the lowest index, whatever order the blocks come in."""
    return grade("combine_picks", fn, combine_cases(), expected_combine, ("key", "index"),
                 Tolerance(rtol=0, atol=0), quiet=quiet, hidden=hidden_combine_cases,
                 dtypes=(None, Kinds("iu", "integers (token ids)")))


def combine_picks(keys, indices):
    """The exercise's answer."""
    best = keys.max(axis=1)
    return best, np.where(keys == best[:, None], indices, np.iinfo(np.int64).max).min(axis=1)
