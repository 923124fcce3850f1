"""CPU tier for log_softmax_02_registers: its NumPy model against the float64 reference (every dtype,
the edge sizes up to 32K, special rows, views), its layout (lane groups, blocks, the scalar rows that
take blocks), its plan builder on fake kernels, and variant="auto"'s choice between it and
log_softmax_01_online."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels import dispatch
from onlinesoftmax.kernels.logsumexp import log_softmax_registers as lr
from onlinesoftmax.kernels.softmax.fast_configs import vector_width
from onlinesoftmax.registry import DTYPE_TAGS

from test_logsumexp import Addressed, install_fake_kernels, log_softmax_compare, rows

DTYPES = checks.DTYPES
VARIANT = osm.REGISTRY["log_softmax_02_registers"]
ONLINE = osm.REGISTRY["log_softmax_01_online"]
COLS = tuple(n for n in checks.EDGE_COLS if n <= VARIANT.max_cols) + (511, 512, 513, 1024, 1025, 32000, 32768)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", COLS)
def test_model_on_the_edge_sizes(dtype, n_cols):
    x = rows(3 if n_cols > 4097 else 7, n_cols, dtype, seed=n_cols + 5)
    y = osm.api.run(VARIANT, x)
    assert y.shape == x.shape and y.dtype == x.dtype
    passed, message = log_softmax_compare(y, x)
    assert passed, f"N={n_cols}: {message}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", (1, 2, 31, 257, 600, 4097))
def test_special_rows(dtype, n_cols):
    """All -inf -> NaN (as torch), NaN or +inf -> NaN, a -inf logit -> -inf, nothing else NaN."""
    x, nan_rows = checks.special_rows(np, n_cols, dtype)
    y = checks.as_float64(osm.api.run(VARIANT, x))
    x64 = checks.as_float64(x)
    assert (np.isnan(y).all(axis=1) == nan_rows).all()
    assert not np.isnan(y[~nan_rows]).any()
    assert (y[~nan_rows][np.isneginf(x64[~nan_rows])] == -np.inf).all()
    assert log_softmax_compare(osm.api.run(VARIANT, x), x)[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_and_vector_builds_agree_with_the_reference(dtype):
    """vec=1 (the scalar builds: misaligned rows, N % V != 0) changes the partition, not the answer."""
    x = rows(5, 1000, dtype, seed=3)
    for vec in (None, 1):
        assert log_softmax_compare(VARIANT.simulate(x, vec=vec), x)[0], vec
    a, b = (checks.as_float64(VARIANT.simulate(x, vec=v)) for v in (None, 1))
    assert np.abs(a - b).max() <= 4 * checks.EPS[dtype] * max(1.0, np.abs(a).max())


def test_the_model_can_fail():
    """A model that forgot log l, or took the wrong row's maximum, fails the comparison."""
    x = rows(4, 300, seed=8)
    y = VARIANT.simulate(x)
    assert log_softmax_compare(y, x)[0]
    assert not log_softmax_compare(y + np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)), x)[0]
    assert not log_softmax_compare(y[::-1].copy(), x)[0]


def test_layout():
    """Vector rows up to 1024 in lane groups, up to 32K in blocks; scalar rows past 512 in blocks."""
    assert lr.layout(256, "float32", 4) == ("g", 2, 32)
    assert lr.layout(1024, "float32", 4) == ("g", 8, 32)
    assert lr.layout(1025, "float32", 1)[0] == "t"
    assert lr.layout(512, "float16", 1) == ("g", 16, 32)
    assert lr.layout(513, "float16", 1) == ("t", 16, 128)
    assert lr.layout(32768, "float32", 4) == ("t", 8, 1024)
    assert lr.layout(32000, "bfloat16", 8) == ("t", 4, 1024)
    with pytest.raises(ValueError):
        lr.layout(40000, "float32", 4)
    entries = set(VARIANT.launched_entries)
    for n_cols in (1, 3, 100, 256, 512, 513, 1000, 1024, 4097, 32768):
        for dtype in DTYPES:
            for vec in (vector_width(dtype), 1):
                kind, nv, lanes = lr.layout(n_cols, dtype, vec)
                assert f"{VARIANT.name}_{DTYPE_TAGS[dtype]}_v{vec}_n{nv}_{kind}{lanes}" in entries


@pytest.fixture
def fake_kernels(monkeypatch):
    return install_fake_kernels(monkeypatch, lr)


def _aligned(shape, dtype):
    """A numpy array whose rows start on 16 bytes (the 16-byte builds' condition)."""
    itemsize = np.dtype(checks.np_dtype(dtype)).itemsize
    raw = np.zeros(int(np.prod(shape)) * itemsize + 16, np.uint8)
    start = (-raw.ctypes.data) % 16
    return raw[start:start + int(np.prod(shape)) * itemsize].view(checks.np_dtype(dtype)).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
def test_plan_builder(dtype, fake_kernels):
    """The entry follows dtype, vector width and layout; the grid and the fixed arguments follow the rows."""
    x, y = _aligned((16384, 256), dtype), _aligned((16384, 256), dtype)
    VARIANT.plan(VARIANT, x, y)(Addressed(x), Addressed(y))
    vec = 16 // x.itemsize
    kind, nv, lanes = lr.layout(256, dtype, vec)
    kernel = fake_kernels[-1]
    assert kernel.entry == f"log_softmax_02_registers_{DTYPE_TAGS[dtype]}_v{vec}_n{nv}_g{lanes}"
    grid, block, args = kernel.launches[0]
    assert block == (128,) and grid == (16384 // (128 // lanes),)
    assert args == (x.ctypes.data, y.ctypes.data, 16384, 256, 256, 256)
    x, y = _aligned((3, 32000), dtype), _aligned((3, 32000), dtype)
    VARIANT.plan(VARIANT, x, y)(Addressed(x), Addressed(y))
    grid, block, args = fake_kernels[-1].launches[0]
    assert fake_kernels[-1].entry.endswith("_t1024") and grid == (3,) and block == (1024,)
    assert args[2:] == (32000, 32000, 32000)
    VARIANT.plan(VARIANT, x[:, 1:], y[:, 1:])   # misaligned: the scalar build
    assert "_v1_" in fake_kernels[-1].entry
    with pytest.raises(TypeError):
        VARIANT.plan(VARIANT, x, np.zeros((3, 32000), np.float64))
    with pytest.raises(ValueError, match="32768"):
        VARIANT.plan(VARIANT, np.zeros((2, 40000), np.float32), np.zeros((2, 40000), np.float32))


def test_auto_chooses_by_length_and_gpu():
    assert dispatch.choose_log_softmax(16384, 256).variant is VARIANT
    assert dispatch.choose_log_softmax(1024, 32000, "float16").variant is VARIANT
    assert dispatch.choose_log_softmax(4, 32769).variant is ONLINE
    for cc in (80, 89, 90, 100, 120):
        assert dispatch.choose_log_softmax(8, 1000, cc=cc).variant.min_cc <= cc
    assert dispatch.choose_log_softmax(8, 1000, cc=75).variant is ONLINE


def test_public_function_runs_it_and_matches_scipy():
    special = pytest.importorskip("scipy.special")
    x = rows(6, 700, seed=11)
    assert np.abs(osm.log_softmax(x) - special.log_softmax(x.astype(np.float64), axis=-1)).max() < 1e-5
    x3 = rows(2 * 3 * 50, 40, seed=12).reshape(2, 3, 50, 40)
    y = osm.log_softmax(x3, axis=2)
    assert y.shape == x3.shape
    assert np.abs(y - special.log_softmax(x3.astype(np.float64), axis=2)).max() < 1e-5
    assert np.array_equal(osm.log_softmax(x), osm.log_softmax(x, variant="registers"))
    assert np.allclose(reference.log_softmax(x.astype(np.float64)), osm.log_softmax(x, variant="online"), atol=1e-5)
