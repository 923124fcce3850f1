"""CPU tier: the NumPy models of the teaching kernels against the float64 reference."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference

SAFE = ("softmax_01_safe", "softmax_02_online")


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("variant", ("softmax_00_naive",) + SAFE)
def test_models_on_the_edge_sizes(variant, n_cols):
    n_rows = 7 if n_cols <= 4097 else 1
    naive = variant == "softmax_00_naive"
    x = checks.random_rows(np, n_rows, n_cols, seed=n_cols, max_offset=10 if naive else 30, outliers=not naive)
    passed, message = checks.compare(osm.softmax(x, variant=variant), reference.softmax(x),
                                     reference.softmax_same_dtype(x), np.float32)
    assert passed, f"{variant} N={n_cols}: {message}"


@pytest.mark.parametrize("n_cols", (1, 3, 100, 257, 4097))
@pytest.mark.parametrize("variant", SAFE)
def test_models_on_special_rows(variant, n_cols):
    x, nan_rows = checks.special_rows(np, n_cols)
    y = osm.softmax(x, variant=variant)
    assert (np.isnan(y).all(axis=1) == nan_rows).all()
    assert not np.isnan(y[~nan_rows]).any()
    passed, message = checks.compare(y, reference.softmax(x), reference.softmax_same_dtype(x), np.float32)
    assert passed, message


def test_the_checker_rejects_wrong_answers():
    """The tolerance can fail: a softmax off by one ulp-scale bias per element, unwritten outputs, or a stray NaN."""
    x = checks.random_rows(np, 4, 257, seed=9)
    ref, base = reference.softmax(x), reference.softmax_same_dtype(x)
    wrong = osm.softmax(x).copy()
    wrong[0, 3] *= 1.001
    assert not checks.compare(wrong, ref, base, np.float32)[0]
    stray = osm.softmax(x).copy()
    stray[1, 5] = np.nan
    assert not checks.compare(stray, ref, base, np.float32)[0]
    assert checks.unwritten(checks.poisoned_like(x)) == x.size
    naive_overflow = osm.softmax(np.array([[89.0, 0.0]], np.float32), variant="naive")
    assert not checks.compare(naive_overflow, reference.softmax(np.array([[89.0, 0.0]])),
                              reference.softmax_same_dtype(np.array([[89.0, 0.0]], np.float32)), np.float32)[0]
