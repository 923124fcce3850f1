"""softmax_topk against the float64 definition — softmax of the row, then its k largest with ties
toward the lower index — on numpy (the kernel's NumPy model) and on cupy (the kernel, GPU tier):
every dtype, awkward lengths, k from 1 to 32, ties, -inf / +inf / NaN rows, views; and bad k."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels import softmax_topk as kt

COLS = (1, 2, 3, 31, 33, 100, 257, 1000, 4097)
KS = (1, 2, 4, 5, 16, 17, 32)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def expected_topk(x64: np.ndarray, k: int, renormalize: bool = False):
    """The definition, in float64: columns by (NaN first, larger logit, lower column), probabilities
    of softmax(x) at them (or the kept exponentials over their own sum)."""
    columns = kt.order(x64)[:, :k]
    p = reference.softmax(x64)
    if renormalize:
        with np.errstate(all="ignore"):
            m = x64.max(axis=1, keepdims=True)
            e = np.take_along_axis(np.exp(x64 - m), columns, axis=1)
            return e / e.sum(axis=1, keepdims=True), columns
    return np.take_along_axis(p, columns, axis=1), columns


def check(x, k, renormalize=False):
    probs, columns, lse = osm.softmax_topk(x, k, renormalize=renormalize, return_lse=True)
    x64 = checks.as_float64(host(x)) if hasattr(checks, "as_float64") else np.asarray(host(x), np.float64)
    want_p, want_c = expected_topk(np.asarray(x64), k, renormalize)
    probs64 = np.asarray(checks.as_float64(host(probs)))
    assert host(columns).dtype == np.int64 and probs.dtype == x.dtype and host(lse).dtype == np.float32
    np.testing.assert_array_equal(host(columns), want_c)
    assert np.array_equal(np.isnan(probs64), np.isnan(want_p)), "NaN where softmax is NaN, nowhere else"
    # the tests' rule: twice the error of the same softmax computed in fp32 and rounded once to
    # x's dtype (checks.baseline_softmax), plus two ulps of the largest probability
    base = np.take_along_axis(np.asarray(checks.as_float64(checks.baseline_softmax(host(x)))), want_c, axis=1)
    if renormalize:
        base = base / base.sum(axis=1, keepdims=True)
    finite = np.isfinite(want_p)
    base_err = float(np.abs(base - want_p)[finite].max()) if finite.any() else 0.0
    tol = checks.tolerance(base_err, want_p, x.dtype)
    assert (np.abs(probs64 - want_p)[finite] <= tol).all(), (np.abs(probs64 - want_p)[finite].max(), tol)
    want_lse = reference.logsumexp(np.asarray(x64))
    ok = np.isfinite(want_lse)
    assert (np.abs(host(lse)[ok] - want_lse[ok]) <= 4 * 2.0**-23 * np.maximum(np.abs(want_lse[ok]), 1)).all()


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", COLS)
def test_matches_the_definition(xp, dtype, n_cols):
    x = checks.random_rows(xp, 5, n_cols, dtype, seed=n_cols)
    for k in KS:
        if k <= n_cols:
            check(x, k)
            check(x, k, renormalize=True)


def test_ties_go_to_the_lower_column_and_renormalized_rows_sum_to_one(xp):
    x = xp.asarray(np.array([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0], [0.0] * 6], np.float32))
    probs, columns = osm.softmax_topk(x, 4, renormalize=True)
    assert host(columns).tolist() == [[1, 2, 4, 3], [0, 1, 2, 3]]
    np.testing.assert_allclose(host(probs).sum(axis=1), 1.0, rtol=1e-6)
    check(x, 4)


def test_rows_with_inf_and_nan(xp):
    special, _ = checks.special_rows(np, 300)
    for k in (1, 5, 32):
        check(xp.asarray(special), k)
    all_neg_inf = xp.asarray(np.full((1, 40), -np.inf, np.float32))
    probs, columns = osm.softmax_topk(all_neg_inf, 3)
    assert np.isnan(host(probs)).all() and host(columns).tolist() == [[0, 1, 2]]


def test_n_d_input_and_another_axis(xp):
    x = checks.random_rows(xp, 6, 50, seed=3).reshape(2, 3, 50)
    probs, columns = osm.softmax_topk(x, 5)
    assert probs.shape == columns.shape == (2, 3, 5)
    moved = xp.ascontiguousarray(xp.moveaxis(x, -1, 1))
    probs_1, columns_1 = osm.softmax_topk(moved, 5, axis=1)
    np.testing.assert_array_equal(host(columns_1), host(columns))
    view = checks.random_rows(xp, 4, 300, seed=4)[:, 3:250]   # misaligned, strided rows
    check(view, 7)


@pytest.mark.parametrize("k, error, match", [
    (0, ValueError, "1 .. N"), (-1, ValueError, "1 .. N"), (101, ValueError, "1 .. N"),
    (2.0, TypeError, "int"), (True, TypeError, "int"), (33, ValueError, "at most 32"),
])
def test_bad_k_is_a_clear_error(k, error, match):
    with pytest.raises(error, match=match):
        osm.softmax_topk(np.ones((2, 100), np.float32), k)


def test_bad_input_names_what_was_passed():
    with pytest.raises(TypeError, match="float64"):
        osm.softmax_topk(np.ones((2, 10)), 2)
    with pytest.raises(ValueError, match="unknown variant"):
        osm.softmax_topk(np.ones((2, 10), np.float32), 2, variant="heap")
    with pytest.raises(TypeError, match="renormalize"):
        osm.softmax_topk(np.ones((2, 10), np.float32), 2, renormalize="yes")


def test_the_model_is_the_online_kernels_schedule():
    """The normalizer is the online kernel's (m, l), the same bits as softmax_02_online's model."""
    x = checks.random_rows(np, 3, 700, seed=8)
    probs, columns, lse = kt.simulate_topk(x, 3)
    y = osm.api.run(osm.REGISTRY["softmax_02_online"], x)
    np.testing.assert_array_equal(probs, np.take_along_axis(y, columns, axis=1))
    assert kt.bucket(1) == 1 and kt.bucket(5) == 16 and kt.bucket(32) == 32


@pytest.mark.parametrize("variant", ["softmax_topk_01_online", "softmax_topk_02_warp_rows"])
@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_both_kernels_on_short_rows(xp, variant, dtype):
    """MoE-gating shapes through each kernel by name: the same answers (auto picks the warp kernel
    up to N = 512 and k = 8, the block kernel beyond)."""
    for n_rows, n_cols in ((1, 8), (9, 64), (17, 257), (3, 1024)):
        x = checks.random_rows(xp, n_rows, n_cols, dtype, seed=n_cols)
        for k in (1, 2, 5, 8):
            probs, columns, lse = osm.softmax_topk(x, k, return_lse=True, variant=variant)
            x64 = np.asarray(checks.as_float64(host(x)))
            np.testing.assert_array_equal(host(columns), expected_topk(x64, k)[1])
            p64 = np.asarray(checks.as_float64(host(probs)))
            want = expected_topk(x64, k)[0]
            assert np.abs(p64 - want).max() <= 4 * checks.EPS[dtype] * max(1.0, want.max())
            assert np.abs(host(lse) - reference.logsumexp(x64)).max() <= 1e-5 * max(1.0, np.abs(x64).max())
    special, _ = checks.special_rows(np, 300)
    x = xp.asarray(special)
    probs, columns = osm.softmax_topk(x, 8, variant=variant)
    want_p, want_c = expected_topk(np.asarray(special, np.float64), 8)
    np.testing.assert_array_equal(host(columns), want_c)
    assert np.array_equal(np.isnan(host(probs)), np.isnan(want_p))


def test_auto_chooses_by_length_and_k():
    from onlinesoftmax import topk

    assert topk.choose(256, 8) is kt.WARP_ROWS and topk.choose(512, 2) is kt.WARP_ROWS
    assert topk.choose(513, 2) is kt.ONLINE_FUSED and topk.choose(64, 9) is kt.ONLINE_FUSED


def test_the_warp_kernel_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match="k <= 8"):
        osm.softmax_topk(np.ones((2, 100), np.float32), 9, variant="warp_rows")
    with pytest.raises(ValueError, match="at most 1024"):
        osm.softmax_topk(np.ones((2, 1025), np.float32), 2, variant="warp_rows")
