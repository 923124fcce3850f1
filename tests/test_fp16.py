"""CPU tier: the fp16 kernels softmax_04_online_fp16_vec4 / softmax_05_online_fp16_vec8 on their models.

The model replays each row's split (scalar head up to the first aligned address, whole
vectors, scalar tail) and each thread's push order; fp16 in, fp32 inside, fp16 out.
tests/gpu/test_fp16_gpu.py runs the same cases on the kernels.
"""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.softmax.fp16 import row_heads, schedule, simulate_fp16

FP16 = ("softmax_04_online_fp16_vec4", "softmax_05_online_fp16_vec8")
VEC = {"softmax_04_online_fp16_vec4": 4, "softmax_05_online_fp16_vec8": 8}


def check_fp16(variant, x, out=None):
    out = checks.poisoned_like(x) if out is None else out
    y = osm.softmax(x, variant=variant, out=out)
    assert y is out and y.dtype == np.float16 and checks.unwritten(y) == 0
    ref = reference.softmax(x)
    passed, message = checks.compare(y, ref, reference.softmax_same_dtype(x), np.float16)
    assert passed, f"{variant} {x.shape}: {message}"
    assert checks.fp16_rounding_excess(y, ref) <= 1.0, "more than fp32 math + one rounding to fp16"
    return y


@pytest.mark.parametrize("n_cols", (1, 2, 3, 5, 7, 8, 9, 31, 33, 100, 255, 256, 257, 1000, 4097))
@pytest.mark.parametrize("variant", FP16)
def test_edge_sizes(variant, n_cols):
    check_fp16(variant, checks.random_rows(np, 7, n_cols, "float16", seed=n_cols, max_offset=8))


@pytest.mark.parametrize("n_cols", (2, 4, 8, 16, 17))
@pytest.mark.parametrize("vec", (4, 8))
def test_schedule_pushes_every_column_once(vec, n_cols):
    for head in range(vec):
        columns = np.concatenate([cols[valid] for cols, valid in schedule(n_cols * 40 + 3, head, vec)])
        assert np.array_equal(np.sort(columns), np.arange(n_cols * 40 + 3))


@pytest.mark.parametrize("variant", FP16)
def test_misaligned_starts_and_odd_row_strides(variant):
    """Views starting at every element offset, odd row strides, and y aligned differently from x."""
    vec = VEC[variant]
    base = checks.random_rows(np, 9, 1003, "float16", seed=5, max_offset=8)
    for start in range(vec + 1):
        view = base[:, start:start + 997]                 # row stride 1003 (odd), start at `start`
        heads = row_heads(view, vec)
        assert len(set(heads.tolist())) > 1               # rows really do differ in alignment
        check_fp16(variant, view)                         # y contiguous: different phase from x
        out_base = checks.poisoned_like(base)
        check_fp16(variant, view, out=out_base[:, start:start + 997])   # y with x's phase
    check_fp16(variant, base[1::2, 3:-1])


@pytest.mark.parametrize("variant", FP16)
def test_logits_beyond_fp16_exp_range_do_not_overflow(variant):
    """e^x overflows fp16 once x > ln(65504) ~ 11.09; with fp32 math inside nothing overflows."""
    rng = np.random.default_rng(7)
    x = np.stack([rng.uniform(11.5, 60.0, 300), rng.uniform(60000, 65504, 300),
                  rng.uniform(-65504, -60000, 300)]).astype(np.float16)
    y = check_fp16(variant, x)
    assert np.isfinite(y).all() and np.isclose(y.astype(np.float64).sum(axis=1), 1.0, atol=3e-2).all()


@pytest.mark.parametrize("n_cols", (1, 3, 100, 257, 4097))
@pytest.mark.parametrize("variant", FP16)
def test_special_rows(variant, n_cols):
    x, nan_rows = checks.special_rows(np, n_cols, "float16")
    y = check_fp16(variant, x)
    assert (np.isnan(y).all(axis=1) == nan_rows).all()
    assert not np.isnan(y[~nan_rows]).any()


def test_model_follows_the_head_it_is_given():
    """Different heads change only the push order: results agree to an fp16 ulp."""
    x = checks.random_rows(np, 4, 1000, "float16", seed=9, max_offset=8)
    ys = [simulate_fp16(x, 8, heads=np.full(4, h)) for h in range(8)]
    for y in ys[1:]:
        np.testing.assert_allclose(y.astype(np.float32), ys[0].astype(np.float32), rtol=1e-3, atol=6e-8)


def test_the_strict_fp16_check_rejects_fp16_arithmetic():
    """Softmax computed in fp16 arithmetic (cupy/numpy float16 ops) is worse than one rounding."""
    x = checks.random_rows(np, 4, 2000, "float16", seed=3, max_offset=8)
    in_fp16 = reference.softmax_same_dtype(x)
    assert checks.fp16_rounding_excess(in_fp16, reference.softmax(x)) > 1.0
    y = osm.softmax(x, variant="online_fp16_vec8")
    y[0, 0] = np.float16(float(y[0, 0]) * 1.01 + 1e-3)
    assert checks.fp16_rounding_excess(y, reference.softmax(x)) > 1.0


@pytest.mark.parametrize("variant", FP16)
def test_bad_input(variant):
    with pytest.raises(TypeError, match="float16"):
        osm.softmax(np.ones((2, 8), np.float32), variant=variant)
    x3 = np.random.default_rng(0).standard_normal((2, 3, 40)).astype(np.float16)   # leading axes merge into rows
    np.testing.assert_array_equal(osm.softmax(x3, variant=variant),
                                  osm.softmax(x3.reshape(6, 40), variant=variant).reshape(2, 3, 40))
    with pytest.raises(ValueError, match="no mask"):
        osm.softmax(np.ones((2, 8), np.float16), variant=variant, causal=True)
    with pytest.raises(TypeError):
        osm.softmax(np.ones((2, 8), np.float16), variant="online")
