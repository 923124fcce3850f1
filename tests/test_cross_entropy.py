"""Cross-entropy from logits (onlinesoftmax.cross_entropy, cross_entropy_with_grad; the kernel
cross_entropy_01_rows through its NumPy model): against torch's F.cross_entropy and the float64
truth, every option, the grader's wrong answers, bad input, and the autograd operator's gradcheck."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.gradient_checks import compare_cross_entropy
from onlinesoftmax.kernels.cross_entropy import rows as kce

OPTIONS = [{}, {"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"softcap": 30.0}, {"ignore_index": 3},
           {"label_smoothing": 0.2, "z_loss": 1e-4, "softcap": 5.0}]


def logits_and_targets(n_rows, n_cols, dtype="float32", seed=0, scale=4.0, ignore_index=-100):
    rng = np.random.default_rng(seed)
    x = checks.to_dtype((rng.standard_normal((n_rows, n_cols)) * scale).astype(np.float32), dtype)
    t = rng.integers(0, n_cols, n_rows)
    t[::5] = ignore_index                            # ignored rows
    return x, t


def kernel_options(options):
    return {"ignore_index": options.get("ignore_index", -100), "label_smoothing": options.get("label_smoothing", 0.0),
            "z_loss": options.get("z_loss", 0.0), "softcap": options.get("softcap", 0.0)}


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_the_model_meets_the_float64_truth(dtype, options):
    x, t = logits_and_targets(13, 257, dtype, seed=len(options), ignore_index=options.get("ignore_index", -100))
    loss, lse, dx = osm.cross_entropy_with_grad(x, t, reduction="sum", **options)
    rows = osm.cross_entropy(x, t, reduction="none", **options)
    passed, message = compare_cross_entropy(rows, lse, dx, x, t, **kernel_options(options))
    assert passed, message
    assert dx.dtype == x.dtype and dx.shape == x.shape and lse.dtype == np.float32


@pytest.mark.parametrize("options", [{}, {"label_smoothing": 0.1}, {"ignore_index": 3}], ids=("plain", "smoothing", "ignore"))
@pytest.mark.parametrize("reduction", ("mean", "sum", "none"))
def test_as_torch_computes_it(options, reduction):
    torch = pytest.importorskip("torch")
    x, t = logits_and_targets(11, 50, seed=2, ignore_index=options.get("ignore_index", -100))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    want = torch.nn.functional.cross_entropy(xt, torch.tensor(t), reduction=reduction, **options)
    want.backward(torch.ones_like(want))
    loss, _, dx = osm.cross_entropy_with_grad(x, t, reduction=reduction, **options)
    np.testing.assert_allclose(loss, want.detach().numpy(), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(osm.cross_entropy(x, t, reduction=reduction, **options), loss, rtol=0, atol=0)


def test_leading_axes_float64_and_in_place():
    x, t = logits_and_targets(12, 33, seed=4)
    loss, lse, dx = osm.cross_entropy_with_grad(x.reshape(3, 4, 33), t.reshape(3, 4))
    assert loss.shape == () and lse.shape == (3, 4) and dx.shape == (3, 4, 33)
    np.testing.assert_array_equal(dx.reshape(12, 33), osm.cross_entropy_with_grad(x, t)[2])
    exact = osm.cross_entropy(x.astype(np.float64), t)
    assert exact.dtype == np.float64 and abs(float(exact) - float(loss)) < 1e-5
    y = x.copy()
    _, _, same = osm.cross_entropy_with_grad(y, t, in_place=True)
    assert same is y and np.array_equal(y, dx.reshape(12, 33))
    assert np.isnan(osm.cross_entropy(x, np.full(12, -100)))   # nothing counted: 0 / 0, as torch
    loss, lse, dx = osm.cross_entropy_with_grad(np.ones((0, 5), np.float16), np.ones(0, np.int64), reduction="sum")
    assert float(loss) == 0 and lse.shape == (0,) and lse.dtype == np.float32 and dx.shape == (0, 5) \
        and dx.dtype == np.float16


def test_a_mean_over_no_row_is_nan_with_a_zero_gradient_as_torch():
    x, t = logits_and_targets(6, 11, seed=3)
    t[:] = -100
    for options in OPTIONS[:3]:
        loss, _, grad = osm.cross_entropy_with_grad(x, t, **options)
        assert np.isnan(loss) and not np.isnan(grad).any() and not grad.any(), options
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401  (the operator)
    logits = torch.from_numpy(x.copy()).requires_grad_()
    loss = osm.cross_entropy(logits, torch.from_numpy(t))
    loss.backward()
    assert torch.isnan(loss) and not logits.grad.isnan().any() and not logits.grad.any()


def test_extreme_rows():
    """Logits of 1e30, -inf entries (a masked vocabulary), a NaN row; softcap keeps 1e30 finite."""
    x = np.zeros((4, 6), np.float32)
    x[0, 2] = 1e30
    x[1, :3] = -np.inf
    x[2, 4] = np.nan
    t = np.array([2, 4, 1, 0])
    rows = osm.cross_entropy(x, t, reduction="none")
    assert rows[0] == 0 and np.isfinite(rows[1]) and np.isnan(rows[2]) and rows[3] == np.float32(np.log(6))
    _, _, dx = osm.cross_entropy_with_grad(x, t, reduction="sum")
    assert (dx[1, :3] == 0).all() and np.isnan(dx[2]).all()
    capped = osm.cross_entropy(x[:1], t[:1], softcap=10.0, reduction="none")
    assert np.isfinite(capped).all()
    passed, message = compare_cross_entropy(rows, kce.reference(x, t)[1].astype(np.float32), dx, x, t)
    assert passed, message


def test_the_grader_rejects_wrong_answers():
    x, t = logits_and_targets(9, 100, seed=5)
    options = kernel_options({})
    rows, lse, dx = kce.simulate(x, t, 1.0, **options)
    assert compare_cross_entropy(rows, lse, dx, x, t, **options)[0]
    wrong = {"loss + 1e-4": (rows + 1e-4, lse, dx), "lse of the wrong row": (rows, np.roll(lse, 1), dx),
             "no one-hot": (rows, lse, np.where(np.arange(100) == t[:, None], 0, dx)),
             "an all-zero gradient": (rows, lse, np.zeros_like(dx)), "dx * 1.001": (rows, lse, dx * 1.001),
             "an ignored row's loss": (np.where(t == -100, 1.0, rows), lse, dx),
             "an unexpected NaN": (rows, lse, np.where(np.arange(100) == 7, np.nan, dx)),
             # the float32 floor is 4 ulps of the row's largest term, which is at most 1
             "one entry per row 10 ulps of 1 off": (rows, lse, dx + np.where(np.arange(100) == 3, np.float32(10 * 2.0**-23), 0))}
    for name, answer in wrong.items():
        assert not compare_cross_entropy(*answer, x, t, **options)[0], name


@pytest.mark.parametrize("kwargs, error, match", [
    ({"targets": np.array([0, 7])}, ValueError, "target 7 of row 1 is outside"),
    ({"targets": np.array([0, -1])}, ValueError, "target -1"),
    ({"targets": np.array([0.0, 1.0])}, TypeError, "integers"),
    ({"targets": np.array([0, 1, 2])}, ValueError, "targets must be"),
    ({"label_smoothing": 1.5}, ValueError, "label_smoothing"),
    ({"z_loss": -1.0}, ValueError, "z_loss"),
    ({"softcap": 0.0}, ValueError, "softcap"),
    ({"reduction": "avg"}, ValueError, "reduction"),
    ({"ignore_index": 1.0}, TypeError, "ignore_index"),
    ({"logits": np.ones((2, 7), np.int32)}, TypeError, "float32"),
    ({"logits": np.ones((2, 0), np.float32)}, ValueError, "at least one class"),
])
def test_bad_input_is_a_clear_error(kwargs, error, match):
    arguments = {"logits": np.ones((2, 7), np.float32), "targets": np.array([0, 1])} | kwargs
    with pytest.raises(error, match=match):
        osm.cross_entropy(arguments.pop("logits"), arguments.pop("targets"), **arguments)


@pytest.mark.parametrize("options", OPTIONS[:5], ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize("reduction", ("mean", "none"))
def test_the_operator_gradchecks(options, reduction):
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    x = torch.randn(6, 9, dtype=torch.float64, requires_grad=True)
    o = kernel_options(options)
    t = torch.tensor([0, 3, o["ignore_index"], 8, 2, 5])

    def f(x):
        return torch.ops.onlinesoftmax.cross_entropy(x, t, o["ignore_index"], o["label_smoothing"], o["z_loss"],
                                                     o["softcap"], reduction)[0]
    assert torch.autograd.gradcheck(f, (x,))
    loss = osm.cross_entropy(x, t, reduction=reduction, **options)   # a tensor that needs a gradient: the operator
    assert loss.requires_grad


# ---- the kernel's own source on the CPU emulator (onlinesoftmax/runtime/emulator.py) ------------------

@pytest.fixture(scope="module")
def emulated():
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    variant = osm.REGISTRY["cross_entropy_01_rows"]
    return variant, emulator.Module(variant.path, list(variant.launched_entries))


def emulate(emulated, x, t, options, grad="separate", vectors=None, scale=0.25):
    """One launch of the kernel's source on x (numpy), into poisoned loss, lse and dx; grad "separate",
    "in place" or None (no gradient: null dx and grad_scale)."""
    variant, module = emulated
    n_rows, n_cols = x.shape
    vec = kce.VEC[x.dtype.name]
    rows = checks.poisoned_like(x, "float32", (n_rows,))
    lse = checks.poisoned_like(x, "float32", (n_rows,))
    dx = None if grad is None else x if grad == "in place" else checks.poisoned_like(x)
    if vectors is None:
        vectors = int(n_cols >= vec and all(a.ctypes.data % 16 == 0 and a.strides[0] % 16 == 0
                                            for a in (x, *(() if dx is None else (dx,)))))
    words = (lambda a: a) if x.dtype == np.float32 else (lambda a: None if a is None else a.view(np.uint16))
    o = kernel_options(options)
    module.launch(variant.dtype_entry(x.dtype.name), (n_rows,), (kce.block_threads(n_cols, vec),),
                  (words(x), words(dx), np.ascontiguousarray(t, np.int64), rows, lse,
                   None if grad is None else np.full(1, scale, np.float32), np.int32(n_cols), np.int64(x.strides[0] // x.itemsize),
                   np.int64(0 if dx is None else dx.strides[0] // dx.itemsize), np.int32(vectors),
                   np.int64(o["ignore_index"]), np.float32(o["label_smoothing"]), np.float32(o["z_loss"]),
                   np.float32(o["softcap"])))
    return rows, lse, dx


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", (1, 7, 33, 300, 1001, 4096))
def test_the_kernel_source_meets_the_truth(emulated, dtype, n_cols):
    for options in (OPTIONS[0], OPTIONS[-1]):
        x, t = logits_and_targets(5, n_cols, dtype, seed=n_cols)
        rows, lse, dx = emulate(emulated, x, t, options)
        assert checks.unwritten(rows) == 0 and checks.unwritten(dx) == 0
        passed, message = compare_cross_entropy(rows, lse, dx, x, t, scale=0.25, **kernel_options(options))
        assert passed, f"{options}: {message}"


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_the_kernel_source_in_place_scalar_and_without_a_gradient(emulated, dtype, options):
    x, t = logits_and_targets(6, 520, dtype, seed=7, ignore_index=options.get("ignore_index", -100))
    rows, lse, dx = emulate(emulated, x, t, options)
    passed, message = compare_cross_entropy(rows, lse, dx, x, t, scale=0.25, **kernel_options(options))
    assert passed, message
    scalar = emulate(emulated, x, t, options, vectors=0)
    np.testing.assert_allclose(scalar[0], rows, rtol=2e-6)
    y = x.copy()
    in_place = emulate(emulated, y, t, options, grad="in place")
    assert np.array_equal(in_place[0], rows) and np.array_equal(y.view(np.uint8), dx.view(np.uint8))
    alone = emulate(emulated, x, t, options, grad=None)
    assert np.array_equal(alone[0], rows) and np.array_equal(alone[1], lse)
    off = np.ascontiguousarray(x[:, 1:])   # rows of 519: every row but the first off 16 bytes, the scalar path
    t_off = np.where(t == options.get("ignore_index", -100), t, np.minimum(t, off.shape[1] - 1))
    passed, message = compare_cross_entropy(*emulate(emulated, off, t_off, options), off, t_off, scale=0.25,
                                            **kernel_options(options))
    assert passed, message


def test_the_kernel_source_on_extreme_rows(emulated):
    x = np.zeros((6, 300), np.float32)
    x[0, 5] = 3e38
    x[1, :100] = -np.inf
    x[2, :] = -np.inf
    x[2, 7] = 1.0
    x[3, 9] = np.nan
    x[4, 11] = np.nan
    x[5, 200] = 30.0
    t = np.array([5, 150, 7, 0, -100, 200])
    rows, lse, dx = emulate(emulated, x, t, {}, scale=1.0)
    passed, message = compare_cross_entropy(rows, lse, dx, x, t, scale=1.0)
    assert passed, message
    assert np.isnan(rows[3]) and rows[4] == 0 and (dx[4] == 0).all() and np.isnan(dx[3]).all()


def test_the_exercise_grader_passes_the_solution_and_rejects_wrong_ones():
    from onlinesoftmax.book.exercises import exercises_loss as el

    assert el.check_cross_entropy_grad(el.solution, quiet=True)
    wrong = {"smoothing forgotten": lambda x, t, eps: el.solution(x, t, 0.0),
             "no maximum subtracted (overflows)": lambda x, t, eps: _unshifted(x, t, eps),
             "the one-hot with the wrong sign": lambda x, t, eps: el.solution(x, t, eps) + 2 * _one_hot(x, t, eps),
             "the untouched stub": lambda x, t, eps: None,
             "right on the visible shapes only": lambda x, t, eps: el.solution(x, t, eps)
             if np.shape(x)[1] in (3, 50, 1, 20) else np.zeros(np.shape(x), np.float32),
             "the row's mean subtracted, not its maximum": lambda x, t, eps: _shifted(x, t, eps, np.mean),
             "the row's first logit subtracted": lambda x, t, eps: _shifted(x, t, eps, lambda a, axis, keepdims:
                                                                            a[:, :1]),
             "a float64 gradient": lambda x, t, eps: el.solution(x, t, eps).astype(np.float64),
             "the whole array's maximum (axis forgotten)": lambda x, t, eps: _shifted(
                 x, t, eps, lambda a, axis, keepdims: a.max()),
             "the maximum started at 0": lambda x, t, eps: _shifted(
                 x, t, eps, lambda a, axis, keepdims: np.maximum(a.max(axis=axis, keepdims=True), 0)),
             "the maximum started at -1e4": lambda x, t, eps: _shifted(
                 x, t, eps, lambda a, axis, keepdims: np.maximum(a.max(axis=axis, keepdims=True), -1e4)),
             "off by 1e-5 of each value": lambda x, t, eps: el.solution(x, t, eps) * np.float32(1 + 1e-5)}
    for name, fn in wrong.items():
        assert not el.check_cross_entropy_grad(fn, quiet=True), name
    # right answers by other roads pass: torch's (e^(x - lse), lse in float32), at any offset
    for seed in range(20):
        assert el.check_cross_entropy_grad(_through_lse, quiet=True), seed


def _shifted(x, t, eps, shift):
    x = np.asarray(x, np.float32)
    with np.errstate(all="ignore"):
        p = np.exp(x - shift(x, axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True) - np.float32(eps / x.shape[1]) - _one_hot(x, t, eps)).astype(np.float32)


def _through_lse(x, t, eps):
    x = np.asarray(x, np.float32)
    m = x.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True))).astype(np.float32)
    return (np.exp(x - lse) - np.float32(eps / x.shape[1]) - _one_hot(x, t, eps)).astype(np.float32)


def _one_hot(x, t, eps):
    hot = np.zeros(np.shape(x), np.float32)
    hot[np.arange(len(t)), t] = 1 - eps
    return hot


def _unshifted(x, t, eps):
    with np.errstate(all="ignore"):
        p = np.exp(np.asarray(x, np.float32))
        return (p / p.sum(axis=1, keepdims=True) - np.float32(eps / np.shape(x)[1]) - _one_hot(x, t, eps)).astype(np.float32)


def test_the_kernel_source_gives_the_same_bits_under_any_schedule(emulated):
    """In place, with every option: random thread schedules give the fixed schedule's bits (no read of
    a logit after another thread overwrote it, no race in the block's reductions)."""
    variant, module = emulated
    x, t = logits_and_targets(3, 704, "bfloat16", seed=9)   # rows of 1408 bytes: every row on 16 bytes
    o = kernel_options(OPTIONS[-1])

    def make_args():
        y = x.copy()
        return (y.view(np.uint16), y.view(np.uint16), t.astype(np.int64), np.zeros(3, np.float32),
                np.zeros(3, np.float32), np.full(1, 0.5, np.float32), np.int32(704), np.int64(704), np.int64(704),
                np.int32(1), np.int64(-100), np.float32(o["label_smoothing"]), np.float32(o["z_loss"]),
                np.float32(o["softcap"]))
    module.launch_schedules(variant.dtype_entry("bfloat16"), (3,), (kce.block_threads(704, 8),), make_args, seeds=(1, 2))


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_a_row_near_the_largest_magnitude_on_the_kernel_source(emulated, dtype):
    """A constant row at -3e38 (fp16: -65504): lse = m + log V rounds back to m, so the gradient must come
    from e^(s - m) / l and the loss from (m - s_t) + log l. The wrong answer e^(s - lse), which sums to
    V instead of 1, and a loss of lse - s_t = 0 are shown failing."""
    big = float(np.finfo(np.float16).max) if dtype == "float16" else 3e38
    x = checks.to_dtype(np.full((2, 300), -big, np.float32), dtype)
    t = np.array([299, 4])
    rows, lse, dx = emulate(emulated, x, t, {}, scale=1.0)
    options = kernel_options({})
    passed, message = compare_cross_entropy(rows, lse, dx, x, t, scale=1.0, **options)
    assert passed, message
    assert np.allclose(rows, np.log(300), rtol=1e-5)
    onehot = np.zeros((2, 300))
    onehot[[0, 1], t] = 1
    wrong = checks.to_dtype((np.exp(checks.as_float64(x) - checks.as_float64(x)[:, :1]) - onehot).astype(np.float32),
                            dtype)                                     # e^(s - lse) with lse rounded to m
    assert not compare_cross_entropy(rows, lse, wrong, x, t, scale=1.0, **options)[0]
    assert not compare_cross_entropy(np.zeros_like(rows), lse, dx, x, t, scale=1.0, **options)[0]


def large_close_rows(dtype):
    """Rows whose logits are large and close (equal, or a few units of the dtype's spacing apart), where
    the label smoothing's m - mean(s) is small and m - sum(s) / V is the difference of two large numbers."""
    big = {"float32": (1e10, 3e38), "bfloat16": (1e10, 3e38), "float16": (6e4, 65504.0)}[dtype]
    rows = [np.full(8, big[0]), np.full(8, big[1]), np.full(8, -big[1]), np.full(8, 1e3 if dtype == "float16" else 1e6)]
    spacing = np.spacing(checks.to_dtype(np.float32(big[0]), dtype).astype(np.float32))   # one ulp of the dtype there
    rows.append(big[0] + spacing * np.arange(8))
    return checks.to_dtype(np.array(rows, np.float32), dtype), np.array([0, 3, 5, 7, 6])


def smoothed_truth(x, t, eps):
    """-(1 - eps) log p_t - eps mean(log p) in float64, log p = s - max - log sum e^(s - max) (torch's form)."""
    s = checks.as_float64(x)
    logp = s - s.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    return -(1 - eps) * logp[np.arange(len(t)), t] - eps * logp.mean(axis=1)


def old_smoothed_loss(x, t, eps):
    """The wrong answer kept: log l + (1 - eps)(m - s_t) + eps (m - sum(s) / V) in float32."""
    s = checks.as_float64(x).astype(np.float32)
    m = s.max(axis=1)
    log_l = np.log(np.exp(s - m[:, None]).sum(axis=1, dtype=np.float32))
    return log_l + (1 - np.float32(eps)) * (m - s[np.arange(len(t)), t]) + np.float32(eps) * (m - s.sum(axis=1) / np.float32(s.shape[1]))


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_label_smoothing_on_large_close_logits(emulated, dtype):
    """Equal logits of 1e10, of +-3e38 (fp16: 6e4, 65504), of 1e6, and 1e10 plus a few ulps: the loss
    with label smoothing is log V where they are equal, as torch's -mean(log_softmax) gives; the model
    of 01, the cluster's model at 1 and 4 chunks and 01's source on the emulator all within 1e-5 of it.
    The old form m - sum(s) / V, off by hundreds (fp32 1e10: -63 for log 8), is kept and fails."""
    from onlinesoftmax.kernels.cross_entropy import cluster_model

    x, t = large_close_rows(dtype)
    eps = 0.1
    truth = smoothed_truth(x, t, eps)
    assert np.allclose(truth[:4], np.log(8), rtol=1e-12)
    got = {"01's model": kce.simulate(x, t, label_smoothing=eps)[0],
           "01's source": emulate(emulated, x, t, {"label_smoothing": eps}, grad=None)[0]}
    for n_chunks in (1, 4):
        got[f"the cluster's model, {n_chunks} chunks"] = cluster_model.simulate(x, t, label_smoothing=eps,
                                                                               n_chunks=n_chunks)[0]
    for name, loss in got.items():
        assert np.all(np.abs(loss - truth) <= 1e-5 * np.maximum(1, np.abs(truth))), (name, loss, truth)
    if dtype != "float16":   # (fp16's largest logit, 65504, is too small for fp32's sum to lose the term)
        old = old_smoothed_loss(x, t, eps)
        assert not np.all(np.abs(old - truth) <= 1e-5 * np.maximum(1, np.abs(truth))), old


def test_unchecked_targets_count_as_ignored_and_are_never_read_outside_the_row():
    """check_targets=False skips the host's check (no synchronization): a target outside [0, V)
    then counts as ignore_index, as the row with ignore_index does; with the check it is an error."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 9)).astype(np.float32)
    t = np.array([3, 9, -7, 0])
    loss, lse, dx = osm.cross_entropy_with_grad(x, t, check_targets=False)
    want = osm.cross_entropy_with_grad(x, np.array([3, -100, -100, 0]))
    for got, expected in zip((loss, lse, dx), want):
        np.testing.assert_array_equal(got, expected)
    assert (dx[1:3] == 0).all() and (dx[0] != 0).all()
    with pytest.raises(ValueError, match="target 9 of row 1 is outside"):
        osm.cross_entropy_with_grad(x, t)
    with pytest.raises(TypeError, match="check_targets must be True or False, got 'no'"):
        osm.cross_entropy(x, t, check_targets="no")


@pytest.mark.parametrize("reduction", ("mean", "sum", "none"))
def test_the_operator_checks_targets_without_waiting_and_raises_in_backward(reduction):
    """The autograd operator never synchronizes in its forward: a target outside [0, V) makes its row's
    loss NaN (never a smaller loss that silently skipped it) and the backward raises the ValueError that
    names it. Wrong answers kept: the unchecked call's loss (the bad row counted as ignored) is finite."""
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    x = torch.randn(4, 9, dtype=torch.float32, requires_grad=True)
    t = torch.tensor([3, 9, 2, 0])
    loss = osm.cross_entropy(x, t, reduction=reduction)
    rows = loss if reduction == "none" else loss.reshape(1)
    assert torch.isnan(rows).any() and (reduction != "none" or torch.isnan(rows).tolist() == [False, True, False, False])
    unchecked = osm.cross_entropy(x.detach(), t, reduction=reduction, check_targets=False)
    assert torch.isfinite(unchecked).all()                           # the wrong answer the NaN replaces
    with pytest.raises(ValueError, match=r"cross_entropy: target 9 of row 1 is outside \[0, 9\)"):
        loss.sum().backward()
    good = torch.tensor([3, 8, -100, 0])                             # in range (and ignored): no error, same gradient
    g, = torch.autograd.grad(osm.cross_entropy(x, good, reduction=reduction).sum(), x)
    want, = torch.autograd.grad(torch.nn.functional.cross_entropy(x, good, reduction=reduction).sum(), x)
    torch.testing.assert_close(g, want)


# ---- cross_entropy_02_cluster's plan (the kernel itself runs in the GPU tier: the emulator has no clusters) --

def covers(n_cols, dtype, piece, plan) -> bool:
    """Whether C chunks of `per_chunk` pieces hold the row's whole pieces, each within 64 KB, C <= 16."""
    from onlinesoftmax.kernels.cross_entropy import cluster

    n_chunks, per_chunk, threads = plan
    itemsize = cluster.ITEMSIZE[dtype]
    return (n_chunks & (n_chunks - 1) == 0 and 1 <= n_chunks <= 16 and n_chunks * per_chunk >= n_cols // piece
            and per_chunk * piece * itemsize <= cluster.CHUNK_BYTES and 32 <= threads <= 1024)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_cluster_plan_holds_every_row_it_takes(dtype):
    from onlinesoftmax.kernels.cross_entropy import cluster

    vec = kce.VEC[dtype]
    floor_plan_misses = 0
    for n_cols in [1, 2, 7, 8, 9, 4097, 32000, 65537, 100003, 128256, 151936, 200001, 262144, 262147, 524288,
                   1048576]:
        for piece in (1, vec):
            plan = cluster.chunks(n_cols, dtype, piece)
            if plan[0] == 0:   # beyond 16 chunks: cross_entropy_01_rows takes the row
                assert n_cols * cluster.ITEMSIZE[dtype] > 16 * cluster.CHUNK_BYTES - 16 and not cluster.fits(n_cols, dtype)
                continue
            assert covers(n_cols, dtype, piece, plan), (n_cols, piece, plan)
            # the wrong answer kept: chunks of floor(pieces / C) leave the last pieces to nobody
            floor_plan = (plan[0], (n_cols // piece) // plan[0], plan[2])
            floor_plan_misses += not covers(n_cols, dtype, piece, floor_plan)
    assert floor_plan_misses > 0


def test_a_gradient_on_a_gpu_with_clusters_takes_the_cluster(monkeypatch):
    from onlinesoftmax import loss
    from onlinesoftmax.runtime import device

    x = np.zeros((4, 128256), np.float32)
    monkeypatch.setattr(device, "compute_capability", lambda: 90)
    assert loss.kernel_for(x, True).name == "cross_entropy_02_cluster"
    assert loss.kernel_for(x, False).name == "cross_entropy_01_rows"
    assert loss.kernel_for(checks.to_dtype(x, "bfloat16"), True).name == "cross_entropy_02_cluster"
    assert loss.kernel_for(np.zeros((1, 2**20), np.float32), True).name == "cross_entropy_01_rows"   # > 16 chunks
    monkeypatch.setattr(device, "compute_capability", lambda: 80)
    assert loss.kernel_for(x, True).name == "cross_entropy_01_rows"


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_the_cluster_model_chunk_by_chunk_meets_the_float64_truth(dtype, options):
    """cross_entropy_02_cluster's model: each chunk's (m, l) and sum, combined across the cluster, gives
    01's loss, LSE and gradient; with extreme rows spread over the chunks (a chunk all -inf, a NaN in one
    chunk, the largest logit in the last). The wrong answer kept: chunks normalized alone."""
    from onlinesoftmax.kernels.cross_entropy import cluster_model as cluster

    x, t = logits_and_targets(12, 2003, dtype, seed=len(options))
    x32 = checks.as_float64(x).astype(np.float32)
    x32[1, :1000] = -np.inf                       # the first chunks all -inf
    x32[2, 1500] = np.nan                         # a NaN in one chunk: the row's loss and gradient NaN
    x32[3, -1] = 3e4                              # the largest logit in the tail of the last chunk
    x32[4, :] = -np.inf
    x32[4, 7] = 0.0                               # one finite logit in a row of -inf
    x = checks.to_dtype(x32, dtype)
    t[4] = 7
    full = kernel_options(options)
    for n_chunks in (1, 2, 4, 16):
        rows, lse, dx = cluster.simulate(x, t, 0.5, n_chunks=n_chunks, **full)
        passed, message = compare_cross_entropy(rows, lse, dx, x, t, scale=0.5, **full)
        assert passed, (n_chunks, message)
    # the wrong answer: each chunk's probabilities from its own (m, l), the cluster's combine left out
    width = -(-(2003 // kce.VEC[dtype]) // 4) * kce.VEC[dtype]
    s64 = checks.as_float64(x)
    with np.errstate(all="ignore"):
        if full["softcap"]:
            s64 = full["softcap"] * np.tanh(s64 / full["softcap"])
        parts = [s64[:, c * width:(c + 1) * width if c < 3 else None] for c in range(4)]
        p = np.concatenate([np.exp(q - np.nanmax(q, axis=1, keepdims=True)) /
                            np.exp(q - np.nanmax(q, axis=1, keepdims=True)).sum(axis=1, keepdims=True) for q in parts], 1)
    counted = np.flatnonzero(t != full["ignore_index"])
    p[counted, t[counted]] -= 1.0
    p[t == full["ignore_index"]] = 0.0
    alone = checks.to_dtype((0.5 * p).astype(np.float32), dtype)
    rows, lse, right = cluster.simulate(x, t, 0.5, n_chunks=4, **full)
    assert compare_cross_entropy(rows, lse, right, x, t, scale=0.5, **full)[0]
    assert not compare_cross_entropy(rows, lse, alone, x, t, scale=0.5, **full)[0]


def test_a_given_grad_scale_replaces_the_reductions():
    """grad_scale multiplies the gradient in place of the reduction's scale (the loss is the
    reduction's): a chunk of a larger batch gets the batch's mean. Wrong answers kept: the chunk's own
    mean, and the scale applied twice."""
    x, t = logits_and_targets(6, 50, "float32", seed=3)
    _, _, summed = osm.cross_entropy_with_grad(x, t, reduction="sum")
    loss, _, scaled = osm.cross_entropy_with_grad(x, t, reduction="sum", grad_scale=0.125)
    assert loss == osm.cross_entropy(x, t, reduction="sum")
    np.testing.assert_allclose(scaled, summed * np.float32(0.125), rtol=1e-6, atol=0)
    _, _, own_mean = osm.cross_entropy_with_grad(x, t, reduction="mean")
    assert not np.allclose(scaled, own_mean) and not np.allclose(scaled, summed * np.float32(0.125 ** 2))
    for bad in (0, -1.0, np.inf, True, "0.5"):
        with pytest.raises(ValueError, match=f"grad_scale must be None or a positive number, got {bad!r}"):
            osm.cross_entropy_with_grad(x, t, grad_scale=bad)
