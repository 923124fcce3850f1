"""Every registered kernel against the float64 reference, once on numpy (its NumPy model) and once on
cupy (the kernel itself, GPU tier): the same test, the same inputs, the same rule (checks.py).

Outputs are poisoned first and must all be written; rows with -inf, +inf and NaN follow torch's
convention (a fully masked row and a row holding NaN or +inf are NaN, nothing else is)."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import api, checks, reference

COLS = (1, 2, 3, 31, 33, 100, 257, 1000, 4097)
SOFTMAX = [v for v in osm.variants("softmax") if not v.name.endswith("_unguarded")
           and v.name != "softmax_00_naive"]   # the naive kernel overflows on purpose (chapter 01)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def cases(variant):
    return [(dtype, n_cols) for dtype in variant.dtypes for n_cols in COLS if n_cols <= variant.max_cols]


@pytest.mark.parametrize("variant", SOFTMAX, ids=lambda v: v.name)
def test_softmax_variant_matches_the_reference(xp, variant):
    long_rows = [(dtype, n_cols) for dtype in variant.dtypes for n_cols in (40000, 65536)
                 if n_cols <= variant.max_cols]
    for dtype, n_cols in cases(variant) + long_rows:
        x = checks.random_rows(xp, 7 if n_cols < 10000 else 2, n_cols, dtype, seed=n_cols)
        y = checks.run_checked(lambda x, out: api.run(variant, x, out=out), x)
        passed, message = checks.compare_softmax(y, x)
        assert passed, f"{variant.name} {dtype} N={n_cols}: {message}"


@pytest.mark.parametrize("variant", SOFTMAX, ids=lambda v: v.name)
def test_softmax_variant_follows_the_nan_convention(xp, variant):
    for dtype, n_cols in cases(variant):
        if n_cols < 3:
            continue
        x, nan_rows = checks.special_rows(xp, n_cols, dtype)
        y = checks.as_float64(api.run(variant, x))
        y = y.get() if hasattr(y, "get") else y
        assert (np.isnan(y).all(axis=1) == nan_rows).all(), f"{variant.name} {dtype} N={n_cols}"
        assert not np.isnan(y[~nan_rows]).any()


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_log_softmax_and_logsumexp_match_the_reference(xp, dtype):
    for n_cols in COLS:
        x = checks.random_rows(xp, 7, n_cols, dtype, seed=n_cols)
        x64 = checks.as_float64(x)
        z = checks.run_checked(lambda x, out: osm.log_softmax(x, out=out), x)
        ref = reference.log_softmax(x64)
        passed, message = checks.compare(checks.as_float64(z), ref,
                                         checks.as_float64(reference.log_softmax_same_dtype(x)),
                                         checks.np_dtype(dtype) if dtype != "bfloat16" else np.float32)
        assert passed, f"log_softmax {dtype} N={n_cols}: {message}"
        lse = checks.run_checked(lambda x, out: osm.logsumexp(x, out=out), x, shape=(7,), dtype="float32")
        error = checks.max_abs_error(lse, reference.logsumexp(x64))
        base = checks.max_abs_error(reference.logsumexp_same_dtype(x), reference.logsumexp(x64))
        assert error <= checks.tolerance(base, reference.logsumexp(x64), np.float32), (dtype, n_cols, error, base)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_public_functions_on_a_score_tensor(xp, dtype):
    """(batch, heads, q, k) through softmax, log_softmax and logsumexp: the 2-D rows' answers."""
    x = checks.random_rows(xp, 2 * 3 * 5, 300, dtype, seed=2).reshape(2, 3, 5, 300)
    rows = x.reshape(30, 300)
    for function in (osm.softmax, osm.log_softmax, osm.logsumexp):
        whole, flat = function(x), function(rows)
        assert whole.shape == (x.shape if function is not osm.logsumexp else x.shape[:-1])
        assert bool((checks.as_float64(whole).reshape(flat.shape) == checks.as_float64(flat)).all()), function


def test_the_naive_kernel_is_right_until_it_overflows(xp):
    for n_cols in COLS:
        x = checks.random_rows(xp, 7, n_cols, seed=n_cols, max_offset=10, outliers=False)
        y = checks.run_checked(lambda x, out: osm.softmax(x, variant="naive", out=out), x)
        assert checks.compare_softmax(y, x)[0], n_cols
    past = xp.asarray(np.array([[89.0, 0.0]], np.float32))     # e^89 > FLT_MAX
    assert not checks.compare_softmax(osm.softmax(past, variant="naive"), past)[0]


def test_the_checks_reject_an_unwritten_or_wrong_answer():
    """The tolerance can fail: an unwritten output, a relative error of 1e-3, a stray NaN."""
    x32 = checks.random_rows(np, 4, 257, seed=9)
    y32 = osm.softmax(x32).copy()
    y32[0, 3] *= 1.001
    assert not checks.compare_softmax(y32, x32)[0]
    y32 = osm.softmax(x32).copy()
    y32[1, 5] = np.nan
    assert not checks.compare_softmax(y32, x32)[0]
    x = checks.random_rows(np, 3, 40, "float16")
    with pytest.raises(AssertionError, match="never written"):
        checks.run_checked(lambda x, out: out, x)
    y = checks.run_checked(lambda x, out: osm.softmax(x, out=out), x)
    wrong = checks.as_float64(y).astype(np.float32)
    wrong[0, 0] *= 1.1
    assert not checks.compare_softmax(checks.to_dtype(wrong, "float16"), x)[0]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_tolerance_knows_every_storage_dtype(dtype):
    """Two ulps of the dtype at a reference of 1 (np.finfo knows no bfloat16: the tolerance must not ask it)."""
    ref = np.ones(4)
    assert checks.tolerance(0.0, ref, checks.np_dtype(dtype)) == 2 * checks.EPS[dtype]
    assert checks.tolerance(1e-3, ref, dtype) == 2e-3 + 2 * checks.EPS[dtype]
