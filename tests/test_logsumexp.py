"""CPU tier: the log-sum-exp kernels' NumPy models in float32, float16 and bfloat16, the API,
the (m, l, u) merge and the graders.

Every model output is judged against the float64 reference with the project's error rule: at
most twice the error of a same-dtype baseline (float32 math, rounded once to the output dtype)
plus two ulps of the output dtype. The LSE is float32 for every input dtype, so it is judged
in float32 whatever the input.
"""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import simulate as sim
from onlinesoftmax import extremes
from onlinesoftmax.registry import DTYPE_TAGS
from onlinesoftmax import checks, merge, reference
from onlinesoftmax.book.exercises import exercises_logsumexp as ex
from onlinesoftmax.kernels.logsumexp import online as kl

EPS32 = float(np.finfo(np.float32).eps)
DTYPES = ("float32", "float16", "bfloat16")
LSE = osm.REGISTRY["logsumexp_01_online"]
LOG_SOFTMAX = osm.REGISTRY["log_softmax_01_online"]


def rows(n_rows, n_cols, dtype="float32", seed=0, **kwargs):
    """checks.random_rows made in float64, rounded once to `dtype` (bf16 through ml_dtypes)."""
    return checks.to_dtype(checks.random_rows(np, n_rows, n_cols, dtype="float64", seed=seed, **kwargs), dtype)


def lse_compare(y, x):
    """checks.tolerance in float32, plus 4 fp32 eps: log l carries l's relative error (each e^x is
    good to ~2 ulp). The baseline is the LSE computed in float32 from x (exact in float32)."""
    assert y.dtype == np.float32, f"the LSE is float32 for {x.dtype} input, got {y.dtype}"
    ref = reference.logsumexp(checks.as_float64(x))
    err = checks.max_abs_error(y, ref)
    base_err = checks.max_abs_error(reference.logsumexp_same_dtype(x.astype(np.float32)), ref)
    tol = checks.tolerance(base_err if np.isfinite(base_err) else 0.0, ref, np.float32) + 4 * EPS32
    return err <= tol, f"{x.dtype} LSE: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def log_softmax_compare(y, x):
    """Error at most 2x that of (x - m) - log l in float32 rounded to x's dtype, plus two ulps of
    x's dtype at the largest |output| (at least 1)."""
    assert y.dtype == x.dtype, f"log_softmax returns x's dtype {x.dtype}, got {y.dtype}"
    dtype = x.dtype.name
    ref = extremes.saturated(reference.log_softmax(checks.as_float64(x)), dtype)
    err = checks.max_abs_error(checks.as_float64(y), ref)
    baseline = checks.as_float64(reference.log_softmax_same_dtype(x))
    base_err = checks.max_abs_error(baseline, ref)
    base_err = base_err if np.isfinite(base_err) else 0.0
    finite = np.abs(ref[np.isfinite(ref)])
    scale = max(float(finite.max()) if finite.size else 1.0, 1.0)
    tol = 2.0 * base_err + 2.0 * checks.EPS[dtype] * scale
    return bool(err <= tol), f"{dtype} log_softmax: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def rows_for(n_cols):
    return 7 if n_cols <= 4097 else 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
def test_logsumexp_models_on_the_edge_sizes(dtype, n_cols):
    x = rows(rows_for(n_cols), n_cols, dtype, seed=n_cols)
    y = osm.api.run(LSE, x)
    assert y.shape == (x.shape[0],) and y.dtype == np.float32
    passed, message = lse_compare(y, x)
    assert passed, f"N={n_cols}: {message}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
def test_log_softmax_models_on_the_edge_sizes(dtype, n_cols):
    x = rows(rows_for(n_cols), n_cols, dtype, seed=n_cols + 1)
    y = osm.api.run(LOG_SOFTMAX, x)
    assert y.shape == x.shape and y.dtype == x.dtype
    passed, message = log_softmax_compare(y, x)
    assert passed, f"N={n_cols}: {message}"


def test_public_functions_take_every_dtype():
    """logsumexp gives float32, log_softmax x's dtype, for each of the three dtypes."""
    x32 = rows(3, 77, seed=2)
    for dtype in DTYPES:
        x = checks.to_dtype(x32, dtype)
        lse, y = osm.logsumexp(x), osm.log_softmax(x)
        assert lse.dtype == np.float32 and lse.shape == (3,) and lse_compare(lse, x)[0], dtype
        assert y.dtype == x.dtype and y.shape == x.shape and log_softmax_compare(y, x)[0], dtype


def test_a_row_of_a_million():
    x = checks.random_rows(np, 1, checks.HUGE_COLS[1], seed=3)
    passed, message = lse_compare(osm.api.run(LSE, x), x)
    assert passed, message
    passed, message = log_softmax_compare(osm.api.run(LOG_SOFTMAX, x), x)
    assert passed, message
    for dtype in ("float16", "bfloat16"):
        xd = checks.to_dtype(x, dtype)
        assert lse_compare(osm.api.run(LSE, xd), xd)[0], dtype
        assert log_softmax_compare(osm.api.run(LOG_SOFTMAX, xd), xd)[0], dtype


def test_lse_near_zero_is_accurate_in_absolute_terms():
    """Rows shifted so LSE ~ 0.3: the error is then log l's alone, which must stay within a few eps."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 65536)) * 2
    x = (x - reference.logsumexp(x)[:, None] + 0.3).astype(np.float32)
    assert np.abs(osm.api.run(LSE, x) - reference.logsumexp(x)).max() <= 4 * EPS32
    for dtype in ("float16", "bfloat16"):   # the input rounded, the LSE of what was rounded: still float32-exact
        xd = checks.to_dtype(x, dtype)
        assert np.abs(osm.api.run(LSE, xd) - reference.logsumexp(checks.as_float64(xd))).max() <= 4 * EPS32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", (1, 2, 3, 31, 100, 257, 4097))
def test_special_rows(dtype, n_cols):
    x, nan_rows = checks.special_rows(np, n_cols, dtype)
    lse = osm.api.run(LSE, x)
    assert lse[1] == -np.inf, "a row of all -inf has LSE -inf (log 0), not NaN"
    assert lse[2] == np.inf, "a row holding +inf has LSE +inf, as torch and scipy"
    assert (np.isnan(lse) == (np.arange(6) == 3)).all(), "NaN exactly for the row holding NaN"
    assert lse_compare(lse, x)[0]
    y = checks.as_float64(osm.api.run(LOG_SOFTMAX, x))
    x64 = checks.as_float64(x)
    assert (np.isnan(y).all(axis=1) == nan_rows).all(), "all -inf, +inf and NaN rows are NaN"
    assert not np.isnan(y[~nan_rows]).any(), "unexpected NaN"
    assert (y[~nan_rows][np.isneginf(x64[~nan_rows])] == -np.inf).all(), "a -inf logit has log-probability -inf"
    passed, message = log_softmax_compare(osm.api.run(LOG_SOFTMAX, x), x)
    assert passed, message


@pytest.mark.parametrize("group", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
def test_every_group_size(group):
    """Any lane count gives the same answer: the group reduction is the monoid at work."""
    for n_cols in (1, 5, 33, 1000, 4097):
        x = rows(3, n_cols, seed=group + n_cols)
        for dtype in DTYPES:
            xd = checks.to_dtype(x, dtype)
            assert lse_compare(osm.api.run(LSE, xd, group=group), xd)[0], (dtype, group, n_cols)
            assert log_softmax_compare(osm.api.run(LOG_SOFTMAX, xd, group=group), xd)[0], (dtype, group, n_cols)


def test_row_heads_follow_the_addresses():
    base = np.zeros((4, 1003), np.float32)
    phases = sim.row_heads(base[:, 1:])
    start = (base.ctypes.data + 4) % 16
    expected = [((16 - (start + r * 1003 * 4) % 16) % 16) // 4 for r in range(4)]
    assert list(phases) == expected and len(set(phases)) > 1
    for dtype in ("float16", "bfloat16"):
        halves = checks.to_dtype(np.zeros((3, 77), np.float32), dtype)
        view = halves[:, 3:]
        start = view.ctypes.data % 16
        expected = [((16 - (start + r * 77 * 2) % 16) % 16) // 2 for r in range(3)]
        assert list(sim.row_heads(view)) == expected and all(0 <= p < 8 for p in expected), dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_and_strided_views(dtype):
    base = rows(9, 1001, dtype, seed=5)
    for view in (base[:, 1:], base[:, 3:-2], base[::2], base[1::3, 5:], base[:, ::2], base[::-1]):
        passed, message = log_softmax_compare(osm.api.run(LOG_SOFTMAX, view), view)
        assert passed, message
        passed, message = lse_compare(osm.api.run(LSE, view), view)
        assert passed, message


def test_model_phases_change_the_partition_not_the_answer():
    x = checks.random_rows(np, 5, 1000, seed=8)
    for dtype, n_phases in (("float32", 4), ("float16", 8), ("bfloat16", 8)):
        xd = checks.to_dtype(x, dtype)
        answers = [kl.simulate_logsumexp(xd, phases=np.full(5, p)) for p in range(n_phases)]
        for y in answers:
            assert lse_compare(y, xd)[0]
        assert max(np.abs(a - answers[0]).max() for a in answers) <= 4 * EPS32 * np.abs(answers[0]).max()


def test_16_bit_models_are_the_float32_model_rounded_once():
    """fp16 / bf16 widen exactly and compute in fp32 on the same schedule as 8-element vectors:
    log_softmax is the fp32 result rounded once to the dtype; the LSE is not rounded at all."""
    for n_cols in (7, 1000, 4097):
        x = rows(4, n_cols, seed=n_cols)
        for dtype in ("float16", "bfloat16"):
            xd = checks.to_dtype(x, dtype)
            widened = xd.astype(np.float32)
            group = kl.group_size(n_cols, 8)
            phases = sim.row_heads(xd)
            m, l = kl.group_reduce(*kl.lane_states(widened, group, kl.LAYOUTS[dtype], phases), group)
            with np.errstate(all="ignore"):
                expected = ((widened - m[:, None]) - np.log(l)[:, None]).astype(np.float32).astype(xd.dtype)
                lse = (m + np.log(l)).astype(np.float32)
            got = kl.simulate_log_softmax(xd)
            assert got.dtype == xd.dtype
            np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))
            np.testing.assert_array_equal(kl.simulate_logsumexp(xd), lse)


def test_group_size_and_launch_geometry():
    assert [kl.group_size(n, 4) for n in (1, 100, 256, 1000, 4096, 16384, 65536, 1 << 20)] == \
        [4, 4, 8, 32, 128, 512, 1024, 1024]
    assert kl.group_size(4096, 8) == 64
    assert kl.LAYOUTS["bfloat16"] == kl.LAYOUTS["float16"] == kl.RowLayout(vec=8, unroll=2)
    assert kl.LAYOUTS["float32"] == kl.RowLayout(vec=4, unroll=4)
    assert LSE.geometry(4000, 100).grid == (63,) and LSE.geometry(4000, 100).block == (256,)
    assert LSE.geometry(10, 1 << 20).grid == (10,) and LSE.geometry(10, 1 << 20).block == (1024,)
    for bad in (0, 3, 2048, 1.0):
        with pytest.raises(ValueError):
            osm.api.run(LSE, np.ones((2, 8), np.float32), group=bad)


# --- one variant per file, one entry per dtype, chosen by the plan builder ---------------------

def test_one_variant_per_file_with_an_entry_per_dtype():
    for variant in (LSE, LOG_SOFTMAX):
        stem = variant.name
        assert variant.dtypes == DTYPES
        assert variant.launched_entries == (f"{stem}_f32", f"{stem}_f16", f"{stem}_bf16")
        assert variant.entry_name == f"{stem}_f32"
        assert [variant.dtype_entry(d) for d in DTYPES] == list(variant.launched_entries)
        assert all(name.startswith(stem + "_") for name in variant.launched_entries)
        with pytest.raises(TypeError):
            variant.dtype_entry("float64")
    assert not [name for name in osm.REGISTRY if name.startswith(("log_softmax_01_online_", "logsumexp_01_online_"))], \
        "the dtypes are entries of one variant, not variants of their own"


class FakeKernel:
    """Stands in for the cupy.RawKernel: records the entry it was built for and each launch."""

    def __init__(self, entry):
        self.entry, self.launches = entry, []

    def __call__(self, grid, block, args, **kwargs):
        self.launches.append((grid, block, args))


def install_fake_kernels(monkeypatch, module) -> list:
    """Replace a launcher module's get_kernel and driver.prepare_launch: every kernel built is a
    FakeKernel (returned in build order) whose launches record the whole argument list."""
    built = []

    def get_kernel(path, entry, defines=()):
        assert str(path).endswith(".cu") and tuple(defines) == ()
        built.append(FakeKernel(entry))
        return built[-1]

    def prepare_launch(fn, grid, block, shared, cluster, types, fixed=None, **flags):
        def launch(*values):   # the whole argument list, as the kernel would see it
            given = iter(values)
            fn.launches.append((tuple(grid), tuple(block),
                                tuple(fixed[i] if i in fixed else next(given) for i in range(len(types)))))
        return launch

    monkeypatch.setattr(module, "get_kernel", get_kernel)
    monkeypatch.setattr(module.driver, "prepare_launch", prepare_launch)
    return built


@pytest.fixture
def fake_kernels(monkeypatch):
    return install_fake_kernels(monkeypatch, kl)


class Addressed:
    """A numpy array with a device-style address (.data.ptr), as a runner or a plan reads it."""

    def __init__(self, array):
        self.shape, self.strides, self.itemsize, self.dtype = array.shape, array.strides, array.itemsize, array.dtype
        self.data = type("Pointer", (), {"ptr": array.ctypes.data})()


@pytest.mark.parametrize("dtype", DTYPES)
def test_plan_builders_pick_the_entry_of_the_dtype(dtype, fake_kernels):
    """Without a GPU: the plan builder chooses `<stem>_<tag>` from x's dtype, sizes the lane group
    from the dtype's vector width, takes a float32 LSE output and an x-dtype log_softmax output."""
    x = checks.to_dtype(np.zeros((5, 4096), np.float32), dtype)
    vec = kl.LAYOUTS[dtype].vec
    lse = np.zeros(5, np.float32)
    run = LSE.plan(LSE, x, lse)
    run(Addressed(x), Addressed(lse))
    kernel = fake_kernels[-1]
    assert kernel.entry == f"logsumexp_01_online_{DTYPE_TAGS[dtype]}"
    grid, block, args = kernel.launches[0]
    assert args[2:] == (5, 4096, 4096, kl.group_size(4096, vec)) and block == (max(256, kl.group_size(4096, vec)),)
    y = np.zeros_like(x)
    LOG_SOFTMAX.plan(LOG_SOFTMAX, x, y)(Addressed(x), Addressed(y))
    assert fake_kernels[-1].launches[0][2][:2] == (x.ctypes.data, y.ctypes.data)
    assert fake_kernels[-1].entry == f"log_softmax_01_online_{DTYPE_TAGS[dtype]}"
    with pytest.raises(TypeError, match="float32"):
        LSE.plan(LSE, x, np.zeros(5, np.float16 if dtype == "float32" else np.float64))
    with pytest.raises(TypeError):
        LOG_SOFTMAX.plan(LOG_SOFTMAX, x, np.zeros((5, 4096), np.float32 if dtype != "float32" else np.float16))
    with pytest.raises(TypeError):
        LSE.plan(LSE, x.astype(np.float64), np.zeros(5, np.float32))


def test_the_checks_reject_wrong_answers():
    """The comparisons above can fail: an LSE rounded to the input's 16-bit dtype, a log_softmax off
    by a few ulps of its dtype in one element, and rows swapped."""
    x = rows(4, 300, seed=9)
    for dtype in DTYPES:
        xd = checks.to_dtype(x, dtype)
        lse = osm.api.run(LSE, xd)
        assert lse_compare(lse, xd)[0]
        wrong = lse * np.float32(1 + 16 * EPS32)
        assert not lse_compare(wrong, xd)[0], dtype
        if dtype != "float32":
            assert not lse_compare(checks.to_dtype(lse, dtype).astype(np.float32), xd)[0], dtype
        y = osm.api.run(LOG_SOFTMAX, xd)
        assert log_softmax_compare(y, xd)[0]
        y64 = checks.as_float64(y)
        scale = np.abs(y64).max()
        bumped = y64.copy()
        bumped[2, 17] += 12 * checks.EPS[dtype] * scale
        assert not log_softmax_compare(checks.to_dtype(bumped, dtype), xd)[0], dtype
        assert not log_softmax_compare(y[::-1].copy(), xd)[0], dtype


def test_api_out_and_errors():
    x = checks.random_rows(np, 4, 33)
    out = checks.poisoned_like(np.empty(4, np.float32))
    assert osm.logsumexp(x, out=out) is out and checks.unwritten(out) == 0
    with pytest.raises(ValueError, match="out must be"):
        osm.logsumexp(x, out=np.empty((4, 33), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        osm.log_softmax(x, out=np.empty(4, np.float32))
    y = checks.poisoned_like(x)
    assert osm.log_softmax(x, out=y) is y and checks.unwritten(y) == 0
    for bad in (x.astype(np.float64), np.ones((2, 3), np.int32)):   # a named kernel takes no float64
        for variant in (LSE, LOG_SOFTMAX):
            with pytest.raises(TypeError):
                osm.api.run(variant, bad)
    for function in (osm.logsumexp, osm.log_softmax):
        with pytest.raises(TypeError):
            function(np.ones((2, 3), np.int32))
        assert function(x.astype(np.float64)).dtype == np.float64   # the public functions: exactly
    with pytest.raises(ValueError):
        osm.api.run(LSE, np.ones(5, np.float32))
    with pytest.raises(ValueError):
        osm.api.run(LOG_SOFTMAX, np.ones((0, 5), np.float32))
    assert osm.log_softmax(np.ones((0, 5), np.float32)).shape == (0, 5)
    with pytest.raises(ValueError, match="unknown"):
        osm.logsumexp(x, variant="fastest")
    for dtype in ("float16", "bfloat16"):   # one variant takes every dtype; nothing to dispatch to
        xd = checks.to_dtype(x, dtype)
        np.testing.assert_array_equal(osm.log_softmax(xd, variant="online").view(np.uint16),
                                      osm.api.run(LOG_SOFTMAX, xd).view(np.uint16))
        np.testing.assert_array_equal(osm.logsumexp(xd, variant="online"), osm.api.run(LSE, xd))


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_lse_out_is_float32_for_16_bit_input(dtype):
    """The LSE is float32 for every input dtype, `out=` included (flash-attention keeps it so)."""
    x = checks.to_dtype(checks.random_rows(np, 4, 33), dtype)
    out = checks.poisoned_like(np.empty(4, np.float32))
    assert osm.api.run(LSE, x, out=out) is out and checks.unwritten(out) == 0
    assert lse_compare(out, x)[0]
    with pytest.raises(ValueError, match="out must be"):
        osm.api.run(LSE, x, out=np.empty(4, x.dtype))


# --- the (m, l, u) merge and blocked attention ---------------------------------------------------

def test_worked_example():
    a = merge.block_state([1.0, 2.0], [[10.0], [0.0]])
    b = merge.block_state([3.0], [[-10.0]])
    assert a[0] == 2.0 and abs(a[1] - 1.367879) < 5e-7 and abs(a[2][0] - 3.678794) < 5e-7
    assert b == (3.0, 1.0, pytest.approx(np.array([-10.0])))
    m, l, u = merge.merge(a, b)
    assert m == 3.0 and abs(l - 1.503215) < 5e-7 and abs(u[0] - -8.646647) < 5e-7
    direct = reference.softmax(np.array([1.0, 2.0, 3.0])) @ np.array([10.0, 0.0, -10.0])
    assert abs(u[0] / l - direct) < 1e-15 and abs(direct - -5.752104) < 5e-7


def test_merge_with_masked_blocks():
    empty = (-np.inf, 0.0, np.zeros(3))
    assert merge.block_state(np.full(4, -np.inf), np.ones((4, 3)))[:2] == (-np.inf, 0.0)
    m, l, u = merge.merge(empty, empty)
    assert m == -np.inf and l == 0.0 and not np.isnan(u).any()
    a = merge.block_state(np.array([0.5, -1.0]), np.eye(2, 3))
    assert merge.merge(a, empty)[1] == a[1] and merge.merge(empty, a)[1] == a[1]


@pytest.mark.parametrize("n_keys, d, block", [(1, 8, 4), (7, 8, 3), (1000, 64, 64), (4097, 128, 128)])
def test_blocked_attention_equals_softmax_qk_v(n_keys, d, block):
    rng = np.random.default_rng(n_keys)
    q, K, V = rng.standard_normal(d), rng.standard_normal((n_keys, d)) * 2, rng.standard_normal((n_keys, 16))
    ref = merge.attention_reference(q, K, V)
    for loop in (merge.attention_blocked, merge.attention_blocked_running_max):
        assert np.abs(loop(q, K, V, block) - ref).max() < 1e-14


# --- the graders accept right answers and reject the deliberately wrong ones ---------------------

def test_graders(capsys):
    assert ex.check_logsumexp_rows(reference.logsumexp)
    assert ex.check_logsumexp_rows(osm.logsumexp)
    assert not ex.check_logsumexp_rows(lambda x: np.log(np.exp(x.astype(np.float64)).sum(axis=1)))
    assert ex.check_merge_attention(merge.merge)

    def unguarded(a, b):
        (m_a, l_a, u_a), (m_b, l_b, u_b) = a, b
        m = max(m_a, m_b)
        alpha, beta = np.exp(m_a - m), np.exp(m_b - m)
        return m, alpha * l_a + beta * l_b, alpha * u_a + beta * u_b

    assert not ex.check_merge_attention(unguarded)
    assert ex.check_probabilities_from_lse(lambda s, lse: np.exp(s - lse[:, None]))
    assert not ex.check_probabilities_from_lse(lambda s, lse: np.exp(s - s.max(axis=1, keepdims=True)))
    printed = capsys.readouterr().out
    assert "passed" in printed and "FAILED" in printed
