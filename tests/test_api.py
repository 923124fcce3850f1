"""CPU tier: the public API on numpy input (the kernels' NumPy models): its conventions (axis, any number
of dimensions, dtypes) against scipy, its errors, `out`, and the launch-plan cache behind it."""
import builtins
import contextlib
import os
import pathlib

import numpy as np
import pytest
import scipy.special

import onlinesoftmax as osm
from onlinesoftmax import api, checks, inputs, reference
from onlinesoftmax.kernels import dispatch
from onlinesoftmax.runtime import device, loader, plan

ml_dtypes = pytest.importorskip("ml_dtypes")
SHAPES_AXES = [((7,), 0), ((7,), -1), ((3, 50), -1), ((3, 50), 0), ((2, 3, 33), -1), ((2, 3, 33), 1),
               ((2, 3, 33), 0), ((2, 2, 5, 300), -1), ((2, 2, 5, 300), 2), ((1, 1, 1), -1)]


def _tolerance(dtype):
    return {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize(("shape", "axis"), SHAPES_AXES)
def test_softmax_and_log_softmax_follow_scipy(shape, axis, dtype):
    x32 = np.random.default_rng(len(shape) + axis).standard_normal(shape).astype(np.float32) * 4
    x = checks.to_dtype(x32, dtype)
    exact = np.asarray(x, dtype=np.float64)
    y = osm.softmax(x, axis=axis)
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_allclose(y.astype(np.float64), scipy.special.softmax(exact, axis=axis),
                               rtol=_tolerance(dtype), atol=_tolerance(dtype) * 1e-3)
    z = osm.log_softmax(x, axis=axis)
    assert z.shape == x.shape and z.dtype == x.dtype
    np.testing.assert_allclose(z.astype(np.float64), scipy.special.log_softmax(exact, axis=axis),
                               rtol=_tolerance(dtype), atol=_tolerance(dtype) * 8)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize(("shape", "axis"), SHAPES_AXES)
def test_logsumexp_follows_scipy_and_is_float32(shape, axis, dtype):
    x = checks.to_dtype(np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 4 + 10, dtype)
    lse = osm.logsumexp(x, axis=axis)
    expected = scipy.special.logsumexp(np.asarray(x, dtype=np.float64), axis=axis)
    assert lse.dtype == np.float32 and lse.shape == expected.shape
    np.testing.assert_allclose(lse, expected, rtol=2e-6, atol=2e-6)


def test_a_score_tensor_is_rows_of_its_last_axis():
    """(batch, heads, q, k): the same numbers as the 2-D (batch * heads * q, k) call, no copy needed."""
    x = checks.random_rows(np, 2 * 4 * 16, 100, seed=5).reshape(2, 4, 16, 100)
    np.testing.assert_array_equal(osm.softmax(x), osm.softmax(x.reshape(-1, 100)).reshape(x.shape))
    rows, is_view = api.as_rows(x, 3)
    assert is_view and rows.shape == (128, 100) and np.shares_memory(rows, x)
    moved, is_view = api.as_rows(x, 1)
    assert not is_view and moved.shape == (2 * 16 * 100, 4)


@pytest.mark.parametrize("bad, error, words", [
    (np.float32(3.0), TypeError, "numpy or cupy array"),
    (np.ones((), np.float32), ValueError, "0-d"),
    (np.ones((2, 4), np.int32), TypeError, "takes float32, float16, bfloat16 or float64, got int32"),
    (np.ones((2, 4), bool), TypeError, "got bool"),
    ([[1.0, 2.0]], TypeError, "got a list"),
    (3.0, TypeError, "got a float"),
])
@pytest.mark.parametrize("function", (osm.softmax, osm.log_softmax, osm.logsumexp))
def test_bad_input_is_a_clear_error(function, bad, error, words):
    with pytest.raises(error, match=words):
        function(bad)


@pytest.mark.parametrize("function", ("softmax", "log_softmax", "logsumexp"))
def test_float64_and_empty_arrays_are_computed_as_torch_and_scipy_compute_them(function):
    """float64: exactly (the float64 reference), float64 out; empty: an empty result, and the
    log-sum-exp of an empty axis is -inf (scipy.special.logsumexp and torch.logsumexp agree)."""
    public, theirs = getattr(osm, function), getattr(scipy.special, function)
    x = np.random.default_rng(7).standard_normal((3, 5, 9)) * 30
    for axis in (0, 1, -1):
        y = public(x, axis)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, theirs(x, axis=axis), rtol=1e-13, atol=1e-300)
    for shape, axis in (((0, 4), -1), ((4, 0), -1), ((4, 0), 0), ((2, 0, 3), 1)):
        empty = np.ones(shape, np.float32)
        got = public(empty, axis)
        if function == "logsumexp":
            with np.errstate(divide="ignore"):
                want = theirs(empty.astype(np.float64), axis=axis)
        else:   # scipy's softmax of an empty array raises; torch's gives an empty tensor
            want = empty
        assert got.shape == want.shape, (shape, axis)
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    with pytest.raises(TypeError, match="variant 'online' takes float32, float16 and bfloat16, got float64"):
        public(x, variant="online")
    with pytest.raises(ValueError, match=r"variant 'online' launches a kernel, which needs at least one element, "
                                         r"got shape \(0, 4\)"):
        public(np.ones((0, 4), np.float32), variant="online")


def test_logsumexp_keepdims_as_numpy():
    x = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)
    for axis in (0, 1, 2, -1):
        kept = osm.logsumexp(x, axis, keepdims=True)
        np.testing.assert_allclose(kept, scipy.special.logsumexp(x.astype(np.float64), axis=axis, keepdims=True),
                                   rtol=1e-6)
        np.testing.assert_array_equal(kept.squeeze(axis), osm.logsumexp(x, axis))
    with pytest.raises(TypeError, match="keepdims must be True or False, got 'yes'"):
        osm.logsumexp(x, keepdims="yes")


def test_errors_name_what_the_reader_passed():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="unknown variant 'fastest-ever'; known: 'auto'"):
        osm.softmax(x, variant="fastest-ever")
    with pytest.raises(TypeError, match=r"variant='online'"):
        osm.softmax(x, "online")                       # the second positional argument is the axis
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        osm.softmax(x, axis=2)
    with pytest.raises(TypeError, match="variant 'online' takes float32, got float16"):
        osm.softmax(x.astype(np.float16), variant="online")
    with pytest.raises(ValueError, match="out must be a ndarray of shape \\(2, 4\\)"):
        osm.softmax(x, out=np.empty((2, 5), np.float32))
    with pytest.raises(ValueError, match="out must be a ndarray of shape \\(2,\\) and dtype float32"):
        osm.logsumexp(x.astype(np.float16), out=np.empty(2, np.float16))
    for function in (osm.softmax, osm.log_softmax, osm.logsumexp):
        with pytest.raises(ValueError) as caught:
            function(x, variant="softmax_99")
        assert "softmax_99" in str(caught.value)


def test_same_dtype_back_and_out_is_filled():
    for dtype in checks.DTYPES:
        x = checks.random_rows(np, 4, 33, dtype)
        out = checks.poisoned_like(x)
        y = osm.softmax(x, out=out)
        assert y is out and y.dtype == x.dtype and checks.unwritten(y) == 0
    lse_out = np.full(4, np.nan, np.float32)
    assert osm.logsumexp(checks.random_rows(np, 4, 33, "bfloat16"), out=lse_out) is lse_out
    assert np.isfinite(lse_out).all()


def test_non_contiguous_views_give_the_same_answer():
    base = checks.random_rows(np, 6, 101, seed=4)
    for view in (base[:, 1:], base[::2], base[:, ::2], base.T):
        passed, message = checks.compare(osm.softmax(view), reference.softmax(view),
                                         reference.softmax_same_dtype(view), np.float32)
        assert passed, message


def test_out_that_would_give_a_wrong_answer_is_rejected():
    x = checks.random_rows(np, 4, 16)
    with pytest.raises(ValueError, match="overlaps x"):
        osm.softmax(x, out=x)
    big = np.empty((4, 32), np.float32)
    with pytest.raises(ValueError, match="overlaps x"):
        osm.softmax(big[:, :16], out=big[:, 8:24])
    shared_rows = np.lib.stride_tricks.as_strided(np.empty(16, np.float32), shape=(4, 16), strides=(0, 4))
    with pytest.raises(ValueError, match="rows overlap"):
        osm.softmax(x, out=shared_rows)
    good = np.empty((4, 40), np.float32)[:, 3:19]  # strided rows, unaligned start: fine
    assert osm.softmax(x, out=good) is good and checks.unwritten(good) == 0


def test_n_cols_beyond_the_int32_index_range_is_refused_before_any_copy():
    from onlinesoftmax.registry import MAX_COLS

    too_long = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(1, MAX_COLS + 1), strides=(0, 0))
    with pytest.raises(ValueError, match="at most"):
        osm.softmax(too_long)


def test_mask_value_needs_a_mask_and_a_number():
    x = checks.random_rows(np, 2, 8)
    with pytest.raises(ValueError, match="only applies"):
        osm.softmax(x, mask_value=-1e6)
    with pytest.raises(TypeError, match="must be a number"):
        osm.softmax(x, causal=True, mask_value="a")
    assert np.isfinite(osm.softmax(x, causal=True, mask_value=-1e6)).all()
    with pytest.raises(ValueError, match="along the last axis"):
        osm.softmax(np.ones((2, 2, 8), np.float32), axis=1, causal=True)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_masks_on_a_score_tensor_follow_its_query_axis(dtype):
    """(batch, heads, q, k) with causal=True, a (q, k) additive mask and per-row lengths: each (q, k)
    matrix is masked as torch masks it, checked against the float64 softmax of explicitly masked logits."""
    rng = np.random.default_rng(7)
    b, h, q, k = 2, 3, 5, 7
    x = checks.to_dtype(rng.standard_normal((b, h, q, k)).astype(np.float32) * 3, dtype)
    x64 = np.asarray(x, dtype=np.float64)
    tril = np.tril(np.ones((q, k), bool), k=k - q)   # bottom-right: the last query sees every key
    additive = np.where(rng.random((q, k)) < 0.7, 0.0, -np.inf).astype(np.float32)
    additive[:, 0] = 0.0
    lengths = rng.integers(1, k + 1, size=(b, h, q))
    cases = [({"causal": True}, np.where(tril, x64, -np.inf)),
             ({"mask": additive}, x64 + additive),
             ({"valid_lengths": lengths}, np.where(np.arange(k) < lengths[..., None], x64, -np.inf))]
    for kwargs, logits in cases:
        y = osm.softmax(x, **kwargs)
        assert y.shape == x.shape and y.dtype == x.dtype
        np.testing.assert_allclose(y.astype(np.float64), scipy.special.softmax(logits, axis=-1),
                                   rtol=_tolerance(dtype), atol=_tolerance(dtype) * 1e-2, err_msg=str(list(kwargs)))


def test_auto_on_numpy_runs_the_chosen_kernels_model():
    for dtype in checks.DTYPES:
        for n_rows, n_cols in ((4, 100), (4, 5000), (2, 70000)):
            x = checks.random_rows(np, n_rows, n_cols, dtype, seed=1)
            chosen = dispatch.choose(n_rows, n_cols, dtype).variant.name
            np.testing.assert_array_equal(osm.softmax(x), osm.softmax(x, variant=chosen))
    assert osm.VARIANTS[0] == "auto"


@pytest.mark.parametrize("cc", (75, 80, 86, 89, 90, 100, 120))
def test_auto_never_picks_a_kernel_the_device_cannot_run(cc):
    shapes = [(r, n) for r in (1, 7, 64, 131, 132, 1024, 4000) for n in (1, 1000, 4096, 9999, 32000, 50257, 65536,
                                                                           151936, 262144, 1 << 20)]
    with device.simulate_device(compute_capability=cc, sm_count=108 if cc == 80 else 132):
        chosen = {dispatch.choose(r, n, dtype).variant for r, n in shapes for dtype in checks.DTYPES}
    assert all(v.min_cc <= cc for v in chosen), [(v.name, v.min_cc) for v in chosen]
    if cc < 90:
        assert not {"softmax_10_cluster", "softmax_12_pipelined"} & {v.name for v in chosen}
    else:
        assert "softmax_10_cluster" in {v.name for v in chosen}


def test_a_named_kernel_the_device_cannot_run_is_refused(monkeypatch):
    monkeypatch.setattr(device, "has_gpu", lambda: True)
    x = np.ones((2, 4), np.float32)
    rows, _ = api.as_rows(x, 1)
    with device.simulate_device(compute_capability=80):
        with pytest.raises(RuntimeError, match="needs compute capability 9.0"):
            api.check_variant_accepts(osm.REGISTRY["softmax_10_cluster"], rows, "cluster", "softmax", on_gpu=True)
        api.check_variant_accepts(osm.REGISTRY["softmax_11_split"], rows, "split", "softmax", on_gpu=True)


class FakeKernel:
    def __init__(self, launches):
        self.launches = launches

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append(grid)


def test_a_repeated_call_reads_no_file_and_asks_the_device_nothing(monkeypatch):
    """The second call of a plan must not stat or open a file, query the device or import: patch
    the file system and the device queries to raise once the plan exists, and call again."""
    launches = []
    variant = osm.REGISTRY["softmax_02_online"]
    monkeypatch.setattr(type(variant), "kernel", lambda self: FakeKernel(launches))
    x = np.zeros((3, 10), np.float32)
    y = np.empty_like(x)
    fake = type("Array", (), {})   # stands in for a cupy array: layout and address only
    xs, ys = fake(), fake()
    for a, b in ((xs, x), (ys, y)):
        a.shape, a.strides, a.dtype, a.itemsize, a.device = b.shape, b.strides, b.dtype, b.itemsize, \
            type("D", (), {"id": 0})()
        a.data = type("M", (), {"ptr": 4096})()
    monkeypatch.setattr(plan.cupy.cuda, "get_current_stream", lambda: type("Stream", (), {"ptr": 0})())
    plan.get_runner(variant, xs, ys, {})(xs, ys)
    assert plan.cached_runners() >= 1 and len(launches) == 1

    with hot_path_forbids_io():
        plan.get_runner(variant, xs, ys, {})(xs, ys)
    assert len(launches) == 2


def test_reload_forgets_kernels_and_plans(monkeypatch):
    built = []
    monkeypatch.setattr(loader, "load_module", lambda path, defines=(): type(
        "Module", (), {"get_function": lambda self, entry: built.append(entry) or entry})())
    loader.reload()
    assert loader.get_kernel("softmax/softmax_02_online.cu", "softmax_02_online") == "softmax_02_online"
    loader.get_kernel("softmax/softmax_02_online.cu", "softmax_02_online")
    assert built == ["softmax_02_online"], "a second lookup must not build again"
    plan._runners["sentinel"] = object()
    osm.reload()
    assert "sentinel" not in plan._runners
    loader.get_kernel("softmax/softmax_02_online.cu", "softmax_02_online")
    assert built == ["softmax_02_online"] * 2, "after reload() the kernel is built again"
    loader.reload()


@contextlib.contextmanager
def hot_path_forbids_io():
    """Inside: any file-system access, import or device query raises (what a repeated call must not do)."""
    def forbidden(*args, **kwargs):
        raise AssertionError("the hot path touched the file system, the device or an import")
    saved = (os.stat, pathlib.Path.stat, builtins.open, builtins.__import__, device.compute_capability,
             device.sm_count)
    os.stat = pathlib.Path.stat = builtins.open = builtins.__import__ = forbidden
    device.compute_capability = device.sm_count = forbidden
    try:
        yield
    finally:
        (os.stat, pathlib.Path.stat, builtins.open, builtins.__import__, device.compute_capability,
         device.sm_count) = saved


class FakeDeviceArray:
    """A numpy array dressed as a cupy one, for the API's cupy path without a GPU."""

    def __init__(self, array):
        self.array = array
        self.data = type("Pointer", (), {"ptr": array.__array_interface__["data"][0], "device_id": 0})()
        self.device = type("Device", (), {"id": 0})()

    def __getattr__(self, name):            # shape, strides, dtype, ndim, flags, itemsize, size
        return getattr(self.array, name)

    def reshape(self, *shape):
        return FakeDeviceArray(self.array.reshape(*shape))


@pytest.fixture
def fake_gpu(monkeypatch):
    """The API's cupy path without a GPU: FakeDeviceArray for cupy arrays, runners that record the
    kernel they would launch, and a record of the calls that took the slow path (_call)."""
    launches, slow_calls = [], []
    fake_cupy = type("FakeCupy", (), {
        "empty": staticmethod(lambda shape, dtype=None: FakeDeviceArray(np.empty(shape, dtype))),
        "ndarray": staticmethod(lambda shape, dtype=None: FakeDeviceArray(np.empty(shape, dtype))),
        "ascontiguousarray": staticmethod(lambda a: a),
        "may_share_memory": staticmethod(lambda a, b: np.may_share_memory(a.array, b.array))})
    monkeypatch.setattr(api, "CUPY_ARRAY", FakeDeviceArray)
    monkeypatch.setattr(api, "_cupy", fake_cupy)
    monkeypatch.setattr(api, "new_cupy_array", fake_cupy.ndarray)
    monkeypatch.setattr(api, "current_device", lambda: 0)
    monkeypatch.setattr(inputs, "_cupy", fake_cupy)
    monkeypatch.setattr(inputs, "current_device", lambda: 0)
    monkeypatch.setattr(api, "current_stream", lambda: type("Stream", (), {"ptr": 0})())
    monkeypatch.setattr(device, "is_cupy_array", lambda a: isinstance(a, FakeDeviceArray))
    monkeypatch.setattr(api, "get_runner", lambda variant, x, y, options: lambda x, y, **o: launches.append(variant.name))
    real_call = api._call
    monkeypatch.setattr(api, "_call", lambda *args: slow_calls.append(args[0]) or real_call(*args))
    api._fast_path.clear()
    yield launches, slow_calls
    api._fast_path.clear()


FAST_CALLS = {
    "softmax auto axis=-1": lambda x, out: osm.softmax(x),
    "softmax auto axis=1": lambda x, out: osm.softmax(x, axis=1),
    "softmax by name": lambda x, out: osm.softmax(x, variant="softmax_08_registers"),
    "softmax by short name": lambda x, out: osm.softmax(x, variant="warp_per_row"),
    "softmax out=": lambda x, out: osm.softmax(x, out=out),
    "softmax causal top-left": lambda x, out: osm.softmax(x, causal=True, causal_align="top_left"),
    "softmax causal top-left, mask_value=-1e6": lambda x, out: osm.softmax(x, causal=True, causal_align="top_left",
                                                                           mask_value=-1e6),
    "log_softmax": lambda x, out: osm.log_softmax(x),
    "log_softmax out=": lambda x, out: osm.log_softmax(x, out=out),
    "logsumexp": lambda x, out: osm.logsumexp(x),
    "logsumexp by name": lambda x, out: osm.logsumexp(x, variant="logsumexp_01_online"),
}


@pytest.mark.parametrize("call", FAST_CALLS)
def test_a_repeated_call_takes_the_fast_path(fake_gpu, call):
    """The second call with the same layout and arguments is one lookup and one launch: the slow path
    (_call) must not run again, whatever way the caller wrote the axis, the variant (auto, a name),
    out= or a causal mask (a stored key under the normalized axis once made every axis=-1 call
    miss: 25-40 us per call on the H200). The additive-mask and lengths forms need real cupy
    arrays: tests/gpu/test_masked_gpu.py checks them. (A bottom-right causal mask on a matrix that is
    not square runs as per-row lengths made at each call: the slow path, onlinesoftmax/masks.py.)"""
    launches, slow_calls = fake_gpu
    x = FakeDeviceArray(np.zeros((3, 50), np.float32))
    out_shape = (3,) if call.startswith("logsumexp") else (3, 50)
    out = FakeDeviceArray(np.zeros(out_shape, np.float32))
    for _ in range(3):
        y = FAST_CALLS[call](x, out)
        assert y.shape == out_shape
        assert (y is out) == ("out=" in call)
    assert slow_calls == [call.split()[0]], "only the first call may take the slow path"
    assert len(launches) == 3 and len(set(launches)) == 1


def test_the_fast_path_keeps_the_checks_that_depend_on_addresses(fake_gpu):
    """A key holds layouts, not addresses: an out= that overlaps x at the next call, or a call on
    another GPU, goes back to the slow path, which refuses or handles it."""
    launches, slow_calls = fake_gpu
    both = FakeDeviceArray(np.zeros((2, 4, 48), np.float32))   # x and out: the same layout, 16-byte phase
    x, out = FakeDeviceArray(both.array[0]), FakeDeviceArray(both.array[1])
    osm.softmax(x, out=out)
    osm.softmax(x, out=out)
    assert slow_calls == ["softmax"]
    assert api._call_key("softmax", x, -1, "auto", out) == api._call_key("softmax", x, -1, "auto", x)
    with pytest.raises(ValueError, match="overlaps"):
        osm.softmax(x, out=x)
    assert slow_calls == ["softmax"] * 2
    api.current_device = inputs.current_device = lambda: 1   # restored by the fixture's monkeypatch
    with pytest.raises(ValueError, match="GPU 0"):
        osm.softmax(x)


@pytest.mark.parametrize("function", ["softmax", "log_softmax", "logsumexp"])
def test_a_plain_repeated_call_launches_the_plans_pointer_launch(fake_gpu, monkeypatch, function):
    """f(x) with every other argument at its default: a repeated call goes straight to the plan's
    launch of x's and y's addresses (runner.pointers, plan.two_pointer_runner), without the runner's
    call, and touches no file, device query or import; a plan without `pointers` (two launches)
    and a masked call keep calling the runner."""
    from onlinesoftmax.runtime import plan

    launched, ran = [], []

    def build_pointer_runner(variant, x, y, options):
        runner = plan.two_pointer_runner(lambda x_ptr, y_ptr: launched.append((x_ptr, y_ptr)))
        if options:   # a masked plan: the runner takes the mask on every call
            return lambda x, y, **o: ran.append(variant.name)
        return runner

    monkeypatch.setattr(api, "get_runner", build_pointer_runner)
    call = getattr(osm, function)
    x = FakeDeviceArray(np.zeros((3, 64), np.float32))
    call(x)
    real_key = api._call_key
    monkeypatch.setattr(api, "_call_key", lambda *a, **k: pytest.fail("a plain call built the full key"))
    with hot_path_forbids_io():
        for _ in range(3):
            y = call(x)   # _plain's written-out key must be _call_key's short key, or this misses
    monkeypatch.setattr(api, "_call_key", real_key)
    _, slow_calls = fake_gpu
    assert slow_calls == [function]
    assert len(launched) == 4 and {p[0] for p in launched} == {x.data.ptr}
    assert y.data.ptr == launched[-1][1]
    assert ran == []
    if function == "softmax":   # a masked call has no pointer launch: its runner runs every time
        osm.softmax(x, causal=True)
        osm.softmax(x, causal=True)
        assert len(ran) == 2 and len(launched) == 4
