"""GPU tier for the backward kernels (softmax_backward_01_rows, log_softmax_backward_01_rows), float32,
float16 and bfloat16: edge sizes, every lane-group size, rows off 16 bytes and strided, extreme rows,
poisoned outputs, the NumPy models, and torch's own backward as the same-dtype baseline.

Each launch goes through the plan the public functions use (get_runner) into a poisoned dx, and is
judged against the float64 gradient of the same y and dy (gradient_checks.compare_backward); beside
it, torch._softmax_backward_data in the same dtype must not be more than twice as accurate.
"""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.gradient_checks import compare_backward
from onlinesoftmax.kernels.softmax import backward as kb
from onlinesoftmax.runtime.plan import get_runner

pytestmark = pytest.mark.gpu

FUNCTIONS = ("softmax_backward", "log_softmax_backward")
DTYPES = checks.DTYPES
SIZES = (1, 2, 3, 31, 33, 127, 1000, 1024, 4097, 16384, 65537, 262144)


def pair(function, n_rows, n_cols, dtype, seed=0, scale=3.0):
    rng = cp.random.default_rng(seed)
    x = rng.standard_normal((n_rows, n_cols), dtype=cp.float32) * scale
    y = osm.softmax(x) if function == "softmax_backward" else osm.log_softmax(x)
    dy = rng.standard_normal((n_rows, n_cols), dtype=cp.float32)
    return checks.from_float32(y, dtype), checks.from_float32(dy, dtype)


def launch(function, y, dy, group=None):
    variant = osm.REGISTRY[f"{function}_01_rows"]
    dx = checks.poisoned_like(y)
    options = {"dy": dy} if group is None else {"dy": dy, "group": group}
    get_runner(variant, y, dx, options)(y, dx, **options)
    cp.cuda.Device().synchronize()
    return dx


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", SIZES)
def test_edge_sizes_meet_the_float64_gradient(function, dtype, n_cols):
    n_rows = 3 if n_cols > 60000 else 37
    y, dy = pair(function, n_rows, n_cols, dtype, seed=n_cols)
    dx = launch(function, y, dy)
    assert checks.unwritten(dx) == 0
    passed, message = compare_backward(dx, y, dy, function)
    assert passed, message


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group", (1, 2, 4, 32, 64, 256, 1024))
def test_every_group_size_and_its_model(function, dtype, group):
    y, dy = pair(function, 9, 3001, dtype, seed=group)
    dx = launch(function, y, dy, group)
    if group >= 32:   # a lane or two per row of 3001 sums in a worse order than the plan ever picks
        assert compare_backward(dx, y, dy, function)[0]
    model = osm.REGISTRY[f"{function}_01_rows"].simulate(cp.asnumpy(y.view(cp.uint16)).view(y.dtype) if dtype != "float32"
                                                         else cp.asnumpy(y), cp.asnumpy(dy.view(cp.uint16)).view(dy.dtype)
                                                         if dtype != "float32" else cp.asnumpy(dy), group=group)
    got, want = checks.as_float64(dx).get(), checks.as_float64(model)
    if function == "softmax_backward":
        np.testing.assert_array_equal(got, want)
    else:   # expf on the GPU and NumPy's exp may part by an ulp of e^y s
        terms = np.abs(checks.as_float64(dy).get()) + np.abs(want)
        assert (np.abs(got - want) <= 2 * checks.EPS[dtype] * terms).all()


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_views_off_16_bytes_strided_and_along_another_axis(function, dtype):
    y, dy = pair(function, 8, 4099, dtype, seed=4)
    for ys, dys in ((y[:, 1:], dy[:, 1:]), (y[::2, 3:], dy[1::2, 3:]), (y[:, :4096], dy[:, :4096])):
        dx = osm.REGISTRY[f"{function}_01_rows"]
        got = getattr(osm, function)(ys, dys)
        assert compare_backward(got, ys, dys, function)[0], (dx.name, ys.shape, ys.strides)
    public = getattr(osm, function)
    moved = public(cp.ascontiguousarray(y.T), cp.ascontiguousarray(dy.T), axis=0)
    assert cp.array_equal(moved.T.view(cp.uint8) if dtype == "float32" else moved.T.view(cp.uint16),
                          public(y, dy).view(cp.uint8) if dtype == "float32" else public(y, dy).view(cp.uint16))


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_extreme_rows(function, dtype):
    """Peaked rows (one-hot y, probabilities that underflow to 0, log y = -inf), dy at the dtype's large
    and tiny magnitudes, a NaN in dy (its row only must be NaN), one element."""
    n_cols = 3000
    big = {"float32": 1e30, "float16": 2000.0, "bfloat16": 1e30}[dtype]   # dx stays finite in the dtype
    x = cp.zeros((6, n_cols), cp.float32)
    x[0, 17] = 1e4                                   # one-hot: y = e_17 exactly, the rest 0 (log y = -inf)
    x[1] = cp.linspace(-200, 0, n_cols, dtype=cp.float32)
    x[2:] = cp.random.default_rng(1).standard_normal((4, n_cols), dtype=cp.float32)
    y = osm.softmax(x) if function == "softmax_backward" else osm.log_softmax(x)
    dy = cp.random.default_rng(2).standard_normal((6, n_cols), dtype=cp.float32)
    dy[2] *= big
    dy[3] *= 1e-30 if dtype != "float16" else 1e-4
    dy[4, 5] = cp.nan
    y, dy = checks.from_float32(y, dtype), checks.from_float32(dy, dtype)
    dx = launch(function, y, dy)
    assert checks.unwritten(dx) == 0
    assert bool(cp.isnan(checks.as_float64(dx)[4]).all()), "a NaN in dy makes its row NaN"
    keep = np.array([0, 1, 2, 3, 5])
    passed, message = compare_backward(dx[keep], y[keep], dy[keep], function)
    assert passed, message
    one = launch(function, y[:1, :1], dy[:1, :1])
    assert compare_backward(one, y[:1, :1], dy[:1, :1], function)[0]


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_as_accurate_as_torch_in_the_same_dtype(function, dtype):
    import torch

    from onlinesoftmax.measure.bench import torch_view

    y, dy = pair(function, 64, 32768, dtype, seed=9)
    ours = checks.as_float64(getattr(osm, function)(y, dy))
    theirs_fn = torch._softmax_backward_data if function == "softmax_backward" else torch._log_softmax_backward_data
    ty = torch_view(y)
    theirs = theirs_fn(torch_view(dy), ty, -1, ty.dtype)
    theirs = checks.as_float64(cp.from_dlpack(theirs.view(torch.int16)).view(y.dtype) if dtype == "bfloat16"
                               else cp.from_dlpack(theirs))
    from onlinesoftmax import exact
    ref = exact.backward(function, checks.as_float64(y), checks.as_float64(dy), -1)
    scale = float(cp.abs(ref).max())
    ours_err, torch_err = float(cp.abs(ours - ref).max()), float(cp.abs(theirs - ref).max())
    assert ours_err <= 2 * torch_err + 2 * checks.EPS[dtype] * scale, (ours_err, torch_err)


def test_vectors_are_chosen_from_every_address():
    y, dy = pair("softmax_backward", 4, 64, "float32")
    dx = cp.empty_like(y)
    assert kb.vectors_fit(y, dy, dx)
    assert not kb.vectors_fit(y[:, 1:], dy[:, 1:], dx[:, 1:])
    assert not kb.vectors_fit(y, dy, cp.empty((4, 65), cp.float32)[:, :64])
