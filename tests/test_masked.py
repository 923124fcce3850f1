"""CPU tier: the fused masks of softmax_03_online_masked on its NumPy model, in float32, float16
and bfloat16, and their errors.

The reference is the float64 softmax of the masked logits (`softmax_masked.reference_masked`);
the baseline the same softmax computed in float32 and rounded once to x's dtype; the rule:
error at most twice the baseline's, plus two ulps (checks.compare for float32, checks.compare_softmax's
ulps of the largest output for the 16-bit dtypes). The GPU tier (tests/gpu/test_masked_gpu.py)
runs the same cases on the kernel.
"""
import numpy as np
import scipy.special
import pytest

import onlinesoftmax as osm
from onlinesoftmax import masks
from onlinesoftmax.registry import DTYPE_TAGS
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.softmax import masked as km
from onlinesoftmax.kernels.softmax.masked import FLT_MAX, effective_logits, prepare, reference_masked

MASKED = "softmax_03_online_masked"
VARIANT = osm.REGISTRY[MASKED]
# the masked kernels: the two-pass online kernel (any N) and the register row (N <= 32K, the default there)
MASKED_VARIANTS = (MASKED, "softmax_14_registers_masked")


def fits(name, n_cols):
    return n_cols <= osm.REGISTRY[name].max_cols
DTYPES = ("float32", "float16", "bfloat16")


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
        "causal": {"causal": True},
        "padding": {"valid_lengths": lengths},
        "additive rows x N": {"mask": additive},
        "additive N": {"mask": np.where(rng.random(n_cols) < 0.5, 0.0, -np.inf).astype(np.float32)},
        "additive float": {"mask": rng.uniform(-5, 5, (n_rows, n_cols)).astype(np.float32)},
        "causal + padding": {"causal": True, "valid_lengths": lengths},
        "additive + padding, -1e6": {"mask": additive, "valid_lengths": lengths, "mask_value": -1e6},
    }


def options_of(x, kwargs):
    return masks.options(x, kwargs.get("mask"), kwargs.get("valid_lengths"), kwargs.get("mask_value", -np.inf),
                         causal=kwargs.get("causal", False))


def masked_compare(y, x, options):
    """(passed, message): y against the float64 softmax of the masked logits, with x's dtype's rule."""
    dtype = x.dtype.name
    assert y.dtype == x.dtype, f"the masked softmax returns x's dtype {dtype}, got {y.dtype}"
    x64 = checks.as_float64(x)
    ref = reference_masked(x64, **options)
    baseline32 = reference.softmax_same_dtype(effective_logits(x64.astype(np.float32), **options))
    if dtype == "float32":
        return checks.compare(y, ref, baseline32, np.float32)
    baseline = checks.as_float64(checks.to_dtype(baseline32, dtype))
    err = checks.max_abs_error(checks.as_float64(y), ref)
    base_err = checks.max_abs_error(baseline, ref)
    base_err = base_err if np.isfinite(base_err) else 0.0
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 1.0
    tol = 2.0 * base_err + 2.0 * checks.EPS[dtype] * scale   # two ulps of the largest output
    return bool(err <= tol), f"{dtype}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def check_masked(x, variant=MASKED, **kwargs):
    """The model of `variant` through api.run on a poisoned output: everything written, NaN where the
    reference has NaN, error within the rule. Returns (y as float64, reference)."""
    options = options_of(x, kwargs)
    out = checks.poisoned_like(x)
    y = osm.api.run(osm.REGISTRY[variant], x, out=out, **options)
    assert y is out and checks.unwritten(y) == 0
    ref = reference_masked(checks.as_float64(x), **options)
    passed, message = masked_compare(y, x, options)
    assert passed, message
    y64 = checks.as_float64(y)
    assert np.array_equal(np.isnan(y64), np.isnan(ref))
    return y64, ref


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_rows, n_cols", [(1, 1), (7, 3), (7, 100), (300, 257), (5, 4097), (3, 1000), (9, 2)])
@pytest.mark.parametrize("kind", list(mask_cases(np.zeros((2, 2)))))
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_every_mask_kind_matches_the_reference(variant, kind, n_rows, n_cols, dtype):
    x = checks.random_rows(np, n_rows, n_cols, dtype, seed=n_rows + n_cols)
    check_masked(x, variant, **mask_cases(x, seed=n_cols)[kind])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_edge_sizes_in_every_dtype(variant, dtype, n_cols):
    if not fits(variant, n_cols):
        pytest.skip(f"{variant} takes rows of at most {osm.REGISTRY[variant].max_cols}")
    x = checks.random_rows(np, 3 if n_cols > 4097 else 7, n_cols, dtype, seed=n_cols)
    for kind in ("causal + padding", "additive float"):
        check_masked(x, variant, **mask_cases(x, seed=n_cols)[kind])


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_16_bit_is_the_float32_model_rounded_once(variant, dtype):
    """x widens exactly, the masked softmax runs in fp32 as for float32 input, y is rounded once (at
    N = 257 softmax_14 takes its scalar build, whose partition is the same in every dtype)."""
    x = checks.random_rows(np, 40, 257, dtype, seed=4)
    widened = x.astype(np.float32)
    for kind, kwargs in mask_cases(x, seed=5).items():
        options = options_of(x, kwargs)
        y = osm.api.run(osm.REGISTRY[variant], x, **options)
        expected = checks.to_dtype(osm.api.run(osm.REGISTRY[variant], widened, **options), dtype)
        np.testing.assert_array_equal(y.view(np.uint16), expected.view(np.uint16), err_msg=kind)


def test_the_masked_models_follow_their_unmasked_kernels_and_the_default_dispatch():
    x = checks.random_rows(np, 6, 700, seed=1)
    # with no mask, the masked kernels follow their unmasked kernels exactly (bit for bit): softmax_03
    # softmax_02's schedule where it launches the same 256 threads per row (N > 512), softmax_14 softmax_08's
    np.testing.assert_array_equal(osm.api.run(VARIANT, x), osm.api.run(osm.REGISTRY["softmax_02_online"], x))
    # softmax_14 the layout of softmax_07 up to N = 1024 and of softmax_08 above (in fp32: their 16-bit
    # rows fold the exponent into one FMA, softmax_14 subtracts first)
    registers_masked = osm.REGISTRY["softmax_14_registers_masked"]
    for n_cols, unmasked in ((700, "softmax_07_warp_per_row"), (1024, "softmax_07_warp_per_row"),
                             (1025, "softmax_08_registers"), (5000, "softmax_08_registers")):
        xn = checks.random_rows(np, 6, n_cols, seed=n_cols)
        np.testing.assert_array_equal(osm.api.run(registers_masked, xn), osm.api.run(osm.REGISTRY[unmasked], xn))
    # a mask given to the default variant: rows up to 32K go to softmax_14, longer ones to softmax_03
    for dtype in DTYPES:
        xd = checks.to_dtype(x, dtype)
        np.testing.assert_array_equal(osm.softmax(xd, causal=True).view(np.uint8),
                                      osm.api.run(registers_masked, xd, **masks.options(xd, causal=True)).view(np.uint8))
    long = checks.random_rows(np, 2, registers_masked.max_cols + 1, seed=2)
    np.testing.assert_array_equal(osm.softmax(long, valid_lengths=np.array([5, 40000])),
                                  osm.api.run(VARIANT, long, **prepare(long, valid_lengths=np.array([5, 40000]))))


def test_one_variant_with_an_entry_per_dtype():
    assert VARIANT.dtypes == DTYPES
    assert VARIANT.launched_entries == (f"{MASKED}_f32", f"{MASKED}_f16", f"{MASKED}_bf16")
    assert VARIANT.entry_name == f"{MASKED}_f32"
    assert [VARIANT.dtype_entry(d) for d in DTYPES] == list(VARIANT.launched_entries)
    assert not [name for name in osm.REGISTRY if name.startswith(MASKED + "_")]
    with pytest.raises(TypeError):
        VARIANT.dtype_entry("float64")


class FakeKernel:
    def __init__(self, entry):
        self.entry, self.launches = entry, []

    def __call__(self, grid, block, args, **kwargs):
        self.launches.append((grid, block, args))


class Addressed:
    """A numpy array with a device-style address (.data.ptr), as the runner reads it."""

    def __init__(self, array):
        self.array, self.data = array, type("Pointer", (), {"ptr": array.ctypes.data})()


@pytest.mark.parametrize("dtype", DTYPES)
def test_plan_builder_picks_the_entry_of_the_dtype(dtype, monkeypatch):
    """Without a GPU: the entry follows x's dtype; y must have x's dtype; the mask stays float32;
    the sizes are packed once and a call passes the four addresses (x, y, mask, lengths)."""
    built, launches = [], []
    monkeypatch.setattr(km, "get_kernel", lambda path, entry, defines=(): built.append(FakeKernel(entry)) or built[-1])

    def prepare_launch(fn, grid, block, shared, cluster, types, fixed=None, **flags):
        launches.append({"grid": tuple(grid), "block": tuple(block), "types": types, "fixed": fixed, "calls": []})
        return lambda *values: launches[-1]["calls"].append(values)
    monkeypatch.setattr(km.driver, "prepare_launch", prepare_launch)
    x = checks.to_dtype(np.zeros((4, 8), np.float32), dtype)
    options = prepare(x, np.zeros(8, np.float64), np.array([1, 2, 3, 4], np.int32), -1e6)
    assert options["mask"].dtype == np.float32
    y = np.zeros_like(x)
    runner = VARIANT.plan(VARIANT, x, y, **options)
    assert built[-1].entry == f"{MASKED}_{DTYPE_TAGS[dtype]}"
    launch = launches[-1]
    assert launch["grid"] == (4,) and launch["block"] == (64,) and len(launch["types"]) == 11
    assert (launch["fixed"][6], launch["fixed"][7]) == (8, 1), "one mask row of 8, used by every row (row i mod 1)"
    assert launch["fixed"][2] == 8 and launch["fixed"][9] == 0 and launch["fixed"][10] == np.float32(-1e6)
    mask, lengths = Addressed(options["mask"]), Addressed(options["valid_lengths"])
    runner(Addressed(x), Addressed(y), mask=mask, valid_lengths=lengths)
    runner(Addressed(x), Addressed(y))
    assert launch["calls"][0] == (x.ctypes.data, y.ctypes.data, mask.data.ptr, lengths.data.ptr)
    assert launch["calls"][1][2:] == (None, None), "no mask: null pointers"
    with pytest.raises(TypeError):
        VARIANT.plan(VARIANT, x, np.zeros((4, 8), np.float64))
    with pytest.raises(TypeError):
        VARIANT.plan(VARIANT, x, y, mask=np.zeros((1, 8), np.float64))
    with pytest.raises(TypeError):
        VARIANT.plan(VARIANT, x.astype(np.float64), x.astype(np.float64))


def test_short_rows_get_a_smaller_block_and_the_model_follows():
    """Block size follows N (64 .. 256 threads, four or more columns each); the model partitions the
    row over the same threads, so it is exact to the kernel's order: its sum for a row of ones is N."""
    assert [km.block_threads(n) for n in (1, 256, 257, 512, 513, 4096, 10**6)] == [64, 64, 128, 128, 256, 256, 256]
    for n in (1, 64, 256, 300, 1000):
        assert VARIANT.geometry(3, n).block == (km.block_threads(n),)
        assert (km.block_threads(n) & (km.block_threads(n) - 1)) == 0
    x = checks.random_rows(np, 3, 257, seed=2)
    threads = km.block_threads(257)
    m, l = km.sim.online_row_state(x, threads, chunked=True)
    y = km.simulate_masked(x)
    expected = (np.exp(x - m[:, None]) * (np.float32(1) / l)[:, None]).astype(np.float32)
    assert np.array_equal(y, expected), "the model uses the launch's thread count"


def test_prepared_options_make_a_plan_key():
    """The options `prepare` returns key a launch plan (runtime/plan.py): the fill is a plain float
    holding the float32 value (a numpy scalar would be taken for an array there)."""
    from onlinesoftmax.runtime.plan import options_key

    x = np.ones((4, 8), np.float32)
    for mask_value in (-np.inf, -1e6, -FLT_MAX, 0.1):
        options = prepare(x, "causal", None, mask_value)
        assert type(options["fill"]) is float and options["fill"] == float(np.float32(mask_value))
        hash(options_key(options))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_checker_rejects_wrong_answers(dtype):
    """An off-by-one causal mask, and one probability a few ulps off, fail in every dtype."""
    x = checks.random_rows(np, 6, 10, dtype, seed=3)
    options = prepare(x, "causal")   # the kernels' own causal limit: row i keeps j <= i
    off_by_one = osm.api.run(VARIANT, x, **prepare(x, valid_lengths=np.minimum(np.arange(6) + 2, 10)))
    assert not masked_compare(off_by_one, x, options)[0]
    y = checks.as_float64(osm.api.run(VARIANT, x, **options))
    assert masked_compare(checks.to_dtype(y, dtype), x, options)[0]
    y[3, 1] += 8 * checks.EPS[dtype] * np.nanmax(y)
    assert not masked_compare(checks.to_dtype(y, dtype), x, options)[0]


@pytest.mark.parametrize("align, diagonal", [("bottom_right", lambda q, n: n - q), ("top_left", lambda q, n: 0)])
def test_causal_alignment_for_tall_and_wide_matrices(align, diagonal):
    """bottom_right (the default, attention's and FlashAttention's causal): row i of a (q, N) matrix keeps
    j <= i + N - q, ones(q, N).tril(N - q), the last row every column; top_left (torch's is_causal):
    ones(q, N).tril(0). A row that keeps nothing (bottom-right, q > N) is NaN with -inf, as torch."""
    for n_rows, n_cols in ((3, 8), (8, 3), (5, 5), (1, 6)):
        x = checks.random_rows(np, n_rows, n_cols, seed=n_rows)
        keep = np.tril(np.ones((n_rows, n_cols), bool), k=diagonal(n_rows, n_cols))
        with np.errstate(invalid="ignore"):
            expected = reference.softmax(np.where(keep, x.astype(np.float64), -np.inf))
        y = osm.softmax(x, causal=True) if align == "bottom_right" else osm.softmax(x, causal=True, causal_align=align)
        assert (y[~keep & keep.any(axis=1, keepdims=True)] == 0).all()
        assert np.array_equal(np.isnan(y), np.isnan(expected))
        np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-12)
    square = checks.random_rows(np, 7, 7, seed=1)
    np.testing.assert_array_equal(osm.softmax(square, causal=True), osm.softmax(square, causal=True, causal_align="top_left"))


def test_causal_alignment_is_attentions():
    """softmax(q k^T * scale, causal=True) @ v is attention(q, k, v, causal=True), tall, wide and square."""
    rng = np.random.default_rng(5)
    for n_q, n_k in ((3, 9), (9, 9), (1, 17)):
        q, k, v = (rng.standard_normal((1, 2, n, 32)).astype(np.float32) for n in (n_q, n_k, n_k))
        scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(32 ** -0.5)
        composed = osm.softmax(scores, causal=True).astype(np.float64) @ v.astype(np.float64)
        np.testing.assert_allclose(osm.attention(q, k, v, causal=True), composed, rtol=1e-4, atol=1e-5)
        if n_q < n_k:   # the other alignment is a different matrix
            top_left = osm.softmax(scores, causal=True, causal_align="top_left").astype(np.float64) @ v
            assert np.abs(top_left - composed).max() > 1e-2


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
    ({"mask": "anticausal"}, ValueError, "additive"),
    ({"mask": "causal"}, ValueError, "causal=True"),
    ({"causal": 1}, TypeError, "True or False"),
    ({"causal": "yes"}, TypeError, "True or False"),
    ({"causal": True, "causal_align": "bottom-right"}, ValueError, "causal_align"),
    ({"causal_align": "diagonal"}, ValueError, "causal_align"),
    ({"valid_lengths": [1, 2, 3]}, ValueError, "one entry per row"),
    ({"valid_lengths": [1.0, 2.0, 3.0, 4.0]}, TypeError, "integers"),
    ({"causal": True, "mask_value": np.nan}, ValueError, "mask_value"),
    ({"causal": True, "mask_value": np.inf}, ValueError, "mask_value"),
    ({"causal": True, "mask_value": -1e39}, ValueError, "float32"),
])
def test_bad_mask_input_is_a_clear_error(kwargs, error, match):
    x = np.ones((4, 8), np.float32)
    with pytest.raises(error, match=match):
        osm.softmax(x, **kwargs)


@pytest.mark.parametrize("variant", ["naive", "safe", "softmax_02_online_unguarded", "online_fp16_vec4",
                                     "softmax_05_online_fp16_vec8"])
def test_mask_with_a_variant_without_masks_is_an_error(variant):
    x = np.ones((4, 8), np.float16 if "fp16" in variant else np.float32)
    with pytest.raises(ValueError, match="mask"):
        osm.softmax(x, variant=variant, causal=True)
    with pytest.raises(ValueError, match="mask"):
        osm.softmax(x, variant=variant, valid_lengths=[1, 2, 3, 4])


def test_masked_kernel_takes_the_three_float_dtypes_only():
    for bad in (np.ones((4, 8), np.float64), np.ones((4, 8), np.int32)):
        with pytest.raises(TypeError):
            osm.api.run(VARIANT, bad)
        with pytest.raises(TypeError):
            osm.softmax(bad, causal=True, variant=VARIANT.name)
    with pytest.raises(TypeError):
        osm.softmax(np.ones((4, 8), np.int32), causal=True)
    assert osm.softmax(np.ones((4, 8)), causal=True).dtype == np.float64   # "auto": the exact float64 path
    for dtype in DTYPES:
        x = checks.to_dtype(np.ones((4, 8), np.float32), dtype)
        y = osm.softmax(x, causal=True, causal_align="top_left")
        assert y.dtype == x.dtype
        assert (checks.as_float64(y)[3, :4] == 0.25).all() and (checks.as_float64(y)[3, 4:] == 0).all()
        y = osm.softmax(x, causal=True)   # bottom-right: row 3 of (4, 8) keeps j <= 7, row 0 j <= 4
        first = checks.as_float64(y)[0]
        assert (checks.as_float64(y)[3] == 0.125).all() and (first[:5] == first[0]).all() and (first[5:] == 0).all()


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_lengths_outside_the_row_keep_or_remove_it_all(dtype):
    """valid_lengths is never read on the host (no synchronization per call): a length past N keeps
    the whole row, a length <= 0 removes it (NaN with -inf, as torch; uniform with a finite fill),
    whatever the integer type (an int64 length past 2^31 must not wrap around into a short one)."""
    x = checks.random_rows(np, 4, 9, seed=3)
    lengths = np.array([12, 2**31 + 3 if dtype == "int64" else 200, 0, 5]).astype(dtype)
    if dtype != "uint8":
        lengths[2] = -4 if dtype != "uint8" else 0
    y = osm.softmax(x, valid_lengths=lengths)
    whole = reference.softmax(x.astype(np.float64))
    np.testing.assert_allclose(y[:2], whole[:2], rtol=2e-6, atol=1e-12)
    assert np.isnan(y[2]).all()
    np.testing.assert_allclose(y[3], reference.softmax(x[3:4, :5].astype(np.float64))[0].tolist() + [0] * 4,
                               rtol=2e-6, atol=1e-12)
    assert np.allclose(osm.softmax(x, valid_lengths=lengths, mask_value=-1e6)[2], 1 / 9)


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


@pytest.mark.parametrize("n_q, n_k", [(3, 9), (9, 4), (6, 6), (1, 5)])
def test_top_left_attention_is_torchs_is_causal(n_q, n_k):
    """attention(causal=True, causal_align="top_left") keeps j <= i (torch's is_causal), built from the
    bottom-right kernels: the float64 softmax of explicitly masked scores, output and LSE."""
    rng = np.random.default_rng(n_q * 10 + n_k)
    q, k, v = (rng.standard_normal((2, 2, n, 32)).astype(np.float32) for n in (n_q, n_k, n_k))
    scores = (q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2)) / np.sqrt(32)
    scores = np.where(np.tril(np.ones((n_q, n_k), bool)), scores, -np.inf)
    out, lse = osm.attention(q, k, v, causal=True, causal_align="top_left", return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 2, n_q)
    np.testing.assert_allclose(out, scipy.special.softmax(scores, axis=-1) @ v.astype(np.float64), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse, scipy.special.logsumexp(scores, axis=-1), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="causal_align"):
        osm.attention(q, k, v, causal=True, causal_align="upper_left")
