"""GPU tier for softmax_03_online_masked: every mask kind on the edge matrix, fully masked rows,
views, rows of a million, the sentinels, and bad input.

Reference: the float64 softmax of the masked logits (`softmax_masked.reference_masked`);
tolerance: twice the error of the same softmax computed in fp32, plus two ulps.
"""
from functools import lru_cache

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.softmax_masked import FLT_MAX, effective_logits, prepare, reference_masked

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

MASKED = "softmax_03_online_masked"
KINDS = ("none", "causal", "padding", "additive rows x N", "additive N", "additive float",
         "causal + padding + additive", "padding, -1e6", "causal, -FLT_MAX")


@lru_cache(maxsize=None)
def rows_on_gpu(n_rows, n_cols, seed):
    return checks.random_rows(cp, n_rows, n_cols, seed=seed)


def mask_kwargs(kind, n_rows, n_cols, seed=0):
    """softmax keyword arguments for one kind of mask; row 0 is fully masked where the kind allows."""
    rng = cp.random.default_rng(seed)
    keep = rng.random((n_rows, n_cols)) < 0.7
    keep[0] = False
    additive = cp.where(keep, 0.0, -cp.inf).astype(cp.float32)
    lengths = rng.integers(0, n_cols + 1, size=n_rows)
    lengths[0] = 0
    if n_rows > 1:
        lengths[-1] = n_cols
    return {
        "none": {},
        "causal": {"mask": "causal"},
        "padding": {"valid_lengths": lengths},
        "additive rows x N": {"mask": additive},
        "additive N": {"mask": cp.where(rng.random(n_cols) < 0.5, 0.0, -cp.inf).astype(cp.float32)},
        "additive float": {"mask": rng.uniform(-5, 5, (n_rows, n_cols)).astype(cp.float32)},
        "causal + padding + additive": {"mask": additive, "valid_lengths": lengths},
        "padding, -1e6": {"valid_lengths": lengths, "mask_value": -1e6},
        "causal, -FLT_MAX": {"mask": "causal", "mask_value": -FLT_MAX},
    }[kind]


def run_and_check(x, variant=MASKED, out=None, **kwargs):
    """Run on poisoned output, synchronize, check coverage, NaN pattern and error. Returns y."""
    out = checks.poisoned_like(x) if out is None else out
    y = osm.softmax(x, variant, out=out, **kwargs)
    cp.cuda.Device().synchronize()
    assert y is out and checks.unwritten(y) == 0, "outputs left unwritten"
    x2 = x if x.strides[1] == x.itemsize else cp.ascontiguousarray(x)
    options = prepare(x2, kwargs.get("mask"), kwargs.get("valid_lengths"), kwargs.get("mask_value", -np.inf))
    ref = reference_masked(x2, **options)
    baseline = reference.softmax_same_dtype(effective_logits(x2, **options))
    assert bool((cp.isnan(y) == cp.isnan(ref)).all()), "NaN pattern differs from the reference"
    passed, message = checks.compare(y, ref, baseline, np.float32)
    assert passed, message
    return y


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
@pytest.mark.parametrize("kind", KINDS)
def test_edge_matrix(kind, n_rows, n_cols):
    x = rows_on_gpu(n_rows, n_cols, n_rows * 7919 + n_cols)
    kwargs = mask_kwargs(kind, n_rows, n_cols, seed=n_cols)
    y = run_and_check(x, **kwargs)
    fully_masked_row0 = kind in ("padding", "additive rows x N", "causal + padding + additive")
    if fully_masked_row0:
        assert bool(cp.isnan(y[0]).all()), "a fully masked row must be NaN (as torch)"
    if kind == "padding, -1e6":
        assert bool(cp.allclose(y[0], 1.0 / n_cols, rtol=1e-5)), "fully masked with -1e6: uniform"


@pytest.mark.parametrize("kind", ("none", "padding", "additive N", "causal + padding + additive"))
@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
def test_rows_of_a_million(kind, n_cols):
    x = rows_on_gpu(3, n_cols, n_cols)
    run_and_check(x, **mask_kwargs(kind, 3, n_cols, seed=1))


@pytest.mark.parametrize("shape", [(8, 3), (300, 100), (3, 8), (100, 300), (257, 257)])
def test_causal_is_torch_is_causal(shape):
    """Row i keeps columns j <= i (ones(L, S).tril(0)) for tall, wide and square matrices."""
    x = rows_on_gpu(*shape, 5)
    y = run_and_check(x, mask="causal")
    keep = cp.tril(cp.ones(shape, dtype=bool))
    assert bool((y[~keep] == 0).all()) and bool(cp.allclose(y.sum(axis=1), 1.0, rtol=1e-5))
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        t = torch.as_tensor(x, device="cuda")
        expected = torch.softmax(t.masked_fill(~torch.ones(shape, dtype=torch.bool, device="cuda").tril(0),
                                               float("-inf")), dim=1)
        assert torch.allclose(torch.as_tensor(y, device="cuda"), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ("causal", "additive rows x N", "causal + padding + additive"))
def test_views_strided_and_misaligned(kind):
    base = rows_on_gpu(9, 1001, 5)
    for view in (base[:, 1:], base[::2], base[1::3, 3:-2], base[:, ::2], base.T[:500].T):
        run_and_check(view, **mask_kwargs(kind, *view.shape, seed=2))
    out_base = checks.poisoned_like(base)
    run_and_check(base[:, 1:], out=out_base[:, 1:], **mask_kwargs(kind, 9, 1000, seed=3))


def test_gpu_matches_the_model():
    host = checks.random_rows(np, 300, 257, seed=11)
    rng = np.random.default_rng(0)
    mask = np.where(rng.random((300, 257)) < 0.6, 0.0, -np.inf).astype(np.float32)
    lengths = rng.integers(0, 258, 300)
    for kwargs in ({"mask": "causal"}, {"mask": mask, "valid_lengths": lengths},
                   {"mask": mask[0]}, {"valid_lengths": lengths, "mask_value": -1e6}):
        gpu = osm.softmax(cp.asarray(host), MASKED, **kwargs).get()
        model = osm.softmax(host, MASKED, **kwargs)
        assert np.array_equal(np.isnan(gpu), np.isnan(model))
        np.testing.assert_allclose(gpu, model, rtol=2e-6, atol=1e-12)


def test_sentinels_on_fully_masked_rows_and_low_logits():
    """-inf: NaN; -1e6 / -FLT_MAX: uniform. Logits near -2e6 lose to a -1e6 sentinel."""
    x = cp.asarray((np.random.default_rng(0).standard_normal((3, 40)) - 2e6).astype(np.float32))
    lengths = cp.asarray([0, 10, 40])
    assert bool(cp.isnan(run_and_check(x, valid_lengths=lengths)[0]).all())
    for sentinel in (-1e6, -FLT_MAX):
        y = run_and_check(x, valid_lengths=lengths, mask_value=sentinel)
        assert bool(cp.allclose(y[0], 1 / 40, rtol=1e-6))
    wrong = run_and_check(x, valid_lengths=lengths, mask_value=-1e6)
    assert abs(float(wrong[1, 10:].sum()) - 1.0) < 1e-5 and bool((wrong[1, :10] == 0).all())
    right = run_and_check(x, valid_lengths=lengths, mask_value=-FLT_MAX)
    assert abs(float(right[1, :10].sum()) - 1.0) < 1e-5 and bool((right[1, 10:] == 0).all())


def test_host_masks_with_gpu_input_and_the_model_agree():
    host = checks.random_rows(np, 7, 100, seed=4)
    mask = np.where(np.random.default_rng(1).random(100) < 0.5, 0.0, -np.inf)   # float64 on the host
    gpu = osm.softmax(cp.asarray(host), mask=mask, valid_lengths=[0, 1, 2, 50, 99, 100, 100])
    model = osm.softmax(host, mask=mask, valid_lengths=[0, 1, 2, 50, 99, 100, 100])
    assert np.array_equal(np.isnan(gpu.get()), np.isnan(model))
    np.testing.assert_allclose(gpu.get(), model, rtol=2e-6, atol=1e-12)


def test_bad_input_then_the_context_is_healthy():
    x = cp.ones((4, 8), cp.float32)
    for kwargs, error in (({"mask": cp.zeros((3, 8), cp.float32)}, ValueError),
                          ({"mask": cp.ones((4, 8), dtype=bool)}, TypeError),
                          ({"valid_lengths": cp.asarray([1, 2, 9, 3])}, ValueError),
                          ({"valid_lengths": [1, -1, 2, 3]}, ValueError),
                          ({"valid_lengths": cp.asarray([1.0, 2.0, 3.0, 4.0])}, TypeError)):
        with pytest.raises(error):
            osm.softmax(x, **kwargs)
    for variant in ("safe", "naive", "softmax_02_online_unguarded", "online_fp16_vec8"):
        with pytest.raises(ValueError, match="does not take a mask"):
            osm.softmax(x.astype(cp.float16) if "fp16" in variant else x, variant, mask="causal")
    with pytest.raises(TypeError):
        osm.softmax(x.astype(cp.float16), mask="causal")
    run_and_check(checks.random_rows(cp, 4, 8, seed=1), mask="causal")
