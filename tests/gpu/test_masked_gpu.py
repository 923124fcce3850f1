"""GPU tier for softmax_03_online_masked in float32, float16 and bfloat16: every mask kind on the
edge matrix, fully masked rows, views, rows of a million, the sentinels, and bad input.

Reference: the float64 softmax of the masked logits (`softmax_masked.reference_masked`);
tolerance: twice the error of the same softmax computed in fp32 and rounded once to x's dtype,
plus two ulps (checks.compare for float32; for fp16 / bf16 two ulps of the largest output, as
checks.compare_softmax). The kernel is launched through its plan (runtime/plan.py's get_runner) with the
options `prepare` makes, so these tests hold whatever the public function routes.
"""
from functools import lru_cache

import numpy as np
import cupy as cp
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, masks, reference
from onlinesoftmax.kernels.softmax.masked import FLT_MAX, effective_logits, prepare, reference_masked
from onlinesoftmax.runtime.loader import get_kernel, resources_from_device
from onlinesoftmax.runtime.plan import get_runner

pytestmark = pytest.mark.gpu

MASKED = "softmax_03_online_masked"
VARIANT = osm.REGISTRY[MASKED]
REGISTERS_MASKED = "softmax_14_registers_masked"   # rows up to 32K: the default for masks there
MASKED_VARIANTS = (MASKED, REGISTERS_MASKED)


def skip_unless_fits(variant, n_cols):
    if n_cols > osm.REGISTRY[variant].max_cols:
        pytest.skip(f"{variant} takes rows of at most {osm.REGISTRY[variant].max_cols}")
DTYPES = checks.DTYPES
KINDS = ("none", "causal", "padding", "additive rows x N", "additive N", "additive float",
         "causal + padding + additive", "padding, -1e6", "causal, -FLT_MAX")
KINDS_16 = ("none", "causal + padding + additive", "padding, -1e6", "additive float")   # fp16 / bf16 edge matrix


@lru_cache(maxsize=None)
def rows_on_gpu(n_rows, n_cols, seed, dtype="float32"):
    return checks.random_rows(cp, n_rows, n_cols, dtype, seed=seed)


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
        "causal": {"causal": True},
        "padding": {"valid_lengths": lengths},
        "additive rows x N": {"mask": additive},
        "additive N": {"mask": cp.where(rng.random(n_cols) < 0.5, 0.0, -cp.inf).astype(cp.float32)},
        "additive float": {"mask": rng.uniform(-5, 5, (n_rows, n_cols)).astype(cp.float32)},
        "causal + padding + additive": {"mask": additive, "valid_lengths": lengths},
        "padding, -1e6": {"valid_lengths": lengths, "mask_value": -1e6},
        "causal, -FLT_MAX": {"causal": True, "mask_value": -FLT_MAX},
    }[kind]


def rows_of(x):
    """x with unit column stride (a copy otherwise, as the API makes); 16-bit arrays copied as bits."""
    if x.strides[1] == x.itemsize and x.strides[0] >= 0 and x.strides[0] % x.itemsize == 0:
        return x
    if x.itemsize == 2:
        return cp.ascontiguousarray(x.view(cp.uint16)).view(x.dtype)
    return cp.ascontiguousarray(x)


def options_of(x, kwargs):
    return masks.options(x, kwargs.get("mask"), kwargs.get("valid_lengths"), kwargs.get("mask_value", -np.inf),
                         causal=kwargs.get("causal", False), causal_align=kwargs.get("causal_align", "bottom_right"))


def launch(x, out=None, variant=MASKED, **kwargs):
    """A masked kernel on x through its plan; `out` (poisoned) defaults to a fresh poisoned array."""
    x = rows_of(x)
    options = options_of(x, kwargs)
    y = checks.poisoned_like(x) if out is None else out
    get_runner(osm.REGISTRY[variant], x, y, options)(x, y, **options)
    return y


def rounded(y32, dtype):
    if dtype == "float16":
        return y32.astype(cp.float16).astype(cp.float64)
    if dtype == "bfloat16":   # NaN kept apart: round_to_bf16's bit trick carries NaN 0x7fffffff into the sign
        return cp.where(cp.isnan(y32), cp.nan, checks.round_to_bf16(y32).astype(cp.float64))
    return y32.astype(cp.float64)


def run_and_check(x, out=None, variant=MASKED, **kwargs):
    """Run on poisoned output, synchronize, check coverage, NaN pattern and error. Returns y."""
    dtype = x.dtype.name
    out = checks.poisoned_like(x) if out is None else out
    assert checks.unwritten(out) == out.size, "pass a poisoned out"
    y = launch(x, out=out, variant=variant, **kwargs)
    cp.cuda.Device().synchronize()
    assert y is out and y.dtype == x.dtype and checks.unwritten(y) == 0, "outputs left unwritten"
    x64 = checks.as_float64(rows_of(x))
    options = options_of(x64, kwargs)
    ref = reference_masked(x64, **options)
    baseline32 = reference.softmax_same_dtype(effective_logits(x64.astype(cp.float32), **options))
    y64 = checks.as_float64(y)
    assert bool((cp.isnan(y64) == cp.isnan(ref)).all()), "NaN pattern differs from the reference"
    if dtype == "float32":
        passed, message = checks.compare(y, ref, baseline32, np.float32)
    else:
        err = checks.max_abs_error(y64, ref)
        base_err = checks.max_abs_error(rounded(baseline32, dtype), ref)
        base_err = base_err if np.isfinite(base_err) else 0.0
        finite = cp.abs(ref[cp.isfinite(ref)])
        scale = float(finite.max()) if finite.size else 1.0
        tol = 2.0 * base_err + 2.0 * checks.EPS[dtype] * scale
        passed, message = bool(err <= tol), f"{dtype}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"
    assert passed, f"{x.shape}: {message}"
    return y


def checked_kinds(dtype):
    return KINDS if dtype == "float32" else KINDS_16


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
@pytest.mark.parametrize("kind, dtype", [(k, d) for d in DTYPES for k in checked_kinds(d)])
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_edge_matrix(variant, kind, dtype, n_rows, n_cols):
    skip_unless_fits(variant, n_cols)
    x = rows_on_gpu(n_rows, n_cols, n_rows * 7919 + n_cols, dtype)
    kwargs = mask_kwargs(kind, n_rows, n_cols, seed=n_cols)
    y64 = checks.as_float64(run_and_check(x, variant=variant, **kwargs))
    fully_masked_row0 = kind in ("padding", "additive rows x N", "causal + padding + additive")
    if fully_masked_row0:
        assert bool(cp.isnan(y64[0]).all()), "a fully masked row must be NaN (as torch)"
    if kind == "padding, -1e6":
        assert bool(cp.allclose(y64[0], 1.0 / n_cols, rtol=max(1e-5, checks.EPS[dtype]))), "fully masked with -1e6: uniform"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ("none", "padding", "additive N", "causal + padding + additive"))
@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
def test_rows_of_a_million(kind, n_cols, dtype):
    x = rows_on_gpu(3, n_cols, n_cols, dtype)
    run_and_check(x, **mask_kwargs(kind, 3, n_cols, seed=1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 3), (300, 100), (3, 8), (100, 300), (257, 257)])
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_causal_is_torch_is_causal(variant, shape, dtype):
    """causal_align="top_left": row i keeps columns j <= i (ones(L, S).tril(0)) for tall, wide and square
    matrices; the default, bottom-right, is tested through every kind of the edge matrix."""
    x = rows_on_gpu(*shape, 5, dtype)
    y = run_and_check(x, variant=variant, causal=True, causal_align="top_left")
    y64 = checks.as_float64(y)
    keep = cp.tril(cp.ones(shape, dtype=bool))
    assert bool((y64[~keep] == 0).all()) and bool(cp.allclose(y64.sum(axis=1), 1.0, rtol=max(1e-5, checks.EPS[dtype])))
    if dtype != "float32":
        return
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        t = torch.as_tensor(x, device="cuda")
        expected = torch.softmax(t.masked_fill(~torch.ones(shape, dtype=torch.bool, device="cuda").tril(0),
                                               float("-inf")), dim=1)
        assert torch.allclose(torch.as_tensor(y, device="cuda"), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ("causal", "additive rows x N", "causal + padding + additive"))
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_views_strided_and_misaligned(variant, kind, dtype):
    base = rows_on_gpu(9, 1001, 5, dtype)
    for view in (base[:, 1:], base[::2], base[1::3, 3:-2], base[:, ::2], base.T[:500].T):
        run_and_check(view, variant=variant, **mask_kwargs(kind, *view.shape, seed=2))
    out_base = checks.poisoned_like(base)
    run_and_check(base[:, 1:], out=out_base[:, 1:], variant=variant, **mask_kwargs(kind, 9, 1000, seed=3))
    aligned = rows_on_gpu(8, 1024, 6, dtype)   # the 16-byte build, with a mask whose rows are off 16 bytes
    mask = cp.zeros((8, 1025), cp.float32)[:, 1:]
    mask[:, 700:] = -cp.inf
    run_and_check(aligned, variant=variant, mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_gpu_matches_the_model(variant, dtype):
    """fp32: to 2e-6 relative; fp16 / bf16: to one ulp of the dtype (both round fp32 values once)."""
    host = checks.random_rows(np, 300, 257, dtype, seed=11)
    rng = np.random.default_rng(0)
    mask = np.where(rng.random((300, 257)) < 0.6, 0.0, -np.inf).astype(np.float32)
    lengths = rng.integers(0, 258, 300)
    for kwargs in ({"causal": True}, {"mask": mask, "valid_lengths": lengths},
                   {"mask": mask[0]}, {"valid_lengths": lengths, "mask_value": -1e6}, {}):
        gpu = checks.as_float64(launch(checks.on_device(cp, host), variant=variant, **kwargs)).get()
        model = checks.as_float64(osm.api.run(osm.REGISTRY[variant], host, **options_of(host, kwargs)))
        assert np.array_equal(np.isnan(gpu), np.isnan(model))
        if dtype == "float32":
            np.testing.assert_allclose(gpu, model, rtol=2e-6, atol=1e-12)
        else:
            keep = ~np.isnan(model)
            assert (np.abs(gpu - model)[keep] <= np.abs(model)[keep] * checks.EPS[dtype] + 1e-30).all(), kwargs


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("variant", MASKED_VARIANTS)
@pytest.mark.parametrize("n_cols", (257,))   # softmax_14's scalar build: one partition for every dtype
def test_16_bit_entries_are_the_float32_entry_rounded_once(variant, n_cols, dtype):
    """x widened exactly, the same fp32 arithmetic, one rounding: bit for bit the fp32 entry's
    output on the widened input, rounded to the dtype."""
    x = rows_on_gpu(300, n_cols, 13, dtype)
    widened = checks.as_float64(x).astype(cp.float32)
    for kind in KINDS:
        kwargs = mask_kwargs(kind, 300, n_cols, seed=4)
        y = launch(x, variant=variant, **kwargs)
        y32 = launch(widened, variant=variant, **kwargs)
        expected = y32.astype(cp.float16) if dtype == "float16" else checks.from_float32(y32, "bfloat16")
        nan = cp.isnan(y32)   # compared apart: NaN has many bit patterns (and round_to_bf16 loses some)
        same = cp.where(nan, cp.isnan(checks.as_float64(y)), y.view(cp.uint16) == expected.view(cp.uint16))
        assert bool(same.all()), f"{kind}: {int((~same).sum())} outputs differ"


@pytest.mark.parametrize("variant", MASKED_VARIANTS)
def test_sentinels_on_fully_masked_rows_and_low_logits(variant):
    """-inf: NaN; -1e6 / -FLT_MAX: uniform. Logits near -2e6 lose to a -1e6 sentinel (float32: fp16
    cannot hold -2e6, bf16 holds it only to 2^14)."""
    def check(x, **kwargs):
        return run_and_check(x, variant=variant, **kwargs)

    x = cp.asarray((np.random.default_rng(0).standard_normal((3, 40)) - 2e6).astype(np.float32))
    lengths = cp.asarray([0, 10, 40])
    assert bool(cp.isnan(check(x, valid_lengths=lengths)[0]).all())
    for sentinel in (-1e6, -FLT_MAX):
        y = check(x, valid_lengths=lengths, mask_value=sentinel)
        assert bool(cp.allclose(y[0], 1 / 40, rtol=1e-6))
    wrong = check(x, valid_lengths=lengths, mask_value=-1e6)
    assert abs(float(wrong[1, 10:].sum()) - 1.0) < 1e-5 and bool((wrong[1, :10] == 0).all())
    right = check(x, valid_lengths=lengths, mask_value=-FLT_MAX)
    assert abs(float(right[1, :10].sum()) - 1.0) < 1e-5 and bool((right[1, 10:] == 0).all())
    for dtype in ("float16", "bfloat16"):   # fully masked rows in 16 bits: NaN with -inf, 1/40 with a sentinel
        x16 = rows_on_gpu(3, 40, 7, dtype)
        assert bool(cp.isnan(checks.as_float64(check(x16, valid_lengths=lengths))[0]).all())
        for sentinel in (-1e6, -FLT_MAX):
            y = checks.as_float64(check(x16, valid_lengths=lengths, mask_value=sentinel))
            assert bool(cp.allclose(y[0], 1 / 40, rtol=checks.EPS[dtype])) and bool((y[1, 10:] == 0).all())


def test_host_masks_with_gpu_input_and_the_model_agree():
    """Through the public function (masks route to the masked kernel), in every dtype."""
    for dtype in DTYPES:
        host = checks.random_rows(np, 7, 100, dtype, seed=4)
        mask = np.where(np.random.default_rng(1).random(100) < 0.5, 0.0, -np.inf)   # float64 on the host
        gpu = osm.softmax(checks.on_device(cp, host), mask=mask, valid_lengths=[0, 1, 2, 50, 99, 100, 100])
        model = osm.softmax(host, mask=mask, valid_lengths=[0, 1, 2, 50, 99, 100, 100])
        assert gpu.dtype == host.dtype and model.dtype == host.dtype
        gpu, model = checks.as_float64(gpu).get(), checks.as_float64(model)
        assert np.array_equal(np.isnan(gpu), np.isnan(model))
        keep = ~np.isnan(model)
        rtol = 2e-6 if dtype == "float32" else checks.EPS[dtype]
        assert (np.abs(gpu - model)[keep] <= rtol * np.abs(model)[keep] + 1e-12).all(), dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeated_masked_calls_take_the_fast_path_and_read_the_new_mask(dtype, monkeypatch):
    """A repeated call with the same layouts (an additive cupy float32 mask, cupy int32 lengths, a
    causal mask over (batch, q, N)) skips the slow path, and still reads the mask and the lengths
    the caller passes at that call: their contents change between calls, the answers follow.
    Lengths outside [0, N] keep or remove the whole row, as on the NumPy path."""
    slow = []
    real_call = osm.api._call
    monkeypatch.setattr(osm.api, "_call", lambda *args: slow.append(args[0]) or real_call(*args))
    x = rows_on_gpu(6, 300, 11, dtype)
    x3 = x.reshape(2, 3, 300)
    for round_ in range(3):
        rng = cp.random.default_rng(round_)
        mask = cp.where(rng.random((6, 300)) < 0.6, 0.0, -cp.inf).astype(cp.float32)
        mask[:, 0] = 0
        lengths = cp.asarray(rng.integers(-3, 320, 6), dtype=cp.int32)
        lengths[0] = 0
        for kwargs in ({"mask": mask}, {"valid_lengths": lengths}, {"mask": mask, "valid_lengths": lengths,
                                                                     "mask_value": -1e6}):
            out = checks.poisoned_like(x)
            assert osm.softmax(x, out=out, **kwargs) is out
            y = out
            options = masks.options(x, kwargs.get("mask"), kwargs.get("valid_lengths"), kwargs.get("mask_value", -np.inf),
                         causal=kwargs.get("causal", False), causal_align=kwargs.get("causal_align", "bottom_right"))
            expected = reference_masked(x.get() if dtype == "float32" else checks.as_float64(x).get(),
                                        **{k: (v.get() if hasattr(v, "get") else v) for k, v in options.items()})
            got = checks.as_float64(y).get()
            assert np.array_equal(np.isnan(got), np.isnan(expected)), (round_, kwargs.keys())
            keep = ~np.isnan(expected)
            tol = 4e-6 if dtype == "float32" else 2 * checks.EPS[dtype]
            assert (np.abs(got - expected)[keep] <= tol * np.abs(expected)[keep] + tol * 1e-3).all(), (round_, kwargs.keys())
        # causal over (batch, 3 queries, 300 keys), the diagonal bottom-right: query i keeps keys j <= i + 297
        causal = checks.as_float64(osm.softmax(x3, causal=True)).get()
        exact = checks.as_float64(x3).get()
        exact[:, 0, 298:] = exact[:, 1, 299:] = -np.inf
        exact = np.exp(exact - exact.max(axis=-1, keepdims=True))
        exact /= exact.sum(axis=-1, keepdims=True)   # (a 16-bit exponential may underflow to 0: graded as one)
        assert (causal[:, 0, 298:] == 0).all() and (causal[:, 2] != 0).any(axis=-1).all()
        assert (np.abs(causal - exact) <= tol * exact + tol * 1e-3).all(), round_
    assert slow == ["softmax"] * 4, f"only the first call of each form may take the slow path, got {slow}"


def test_registers_masked_without_a_mask_is_softmax_07_or_08_bit_for_bit():
    """fp32, no mask, no lengths, not causal: softmax_14 runs the arithmetic of softmax_07 (N <= 1024)
    or softmax_08 on the same partition (16-bit rows differ: those fold their exponent into one FMA)."""
    for shape in ((7, 1000), (300, 4096), (2, 32768), (5, 333), (130, 1024), (3, 1025), (33, 4)):
        x = rows_on_gpu(*shape, 21)
        y14 = launch(x, variant=REGISTERS_MASKED)
        unmasked = "softmax_07_warp_per_row" if shape[1] <= 1024 else "softmax_08_registers"
        y0 = checks.poisoned_like(x)
        get_runner(osm.REGISTRY[unmasked], x, y0, {})(x, y0)
        assert bool((y14.view(cp.uint8) == y0.view(cp.uint8)).all()), (shape, unmasked)


def test_bad_input_then_the_context_is_healthy():
    x = cp.ones((4, 8), cp.float32)
    for kwargs, error in (({"mask": cp.zeros((3, 8), cp.float32)}, ValueError),
                          ({"mask": cp.ones((4, 8), dtype=bool)}, TypeError),
                          ({"valid_lengths": cp.asarray([1, 2, 3])}, ValueError),
                          ({"mask": "anticausal"}, ValueError),
                          ({"valid_lengths": cp.asarray([1.0, 2.0, 3.0, 4.0])}, TypeError)):
        with pytest.raises(error):
            osm.softmax(x, **kwargs)
    for variant in ("safe", "naive", "softmax_02_online_unguarded", "online_fp16_vec8"):
        with pytest.raises(ValueError, match="mask"):
            osm.softmax(x.astype(cp.float16) if "fp16" in variant else x, variant=variant, causal=True)
    exact = osm.softmax(x.astype(cp.float64), causal=True)   # float64 with a mask: computed exactly, as on the host
    assert exact.dtype == cp.float64 and np.allclose(exact.get(), osm.softmax(x.get().astype(np.float64), causal=True),
                                                     rtol=1e-12, atol=0)
    with pytest.raises(TypeError):   # y in another dtype than x
        VARIANT.plan(VARIANT, x.astype(cp.float16), x, **prepare(x, "causal"))
    for dtype in DTYPES:
        run_and_check(rows_on_gpu(4, 8, 1, dtype), causal=True)


def test_compiled_resources_are_reported():
    """Every entry: registers reported, no local memory."""
    for entry in VARIANT.launched_entries:
        report = resources_from_device(get_kernel(VARIANT.path, entry, VARIANT.defines))
        assert 0 < report.registers <= 64 and report.stack_bytes == 0, (entry, report)


# ---- long peaked rows: the accuracy rule against torch's float32 error, before and after ------------

def peaked_mask_kwargs(kind, x):
    """No mask, or an additive 0 / -inf mask of one row (30% removed) that keeps every row's peak."""
    if kind == "none":
        return {}
    keep = cp.random.default_rng(4).random(x.shape[1]) < 0.7
    keep[cp.argmax(x, axis=1)] = True
    return {"mask": cp.where(keep, 0.0, -cp.inf).astype(cp.float32)}


def long_row_verdicts(variant, x, kwargs):
    """Per row: (passed, message) of `variant` against torch's float32 softmax of the masked logits."""
    from onlinesoftmax.measure.bench import torch_softmax

    options = options_of(x, kwargs)
    y = checks.poisoned_like(x)
    get_runner(variant, x, y, options)(x, y, **options)
    cp.cuda.Device().synchronize()
    assert checks.unwritten(y) == 0, f"{variant.name}: outputs left unwritten"
    logits = effective_logits(x, **options)
    ref = reference.softmax(logits.astype(cp.float64).get())
    return checks.compare_each_row(y.get(), ref, torch_softmax(logits).get(), np.float32)


@pytest.mark.parametrize("kind", ("none", "additive N"))
@pytest.mark.parametrize("n_cols", checks.LONG_PEAKED_COLS)
def test_long_peaked_rows_pass_the_rule_and_the_sequential_build_fails(n_cols, kind):
    """checks.peaked_rows within twice torch's float32 error plus two ulps, each row; the build with one
    running state per thread (-DTHREAD_FOLD_SEQUENTIAL=1, the schedule before the fix) fails it."""
    pytest.importorskip("torch", reason="the long-row rule's baseline is torch.softmax")
    from onlinesoftmax.kernels.softmax.teaching import sequential_of

    x = checks.peaked_rows(cp, n_cols)
    kwargs = peaked_mask_kwargs(kind, x)
    after = long_row_verdicts(VARIANT, x, kwargs)
    assert all(passed for passed, _ in after), "; ".join(m for _, m in after)
    before = long_row_verdicts(sequential_of(MASKED), x, kwargs)
    assert not all(passed for passed, _ in before), "the sequential build passes: " + "; ".join(m for _, m in before)
