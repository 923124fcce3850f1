"""The extreme-row matrix for attention, on the NumPy models of every attention kernel (the GPU
tier runs the kernels on the same inputs: tests/gpu/test_attention_gpu.py, test_attention_mma_gpu.py).

- Scores near 1e10: every model subtracts the row's max after the scaled score is rounded, so the
  max contributes exactly 2^0 = 1. The fused form 2^fma(s, scale log2 e, -m) (kept below as the wrong
  answer) leaves the rounding of m, up to |m| 2^-24 (hundreds here), in the exponent: inf or 0.
- NaN in a query: that query's output and LSE are NaN, as torch's scaled_dot_product_attention. A
  finish that tests `l > 0` to find queries that see no key (kept below as the wrong answer) takes
  NaN for "no key" and writes 0 and -inf.
- A query that sees no key still gives 0 and LSE -inf (the book's convention).
"""
import numpy as np
import pytest

from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import decode_mma as dm
from onlinesoftmax.kernels.attention import mma as am

MODELS = {"attention_01_blocked": ab.BLOCKED.simulate, "attention_05_pipelined": am.simulate,
          "attention_07_fragment_reuse": am.simulate_reuse, "attention_06_decode_mma": dm.simulate}


def qkv(n_q, n_k, d, dtype, seed, q_scale=1.0, k_scale=1.0):
    rng = np.random.default_rng(seed)
    make = lambda n, s: checks.to_dtype((rng.standard_normal((1, 2, n, d)) * s).astype(np.float32), dtype)  # noqa: E731
    return make(n_q, q_scale), make(n_k, k_scale), make(n_k, 1.0)


def dtypes_of(name):
    return ("float32", "bfloat16") if name == "attention_01_blocked" else ("bfloat16",)


def judged(out, lse, q, k, v, causal, dtype):
    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
    y = checks.as_float64(out)
    assert not np.isnan(y).any() and not np.isnan(lse).any(), "NaN in the output"
    rounding = float(np.abs(checks.as_float64(checks.to_dtype(ref.astype(np.float32), dtype)) - ref).max())
    err = float(np.abs(y - ref).max())
    assert err <= checks.tolerance(rounding, ref, dtype), f"error {err:.3e}"
    finite = np.isfinite(lse_ref)
    assert np.array_equal(np.isneginf(lse), ~finite)
    assert np.abs(lse[finite] - lse_ref[finite]).max() <= 1e-6 * np.abs(lse_ref[finite]).max()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
def test_scores_near_1e10(name, causal):
    d = 128 if name == "attention_07_fragment_reuse" else 64
    for dtype in dtypes_of(name):
        q, k, v = qkv(1 if name == "attention_06_decode_mma" else 40, 300, d, dtype, seed=5, q_scale=3e5, k_scale=3e5)
        out, lse = MODELS[name](q, k, v, causal=causal)
        judged(out, np.asarray(lse, np.float64), q, k, v, causal, dtype)


def test_the_fused_exponent_fails_near_1e10():
    """The wrong answer: attention_07's exponent as an fma (m's rounding left in the exponent)."""
    q, k, v = qkv(40, 300, 128, "bfloat16", seed=5, q_scale=3e5, k_scale=3e5)
    out, lse = am.simulate(q, k, v, causal=False, block_k=am.REUSE_KEYS[128], fold=True)
    with pytest.raises(AssertionError):
        judged(out, np.asarray(lse, np.float64), q, k, v, False, "bfloat16")


@pytest.mark.parametrize("name", MODELS)
def test_a_nan_query_gives_a_nan_row(name):
    dtype = "bfloat16"
    q, k, v = qkv(1 if name == "attention_06_decode_mma" else 40, 300, 64, dtype, seed=6)
    q = np.array(q)
    q[0, 1, 0, 3] = np.nan
    with np.errstate(invalid="ignore"):
        out, lse = MODELS[name](q, k, v, causal=False)
        ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)))
    y = checks.as_float64(out)
    assert np.array_equal(np.isnan(y), np.isnan(ref)) and np.isnan(y[0, 1, 0]).all()
    assert np.array_equal(np.isnan(np.asarray(lse, np.float64)), np.isnan(lse_ref))
    assert np.isnan(lse_ref[0, 1, 0]) and not np.isnan(lse_ref[0, 0]).any()


def test_a_finish_testing_l_positive_fails_the_nan_query():
    """The wrong answer: `l > 0` marks a query that sees no key, so a NaN l becomes 0 and -inf."""
    l = np.array([np.nan, 0.0, 2.0], np.float32)
    wrong = np.where(l > 0, 1 / np.where(l > 0, l, 1), 0)
    right = np.where(l != 0, 1 / np.where(l != 0, l, 1), 0)
    assert not np.isnan(wrong[0]) and np.isnan(right[0]) and right[1] == 0 == wrong[1]


@pytest.mark.parametrize("name", MODELS)
def test_a_query_that_sees_no_key_gives_zero(name):
    """Causal with n_q > n_k: the first n_q - n_k queries see no key (bottom-right alignment)."""
    if name == "attention_06_decode_mma":
        pytest.skip("decode takes one query per head")
    q, k, v = qkv(50, 20, 64, "bfloat16", seed=7)
    out, lse = MODELS[name](q, k, v, causal=True)
    y = checks.as_float64(out)
    assert (y[:, :, :30] == 0).all() and np.isneginf(np.asarray(lse)[:, :, :30]).all()
    assert np.isfinite(y[:, :, 30:]).all()
