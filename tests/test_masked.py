"""CPU tier: the fused masks of softmax_03_online_masked on its NumPy model, and their errors.

The reference is the float64 softmax of the masked logits (`softmax_masked.reference_masked`);
the GPU tier (tests/gpu/test_masked_gpu.py) runs the same cases on the kernel.
"""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.softmax_masked import FLT_MAX, effective_logits, prepare, reference_masked

MASKED = "softmax_03_online_masked"


def mask_cases(x, seed=0):
    """name -> softmax keyword arguments, for every kind of mask (and all three at once)."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = x.shape
    keep = rng.random((n_rows, n_cols)) < 0.7
    keep[0] = False                                             # a fully masked row
    additive = np.where(keep, 0.0, -np.inf).astype(np.float32)
    lengths = rng.integers(0, n_cols + 1, size=n_rows)
    lengths[0], lengths[-1] = 0, n_cols                         # empty and full rows
    return {
        "causal": {"mask": "causal"},
        "padding": {"valid_lengths": lengths},
        "additive rows x N": {"mask": additive},
        "additive N": {"mask": np.where(rng.random(n_cols) < 0.5, 0.0, -np.inf).astype(np.float32)},
        "additive float": {"mask": rng.uniform(-5, 5, (n_rows, n_cols)).astype(np.float32)},
        "causal + padding": {"mask": "causal", "valid_lengths": lengths},
        "additive + padding, -1e6": {"mask": additive, "valid_lengths": lengths, "mask_value": -1e6},
    }


def check_masked(x, variant=MASKED, **kwargs):
    out = checks.poisoned_like(x)
    y = osm.softmax(x, variant, out=out, **kwargs)
    assert y is out and checks.unwritten(y) == 0
    options = prepare(x, kwargs.get("mask"), kwargs.get("valid_lengths"), kwargs.get("mask_value", -np.inf))
    ref = reference_masked(x, **options)
    baseline = reference.softmax_same_dtype(effective_logits(x, **options))
    passed, message = checks.compare(y, ref, baseline, np.float32)
    assert passed, message
    return y, ref


@pytest.mark.parametrize("n_rows, n_cols", [(1, 1), (7, 3), (7, 100), (300, 257), (5, 4097), (3, 1000), (9, 2)])
@pytest.mark.parametrize("kind", list(mask_cases(np.zeros((2, 2)))))
def test_every_mask_kind_matches_the_reference(kind, n_rows, n_cols):
    x = checks.random_rows(np, n_rows, n_cols, seed=n_rows + n_cols)
    kwargs = mask_cases(x, seed=n_cols)[kind]
    y, ref = check_masked(x, **kwargs)
    assert np.array_equal(np.isnan(y), np.isnan(ref))


def test_online_dispatches_to_the_masked_kernel():
    x = checks.random_rows(np, 6, 70, seed=1)
    np.testing.assert_array_equal(osm.softmax(x, "online", mask="causal"), osm.softmax(x, MASKED, mask="causal"))
    # with no mask, the masked kernel follows the online kernel's schedule exactly
    np.testing.assert_array_equal(osm.softmax(x, MASKED), osm.softmax(x, "online"))


def test_causal_is_torch_is_causal_for_tall_and_wide_matrices():
    """Row i keeps columns j <= i: ones(L, S).tril(0), whether L < S or L > S."""
    for n_rows, n_cols in ((3, 8), (8, 3), (5, 5)):
        x = checks.random_rows(np, n_rows, n_cols, seed=n_rows)
        keep = np.tril(np.ones((n_rows, n_cols), bool))
        expected = reference.softmax(np.where(keep, x.astype(np.float64), -np.inf))
        y = osm.softmax(x, mask="causal")
        assert (y[~keep] == 0).all()
        np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-12)


def test_fully_masked_rows_by_sentinel():
    """-inf: NaN (as torch). -1e6 and -FLT_MAX: the uniform distribution 1/N."""
    x = checks.random_rows(np, 3, 50, seed=2)
    lengths = np.array([0, 20, 50])
    y = osm.softmax(x, valid_lengths=lengths)
    assert np.isnan(y[0]).all() and not np.isnan(y[1:]).any()
    for sentinel in (-1e6, -FLT_MAX):
        y = osm.softmax(x, valid_lengths=lengths, mask_value=sentinel)
        np.testing.assert_allclose(y[0], 1 / 50, rtol=1e-6)
        assert (y[1, 20:] == 0).all()


def test_logits_below_the_sentinel_lose_to_the_masked_columns():
    """Real logits around -2e6 sit below the -1e6 sentinel: the masked columns take all the mass.
    With -inf or -FLT_MAX the kept columns keep it."""
    x = (np.random.default_rng(0).standard_normal((2, 40)) - 2e6).astype(np.float32)
    lengths = np.array([10, 40])
    wrong = osm.softmax(x, valid_lengths=lengths, mask_value=-1e6)
    np.testing.assert_allclose(wrong[0, 10:].sum(), 1.0, rtol=1e-5)
    assert (wrong[0, :10] == 0).all()
    for sentinel in (-np.inf, -FLT_MAX):
        right = osm.softmax(x, valid_lengths=lengths, mask_value=sentinel)
        np.testing.assert_allclose(right[0, :10].sum(), 1.0, rtol=1e-5)
        assert (right[0, 10:] == 0).all()


def test_additive_neg_flt_max_overflows_to_neg_inf_for_negative_logits():
    """x + (-FLT_MAX) rounds to -inf once x <= -2^103 ~ -1.01e31 (half an ulp of FLT_MAX): -FLT_MAX is
    only a safe additive mask for moderate logits. -1e6 quantizes logits to its ulp (1/16)."""
    x = np.array([[-2e31, 1.0, 0.0]], np.float32)
    mask = np.array([-FLT_MAX, 0.0, -FLT_MAX], np.float32)
    v = effective_logits(x, mask=mask)
    assert v[0, 0] == -np.inf and v[0, 2] == -FLT_MAX
    quantized = effective_logits(np.array([[0.01, 0.03]], np.float32), mask=np.float32([-1e6, -1e6]))
    assert quantized[0, 0] == quantized[0, 1] == -1e6


@pytest.mark.parametrize("kwargs, error, match", [
    ({"mask": np.zeros((3, 9), np.float32)}, ValueError, "does not match"),
    ({"mask": np.zeros(7, np.float32)}, ValueError, "does not match"),
    ({"mask": np.zeros((4, 8, 1), np.float32)}, ValueError, "does not match"),
    ({"mask": np.ones((4, 8), bool)}, TypeError, "floats"),
    ({"mask": np.zeros((4, 8), np.int32)}, TypeError, "floats"),
    ({"mask": [[0.0] * 8] * 4}, TypeError, "array"),
    ({"mask": "anticausal"}, ValueError, "causal"),
    ({"valid_lengths": [1, 2, 9, 3]}, ValueError, r"\[0, N\]"),
    ({"valid_lengths": [1, -1, 2, 3]}, ValueError, r"\[0, N\]"),
    ({"valid_lengths": [1, 2, 3]}, ValueError, "one entry per row"),
    ({"valid_lengths": [1.0, 2.0, 3.0, 4.0]}, TypeError, "integers"),
    ({"mask": "causal", "mask_value": np.nan}, ValueError, "mask_value"),
    ({"mask": "causal", "mask_value": np.inf}, ValueError, "mask_value"),
    ({"mask": "causal", "mask_value": -1e39}, ValueError, "float32"),
])
def test_bad_mask_input_is_a_clear_error(kwargs, error, match):
    x = np.ones((4, 8), np.float32)
    with pytest.raises(error, match=match):
        osm.softmax(x, **kwargs)


@pytest.mark.parametrize("variant", ["naive", "safe", "softmax_02_online_unguarded", "online_fp16_vec4",
                                     "softmax_05_online_fp16_vec8"])
def test_mask_with_a_variant_without_masks_is_an_error(variant):
    x = np.ones((4, 8), np.float16 if "fp16" in variant else np.float32)
    with pytest.raises(ValueError, match="does not take a mask"):
        osm.softmax(x, variant, mask="causal")
    with pytest.raises(ValueError, match="does not take a mask"):
        osm.softmax(x, variant, valid_lengths=[1, 2, 3, 4])


def test_masked_kernel_takes_float32_only():
    with pytest.raises(TypeError):
        osm.softmax(np.ones((4, 8), np.float16), mask="causal")
    with pytest.raises(TypeError):
        osm.softmax(np.ones((4, 8), np.float64), MASKED)


def test_the_checker_rejects_an_off_by_one_causal_mask():
    """Keeping j <= i + 1 instead of j <= i must fail against the causal reference."""
    x = checks.random_rows(np, 6, 10, seed=3)
    off_by_one = osm.softmax(x, valid_lengths=np.minimum(np.arange(6) + 2, 10))
    options = prepare(x, "causal")
    passed, _ = checks.compare(off_by_one, reference_masked(x, **options),
                               reference.softmax_same_dtype(effective_logits(x, **options)), np.float32)
    assert not passed


def test_padding_and_additive_masks_from_the_definition():
    """Independent of kernels_masked's helpers: padding is -inf past each row's length, an
    additive mask is added to the logits; the float64 softmax of that is the answer."""
    rng = np.random.default_rng(21)
    x = checks.random_rows(np, 6, 37, seed=21)
    lengths = np.array([1, 5, 37, 12, 30, 2])
    cols = np.arange(37)[None, :]
    padded = np.where(cols < lengths[:, None], x.astype(np.float64), -np.inf)
    np.testing.assert_allclose(osm.softmax(x, valid_lengths=lengths), reference.softmax(padded),
                               rtol=2e-6, atol=1e-12)
    additive = rng.uniform(-4, 4, x.shape).astype(np.float32)
    np.testing.assert_allclose(osm.softmax(x, mask=additive),
                               reference.softmax(x.astype(np.float64) + additive.astype(np.float64)),
                               rtol=5e-6, atol=1e-12)
    broadcast = np.where(rng.random(37) < 0.5, 0.0, -np.inf).astype(np.float32)
    broadcast[0] = 0.0
    np.testing.assert_allclose(osm.softmax(x, mask=broadcast),
                               reference.softmax(x.astype(np.float64) + broadcast[None, :].astype(np.float64)),
                               rtol=2e-6, atol=1e-12)
