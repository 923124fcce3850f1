"""CPU tier: the gradients of softmax and log-softmax (softmax_backward_01_rows, log_softmax_backward_01_rows).

The kernels' CUDA source runs on the CPU emulator and must agree with their NumPy models to the bit
(same order of summation), on both paths (16-byte vectors and element by element), groups of one
warp and of several, all three dtypes; the models are held to the float64 gradient with the book's
rule (gradient_checks.compare_backward), and the rule rejects the wrong answers kept below. The
public functions: axis, float64, empty, errors.
"""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.gradient_checks import compare_backward
from onlinesoftmax.kernels.softmax import backward as kb
from onlinesoftmax.registry import REGISTRY
from onlinesoftmax.runtime import emulator

FUNCTIONS = ("softmax_backward", "log_softmax_backward")
DTYPES = ("float32", "float16", "bfloat16")


def pair(function: str, n_rows: int, n_cols: int, dtype: str, seed: int):
    """A forward output y (softmax or log-softmax of random logits) and an upstream gradient dy."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, n_cols)) * 3
    y64 = osm.reference.softmax(x) if function == "softmax_backward" else osm.reference.log_softmax(x)
    dy = rng.standard_normal((n_rows, n_cols))
    return checks.to_dtype(y64.astype(np.float32), dtype), checks.to_dtype(dy.astype(np.float32), dtype)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", (1, 7, 64, 1000, 4099, 40000))
def test_the_models_meet_the_float64_gradient(function, dtype, n_cols):
    y, dy = pair(function, 5, n_cols, dtype, seed=n_cols)
    dx = REGISTRY[f"{function}_01_rows"].simulate(y, dy)
    assert dx.dtype == y.dtype and dx.shape == y.shape
    passed, message = compare_backward(dx, y, dy, function)
    assert passed, message


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_rule_rejects_wrong_gradients(function, dtype):
    """Each wrong answer a kernel could give must fail the check that passes the right one."""
    y, dy = pair(function, 4, 3000, dtype, seed=3)
    y32, dy32 = y.astype(np.float32), dy.astype(np.float32)
    right = REGISTRY[f"{function}_01_rows"].simulate(y, dy)
    assert compare_backward(right, y, dy, function)[0]
    wrong = {
        "all zero": np.zeros_like(y32),
        "no sum term": y32 * dy32 if function == "softmax_backward" else dy32,
        "sign flipped": -right.astype(np.float32),
        "sum of the wrong row": kb.simulate_softmax_backward(y, np.roll(dy, 1, axis=0)).astype(np.float32)
        if function == "softmax_backward" else kb.simulate_log_softmax_backward(y, np.roll(dy, 1, axis=0)).astype(np.float32),
        "the largest element taken from its neighbour": np.where(
            np.arange(3000) == np.abs(right.astype(np.float32)).argmax(axis=1, keepdims=True),
            np.roll(right.astype(np.float32), -1, axis=1), right.astype(np.float32)),
        "an unexpected NaN": np.where(np.arange(3000) == 7, np.nan, right.astype(np.float32)),
    }
    for name, dx in wrong.items():
        assert not compare_backward(checks.to_dtype(dx, dtype), y, dy, function)[0], f"{name} passed"


@pytest.fixture(scope="module", params=FUNCTIONS)
def emulated(request):
    variant = REGISTRY[f"{request.param}_01_rows"]
    with emulator.uninstrumented():
        module = emulator.Module(variant.path, list(variant.launched_entries))
    return variant, module


@pytest.mark.skipif(not emulator.available(), reason="the CPU emulator needs g++")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols,group,vectors", [(8, 4, "host"), (37, 8, "host"), (320, 32, "host"), (320, 32, 0),
                                                   (1029, 64, "host"), (1029, 128, "host"), (4104, 256, "host"),
                                                   (4096, 1024, "host"), (8192, 32, "host")])
def test_the_kernel_source_matches_its_model_to_the_bit(emulated, dtype, n_cols, group, vectors):
    """vectors "host": as the plan decides from the addresses (16-byte vectors where every row is aligned)."""
    variant, module = emulated
    function = variant.family
    y, dy = pair(function, 6, n_cols, dtype, seed=n_cols + group)
    dx = checks.poisoned_like(y)
    vectors = int(kb.vectors_fit(y, dy, dx)) if vectors == "host" else vectors
    launch = kb.launch_for(6, group)
    words = (lambda a: a.view(np.uint16)) if dtype != "float32" else (lambda a: a)
    module.launch(variant.dtype_entry(dtype), launch.grid, launch.block,
                  (words(y), words(dy), words(dx), np.int32(6), np.int32(n_cols), np.int64(n_cols),
                   np.int64(n_cols), np.int64(n_cols), np.int32(group), np.int32(vectors)))
    assert checks.unwritten(dx) == 0
    model = variant.simulate(y, dy, group=group, vectors=bool(vectors))
    if function == "softmax_backward":   # the same operations in the same order: the same bits
        assert np.array_equal(dx.view(np.uint8), model.view(np.uint8)), f"{variant.name} {dtype}: kernel and model part"
    else:   # e^y: the C library's expf and NumPy's float32 exp may part by an ulp of e^y s = dy - dx
        apart = np.abs(checks.as_float64(dx) - checks.as_float64(model))
        terms = np.abs(checks.as_float64(dy)) + np.abs(checks.as_float64(model))
        assert (apart <= 2 * checks.EPS[dtype] * terms).all(), f"{variant.name} {dtype}: kernel and model part"
    assert compare_backward(dx, y, dy, function)[0]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_the_public_functions_take_any_axis_float64_and_empty(function):
    public = getattr(osm, function)
    y, dy = pair(function, 6, 40, "float32", seed=1)
    moved = public(np.ascontiguousarray(y.T), np.ascontiguousarray(dy.T), axis=0)
    np.testing.assert_array_equal(moved.T, public(y, dy))
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    exact = public(y64, dy64)
    assert exact.dtype == np.float64
    assert compare_backward(exact, y64, dy64, function)[0]
    empty = public(np.empty((0, 3), np.float32), np.empty((0, 3), np.float32))
    assert empty.shape == (0, 3) and empty.dtype == np.float32


@pytest.mark.parametrize("function", FUNCTIONS)
def test_mismatched_inputs_are_refused_by_name(function):
    public = getattr(osm, function)
    y = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="dy must be an array of y's kind, shape and dtype"):
        public(y, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="dy must be"):
        public(y, np.zeros((2, 3), np.float16))
    with pytest.raises(TypeError, match="takes a numpy or cupy array"):
        public([[1.0]], y)
    with pytest.raises(TypeError, match="int8"):
        public(np.zeros((2, 3), np.int8), np.zeros((2, 3), np.int8))


def test_the_public_model_sums_as_the_kernel_would_on_views_whose_fresh_dx_is_not_aligned():
    """y and dy rows 16-byte aligned (a row stride of 64 bytes) but 10 floats wide: the fresh dx's rows
    are 40 bytes apart, so the kernel sums element by element, and so must the model the CPU runs."""
    big_y, big_dy = pair("softmax_backward", 64, 16, "float32", seed=12)
    y, dy = big_y[:, :10], big_dy[:, :10]
    want = kb.simulate_softmax_backward(y, dy, vectors=False)
    np.testing.assert_array_equal(osm.softmax_backward(y, dy), want)
