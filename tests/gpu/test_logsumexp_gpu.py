"""GPU tier for logsumexp_01_online and log_softmax_01_online(_fp16): edge matrix, special rows,
views, every lane-group size, poisoned outputs, agreement with the NumPy models, bad input."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, checks_fp16, reference
from onlinesoftmax.runtime import device
from onlinesoftmax.kernels import logsumexp_online as kl

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not device.has_gpu(), reason="needs a CUDA GPU")]
cp = pytest.importorskip("cupy")

EPS32 = float(np.finfo(np.float32).eps)
LSE = osm.REGISTRY["logsumexp_01_online"]
LOG_SOFTMAX = {"float32": osm.REGISTRY["log_softmax_01_online"],
               "float16": osm.REGISTRY["log_softmax_01_online_fp16"]}


def lse_checked(x, out=None, **options):
    """LSE on a poisoned output; synchronize (surfaces CUDA errors); nothing left unwritten."""
    out = checks.poisoned_like(cp.empty(x.shape[0], cp.float32)) if out is None else out
    out.fill(checks.POISON)
    y = osm.api.run(LSE, x, out=out, **options)
    cp.cuda.Device().synchronize()
    assert y is out and checks.unwritten(y) == 0, "LSE left outputs unwritten"
    return y


def log_softmax_checked(x, out=None, **options):
    out = checks_fp16.poisoned_like(x) if out is None else out
    out.fill(checks_fp16.POISON_FP16 if out.dtype == cp.float16 else checks.POISON)
    y = osm.api.run(LOG_SOFTMAX[x.dtype.name], x, out=out, **options)
    cp.cuda.Device().synchronize()
    assert y is out and checks_fp16.unwritten(y) == 0, "log_softmax left outputs unwritten"
    return y


def assert_lse_close(y, x):
    """checks.tolerance, plus 4 fp32 eps: log l carries l's relative error (each exp2f is good to ~2 ulp)."""
    ref = reference.logsumexp(x)
    err = checks.max_abs_error(y, ref)
    base_err = checks.max_abs_error(reference.logsumexp_same_dtype(x), ref)
    tol = checks.tolerance(base_err if np.isfinite(base_err) else 0.0, ref, np.float32) + 4 * EPS32
    assert err <= tol, f"logsumexp {x.shape}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def assert_log_softmax_close(y, x):
    passed, message = checks.compare(y, reference.log_softmax(x), reference.log_softmax_same_dtype(x), x.dtype)
    assert passed, f"log_softmax {x.dtype} {x.shape}: {message}"


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
def test_logsumexp_edge_matrix(n_rows, n_cols):
    x = checks.random_rows(cp, n_rows, n_cols, seed=n_rows * 7919 + n_cols)
    assert_lse_close(lse_checked(x), x)


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_log_softmax_edge_matrix(dtype, n_rows, n_cols):
    x = checks.random_rows(cp, n_rows, n_cols, dtype=dtype, seed=n_rows * 7919 + n_cols + 1)
    assert_log_softmax_close(log_softmax_checked(x), x)


@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
def test_rows_of_a_million(n_cols):
    x = checks.random_rows(cp, 3, n_cols, seed=n_cols)
    assert_lse_close(lse_checked(x), x)
    assert_log_softmax_close(log_softmax_checked(x), x)
    x16 = x.astype(cp.float16)
    assert_log_softmax_close(log_softmax_checked(x16), x16)


@pytest.mark.parametrize("n_cols", (1, 3, 100, 257, 4097, 65536))
def test_special_rows(n_cols):
    x, nan_rows = checks.special_rows(cp, n_cols)
    lse = lse_checked(x).get()
    assert lse[1] == -np.inf, "a row of all -inf has LSE -inf (log 0), not NaN"
    assert (np.isnan(lse) == (nan_rows & (np.arange(len(nan_rows)) != 1))).all()
    assert_lse_close(cp.asarray(lse), x)
    for dtype in ("float32", "float16"):
        xd = x.astype(dtype)
        y = log_softmax_checked(xd)
        y_host, x_host = y.get(), xd.get()
        assert (np.isnan(y_host).all(axis=1) == nan_rows).all(), "all -inf, +inf and NaN rows must be NaN"
        assert not np.isnan(y_host[~nan_rows]).any(), "unexpected NaN"
        assert (y_host[~nan_rows][np.isneginf(x_host[~nan_rows])] == -np.inf).all()
        assert_log_softmax_close(y, xd)


@pytest.mark.parametrize("group", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
def test_every_group_size(group):
    for n_cols in (1, 5, 33, 1000, 4097, 65536):
        x = checks.random_rows(cp, 7, n_cols, seed=group + n_cols)
        assert_lse_close(lse_checked(x, group=group), x)
        for dtype in ("float32", "float16"):
            xd = x.astype(dtype)
            assert_log_softmax_close(log_softmax_checked(xd, group=group), xd)


@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_misaligned_and_strided_views(dtype):
    base = checks.random_rows(cp, 9, 1001, dtype=dtype, seed=5)
    views = (base[:, 1:], base[:, 3:-2], base[:, 7:], base[::2], base[1::3, 5:], base[:, ::2],
             base.T[:500].T, base[::-1], base[:, 1:2])
    for view in views:
        assert_log_softmax_close(log_softmax_checked(view, out=checks_fp16.poisoned_like(view)), view)
        if dtype == "float32":
            assert_lse_close(lse_checked(view), view)


@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_output_with_another_alignment_than_the_input(dtype):
    """y's rows start at other 16-byte phases than x's: the kernel must fall back to scalar stores."""
    x_base = checks.random_rows(cp, 5, 2051, dtype=dtype, seed=6)
    for x_view, shift in ((x_base[:, :2048], 1), (x_base[:, 1:2049], 0), (x_base[:, 3:2051], 2)):
        out_base = cp.empty((5, 2051), dtype=dtype)
        out = out_base[:, shift:shift + 2048]
        assert_log_softmax_close(log_softmax_checked(x_view, out=out), x_view)
    lse_base = cp.empty(6, cp.float32)
    x = x_base[:, :2048].astype(cp.float32)
    assert_lse_close(lse_checked(x, out=lse_base[1:]), x)  # a misaligned LSE output is fine (scalar writes)


def test_many_rows():
    x = checks.random_rows(cp, 100_003, 5, seed=12)
    assert_lse_close(lse_checked(x), x)
    assert_log_softmax_close(log_softmax_checked(x), x)


def test_gpu_kernels_match_their_models():
    """The models follow the kernels' schedule; told the GPU array's row phases, they agree to ~ulps."""
    for n_cols in (3, 1000, 4097):
        x = checks.random_rows(cp, 7, n_cols + 2, seed=n_cols)[:, 1:-1]  # misaligned rows
        phases = kl.row_phases(x)
        host = x.get()
        lse_gpu, lse_model = lse_checked(x).get(), kl.simulate_logsumexp(host, phases=phases)
        assert np.abs(lse_gpu - lse_model).max() <= 4 * EPS32 * max(1.0, np.abs(lse_model).max())
        y_gpu, y_model = log_softmax_checked(x).get(), kl.simulate_log_softmax(host, phases=phases)
        assert np.abs(y_gpu - y_model).max() <= 4 * EPS32 * max(1.0, np.abs(y_model).max())
        x16 = x.astype(cp.float16)
        y16_gpu = log_softmax_checked(x16).get().astype(np.float64)
        y16_model = kl.simulate_log_softmax(x16.get(), phases=kl.row_phases(x16)).astype(np.float64)
        ulp16 = np.spacing(np.abs(y16_model).astype(np.float16)).astype(np.float64)
        assert (np.abs(y16_gpu - y16_model) <= ulp16 + 1e-7).all()


def test_bad_gpu_input_then_a_healthy_context():
    with pytest.raises(TypeError):
        osm.logsumexp(cp.ones((2, 8), dtype=cp.float64))
    with pytest.raises(TypeError):
        osm.logsumexp(cp.ones((2, 8), dtype=cp.float16))
    with pytest.raises(TypeError):
        osm.log_softmax(cp.ones((2, 8), dtype=cp.int32))
    with pytest.raises(ValueError):
        osm.logsumexp(cp.ones((2, 3, 4), dtype=cp.float32))
    with pytest.raises(ValueError):
        osm.log_softmax(cp.ones((0, 4), dtype=cp.float32))
    with pytest.raises(ValueError):
        osm.logsumexp(cp.ones((2, 8), cp.float32), out=cp.empty((2, 8), cp.float32))
    with pytest.raises(ValueError):
        osm.api.run(LSE, cp.ones((2, 8), cp.float32), group=48)
    x = checks.random_rows(cp, 2, 8)
    assert_lse_close(lse_checked(x), x)
    assert_log_softmax_close(log_softmax_checked(x), x)


def test_compiled_resources_are_reported():
    for variant in (LSE, *LOG_SOFTMAX.values()):
        report = variant.resources()
        assert 0 < report.registers <= 64 and report.stack_bytes == 0, (variant.name, report)
