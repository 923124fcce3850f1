"""GPU tier: the -inf guards on the real kernels give exactly the outcomes tests/test_guards.py
asserts on the NumPy model, and GPU and model agree.

Unguarded builds: softmax_02_online_unguarded (registered) and softmax_03_online_masked
built with -DONLINE_SOFTMAX_GUARDS=0 (built here, not registered).
"""
import dataclasses

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import api, checks, reference
from onlinesoftmax import extremes
from onlinesoftmax.kernels.softmax import masked as softmax_masked
from onlinesoftmax.kernels.softmax.masked import simulate_masked
from onlinesoftmax.kernels.softmax.teaching import simulate_online

pytestmark = pytest.mark.gpu


GUARD_ROWS = checks.GUARD_ROWS
MASKED_UNGUARDED = dataclasses.replace(softmax_masked.MASKED, name="softmax_03_online_masked_unguarded",
                                       defines=("ONLINE_SOFTMAX_GUARDS=0",))


def run_checked(variant, x, **options):
    """Run a Variant (or a registry name) on poisoned output; synchronize; nothing left unwritten."""
    variant = osm.REGISTRY[variant] if isinstance(variant, str) else variant
    out = checks.poisoned_like(x)
    y = api.run(variant, x, out=out, **options)
    cp.cuda.Device().synchronize()
    assert y is out and checks.unwritten(y) == 0, f"{variant.name}: outputs left unwritten"
    return y.get()


@pytest.mark.parametrize("make", GUARD_ROWS.values(), ids=GUARD_ROWS.keys())
def test_unguarded_kernel_gives_all_nan_like_the_model(make):
    host = make()
    gpu = run_checked("softmax_02_online_unguarded", cp.asarray(host))
    model = simulate_online(host, guards=False)
    assert np.isnan(gpu).all() and np.isnan(model).all()


@pytest.mark.parametrize("make", GUARD_ROWS.values(), ids=GUARD_ROWS.keys())
def test_guarded_kernel_is_right_and_agrees_with_the_model(make):
    host = make()
    gpu = run_checked("softmax_02_online", cp.asarray(host))
    assert not np.isnan(gpu).any()
    ref = reference.softmax(host)
    assert checks.max_abs_error(gpu, ref) < 1e-6
    passed, message = checks.compare(gpu, ref, reference.softmax_same_dtype(host), np.float32)
    assert passed, message
    np.testing.assert_allclose(gpu, simulate_online(host), rtol=2e-6, atol=1e-12)


def test_unguarded_kernel_is_fine_when_every_thread_has_finite_data():
    host = checks.random_rows(np, 3, 4096, seed=8)
    gpu = run_checked("softmax_02_online_unguarded", cp.asarray(host))
    assert not np.isnan(gpu).any()
    np.testing.assert_allclose(gpu, simulate_online(host, guards=False), rtol=2e-6, atol=1e-12)


def test_fully_masked_row_is_nan_as_in_torch():
    host = np.full((2, 300), -np.inf, np.float32)
    for variant in ("softmax_01_safe", "softmax_02_online", "softmax_02_online_unguarded",
                    "softmax_03_online_masked"):
        assert np.isnan(run_checked(variant, cp.asarray(host))).all(), variant
    ones = cp.ones((2, 300), cp.float32)
    masked = run_checked("softmax_03_online_masked", ones,
                         **softmax_masked.prepare(ones, None, np.zeros(2, np.int64)))
    assert np.isnan(masked).all()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        assert torch.softmax(torch.full((2, 300), float("-inf"), device="cuda"), dim=1).isnan().all()


def test_causal_mask_unguarded_gives_nan_rows_exactly_where_the_model_does():
    for n in (300, 600):   # 128 and 256 threads per row: rows i < T - 1 leave idle threads at -inf
        host = checks.random_rows(np, n, n, seed=6)
        x = cp.asarray(host)
        options = softmax_masked.prepare(x, "causal")
        gpu = run_checked(MASKED_UNGUARDED, x, **options)
        model = simulate_masked(host, causal=True, guards=False)
        assert np.array_equal(np.isnan(gpu), np.isnan(model))
        threads = softmax_masked.block_threads(n)
        assert np.isnan(gpu[:threads - 1]).all() and not np.isnan(gpu[threads - 1:]).any()
    guarded = run_checked("softmax_03_online_masked", x, **options)
    assert not np.isnan(guarded).any()
    sentinel = softmax_masked.prepare(x, "causal", mask_value=-1e6)
    assert not np.isnan(run_checked(MASKED_UNGUARDED, x, **sentinel)).any()


def test_a_masked_run_inside_a_long_row_needs_the_guard_in_every_chunk():
    """A run of -inf over whole chunks inside a long peaked row: every thread starts a fresh state on
    -inf there. Unguarded: all NaN on the GPU as in the model; guarded: within the long-row rule
    (twice torch's float32 error plus two ulps) and equal to the model to a few ulps."""
    host = extremes.peaked_row_with_a_masked_run()
    unguarded = run_checked("softmax_02_online_unguarded", cp.asarray(host))
    assert np.isnan(unguarded).all() and np.isnan(simulate_online(host, guards=False)).all()
    guarded = run_checked("softmax_02_online", cp.asarray(host))
    assert not np.isnan(guarded).any()
    np.testing.assert_allclose(guarded, simulate_online(host), rtol=2e-6, atol=1e-12)
    masked = run_checked("softmax_03_online_masked", cp.asarray(host))
    np.testing.assert_allclose(masked, simulate_masked(host), rtol=2e-6, atol=1e-12)
    pytest.importorskip("torch", reason="the long-row rule's baseline is torch.softmax")
    from onlinesoftmax.measure.bench import torch_softmax

    baseline = torch_softmax(cp.asarray(host)).get()
    for name, y in (("softmax_02_online", guarded), ("softmax_03_online_masked", masked)):
        passed, message = checks.compare(y, reference.softmax(host), baseline, np.float32)
        assert passed, f"{name}: {message}"
