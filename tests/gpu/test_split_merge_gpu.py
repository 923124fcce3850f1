"""GPU tier for softmax_06_split_merge: rows split over several blocks, partial (m, l) states merged."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.softmax import split_merge as km

pytestmark = pytest.mark.gpu

SPLIT = osm.REGISTRY["softmax_06_split_merge"]


def run_checked(x, out=None, **options):
    """Split-merge softmax on a poisoned output; synchronize; nothing left unwritten."""
    out = checks.poisoned_like(x) if out is None else out
    out.fill(checks.POISON["float32"])
    y = osm.api.run(SPLIT, x, out=out, **options)
    cp.cuda.Device().synchronize()
    assert y is out and checks.unwritten(y) == 0, "outputs left unwritten"
    return y


def assert_close(y, x):
    passed, message = checks.compare(y, reference.softmax(x), reference.softmax_same_dtype(x), np.float32)
    assert passed, f"softmax_06_split_merge {x.shape}: {message}"


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
def test_edge_matrix(n_rows, n_cols):
    x = checks.random_rows(cp, n_rows, n_cols, seed=n_rows * 7919 + n_cols + 2)
    assert_close(run_checked(x), x)


@pytest.mark.parametrize("blocks_per_row", (1, 2, 3, 7, 64, 1024))
@pytest.mark.parametrize("n_cols", (1, 3, 257, 4097, 65536))
def test_explicit_split_including_empty_chunks(n_cols, blocks_per_row):
    """blocks_per_row > n_cols leaves chunks empty: they contribute the identity (-inf, 0)."""
    x = checks.random_rows(cp, 7, n_cols, seed=n_cols + blocks_per_row)
    assert_close(run_checked(x, blocks_per_row=blocks_per_row), x)


@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
def test_rows_of_a_million(n_cols):
    x = checks.random_rows(cp, 3, n_cols, seed=n_cols)
    assert km.split_geometry(3, n_cols)[0] > 1  # few long rows really are split
    assert_close(run_checked(x), x)


@pytest.mark.parametrize("blocks_per_row", (None, 1, 4, 300))
@pytest.mark.parametrize("n_cols", (1, 3, 100, 257, 4097, 65536))
def test_special_rows(n_cols, blocks_per_row):
    x, nan_rows = checks.special_rows(cp, n_cols)
    y = run_checked(x, blocks_per_row=blocks_per_row)
    assert (cp.isnan(y).all(axis=1).get() == nan_rows).all(), "NaN rows differ from torch's convention"
    assert not bool(cp.isnan(y[~cp.asarray(nan_rows)]).any()), "unexpected NaN"
    assert_close(y, x)


def test_strided_and_misaligned_views():
    base = checks.random_rows(cp, 9, 10001, seed=5)
    for view in (base[:, 1:], base[::2], base[1::3, 3:-2], base[:, ::2], base[::-1]):
        for blocks_per_row in (None, 3):
            assert_close(run_checked(view, out=checks.poisoned_like(view), blocks_per_row=blocks_per_row), view)
    out_base = checks.poisoned_like(base)
    assert_close(run_checked(base[:, :9999], out=out_base[:, 2:], blocks_per_row=5), base[:, :9999])


def test_more_rows_than_one_grid_dimension_holds():
    """grid.y <= 65535: the launcher splits 70000 rows into two slabs."""
    x = checks.random_rows(cp, 70_000, 33, seed=4)
    assert_close(run_checked(x), x)
    assert_close(run_checked(x, blocks_per_row=2), x)


def test_gpu_kernel_matches_its_model():
    x = checks.random_rows(np, 5, 20_000, seed=11)
    for blocks_per_row in (None, 1, 6, 64):
        gpu = run_checked(cp.asarray(x), blocks_per_row=blocks_per_row).get()
        model = km.simulate_split_merge(x, blocks_per_row)
        np.testing.assert_allclose(gpu, model, rtol=2e-6, atol=1e-12)


def test_partials_match_the_model():
    """Launch 1 alone: each chunk's (m, l) as the model computes it."""
    from onlinesoftmax.runtime.loader import get_kernel

    x = checks.random_rows(np, 3, 9000, seed=13)
    blocks_per_row, chunk_cols = km.split_geometry(3, 9000, 4)
    partials = cp.full((3, blocks_per_row, 2), np.nan, dtype=cp.float32)
    kernel = get_kernel(SPLIT.path, "softmax_06_split_merge_partials")
    xg = cp.asarray(x)
    kernel((blocks_per_row, 3), (km.BLOCK_THREADS,),
           (xg, partials, np.int32(9000), np.int64(9000), np.int32(chunk_cols)))
    m_model, l_model = km.partial_states(x, blocks_per_row)
    host = partials.get()
    np.testing.assert_array_equal(host[..., 0], m_model)
    np.testing.assert_allclose(host[..., 1], l_model, rtol=2e-6)


def test_bad_split_then_a_healthy_context():
    x = checks.random_rows(cp, 2, 100)
    for bad in (0, 1025):
        with pytest.raises(ValueError):
            osm.api.run(SPLIT, x, blocks_per_row=bad)
    with pytest.raises(TypeError):  # not an int (softmax_split_merge.split_geometry)
        osm.api.run(SPLIT, x, blocks_per_row=2.5)
    with pytest.raises(TypeError):
        osm.softmax(cp.ones((2, 8), cp.float64), variant="split_merge")
    assert_close(run_checked(x), x)


def test_compiled_resources_are_reported():
    report = SPLIT.resources()  # the partials entry
    assert report.registers > 0 and report.stack_bytes == 0
