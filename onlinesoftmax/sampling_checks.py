"""Does a sampler draw from the distribution it should? A chi-square test of goodness of fit on many
draws from one row, with a fixed significance, and the tokens the distribution gives no mass never
drawn at all. Runs where a sampler runs (NumPy, CuPy); no SciPy: the critical value comes from the
Wilson-Hilferty approximation of the chi-square quantile, close for the degrees of freedom used here.
"""
from __future__ import annotations

import math

import numpy as np

SIGNIFICANCE_Z = 5.0          # one-sided normal quantile, made the chi-square's by Wilson-Hilferty: a false
                              # alarm about once in 3.5 million runs by the normal tail, once in about 6
                              # million by the exact chi-square (the approximation errs on the safe side)
MIN_EXPECTED = 5.0            # tokens expected fewer times than this are pooled into one cell


def chi_square_critical(df: int, z: float = SIGNIFICANCE_Z) -> float:
    """The chi-square statistic above which the fit is rejected (Wilson-Hilferty)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def compare_draws(tokens, probabilities) -> tuple[bool, str]:
    """(passed, message): tokens (draws of one distribution) against its float64 probabilities."""
    tokens = np.asarray(tokens.get() if hasattr(tokens, "get") else tokens).reshape(-1)
    p = np.asarray(probabilities, np.float64).reshape(-1)
    n = tokens.size
    if n == 0 or not np.isfinite(p).all() or abs(p.sum() - 1) > 1e-9:
        return False, f"nothing to compare: {n} draws, probabilities summing to {p.sum()}"
    outside = (tokens < 0) | (tokens >= p.size)
    if outside.any():
        return False, f"token {int(tokens[outside][0])} is not one of the {p.size} tokens"
    counts = np.bincount(tokens, minlength=p.size)
    forbidden = (p == 0) & (counts > 0)
    if forbidden.any():
        j = int(np.flatnonzero(forbidden)[0])
        return False, f"token {j} has probability 0 and was drawn {int(counts[j])} times"
    expected = n * p
    big = expected >= MIN_EXPECTED
    observed_cells = np.r_[counts[big], counts[~big & (p > 0)].sum()]
    expected_cells = np.r_[expected[big], expected[~big & (p > 0)].sum()]
    keep = expected_cells > 0
    observed_cells, expected_cells = observed_cells[keep], expected_cells[keep]
    df = observed_cells.size - 1
    if df < 1:
        return True, f"one possible token, drawn all {n} times"
    statistic = float(((observed_cells - expected_cells) ** 2 / expected_cells).sum())
    critical = chi_square_critical(df)
    worst = int(np.argmax((observed_cells - expected_cells) ** 2 / expected_cells))
    message = (f"chi-square {statistic:.1f} over {df} degrees of freedom (rejected above {critical:.1f}); "
               f"the worst cell drawn {int(observed_cells[worst])} times, expected {expected_cells[worst]:.1f}")
    return statistic <= critical, message


def compare_with_model(x, tokens, seed: int, offset: int, **params) -> tuple[bool, str]:
    """(passed, message): a kernel's tokens for logits x against its NumPy model's (the same noise and
    thresholds). A greedy row must give the model's token exactly. Elsewhere, where they differ, both
    tokens must be kept and their keys, the kernel's float32 (s - M) + g, within a few float32 ulps of
    each other (the kernel's logf and the model's may round apart): such keys may order either way."""
    from onlinesoftmax.checks import host
    from onlinesoftmax.kernels.sampling import philox
    from onlinesoftmax.kernels.sampling import rows as ks

    x = host(x)
    params = {name: host(v) if hasattr(v, "shape") else v for name, v in params.items()}
    want = ks.simulate(x, seed, offset, **params)
    got = np.asarray(host(tokens)).reshape(-1)
    differ = np.flatnonzero(got != want)
    if differ.size == 0:
        return True, f"the model's tokens on all {got.size} rows"
    per_row = ks.row_params(x.shape[0], params)
    greedy = per_row["temperature"].astype(np.float32) < np.float32(ks.GREEDY_BELOW)
    if (got[differ] < 0).any() or (want[differ] < 0).any() or (got[differ] >= x.shape[1]).any() or greedy[differ].any():
        return False, (f"rows {differ[:5].tolist()}: tokens {got[differ][:5].tolist()}, the model's "
                       f"{want[differ][:5].tolist()}")
    t = per_row["temperature"].astype(np.float32)[differ]
    s = x[differ].astype(np.float32) / t[:, None]
    m = s.max(axis=1)
    keep = ks.kept(s, m, *(per_row[name][differ].astype(np.float32) if name != "top_k" else per_row[name][differ]
                         for name in ("top_k", "top_p", "min_p")), fixed_point=True)
    keys = ((s - m[:, None]) + philox.gumbel(differ.size, x.shape[1], seed, offset, rows=differ)).astype(np.float32)
    rows = np.arange(differ.size)
    if not keep[rows, got[differ]].all():
        return False, f"rows {differ[~keep[rows, got[differ]]][:5].tolist()} picked a token the filters drop"
    gap = np.abs(keys[rows, got[differ]] - keys[rows, want[differ]])
    ulp = np.spacing(np.maximum(np.abs(keys[rows, want[differ]]), np.float32(1)))
    close = gap <= 4 * ulp
    return bool(close.all()), f"{differ.size} of {got.size} rows differ, key gaps up to {gap.max():.3g}"


# Filters that take each path of the samplers' threshold search, for filter_path_rows' rows.
FILTER_PATH_CASES = ({"top_k": 10}, {"top_p": 0.5}, {"top_k": 40, "top_p": 0.9}, {"top_k": 3000, "top_p": 0.3},
                     {"top_k": 7, "top_p": 0.6, "min_p": 0.1}, {"top_p": 0.97, "temperature": 0.7})


def filter_path_rows(n: int = 5000, seed: int = 11) -> np.ndarray:
    """float32 (8, n) rows built so that FILTER_PATH_CASES take every path of the 2048-bin threshold
    search: 0 both thresholds in their bins (top-p's pending); 1 one full bin (the radix selects over
    the row); 2 top-k's bin the last, unbounded one; 3 top-p's pending bin of n - 1 tokens; 4 top-p
    inside top-k's bin (ties of the k-th); 5 pairs of ties in many bins; 6 masked tokens in the last
    bin; 7 nearly flat: every token in one bin."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 2, (8, n)).astype(np.float32)
    x[1] = 0.0
    x[2, 3:] = -1000.0
    x[2, :3] = (0.0, 1.0, 2.0)
    x[3] = -1.0
    x[3, 0] = 0.0
    x[4, :10] = 0.0
    x[4, 10:] = -50.0
    x[5] = np.repeat(np.linspace(0, -8, n // 2, dtype=np.float32), 2)
    x[6, ::7] = -np.inf
    x[7] = 1e-4 * rng.normal(size=n).astype(np.float32)
    return x
