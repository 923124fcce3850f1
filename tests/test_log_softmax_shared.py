"""CPU tier for log_softmax_04_shared: its NumPy model against the float64 reference (every dtype, rows
past 32K, past the shared-memory cache, special rows, rows at any start) and its entries. The kernel's
source is built by tests/test_kernels_compile.py; it cannot run on the CPU emulator (vec_io.cuh's
conversions are inline PTX, as for softmax_09 whose pass it shares), so its values are checked on the
GPU tier (tests/gpu/test_logsumexp_gpu.py: the edge matrix, special rows, views, caches smaller than
the row, agreement with this model)."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.softmax.fast_configs import chunks_09, vector_width
from onlinesoftmax.registry import DTYPE_TAGS

from test_logsumexp import log_softmax_compare, rows

DTYPES = checks.DTYPES
VARIANT = osm.REGISTRY["log_softmax_04_shared"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", (1, 7, 33, 1000, 32769, 50257, 70001))
def test_model_meets_the_reference(dtype, n_cols):
    x = rows(3, n_cols, dtype, seed=n_cols + 2)
    y = VARIANT.simulate(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    passed, message = log_softmax_compare(y, x)
    assert passed, f"N={n_cols}: {message}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_model_special_rows_and_views(dtype):
    """All -inf -> NaN (as torch), NaN or +inf -> NaN, a -inf logit -> -inf; rows at any start."""
    x, nan_rows = checks.special_rows(np, 600, dtype)
    y = checks.as_float64(VARIANT.simulate(x))
    assert (np.isnan(y).all(axis=1) == nan_rows).all() and not np.isnan(y[~nan_rows]).any()
    assert (y[~nan_rows][np.isneginf(checks.as_float64(x)[~nan_rows])] == -np.inf).all()
    wide = rows(4, 3001, dtype, seed=4)
    view = wide[:, 3:]                                   # rows off their 16-byte boundary
    assert log_softmax_compare(VARIANT.simulate(view), view)[0]


def test_the_model_can_fail():
    x = rows(4, 40000, seed=8)
    y = VARIANT.simulate(x)
    assert log_softmax_compare(y, x)[0]
    assert not log_softmax_compare(y + np.float32(0.01), x)[0]          # log l off by 1 %
    assert not log_softmax_compare(y[::-1].copy(), x)[0]                # another row's (m, l)


def test_entries_and_plan_sizes():
    entries = set(VARIANT.launched_entries)
    for dtype in DTYPES:
        for v in (vector_width(dtype), 1):
            assert f"log_softmax_04_shared_{DTYPE_TAGS[dtype]}_v{v}" in entries
    plan = chunks_09(70001, "float32", 4)
    assert plan.cache_elems < 70001                                     # the test below reads past the cache
