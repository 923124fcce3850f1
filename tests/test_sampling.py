"""CPU tier: sampling one token per row (onlinesoftmax/sampling.py, kernels/sampling/).

What is checked, and the wrong answers each check rejects:
- Philox4x32-10 gives Random123's known answers (a wrong constant or round count does not);
- the float64 distribution keeps what top-k, top-p and min-p define on hand-made rows (ties kept);
- draws of the NumPy model fit the float64 distribution (chi-square, fixed significance), and draws
  of wrong samplers (a filter ignored, top-k one too wide, the temperature inverted, uniform over the
  kept tokens) do not;
- the kernel's own source on the CPU emulator picks the model's tokens (its Philox noise, its
  thresholds), on every dtype, odd lengths, extreme rows and per-row parameters;
- the same seed gives the same tokens; bad parameters are errors naming what was passed.
"""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.sampling import philox
from onlinesoftmax.kernels.sampling import rows as ks
from onlinesoftmax.sampling_checks import chi_square_critical, compare_draws

SEED = 20261204 + 7


def test_philox_gives_random123s_known_answers():
    kat = {(0,) * 6: (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
           (0xFFFFFFFF,) * 6: (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
           (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0):
               (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)}
    for (c0, c1, c2, c3, k0, k1), words in kat.items():
        assert tuple(int(w) for w in philox.philox4x32_10(c0, c1, c2, c3, k0, k1)) == words


def test_gumbel_noise_is_finite_and_below_its_bound():
    g = philox.gumbel_from_words(np.array([0, 1, 511, 512, 2**31, 2**32 - 1], np.uint32))
    assert np.isfinite(g).all() and g.max() < philox.GUMBEL_MAX and g.min() > -3
    g = philox.gumbel(64, 1000, SEED, 3)
    assert abs(float(g.mean()) - 0.5772) < 0.01 and abs(float(g.var()) - np.pi ** 2 / 6) < 0.03


def test_the_distribution_keeps_what_the_filters_define():
    x = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    keep = lambda **p: np.flatnonzero(ks.distribution(x, **p)[0] > 0).tolist()
    assert keep() == [0, 1, 2, 3]
    assert keep(top_k=2) == [0, 1] and keep(top_k=4) == [0, 1, 2, 3] and keep(top_k=0) == [0, 1, 2, 3]
    assert keep(top_p=0.5) == [0] and keep(top_p=0.79) == [0, 1] and keep(top_p=0.81) == [0, 1, 2]
    assert keep(top_k=3, top_p=0.84) == [0, 1]          # 0.8 / 0.95 of the top-3 mass
    assert keep(min_p=0.3) == [0, 1, 2] and keep(min_p=0.31) == [0, 1]
    assert keep(temperature=0.0) == [0]
    p = ks.distribution(x, top_p=0.81)[0]
    np.testing.assert_allclose(p[:3], np.array([0.5, 0.3, 0.15]) / 0.95)
    ties = np.array([[3.0, 1.0, 1.0, 1.0, 0.0]])
    assert np.flatnonzero(ks.distribution(ties, top_k=2)[0]).tolist() == [0, 1, 2, 3]   # ties with the k-th kept
    refused = np.array([[0, np.nan, 1], [0, np.inf, 1], [-np.inf] * 3, [-np.inf, 0, -np.inf]])
    d = ks.distribution(refused)
    assert np.isnan(d[:3]).all() and d[3].tolist() == [0, 1, 0]
    assert ks.simulate(refused.astype(np.float32)).tolist() == [-1, -1, -1, 1]


CASES = {
    "plain": {},
    "temperature 0.5": {"temperature": 0.5},
    "temperature 2": {"temperature": 2.0},
    "top-k 3": {"top_k": 3},
    "top-p 0.7": {"top_p": 0.7},
    "min-p 0.2": {"min_p": 0.2},
    "all three": {"temperature": 0.8, "top_k": 6, "top_p": 0.9, "min_p": 0.05},
}


def one_row(n: int = 16, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1.5, (1, n)).astype(np.float32)


@pytest.mark.parametrize("case", CASES)
def test_draws_of_the_model_fit_the_float64_distribution(case):
    x = one_row()
    draws = ks.simulate(np.repeat(x, 100_000, axis=0), SEED, 11, **CASES[case])
    passed, message = compare_draws(draws, ks.distribution(x, **CASES[case])[0])
    assert passed, f"{case}: {message}"


WRONG = {
    "top-p ignored": ({"top_p": 0.7}, {}),
    "min-p ignored": ({"min_p": 0.2}, {}),
    "top-k one too wide": ({"top_k": 3}, {"top_k": 4}),
    "the temperature inverted": ({"temperature": 0.5}, {"temperature": 2.0}),
    "top-p of the whole row, not of the top-k": ({"top_k": 4, "top_p": 0.6}, {"top_k": 4, "top_p": 0.75}),
}


@pytest.mark.parametrize("wrong", WRONG)
def test_the_chi_square_check_rejects_wrong_samplers(wrong):
    x = one_row()
    right, drawn = WRONG[wrong]
    draws = ks.simulate(np.repeat(x, 100_000, axis=0), SEED, 12, **drawn)
    passed, message = compare_draws(draws, ks.distribution(x, **right)[0])
    assert not passed, f"{wrong} passed: {message}"


def test_the_chi_square_check_rejects_more_wrong_draws():
    p = ks.distribution(one_row(), top_p=0.9)[0]
    kept = np.flatnonzero(p)
    rng = np.random.default_rng(SEED)
    assert compare_draws(rng.choice(p.size, 100_000, p=p), p)[0]
    assert not compare_draws(rng.choice(kept, 100_000), p)[0], "uniform over the kept tokens"
    assert not compare_draws(np.zeros(100_000, np.int64), p)[0], "always token 0"
    assert not compare_draws(np.full(100_000, -1), p)[0], "every row refused"
    assert not compare_draws(rng.choice(p.size, 100_000), p)[0], "uniform over every token"


def test_the_critical_value_is_close_to_scipys_and_on_the_safe_side():
    stats = pytest.importorskip("scipy.stats")
    alpha = stats.norm.sf(5.0)
    for df in (1, 3, 10, 50, 200):
        exact = stats.chi2.isf(alpha, df)
        assert exact <= chi_square_critical(df) <= 1.2 * exact, df


def test_the_same_seed_gives_the_same_tokens():
    x = np.random.default_rng(1).standard_normal((64, 500)).astype(np.float32)
    a = osm.sample(x, top_p=0.9, generator=5)
    assert np.array_equal(a, osm.sample(x, top_p=0.9, generator=5))
    assert not np.array_equal(a, osm.sample(x, top_p=0.9, generator=6))
    assert osm.sample(x).shape == (64,) and osm.sample(x.reshape(8, 8, 500)).shape == (8, 8)
    assert np.array_equal(osm.sample(x, temperature=0.0), x.argmax(axis=1))
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(osm.sample(x, generator=g1), osm.sample(x, generator=g2))
    assert osm.sample(np.zeros((0, 5), np.float32)).shape == (0,)
    assert np.array_equal(osm.sample(x, top_k=2**32 + 5, generator=5), osm.sample(x, generator=5))   # off, not top-5
    per_row = np.tile(np.array([0.0, 1.0]), 32).reshape(8, 8)               # one value per row of (8, 8, 500) logits
    tokens = osm.sample(x.reshape(8, 8, 500), temperature=per_row, generator=5)
    assert np.array_equal(tokens.reshape(-1)[::2], x.argmax(axis=1)[::2])
    exact = osm.sample(x.astype(np.float64), top_k=5, generator=5)
    assert all(t in np.argsort(-x[i])[:5] for i, t in enumerate(exact))


@pytest.mark.parametrize("options, error", [
    ({"temperature": -1.0}, "temperature must be a finite number >= 0, got -1.0"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature must be a finite number >= 0, got inf"),
    ({"top_p": 0.0}, r"top_p must be a number in \(0, 1\], got 0.0"),
    ({"top_p": 1.5}, "top_p"),
    ({"min_p": 2}, "min_p must be a number in"),
    ({"top_k": 2.5}, "top_k must be an int"),
    ({"top_k": np.ones(3, np.int32)}, "one value per row"),
    ({"top_p": np.array([0.5, 0.0, 0.5, 0.5])}, r"got 0.0 \(row 1\)"),
    ({"top_k": np.ones(4, np.float32)}, "top_k must be integers"),
    ({"generator": "seed"}, "generator must be None, an int seed"),
])
def test_bad_parameters_are_errors_naming_them(options, error):
    x = np.zeros((4, 10), np.float32)
    with pytest.raises((ValueError, TypeError), match=error):
        osm.sample(x, **options)


@pytest.mark.parametrize("value", ["1", [1.0, 1.0, 1.0, 1.0], True])
def test_a_parameter_of_the_wrong_type_is_a_type_error(value):
    """A str, a list or a bool where a number or an array goes: TypeError (a str was a ValueError, a bool a
    TypeError); an array of the wrong shape stays a ValueError."""
    x = np.zeros((4, 10), np.float32)
    with pytest.raises(TypeError, match="temperature"):
        osm.sample(x, temperature=value)
    with pytest.raises(ValueError, match="one value per row"):
        osm.sample(x, temperature=np.ones(3, np.float32))


def test_bad_logits_are_errors():
    with pytest.raises(TypeError, match="float32, float16, bfloat16 or float64, got int64"):
        osm.sample(np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="at least one token"):
        osm.sample(np.zeros((2, 0), np.float32))


# ---- the kernel's own source on the CPU emulator (onlinesoftmax/runtime/emulator.py) ------------------

@pytest.fixture(scope="module")
def emulated():
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    variant = osm.REGISTRY["sampling_01_rows"]
    return variant, emulator.Module(variant.path, list(variant.launched_entries))


def emulate(emulated, x, seed=SEED, offset=0, block=None, schedule=None, n=None, **params):
    """One launch of the kernel's source on x (numpy) into poisoned tokens; array parameters per row;
    n: the first n columns of each row only (rows strided)."""
    variant, module = emulated
    n_rows, n = x.shape[0], n or x.shape[1]
    tokens = np.full(n_rows, -7, np.int64)
    arrays = [None if np.isscalar(params.get(name, 0)) else np.ascontiguousarray(params[name],
              np.int32 if name == "top_k" else np.float32) for name in ks.PARAMS]
    scalars = [ks.OFF[name] if a is not None else params.get(name, ks.OFF[name]) for name, a in zip(ks.PARAMS, arrays)]
    words = x if x.dtype == np.float32 else x.view(np.uint16)
    extra = {} if schedule is None else {"schedule": "random", "seed": schedule}
    module.launch(variant.dtype_entry(x.dtype.name), (n_rows,), (block or ks.block_threads(n),),
                  (words, tokens, *arrays, np.float32(scalars[0]), np.int32(scalars[1]), np.float32(scalars[2]),
                   np.float32(scalars[3]), np.int32(n), np.int64(x.strides[0] // x.itemsize),
                   np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32), np.uint32(offset & 0xFFFFFFFF),
                   np.uint32(offset >> 32)), **extra)
    return tokens


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n", (1, 7, 33, 300, 1001))
def test_the_kernel_source_picks_the_models_tokens(emulated, dtype, n):
    x = checks.to_dtype(np.random.default_rng(n).normal(0, 2, (6, n)), dtype)
    for case in CASES.values():
        tokens = emulate(emulated, x, **case)
        assert np.array_equal(tokens, ks.simulate(x, SEED, 0, **case)), case


def test_the_kernel_source_with_per_row_parameters_strides_and_other_blocks(emulated):
    rng = np.random.default_rng(2)
    wide = rng.normal(0, 3, (8, 700)).astype(np.float32)
    x = wide[:, :647]                                      # rows strided
    params = {"temperature": np.array([1, 0.5, 0, 2, 1, 1, 0.7, 1.3]), "top_k": np.array([0, 5, 1, 700, -1, 40, 3, 2]),
              "top_p": np.array([1, 0.5, 0.9, 0.3, 1, 0.95, 0.01, 1]), "min_p": np.array([0, 0, 0.5, 0.1, 0.9, 0, 0, 1])}
    want = ks.simulate(x, 99, 2**33 + 5, **params)
    assert np.array_equal(emulate(emulated, wide, seed=99, offset=2**33 + 5, n=647, **params), want)
    assert np.array_equal(emulate(emulated, wide, seed=99, offset=2**33 + 5, n=647, block=32, **params), want)
    assert np.array_equal(emulate(emulated, wide, seed=99, offset=2**33 + 5, n=647, block=1024, schedule=4,
                                  **params), want)
    assert not np.array_equal(emulate(emulated, wide, seed=100, n=647, **params), want)


def test_the_kernel_source_on_extreme_rows(emulated):
    x = np.zeros((9, 300), np.float32)
    x[0, 5] = np.nan
    x[1, 7] = np.inf
    x[2] = -np.inf
    x[3] = -np.inf
    x[3, [10, 250]] = 1.0                                  # two finite tokens, tied
    x[4, 17] = 3e38                                        # a huge logit: a point mass
    x[5] = np.float32(1e30)                                # all tied and huge
    x[6, ::2] = -3e38
    x[7] = 1e-3 * np.arange(300)                           # nearly uniform
    x[8, 99] = 1.0                                         # one above a flat row
    x[8, 1::3] = -0.0                                      # zeros of both signs: one value, tied
    for case in (*CASES.values(), {"top_k": 2}, {"top_k": 250, "top_p": 0.5}, {"temperature": 0.0}):
        tokens = emulate(emulated, x, **case)
        assert np.array_equal(tokens, ks.simulate(x, SEED, 0, **case)), case
        assert tokens[:3].tolist() == [-1, -1, -1] and tokens[3] in (10, 250)
        t = case.get("temperature", 1)
        assert tokens[4] == (17 if t >= 1 or t < 1e-5 else -1)   # 3e38 / 0.5 overflows: refused; greedy divides by 1


def test_the_kernel_source_through_each_path_of_its_filters(emulated):
    """The kernel finds top-k's and top-p's thresholds in a histogram of 2048 bins of s - M, then among
    the tokens of one bin gathered in shared memory (at most 2048); rows built to take each path,
    the fallback to four radix passes over the row included, pick the model's tokens."""
    from onlinesoftmax.sampling_checks import FILTER_PATH_CASES as cases, filter_path_rows

    x = filter_path_rows()
    for case in cases:
        tokens = emulate(emulated, x, **case)
        assert np.array_equal(tokens, ks.simulate(x, SEED, 0, **case)), case
    bf16 = checks.to_dtype(x, "bfloat16")
    for case in cases[1:3]:
        assert np.array_equal(emulate(emulated, bf16, **case), ks.simulate(bf16, SEED, 0, **case)), case


def test_the_model_comparison_can_fail():
    from onlinesoftmax.sampling_checks import compare_with_model

    x = np.random.default_rng(5).normal(0, 2, (40, 300)).astype(np.float32)
    tokens = ks.simulate(x, 3, 1, top_k=10)
    assert compare_with_model(x, tokens, 3, 1, top_k=10)[0]
    assert not compare_with_model(x, tokens, 4, 1, top_k=10)[0], "another seed's tokens"
    assert not compare_with_model(x, tokens, 3, 1, top_k=2)[0], "tokens the filter drops"
    assert not compare_with_model(x, np.zeros(40, np.int64), 3, 1)[0], "always token 0"
    assert not compare_with_model(x, np.full(40, -1), 3, 1)[0], "every row refused"
    huge = np.full((40, 300), 1e30, np.float32)                 # every key (s - M) + g is the noise alone
    assert not compare_with_model(huge, np.zeros(40, np.int64), 3, 1)[0], "token 0 of a row of equal huge logits"
    tied = np.zeros((40, 300), np.float32)
    tied[:, [5, 7]] = 1.0
    assert not compare_with_model(tied, np.full(40, 7), 3, 1, temperature=0.0)[0], "the last of tied maxima, greedy"


# ---- the chapter's graders: the right answers pass, each wrong one is rejected --------------------

def _softmax(x):
    w = np.exp(x - x.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def _threshold_before_p(x, p):            # the last token before the sum reaches p: one token short
    ordered = -np.sort(-np.asarray(x, np.float64), axis=1)
    cumulative = np.cumsum(_softmax(ordered), axis=1)
    return ordered[np.arange(len(x)), np.maximum(0, np.argmax(cumulative >= p, axis=1) - 1)]


def _threshold_unguarded(x, p):           # p = 1 rounds short of the last token: argmax of all-False is 0
    ordered = -np.sort(-np.asarray(x, np.float64), axis=1)
    return ordered[np.arange(len(x)), np.argmax(np.cumsum(_softmax(ordered), axis=1) >= p, axis=1)]


def _threshold_unnormalised(x, p):        # sums of e^(x - max): the first token always reaches p
    ordered = -np.sort(-np.asarray(x, np.float64), axis=1)
    w = np.exp(ordered - ordered[:, :1])
    return ordered[np.arange(len(x)), np.argmax(np.cumsum(w, axis=1) >= p, axis=1)]


def _threshold_ascending(x, p):           # the smallest probabilities first
    ordered = np.sort(np.asarray(x, np.float64), axis=1)
    cumulative = np.cumsum(_softmax(ordered), axis=1)
    return ordered[np.arange(len(x)), np.argmax(cumulative >= p, axis=1)]


def _threshold_float32(x, p):
    x = np.asarray(x, np.float64)
    ordered = -np.sort(-x, axis=1)
    w = np.exp(ordered - ordered[:, :1]).astype(np.float32)
    cumulative = np.cumsum(w / w.sum(axis=1, keepdims=True), axis=1, dtype=np.float32)
    reached = cumulative >= np.float32(p)
    first = np.where(reached.any(axis=1), np.argmax(reached, axis=1), x.shape[1] - 1)
    return ordered[np.arange(len(x)), first]


def _threshold_top_1000(x, p):
    x = np.asarray(x, np.float64)
    ordered = -np.sort(-x, axis=1)[:, :1000]                       # the tail's mass left out
    w = np.exp(ordered - ordered[:, :1])
    reached = np.cumsum(w / w.sum(axis=1, keepdims=True), axis=1) >= p
    first = np.where(reached.any(axis=1), np.argmax(reached, axis=1), ordered.shape[1] - 1)
    return ordered[np.arange(len(x)), first]


def test_the_sampling_graders_pass_the_answers_and_reject_wrong_ones():
    from onlinesoftmax.book.exercises import exercises_sampling as es

    assert es.check_gumbel_pick(es.gumbel_pick, quiet=True)
    assert es.check_nucleus_threshold(es.nucleus_threshold, quiet=True)
    g = lambda u: -np.log(-np.log(u))
    wrong_picks = {"the stub": lambda x, u: None,
                   "no noise": lambda x, u: np.argmax(x, axis=1),
                   "uniform noise": lambda x, u: np.argmax(x + u, axis=1),
                   "the noise's sign flipped": lambda x, u: np.argmax(x - g(u), axis=1),
                   "noise on the probabilities": lambda x, u: np.argmax(_softmax(x) + g(u), axis=1),
                   "right on the visible shapes only": lambda x, u: es.gumbel_pick(x, u)
                   if np.shape(x) in ((1, 3), (8, 40), (1, 2)) else np.full(len(x), -1),   # never a token
                   "tokens as floats": lambda x, u: es.gumbel_pick(x, u).astype(np.float64),
                   "u clipped to [1e-4, 1 - 1e-4]": lambda x, u: np.argmax(x - np.log(-np.log(np.clip(u, 1e-4, 1 - 1e-4))),
                                                                          axis=1),
                   "u clipped to [1e-9, 1 - 1e-9]": lambda x, u: np.argmax(x - np.log(-np.log(np.clip(u, 1e-9, 1 - 1e-9))),
                                                                          axis=1),
                   "token 0 never picked": lambda x, u: 1 + np.argmax((x - np.log(-np.log(u)))[:, 1:], axis=1),
                   "tokens as uint8": lambda x, u: es.gumbel_pick(x, u).astype(np.uint8)}
    for name, fn in wrong_picks.items():
        assert not es.check_gumbel_pick(fn, quiet=True), name
    wrong_thresholds = {"the stub": lambda x, p: None, "one token short": _threshold_before_p,
                        "p = 1 unguarded": _threshold_unguarded, "unnormalised sums": _threshold_unnormalised,
                        "smallest first": _threshold_ascending,
                        "right on the visible shapes only": lambda x, p: es.nucleus_threshold(x, p)
                        if np.shape(x) in ((1, 4), (8, 50), (2, 50)) else np.max(x, axis=1) + 1,   # no logit
                        "p - 1e-6": lambda x, p: es.nucleus_threshold(x, p - 1e-6),
                        "sums in float32": _threshold_float32,
                        "the row's smallest logit for every p above 0.95": lambda x, p: np.min(x, axis=1)
                        if 0.95 < p < 1 else es.nucleus_threshold(x, p),
                        "normalised over the 1000 largest logits": _threshold_top_1000}
    for name, fn in wrong_thresholds.items():
        assert not es.check_nucleus_threshold(fn, quiet=True), name


def test_the_kernel_source_on_rows_that_probe_the_selects(emulated):
    """Rows where a wrong select shows: top-p measured over the whole row instead of the top-k tokens;
    a weight sum that lands within float32 rounding of a lane's running sum; greedy ties (the first
    index, not the last); every row's token the model's."""
    nucleus = np.r_[0.0, np.log(0.9), np.full(98, np.log(1.9 / 98))].astype(np.float32)
    rows = np.repeat(nucleus[None, :], 64, axis=0)
    tokens = emulate(emulated, rows, top_k=2, top_p=0.5)
    assert (tokens == 0).all(), "top-p must be measured within the top-k tokens (token 0 alone reaches 0.5 of them)"
    edge = np.repeat(np.float32([[3.0236433, 1.9256955, 0.17905985, 0.0, -1.9229742, -3.8709886, -18.159834]]), 64, 0)
    for block in (32, 64):
        tokens = emulate(emulated, edge, block=block, top_p=np.float32(0.99439365))
        assert np.array_equal(tokens, ks.simulate(edge, SEED, 0, top_p=np.float32(0.99439365)))
        assert tokens.max() <= 4, "the nucleus of 0.99439365 is the first five tokens"
    ties = np.zeros((3, 300), np.float32)
    ties[0, [0, 63, 250]] = 5.0
    ties[1, [10, 250]] = 2.0
    ties[2, [63, 236]] = -1.0
    ties[2, :63] = -2.0
    ties[2, 64:236] = -2.0
    ties[2, 237:] = -2.0
    assert emulate(emulated, ties, temperature=0.0).tolist() == [0, 10, 63]


# The histogram adds of the radix selects, one atomic per distinct digit among a warp's lanes: each
# broken copy must change some token of the rows above (so the checks above would fail).
@pytest.mark.parametrize("change, why", [
    (("            if (active) shared_add_u64(&hist[digit], MASS ? weight : 1ull);\n", ""),
     "lanes left after four groups add nothing"),
    (("static_cast<unsigned>(weight >> 16) : 0u", "static_cast<unsigned>(weight >> 17) : 0u"),
     "the high halves of the weights summed at half their value"),
    (("unsigned long long sum = static_cast<unsigned long long>(__popc(group));",
      "unsigned long long sum = 1ull;"), "a group counted as one token"),
    (("", ""), None),   # the source as it is
])
def test_a_broken_warp_add_changes_tokens(emulated, change, why):
    from onlinesoftmax.runtime import emulator

    from onlinesoftmax.runtime.loader import expand_source

    variant, _ = emulated
    source = expand_source(variant.path)[0]            # warp_add is in sampling_select.cuh
    assert change[0] in source
    module = (variant, emulator.Module(variant.path, list(variant.launched_entries), source=source.replace(*change)))
    rows = [checks.to_dtype(np.random.default_rng(n).normal(0, 2, (6, n)), dtype)
            for n in (33, 300, 1001) for dtype in ("float32", "float16")]
    # top-k 3 keeps the five tied 10s, one per lane at the same place in each lane's 16-byte vector (fp32:
    # columns 0, 4, .., 16): one group of five lanes, to be counted 5, not 1; 9.9s the same way after them
    ties = np.full((8, 64), -np.inf, np.float32)
    ties[:, 0:20:4], ties[:, 20:40:4] = 10.0, 9.9
    rows.append(ties)
    # top-p's threshold among 500 distinct values inside one bin of the histogram (width 1/92): the
    # radix select over the gathered tokens decides it, where each add counts
    inside = np.full((16, 600), -np.inf, np.float32)   # 16 rows: 16 draws that would tell
    inside[:, 0] = 0.0
    inside[:, 1:501] = -1.0 + 2e-5 * np.arange(500, dtype=np.float32)
    rows.append(inside)
    same = all(np.array_equal(emulate(module, x, **case), ks.simulate(x, SEED, 0, **case))
               for x in rows for case in (CASES["top-k 3"], CASES["top-p 0.7"], CASES["all three"],
                                          {"top_p": 0.02}, {"top_p": 0.5}, {"top_k": 250}))
    assert same == (why is None), why


def peaked_rows(n_rows=48, n=1501, seed=11):
    """Rows as a trained model's logits look: a few tokens near the top, the rest 20 to 40 nats below
    (further than the noise can lift a token, and in the histogram's last bin)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(-30.0, 3.0, (n_rows, n)).astype(np.float32)
    for row in x:
        row[rng.choice(n, 24, replace=False)] = rng.normal(0.0, 1.0, 24)
    return x


PEAKED_CASES = (*CASES.values(), {"top_k": 40}, {"top_p": 0.99})


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_the_kernel_source_on_peaked_rows(emulated, dtype):
    x = checks.to_dtype(peaked_rows(), dtype)
    for block in (32, 256):
        for case in PEAKED_CASES:
            assert np.array_equal(emulate(emulated, x, block=block, **case), ks.simulate(x, SEED, 0, **case)), (block, case)
