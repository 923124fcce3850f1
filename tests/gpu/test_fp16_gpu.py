"""GPU tier for the fp16 kernels softmax_04_online_fp16_vec4 and softmax_05_online_fp16_vec8.

Edge matrix, rows of a million, N not a multiple of 4 or 8, views starting at every
element offset with odd row strides (x and y aligned alike or not), logits beyond
ln(65504) ~ 11.09, NaN rows; outputs poisoned (with a finite fp16 value) before each run.
Two checks: twice the error of softmax computed in fp16 plus two ulps (the book's rule),
and the strict one: no more than fp32 math plus one rounding to fp16.
"""
from functools import lru_cache

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.softmax.fp16 import row_heads, simulate_fp16

pytestmark = pytest.mark.gpu

FP16 = ("softmax_04_online_fp16_vec4", "softmax_05_online_fp16_vec8")
VEC = {"softmax_04_online_fp16_vec4": 4, "softmax_05_online_fp16_vec8": 8}


@lru_cache(maxsize=None)
def rows_on_gpu(n_rows, n_cols, seed):
    return checks.random_rows(cp, n_rows, n_cols, "float16", seed=seed, max_offset=8)


def run_and_check(variant, x, out=None):
    out = checks.poisoned_like(x) if out is None else out
    y = osm.softmax(x, variant=variant, out=out)
    cp.cuda.Device().synchronize()
    assert y is out and y.dtype == cp.float16
    assert checks.unwritten(y) == 0, f"{variant}: outputs left unwritten"
    ref = reference.softmax(x)
    passed, message = checks.compare(y, ref, reference.softmax_same_dtype(x), np.float16)
    assert passed, f"{variant} {x.shape}: {message}"
    excess = checks.fp16_rounding_excess(y, ref)
    assert excess <= 1.0, f"{variant} {x.shape}: error {excess:.2f}x (fp32 math + one fp16 rounding)"
    return y


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
@pytest.mark.parametrize("variant", FP16)
def test_edge_matrix(variant, n_rows, n_cols):
    run_and_check(variant, rows_on_gpu(n_rows, n_cols, n_rows * 7919 + n_cols))


@pytest.mark.parametrize("n_cols", (4, 5, 6, 7, 8, 9, 12, 15, 17, 1023, 1025, 2047, 2049))
@pytest.mark.parametrize("variant", FP16)
def test_n_not_a_multiple_of_the_vector(variant, n_cols):
    run_and_check(variant, rows_on_gpu(7, n_cols, n_cols))


@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
@pytest.mark.parametrize("variant", FP16)
def test_rows_of_a_million(variant, n_cols):
    run_and_check(variant, rows_on_gpu(3, n_cols, n_cols))


@pytest.mark.parametrize("variant", FP16)
def test_misaligned_starts_and_odd_row_strides(variant):
    vec = VEC[variant]
    base = rows_on_gpu(9, 1003, 5)
    out_base = checks.poisoned_like(base)
    for start in range(vec + 1):
        view = base[:, start:start + 997]                       # row stride 1003: rows differ in alignment
        assert len(set(row_heads(view, vec).tolist())) > 1
        run_and_check(variant, view)                            # y aligned, x not: scalar stores
        out_base.fill(checks.POISON["float16"])
        run_and_check(variant, view, out=out_base[:, start:start + 997])   # same phase: vector stores
    aligned = rows_on_gpu(5, 1024, 6)
    wider = checks.poisoned_like(rows_on_gpu(5, 1025, 6))
    run_and_check(variant, aligned, out=wider[:, 1:])           # x aligned, y not
    for view in (base[1::2, 3:-1], base[:, ::2], base.T[:500].T):
        run_and_check(variant, view)


@pytest.mark.parametrize("variant", FP16)
def test_logits_beyond_fp16_exp_range_do_not_overflow(variant):
    rng = np.random.default_rng(7)
    host = np.stack([rng.uniform(11.5, 60.0, 4097), rng.uniform(60000, 65504, 4097),
                     rng.uniform(-65504, -60000, 4097), np.full(4097, 65504.0)]).astype(np.float16)
    y = run_and_check(variant, cp.asarray(host))
    assert bool(cp.isfinite(y).all())
    assert bool(cp.allclose(y[3], 1 / 4097, rtol=1e-3))


@pytest.mark.parametrize("n_cols", (1, 3, 100, 257, 4097, 65536))
@pytest.mark.parametrize("variant", FP16)
def test_special_rows(variant, n_cols):
    x, nan_rows = checks.special_rows(cp, n_cols, "float16")
    y = run_and_check(variant, x)
    assert (cp.isnan(y).all(axis=1).get() == nan_rows).all(), "NaN rows differ from torch's convention"
    assert not bool(cp.isnan(y[cp.asarray(~nan_rows)]).any()), "unexpected NaN"


@pytest.mark.parametrize("variant", FP16)
def test_gpu_matches_the_model_given_the_gpu_alignment(variant):
    vec = VEC[variant]
    base = rows_on_gpu(9, 4099, 12)
    for view in (base, base[:, 1:], base[:, 3:-2]):
        gpu = osm.softmax(view, variant=variant).get()
        model = simulate_fp16(view.get(), vec, heads=row_heads(view, vec))
        assert np.array_equal(np.isnan(gpu), np.isnan(model))
        ulp = np.spacing(np.abs(model)).astype(np.float64)
        assert (np.abs(gpu.astype(np.float64) - model) <= ulp).all(), "GPU and model differ by > 1 fp16 ulp"


def test_torch_half_softmax_agrees_when_available():
    try:
        import torch
    except ImportError:
        pytest.skip("torch not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    x = rows_on_gpu(7, 4097, 3)
    expected = torch.softmax(torch.as_tensor(x, device="cuda").float(), dim=1).half()
    for variant in FP16:
        y = torch.as_tensor(osm.softmax(x, variant=variant), device="cuda")
        assert torch.allclose(y.float(), expected.float(), rtol=1e-3, atol=6e-8)


@pytest.mark.parametrize("variant", FP16)
def test_bad_input_then_the_context_is_healthy(variant):
    with pytest.raises(TypeError, match="float16"):
        osm.softmax(cp.ones((2, 8), cp.float32), variant=variant)
    with pytest.raises(TypeError):
        osm.softmax(cp.ones((2, 8), cp.float64), variant=variant)
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        osm.softmax(cp.ones((2, 3, 4), cp.float16), axis=3, variant=variant)
    with pytest.raises(ValueError):
        osm.softmax(cp.ones((0, 4), cp.float16), variant=variant)
    with pytest.raises(ValueError, match="takes no mask"):
        osm.softmax(cp.ones((2, 8), cp.float16), variant=variant, causal=True)
    run_and_check(variant, rows_on_gpu(2, 8, 1))


def test_compiled_resources_are_reported():
    for name in FP16 + ("softmax_03_online_masked",):
        report = osm.REGISTRY[name].resources()
        assert report.registers > 0 and report.stack_bytes == 0
