"""CPU tier for log_softmax_04_shared and log_softmax_05_cluster: their NumPy models against the float64
reference (every dtype, rows past 32K, past the shared-memory cache, cluster sizes, special rows, rows at
any start) and their entries. The kernels' sources are built by tests/test_kernels_compile.py; they
cannot run on the CPU emulator (vec_io.cuh's conversions are inline PTX, as for softmax_09 and 10 whose
passes they share), so their values are checked on the GPU tier (tests/gpu/test_logsumexp_gpu.py: the
edge matrix, special rows, views, caches smaller than the row, cluster sizes, agreement with these
models)."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.softmax.fast_configs import chunks_09, vector_width
from onlinesoftmax.registry import DTYPE_TAGS

from test_logsumexp import log_softmax_compare, rows

DTYPES = checks.DTYPES
VARIANT = osm.REGISTRY["log_softmax_04_shared"]
CLUSTER = osm.REGISTRY["log_softmax_05_cluster"]


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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_rows, n_cols", [(2, 1), (3, 4097), (2, 70001), (1, 300001)])
def test_cluster_model_meets_the_reference(dtype, n_rows, n_cols):
    x = rows(n_rows, n_cols, dtype, seed=n_cols + 11)
    for n_chunks in (None, 1, 2, 16):
        passed, message = log_softmax_compare(CLUSTER.simulate(x, n_chunks=n_chunks), x)
        assert passed, f"N={n_cols}, C={n_chunks}: {message}"
    view = rows(3, n_cols + 3, dtype, seed=2)[:, 3:]
    assert log_softmax_compare(CLUSTER.simulate(view), view)[0]


def test_the_cluster_model_can_fail_and_special_rows_are_nan_where_torch_is():
    x = rows(3, 70001, seed=12)
    assert not log_softmax_compare(CLUSTER.simulate(x)[::-1].copy(), x)[0]
    x, nan_rows = checks.special_rows(np, 5000, "float32")
    y = checks.as_float64(CLUSTER.simulate(x, n_chunks=4))
    assert (np.isnan(y).all(axis=1) == nan_rows).all() and not np.isnan(y[~nan_rows]).any()


def test_entries_and_plan_sizes():
    for variant in (VARIANT, CLUSTER):
        entries = set(variant.launched_entries)
        for dtype in DTYPES:
            for v in (vector_width(dtype), 1):
                assert f"{variant.name}_{DTYPE_TAGS[dtype]}_v{v}" in entries
    plan = chunks_09(70001, "float32", 4)
    assert plan.cache_elems < 70001                                     # the test below reads past the cache
