"""CPU tier: the teaching kernels' own CUDA source on the CPU emulator (kernels/emulator/).

softmax_01_safe and softmax_02_online fold each thread's columns with thread_fold.cuh: whole chunks
load their 16 columns before the first push, the row's last chunk is guarded column by column.
Both branches run here, on the edge sizes (a row shorter than one chunk of the block, exactly one
chunk, one column more, several chunks and a part), on random and special rows, into poisoned
outputs, against the float64 reference with the book's rule and against the kernel's NumPy model.
The unguarded build must fail on a row that starts with -inf: the check can fail.
"""
import numpy as np
import pytest

from onlinesoftmax import checks
from onlinesoftmax.registry import REGISTRY
from onlinesoftmax.runtime import emulator

pytestmark = pytest.mark.skipif(not emulator.available(), reason="the CPU emulator needs g++")

KERNELS = ("softmax_01_safe", "softmax_02_online")
SIZES = (1, 31, 33, 257, 4095, 4096, 4097, 8193, 70001)   # one chunk of 256 threads is 4096 columns
THREADS = 256


def launch(module, name, x):
    y = checks.poisoned_like(x)
    n_rows, n_cols = x.shape
    module.launch(name, (n_rows,), (THREADS,), (x, y, np.int32(n_cols), np.int64(n_cols), np.int64(n_cols)))
    return y


@pytest.fixture(scope="module", params=KERNELS)
def kernel(request):
    variant = REGISTRY[request.param]
    return variant, emulator.Module(variant.path, [variant.entry_name])


@pytest.mark.parametrize("n_cols", SIZES)
def test_random_rows_match_the_reference_and_the_model(kernel, n_cols):
    variant, module = kernel
    x = checks.random_rows(np, 3, n_cols, seed=n_cols)
    y = launch(module, variant.entry_name, x)
    assert checks.unwritten(y) == 0
    passed, message = checks.compare_softmax(y, x)
    assert passed, f"{variant.name}, N = {n_cols}: {message}"
    model = variant.simulate(x)
    assert np.abs(y - model).max() <= 4 * np.finfo(np.float32).eps * np.abs(model).max(), \
        f"{variant.name}, N = {n_cols}: the emulated kernel and its NumPy model part"


@pytest.mark.parametrize("n_cols", (33, 4097, 8193))
def test_special_rows(kernel, n_cols):
    variant, module = kernel
    x, nan_rows = checks.special_rows(np, n_cols)
    y = launch(module, variant.entry_name, x)
    assert np.isnan(y[nan_rows]).all(), f"{variant.name}: rows of all -inf, +inf or NaN must be NaN"
    passed, message = checks.compare_softmax(y[~nan_rows], x[~nan_rows])
    assert passed, f"{variant.name}, N = {n_cols}: {message}"


def test_the_unguarded_build_fails_on_a_leading_run_of_neg_inf():
    variant = REGISTRY["softmax_02_online"]
    module = emulator.Module(variant.path, [variant.entry_name], flags=("-DONLINE_SOFTMAX_GUARDS=0",))
    x, _ = checks.special_rows(np, 4097)
    y = launch(module, variant.entry_name, x[4:5])          # the row that starts with 300 times -inf
    assert not checks.compare_softmax(y, x[4:5])[0]
