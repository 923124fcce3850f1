"""GPU tier for cross_entropy_01_rows and cross_entropy_02_cluster: the loss, the LSE and the gradient of every dtype against the
float64 truth (gradient_checks.compare_cross_entropy: twice the same-dtype baseline's error plus a
floor relative to each row), at edge and vocabulary sizes, every option, extreme rows, rows off 16
bytes, in place and not, poisoned outputs; against torch's F.cross_entropy and its autograd; bad
targets raise before any launch and leave the context healthy; torch's side stream."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.gradient_checks import compare_cross_entropy
from onlinesoftmax.runtime.plan import get_runner

pytestmark = pytest.mark.gpu

SIZES = (1, 2, 3, 31, 33, 257, 1000, 4097, 32000, 128256, 262144)
OPTIONS = [{}, {"label_smoothing": 0.1}, {"z_loss": 1e-4}, {"softcap": 30.0},
           {"label_smoothing": 0.05, "z_loss": 1e-3, "softcap": 15.0}]


def inputs(n_rows, n_cols, dtype, seed=0, scale=4.0, ignore_index=-100):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n_rows, n_cols)) * scale).astype(np.float32)
    t = rng.integers(0, n_cols, n_rows)
    t[::4] = ignore_index
    return checks.from_float32(cp.asarray(x), dtype), cp.asarray(t)


KERNELS = ("cross_entropy_01_rows", "cross_entropy_02_cluster")


def launch(x, t, options, grad=True, scale=0.5, in_place=False, kernel="cross_entropy_01_rows"):
    """One launch through the plan the public function uses, into poisoned loss, lse and dx."""
    rows, lse = checks.poisoned_like(x, "float32", (x.shape[0],)), checks.poisoned_like(x, "float32", (x.shape[0],))
    dx = (x if in_place else checks.poisoned_like(x)) if grad else None
    given = {"targets": t, "lse": lse, "dx": dx, "grad_scale": cp.full(1, scale, cp.float32) if grad else None}
    get_runner(osm.REGISTRY[kernel], x, rows, {**options, **given})(x, rows, **given)
    cp.cuda.Device().synchronize()
    return rows, lse, dx


def full(options):
    return {"ignore_index": -100, "label_smoothing": 0.0, "z_loss": 0.0, "softcap": 0.0} | options


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", SIZES)
def test_edge_and_vocabulary_sizes(dtype, n_cols, kernel):
    n_rows = 5 if n_cols > 100000 else 37
    x, t = inputs(n_rows, n_cols, dtype, seed=n_cols)
    for options in (OPTIONS[0], OPTIONS[-1]):
        rows, lse, dx = launch(x, t, full(options), kernel=kernel)
        assert checks.unwritten(rows) == 0 and checks.unwritten(dx) == 0
        passed, message = compare_cross_entropy(rows, lse, dx, x, t, scale=0.5, **full(options))
        assert passed, f"{options}: {message}"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_every_option_in_place_and_not(dtype, options, kernel):
    n_cols = 5003 if kernel.endswith("rows") else 100003   # several chunks a row for the cluster
    x, t = inputs(64, n_cols, dtype, seed=len(options))
    rows, lse, dx = launch(x, t, full(options), kernel=kernel)
    passed, message = compare_cross_entropy(rows, lse, dx, x, t, scale=0.5, **full(options))
    assert passed, message
    y = x.copy()
    rows2, lse2, same = launch(y, t, full(options), in_place=True, kernel=kernel)
    assert same is y
    cp.testing.assert_array_equal(rows2, rows)
    cp.testing.assert_array_equal(y.view(cp.uint8), dx.view(cp.uint8))
    only_loss, only_lse, none = launch(x, t, full(options), grad=False, kernel=kernel)
    assert none is None
    cp.testing.assert_array_equal(only_loss, rows)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", (1001, 70001))
def test_rows_off_16_bytes_and_strided(dtype, n_cols, kernel):
    x, t = inputs(20, n_cols, dtype, seed=3)
    for view in (x[:, 1:], x[:, :n_cols - 1], x[::2, 3:]):
        tt = t[: view.shape[0]]
        rows, lse, dx = launch(view, tt, full({}), kernel=kernel)
        passed, message = compare_cross_entropy(rows, lse, dx, view, tt, scale=0.5, **full({}))
        assert passed, message


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_extreme_rows(dtype, kernel):
    """The largest finite logit of the dtype, -inf entries, a row of -inf but the target, a NaN row,
    an ignored NaN row (loss 0, dx 0), one-hot rows."""
    big = float(np.finfo(np.float16).max) if dtype == "float16" else 3e38
    x = np.zeros((7, 300), np.float32)
    x[0, 5] = big
    x[1, :100] = -np.inf
    x[2, :] = -np.inf
    x[2, 7] = 1.0
    x[3, 9] = np.nan
    x[4, 11] = np.nan
    x[5, :] = -big
    x[6, 200] = 30.0
    t = cp.asarray([5, 150, 7, 0, -100, 299, 200])
    xd = checks.from_float32(cp.asarray(x), dtype)
    rows, lse, dx = launch(xd, t, full({}), scale=1.0, kernel=kernel)
    passed, message = compare_cross_entropy(rows, lse, dx, xd, t, scale=1.0, **full({}))
    assert passed, message
    assert bool(cp.isnan(rows[3])) and float(rows[4]) == 0 and (checks.as_float64(dx[4]) == 0).all()


def test_public_function_matches_torch_and_its_autograd():
    torch = pytest.importorskip("torch")
    x, t = inputs(256, 32000, "float32", seed=9)
    xt = torch.as_tensor(x.copy(), device="cuda").requires_grad_()
    tt = torch.as_tensor(t, device="cuda")
    for options in ({}, {"label_smoothing": 0.1}):
        xt.grad = None
        want = torch.nn.functional.cross_entropy(xt, tt, **options)
        want.backward()
        ours_x = xt.detach().clone().requires_grad_()
        got = osm.cross_entropy(ours_x, tt, **options)
        got.backward()
        assert abs(float(got) - float(want)) <= 1e-5 * abs(float(want))
        assert float((ours_x.grad - xt.grad).abs().max()) <= 2e-6 * float(xt.grad.abs().max())
    loss, lse, dx = osm.cross_entropy_with_grad(x, t)   # cupy in, cupy out
    assert isinstance(dx, cp.ndarray) and lse.shape == (256,)


def test_bad_targets_raise_and_the_context_stays_healthy():
    x, t = inputs(8, 100, "float32")
    t[3] = 100
    with pytest.raises(ValueError, match="target 100 of row 3"):
        osm.cross_entropy(x, t)
    t[3] = 1
    passed, message = compare_cross_entropy(*launch(x, t, full({})), x, t, scale=0.5, **full({}))
    assert passed, message


def test_a_side_stream_of_torch():
    torch = pytest.importorskip("torch")
    stream = torch.cuda.Stream()
    x, t = inputs(512, 32000, "bfloat16", seed=4)
    expected = osm.cross_entropy(x, t, reduction="none")
    with torch.cuda.stream(stream):
        for _ in range(20):
            xt = torch.as_tensor(x.view(cp.uint16)).view(torch.bfloat16) * 1   # written on the side stream
            got = osm.cross_entropy(xt, torch.as_tensor(t), reduction="none")
            assert torch.equal(got, torch.as_tensor(expected)), "read before torch wrote it"


def test_the_cluster_takes_a_gradient_and_a_chunk_normalized_alone_is_rejected():
    """cross_entropy_02_cluster is what a gradient runs on a GPU with clusters (01 without a gradient);
    its wrong answer kept: each chunk normalized by its own (m, l), the cluster's combine left out."""
    from onlinesoftmax import loss
    from onlinesoftmax.kernels.cross_entropy import cluster

    x, t = inputs(6, 128256, "bfloat16", seed=5)
    assert loss.kernel_for(cp.zeros(x.shape, cp.float32), True).name == "cross_entropy_02_cluster"
    assert loss.kernel_for(x, True).name == "cross_entropy_02_cluster"
    assert loss.kernel_for(x, False).name == "cross_entropy_01_rows"
    n_chunks, per_chunk, _ = cluster.chunks(128256, "bfloat16", 8)
    assert n_chunks == 4
    rows, lse, dx = launch(x, t, full({}), scale=1.0, kernel="cross_entropy_02_cluster")
    assert compare_cross_entropy(rows, lse, dx, x, t, scale=1.0, **full({}))[0]
    xs, width = checks.as_float64(x), per_chunk * 8
    wrong = cp.zeros_like(xs)
    for c in range(n_chunks):
        part = xs[:, c * width:(c + 1) * width]
        e = cp.exp(part - part.max(axis=1, keepdims=True))
        wrong[:, c * width:(c + 1) * width] = e / e.sum(axis=1, keepdims=True)
    counted = cp.nonzero(t != -100)[0]
    wrong[counted, t[counted]] -= 1.0
    wrong[t == -100] = 0.0
    wrong_dx = checks.from_float32(wrong.astype(cp.float32), "bfloat16")
    passed, message = compare_cross_entropy(rows, lse, wrong_dx, x, t, scale=1.0, **full({}))
    assert not passed, message


@pytest.mark.parametrize("n_rows", (1, 5, 1500))
@pytest.mark.parametrize("reduction", ("mean", "sum", "none"))
def test_the_public_call_on_the_gpu_meets_its_numpy_model(n_rows, reduction):
    """The public call's three launches (targets checked and counted on the device, the row kernel,
    the loss reduced on the device) against the same call on NumPy arrays: checked, unchecked (a
    target outside [0, V) counts as ignored), every row ignored (a mean of none is NaN), and the
    operator's deferred check (its row NaN, the error in the backward); more rows than a step's 1024
    threads."""
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    x, t = inputs(n_rows, 1000, "float32", seed=n_rows)
    host_x, host_t = cp.asnumpy(x), cp.asnumpy(t)
    for options in ({}, {"label_smoothing": 0.1, "z_loss": 1e-3}):
        for call in (osm.cross_entropy, lambda *a, **o: osm.cross_entropy_with_grad(*a, **o)[0]):
            got, want = call(x, t, reduction=reduction, **options), call(host_x, host_t, reduction=reduction, **options)
            np.testing.assert_allclose(cp.asnumpy(got), want, rtol=1e-5, atol=1e-6)
    outside = t.copy()
    outside[n_rows // 2] = 1000
    with pytest.raises(ValueError, match=f"target 1000 of row {n_rows // 2}"):
        osm.cross_entropy_with_grad(x, outside, reduction=reduction)
    got = osm.cross_entropy(x, outside, reduction=reduction, check_targets=False)
    want = osm.cross_entropy(host_x, cp.asnumpy(outside), reduction=reduction, check_targets=False)
    np.testing.assert_allclose(cp.asnumpy(got), want, rtol=1e-5, atol=1e-6)
    ignored = cp.full_like(t, -100)
    loss, _, dx = osm.cross_entropy_with_grad(x, ignored, reduction=reduction)
    assert (cp.isnan(loss).all() if reduction == "mean" else (loss == 0).all()) and not dx.any()
    xt = torch.as_tensor(x).requires_grad_()
    rows = osm.cross_entropy(xt, torch.as_tensor(outside), reduction=reduction).reshape(-1)
    assert torch.isnan(rows).tolist() == ([True] if reduction != "none" else
                                          [i == n_rows // 2 for i in range(n_rows)])
    with pytest.raises(ValueError, match=f"target 1000 of row {n_rows // 2}"):
        rows.sum().backward()
