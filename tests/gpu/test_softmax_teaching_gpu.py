"""GPU tier for the teaching kernels softmax_00_naive, softmax_01_safe, softmax_02_online(_unguarded)."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import api, checks, reference
from onlinesoftmax.kernels.softmax.teaching import simulate_online, simulate_naive

pytestmark = pytest.mark.gpu

SAFE_VARIANTS = ("softmax_01_safe", "softmax_02_online")
ALL_VARIANTS = ("softmax_00_naive",) + SAFE_VARIANTS
LN_FLT_MAX = float(np.log(np.finfo(np.float32).max))  # 88.72


def run_checked(variant, x):
    """Run on poisoned output, synchronize (surfaces any CUDA error), check nothing was left unwritten."""
    out = checks.poisoned_like(x)
    y = osm.softmax(x, variant=variant, out=out)
    cp.cuda.Device().synchronize()
    assert y is out
    assert checks.unwritten(y) == 0, f"{variant}: outputs left unwritten"
    return y


def assert_close(variant, y, x):
    ref = reference.softmax(x)
    passed, message = checks.compare(y, ref, reference.softmax_same_dtype(x), np.float32)
    assert passed, f"{variant} {x.shape}: {message}"


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_edge_matrix(variant, n_rows, n_cols):
    # The naive kernel is only defined where e^x does not overflow: keep its logits below 60.
    max_offset = 30.0 if variant != "softmax_00_naive" else 10.0
    x = checks.random_rows(cp, n_rows, n_cols, seed=n_rows * 7919 + n_cols, max_offset=max_offset,
                           outliers=variant != "softmax_00_naive")
    assert_close(variant, run_checked(variant, x), x)


@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
@pytest.mark.parametrize("variant", SAFE_VARIANTS)
def test_rows_of_a_million(variant, n_cols):
    x = checks.random_rows(cp, 3, n_cols, seed=n_cols)
    assert_close(variant, run_checked(variant, x), x)


@pytest.mark.parametrize("n_cols", (1, 3, 100, 257, 4097, 65536))
@pytest.mark.parametrize("variant", SAFE_VARIANTS)
def test_special_rows(variant, n_cols):
    x, nan_rows = checks.special_rows(cp, n_cols)
    y = run_checked(variant, x)
    assert (cp.isnan(y).all(axis=1).get() == nan_rows).all(), "NaN rows differ from torch's convention"
    assert not bool(cp.isnan(y[~cp.asarray(nan_rows)]).any()), "unexpected NaN"
    assert_close(variant, y, x)


@pytest.mark.parametrize("variant", SAFE_VARIANTS)
def test_strided_and_misaligned_views(variant):
    base = checks.random_rows(cp, 9, 1001, seed=5)
    for view in (base[:, 1:], base[::2], base[1::3, 3:-2], base[:, ::2], base.T[:500].T):
        assert_close(variant, osm.softmax(view, variant=variant), view)


def test_unguarded_kernel_gives_nan_exactly_where_the_model_does():
    """Without the guards: N < 256 and a leading run of -inf come out all NaN, on the GPU as in the model."""
    short, leading = checks.short_row(), checks.leading_neg_inf_row()
    ordinary = np.random.default_rng(3).standard_normal((4, 4096)).astype(np.float32)
    for host, expect_nan in ((short, True), (leading, True), (ordinary, False)):
        y = run_checked("softmax_02_online_unguarded", cp.asarray(host))
        model = simulate_online(host, guards=False)
        assert bool(cp.isnan(y).all()) == expect_nan == bool(np.isnan(model).all())
        guarded = run_checked("softmax_02_online", cp.asarray(host))
        assert not bool(cp.isnan(guarded).any())
        assert_close("softmax_02_online", guarded, cp.asarray(host))


def test_naive_kernel_overflows_where_theory_says():
    """e^x overflows float32 past ln(FLT_MAX) = 88.72: just below it the naive kernel is right, just above NaN."""
    below = np.full((1, 64), -5.0, np.float32)
    below[0, 7] = LN_FLT_MAX - 0.05
    above = below.copy()
    above[0, 7] = LN_FLT_MAX + 0.05
    y_below = run_checked("softmax_00_naive", cp.asarray(below))
    assert_close("softmax_00_naive", y_below, cp.asarray(below))
    y_above = run_checked("softmax_00_naive", cp.asarray(above)).get()
    assert np.isnan(y_above[0, 7]) and np.isnan(simulate_naive(above)[0, 7])
    safe = run_checked("softmax_01_safe", cp.asarray(above))
    assert_close("softmax_01_safe", safe, cp.asarray(above))


def test_gpu_kernels_match_their_models():
    """The NumPy model follows the kernel's schedule: on the same input they agree to a few ulps."""
    for variant in ALL_VARIANTS + ("softmax_02_online_unguarded",):
        naive = variant == "softmax_00_naive"  # keep e^x finite: NaN == NaN would compare nothing
        x = checks.random_rows(np, 7, 4097, seed=11, max_offset=10 if naive else 30, outliers=not naive)
        gpu = osm.softmax(cp.asarray(x), variant=variant).get()
        model = osm.softmax(x, variant=variant)
        assert not np.isnan(model).any()
        np.testing.assert_allclose(gpu, model, rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_bad_gpu_input(variant):
    with pytest.raises(TypeError):
        osm.softmax(cp.ones((2, 8), dtype=cp.int32), variant=variant)
    with pytest.raises(TypeError):
        osm.softmax(cp.ones((2, 8), dtype=cp.float64), variant=variant)
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        osm.softmax(cp.ones((2, 3, 4), dtype=cp.float32), axis=3, variant=variant)
    with pytest.raises(ValueError):
        osm.softmax(cp.ones((0, 4), dtype=cp.float32), variant=variant)
    # the context is still healthy afterwards
    assert_close(variant, run_checked(variant, cp.ones((2, 8), cp.float32)), cp.ones((2, 8), cp.float32))


def test_compiled_resources_are_reported():
    for variant in osm.variants("softmax"):
        if variant.name.startswith(ALL_VARIANTS):
            report = variant.resources()
            assert report.registers > 0 and report.stack_bytes == 0


# ---- long peaked rows: the accuracy rule against torch's float32 error, before and after ------------
# The rows of checks.peaked_rows (N = 262145 and 1048577, a peak 12-15 above the rest): each row must
# be within twice torch.softmax's float32 error (plus two ulps) of the float64 reference. The build of
# the same kernel with one running value per thread (-DTHREAD_FOLD_SEQUENTIAL=1, the schedule before
# the fix) must fail that rule: the test can fail, and it proves the fix.

def long_row_verdicts(variant, x):
    """Per row: (passed, message) of `variant` on x against torch's float32 softmax of x."""
    from onlinesoftmax.measure.bench import torch_softmax

    y = checks.run_checked(lambda x, out: api.run(variant, x, out=out), x)
    ref = reference.softmax(x.get())
    return checks.compare_each_row(y.get(), ref, torch_softmax(x).get(), np.float32)


@pytest.mark.parametrize("n_cols", checks.LONG_PEAKED_COLS)
@pytest.mark.parametrize("variant", SAFE_VARIANTS)
def test_long_peaked_rows_pass_the_rule_and_the_sequential_build_fails(variant, n_cols):
    pytest.importorskip("torch", reason="the long-row rule's baseline is torch.softmax")
    from onlinesoftmax.kernels.softmax.teaching import sequential_of

    x = checks.peaked_rows(cp, n_cols)
    after = long_row_verdicts(osm.REGISTRY[variant], x)
    assert all(passed for passed, _ in after), f"{variant} N={n_cols}: " + "; ".join(m for _, m in after)
    before = long_row_verdicts(sequential_of(variant), x)
    assert not all(passed for passed, _ in before), \
        f"{variant} N={n_cols}: the sequential build passes, so this test cannot tell the fix: " + \
        "; ".join(m for _, m in before)


@pytest.mark.parametrize("variant", SAFE_VARIANTS)
def test_long_rows_match_the_chunked_model(variant):
    """17 chunks per thread (a binary counter that is not a power of two) and a peaked row: the GPU
    agrees with the model of the chunked schedule, not only with the reference."""
    x = np.concatenate([checks.random_rows(np, 2, 70_001, seed=12), checks.peaked_rows(np, 70_001)[:2]])
    gpu = osm.softmax(cp.asarray(x), variant=variant).get()
    np.testing.assert_allclose(gpu, osm.softmax(x, variant=variant), rtol=2e-6, atol=1e-12)
