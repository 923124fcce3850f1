"""CPU tier: what the -inf guards of online_state.cuh prevent, on the thread-level NumPy model.

Without the guards, two empty states (-inf, 0) combine as e^(-inf - -inf) = NaN. The model
replays the kernel's schedule, so it must show the NaN exactly where the GPU does
(tests/gpu/test_guards_gpu.py asserts the same outcomes on the real kernels).
"""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference, simulate
from onlinesoftmax import extremes
from onlinesoftmax.kernels.softmax.masked import block_threads, simulate_masked
from onlinesoftmax.kernels.softmax.teaching import simulate_online


GUARD_ROWS = checks.GUARD_ROWS


@pytest.mark.parametrize("make", GUARD_ROWS.values(), ids=GUARD_ROWS.keys())
def test_without_guards_the_row_is_all_nan(make):
    x = make()
    assert np.isnan(simulate_online(x, guards=False)).all()
    assert np.isnan(osm.softmax(x, variant="softmax_02_online_unguarded")).all()
    m, l = simulate.online_row_state(x, guards=False, chunked=True)
    assert np.isnan(l).all()


@pytest.mark.parametrize("make", GUARD_ROWS.values(), ids=GUARD_ROWS.keys())
def test_with_guards_the_row_is_right(make):
    x = make()
    y = osm.softmax(x, variant="softmax_02_online")
    assert not np.isnan(y).any()
    error = checks.max_abs_error(y, reference.softmax(x))
    assert error < 1e-6, error  # fp32: about 1e-8 on these rows
    passed, message = checks.compare(y, reference.softmax(x), reference.softmax_same_dtype(x), np.float32)
    assert passed, message


def test_guards_do_not_matter_when_every_thread_has_finite_data():
    """N >= 256 with no -inf: no state is ever empty, so the unguarded build is right too."""
    x = checks.random_rows(np, 3, 4096, seed=8)
    unguarded = simulate_online(x, guards=False)
    assert not np.isnan(unguarded).any()
    np.testing.assert_array_equal(unguarded, simulate_online(x, guards=True))


def test_warp0_width_keeps_empty_lanes_apart():
    """Warp 0 holds 8 warp results and 24 identities. The butterfly over offsets 4, 2, 1
    never pairs a data lane with an empty one; over all 32 lanes, unguarded, lane 0 meets
    NaN from two combined identities (lanes 8 and 24) even though every thread had data."""
    x = checks.random_rows(np, 2, 256, seed=2)
    m = x.copy()
    l = np.ones_like(m)
    per_warp = simulate.warp_butterfly((m, l), lambda a, b: simulate.online_combine(a, b, False))
    warp0_m = np.full((2, 32), -np.inf, np.float32)
    warp0_l = np.zeros((2, 32), np.float32)
    warp0_m[:, :8], warp0_l[:, :8] = per_warp[0][:, ::32], per_warp[1][:, ::32]
    with np.errstate(all="ignore"):
        narrow = simulate.warp_butterfly((warp0_m, warp0_l), lambda a, b: simulate.online_combine(a, b, False), 8)
        wide = simulate.warp_butterfly((warp0_m, warp0_l), lambda a, b: simulate.online_combine(a, b, False), 32)
    assert np.isfinite(narrow[1][:, 0]).all()
    assert np.isnan(wide[1][:, 0]).all()
    guarded = simulate.warp_butterfly((warp0_m, warp0_l), simulate.online_combine, 32)
    np.testing.assert_allclose(guarded[1][:, 0], narrow[1][:, 0], rtol=1e-6)


def test_fully_masked_row_is_nan_even_with_guards():
    """All -inf: m = -inf, l = 0, and 0/0 = NaN, as torch.softmax gives."""
    x = np.full((2, 300), -np.inf, np.float32)
    for variant in ("softmax_01_safe", "softmax_02_online", "softmax_02_online_unguarded",
                    "softmax_03_online_masked"):
        assert np.isnan(osm.softmax(x, variant=variant)).all(), variant
    assert np.isnan(reference.softmax(x)).all()


def test_causal_mask_needs_the_guards_sentinel_hides_the_need():
    """Causal rows i < T - 1 (T threads per row: 256 at N = 600) leave threads i+1..T-1 with only
    -inf: unguarded -> NaN. A finite sentinel (-1e6) never makes a state -inf, so the unguarded
    build survives it."""
    x = checks.random_rows(np, 600, 600, seed=6)
    threads = block_threads(600)
    assert threads == 256
    unguarded = simulate_masked(x, causal=True, guards=False)
    nan_rows = np.isnan(unguarded).all(axis=1)
    assert nan_rows[:threads - 1].all() and not np.isnan(unguarded[threads - 1:]).any()
    guarded = simulate_masked(x, causal=True)
    assert not np.isnan(guarded).any()
    assert not np.isnan(simulate_masked(x, causal=True, fill=-1e6, guards=False)).any()


def test_a_masked_run_inside_a_long_row_needs_the_guard_in_every_chunk():
    """Each chunk of thread_fold.cuh starts a fresh (-inf, 0) state: a run of -inf covering whole chunks
    in the middle of a row makes the unguarded build NaN, although every thread's slice starts finite.
    The schedule with one running state per thread (-DTHREAD_FOLD_SEQUENTIAL=1) never meets it."""
    x = extremes.peaked_row_with_a_masked_run()
    assert np.isfinite(x[0, :256]).all()
    assert np.isnan(simulate_online(x, guards=False)).all()
    assert not np.isnan(simulate_online(x, guards=False, sequential=True)).any()
    y = simulate_online(x)
    passed, message = checks.compare(y, reference.softmax(x), reference.softmax_same_dtype(x), np.float32)
    assert passed, message
