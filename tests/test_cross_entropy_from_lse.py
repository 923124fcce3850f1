"""cross_entropy_03_from_lse: the gradient of a block of each row's columns from the rows' saved m and
log l. Its NumPy model and its source on the CPU emulator, block by block and stitched into whole rows,
against the float64 truth of the whole rows (the tolerance of cross_entropy_01_rows' gradient), with
every option, extreme rows, and the wrong answers the check must reject."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.gradient_checks import compare_cross_entropy
from onlinesoftmax.kernels.cross_entropy import from_lse
from onlinesoftmax.kernels.cross_entropy import rows as kce

OPTIONS = [{}, {"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"softcap": 30.0}, {"ignore_index": 3},
           {"label_smoothing": 0.2, "z_loss": 1e-4, "softcap": 5.0}]
SCALE = 0.25


def logits_and_targets(n_rows, n_cols, dtype, seed, ignore_index=-100):
    rng = np.random.default_rng(seed)
    x = checks.to_dtype((rng.standard_normal((n_rows, n_cols)) * 4).astype(np.float32), dtype)
    t = rng.integers(0, n_cols, n_rows)
    t[::4] = ignore_index
    return x, t


def full(options):
    return {"ignore_index": options.get("ignore_index", -100), "label_smoothing": options.get("label_smoothing", 0.0),
            "z_loss": options.get("z_loss", 0.0), "softcap": options.get("softcap", 0.0)}


def block_options(options, n_cols):
    o = full(options)
    return {"ignore_index": o["ignore_index"], "uniform": o["label_smoothing"] / n_cols,
            "hit": 1 - o["label_smoothing"], "z_loss": o["z_loss"], "softcap": o["softcap"]}


def row_terms(x, options):
    """(m, log l) per row as linear_cross_entropy keeps them: the largest (capped) logit, and the loss
    kernel's loss with each row's largest logit as its target."""
    o = full(options)
    where = np.asarray(x).astype(np.float32).argmax(1)
    v = np.asarray(x).astype(np.float32)[np.arange(x.shape[0]), where]
    m = (np.float32(o["softcap"]) * np.tanh(v / np.float32(o["softcap"]))).astype(np.float32) if o["softcap"] else v
    log_l = kce.simulate(x, where, ignore_index=-1, softcap=o["softcap"])[0]
    return m.astype(np.float32), log_l.astype(np.float32)


def stitched(x, t, options, width, gradient, first_of=lambda first: first):
    """The whole rows' gradient from blocks of `width` columns, each made by gradient(block, m, log_l, t,
    first=, ...) over a copy of the block's logits."""
    m, log_l = row_terms(x, options)
    dx = checks.poisoned_like(x)
    for first in range(0, x.shape[1], width):
        block = x[:, first:first + width].copy()   # (the gradient is written over it)
        dx[:, first:first + width] = gradient(block, m, log_l, t, first=first_of(first), scale=SCALE,
                                              **block_options(options, x.shape[1]))
    return dx


def check(dx, x, t, options):
    rows, lse, _ = kce.simulate(x, t, None, **full(options))
    return compare_cross_entropy(rows, lse, dx, x, t, scale=SCALE, **full(options))


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_the_model_block_by_block_meets_the_whole_rows_truth(dtype, options):
    x, t = logits_and_targets(9, 1000, dtype, seed=3, ignore_index=full(options)["ignore_index"])
    for width in (1000, 384, 77):
        passed, message = check(stitched(x, t, options, width, from_lse.gradient_from_lse), x, t, options)
        assert passed, f"blocks of {width}: {message}"


def test_wrong_answers_are_rejected():
    x, t = logits_and_targets(9, 1000, "float32", seed=4)
    options = {"label_smoothing": 0.1}
    right = stitched(x, t, options, 128, from_lse.gradient_from_lse)
    assert check(right, x, t, options)[0]
    # every block told it starts at column 0: the target's -(1 - eps) lands in every block's column t
    assert not check(stitched(x, t, options, 128, from_lse.gradient_from_lse, first_of=lambda first: 0), x, t,
                     options)[0]
    ignored_not_zero = right.copy()
    ignored_not_zero[t == -100] = 1e-9
    assert not check(ignored_not_zero, x, t, options)[0]
    assert not check(np.zeros_like(right), x, t, options)[0]
    assert not check(right * np.float32(1.001), x, t, options)[0]


# ---- the kernel's own source on the CPU emulator (onlinesoftmax/runtime/emulator.py) ------------------

@pytest.fixture(scope="module")
def emulated():
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    variant = osm.REGISTRY["cross_entropy_03_from_lse"]
    return variant, emulator.Module(variant.path, list(variant.launched_entries))


def emulate(emulated, vectors=None):
    """gradient(block, m, log_l, t, first=, scale=, **options): one launch of the source over the block
    (the gradient written over it); vectors None: as the launcher decides."""
    variant, module = emulated

    def gradient(block, m, log_l, t, first=0, scale=1.0, ignore_index=-100, uniform=0.0, hit=1.0, z_loss=0.0,
                 softcap=0.0):
        n_rows, n_cols = block.shape
        vec = kce.VEC[block.dtype.name]
        use = vectors if vectors is not None else int(n_cols >= vec and block.ctypes.data % 16 == 0
                                                       and block.strides[0] % 16 == 0)
        words = block if block.dtype == np.float32 else block.view(np.uint16)
        module.launch(variant.dtype_entry(block.dtype.name), (n_rows,), (kce.block_threads(n_cols, vec),),
                      (words, np.int64(block.strides[0] // block.itemsize), np.int32(n_cols), m, log_l,
                       np.ascontiguousarray(t, np.int64), np.int64(first), np.int64(ignore_index), np.int32(use),
                       np.float32(scale), np.float32(uniform), np.float32(hit), np.float32(z_loss), np.float32(softcap)))
        return block
    return gradient


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_kernel_source_meets_the_truth_and_its_paths_agree(emulated, dtype):
    for options in (OPTIONS[0], OPTIONS[-1]):
        x, t = logits_and_targets(5, 1030, dtype, seed=5)
        vector = stitched(x, t, options, 512, emulate(emulated))
        passed, message = check(vector, x, t, options)
        assert passed, f"{options}: {message}"
        scalar = stitched(x, t, options, 512, emulate(emulated, vectors=0))
        assert np.array_equal(scalar.view(np.uint8), vector.view(np.uint8))   # the same arithmetic per element
        model = stitched(x, t, options, 512, from_lse.gradient_from_lse)
        np.testing.assert_allclose(checks.as_float64(vector), checks.as_float64(model),
                                   rtol=4 * checks.EPS[dtype], atol=4 * checks.EPS[dtype] * SCALE)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_kernel_source_on_the_extreme_row_matrix(emulated, dtype):
    """Every row of the extreme-row matrix (onlinesoftmax/extremes.py), a target in each, and one row
    more that is ignored and holds a NaN: its gradient is 0, never 0 * NaN."""
    from onlinesoftmax import extremes

    x = extremes.extreme_rows(np, 300, dtype)
    x = np.concatenate([x, checks.to_dtype(np.where(np.arange(300) == 11, np.nan, 0.0).astype(np.float32)[None],
                                           dtype)])
    t = np.append(np.arange(len(x) - 1) * 37 % 300, -100)
    dx = stitched(x, t, {}, 128, emulate(emulated))
    passed, message = check(dx, x, t, {})
    assert passed, message
    assert (checks.as_float64(dx[-1]) == 0).all()


def test_the_plan_writes_over_x_only():
    variant = osm.REGISTRY["cross_entropy_03_from_lse"]

    def fake(address):   # what the plan reads of an array; it refuses before it touches a device
        return type("Array", (), {"shape": (2, 8), "strides": (32, 4), "itemsize": 4, "dtype": np.dtype(np.float32),
                                  "data": type("Memory", (), {"ptr": address})})()
    with pytest.raises(ValueError, match="y must be x"):
        from_lse.plan(variant, fake(0), fake(64))


def test_row_statistics_of_the_wrong_kind_are_a_clear_error():
    x = np.zeros((3, 8), np.float32)
    m, log_l, t = np.zeros(3, np.float32), np.zeros(3, np.float32), np.zeros(3, np.int64)
    with pytest.raises(TypeError, match="m a contiguous float32 array of one value per row, got x of shape"):
        from_lse.gradient_from_lse(x, m.astype(np.float64), log_l, t)
    with pytest.raises(TypeError, match="targets a contiguous int64"):
        from_lse.gradient_from_lse(x, m, log_l, t[:2])
    with pytest.raises(TypeError, match="log_l"):
        from_lse.gradient_from_lse(x, m, np.zeros(6, np.float32)[::2], t)
