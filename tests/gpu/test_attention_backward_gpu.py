"""GPU tier for attention_backward_01_blocked: dq, dk, dv of every dtype against the float64 gradients
(at most twice the NumPy model's error plus two ulps of the gradient's scale) over N in {1, 31, 257,
1000, 4097}, grouped heads, causal and not, n_q != n_k, atomic and deterministic dq; deterministic dq
the same bits on every run; the operator's gradients against torch's own attention in the same
dtype (within twice its error); a few training steps through the operator against torch's."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import backward_blocked as bb

pytestmark = pytest.mark.gpu


def make(batch, heads, kv_heads, n_q, n_k, d, dtype, causal, seed=0):
    rng = np.random.default_rng(seed)
    f = lambda shape: checks.to_dtype(rng.standard_normal(shape).astype(np.float32), dtype)   # noqa: E731
    q, k, v, dout = f((batch, heads, n_q, d)), f((batch, kv_heads, n_k, d)), f((batch, kv_heads, n_k, d)), \
        f((batch, heads, n_q, d))
    out, lse = osm.attention(*(checks.from_float32(cp.asarray(np.asarray(a, np.float32)), dtype) for a in (q, k, v)),
                             causal=causal, return_lse=True, variant="blocked")
    return dout, q, k, v, checks.host(out), cp.asnumpy(lse)


def judge(grads, dout, q, k, v, out, lse, causal):
    """Each gradient within checks.tolerance of the model's error against float64. In float32 the model's
    products are BLAS's blocked sums while the kernel adds n terms one after another (dq over the n_k
    keys, dk and dv over the group's n_q queries): a sequential fp32 sum of n terms carries about
    sqrt(n) ulps of its scale, which the rule adds (twice) for float32."""
    refs = bb.reference(dout, q, k, v, causal)
    model = bb.simulate(dout, q, k, v, out, lse, causal)
    terms = {"dq": k.shape[2], "dk": q.shape[2] * q.shape[1] // k.shape[1], "dv": q.shape[2] * q.shape[1] // k.shape[1]}
    for name, got, ref, mod in zip(("dq", "dk", "dv"), grads, refs, model):
        y = checks.as_float64(checks.host(got))
        assert not np.isnan(y).any(), f"{name}: NaN"
        model_err = float(np.abs(checks.as_float64(mod) - ref).max())
        err = float(np.abs(y - ref).max())
        allowed = checks.tolerance(model_err, ref, q.dtype.name)
        if q.dtype == np.float32:
            allowed += 2 * np.sqrt(terms[name]) * checks.EPS["float32"] * float(np.abs(ref).max())
        assert err <= allowed, f"{name}: error {err:.3g}, the model's {model_err:.3g}, allowed {allowed:.3g}"


def run(dout, q, k, v, out, lse, causal, deterministic=False):
    dtype = q.dtype.name
    on = lambda a: checks.from_float32(cp.asarray(np.asarray(a, np.float32)), dtype)   # noqa: E731
    return osm.attention_backward(on(dout), on(q), on(k), on(v), on(out), cp.asarray(lse), causal=causal,
                                  deterministic=deterministic, variant="blocked")


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
@pytest.mark.parametrize("n", (1, 31, 257, 1000, 4097))
@pytest.mark.parametrize("causal", (False, True))
def test_lengths_dtypes_and_masks(dtype, n, causal):
    args = make(1, 4, 2, n, n, 64 if n > 1000 else 128, dtype, causal, seed=n)
    judge(run(*args, causal), *args, causal)


@pytest.mark.parametrize("shape", [(2, 8, 2, 100, 333), (1, 4, 4, 333, 100), (2, 6, 1, 1, 2000)], ids=str)
@pytest.mark.parametrize("deterministic", (False, True))
def test_groups_and_unequal_lengths(shape, deterministic):
    args = make(*shape, 128, "bfloat16", True, seed=sum(shape))
    judge(run(*args, True, deterministic), *args, True)


def test_deterministic_dq_is_the_same_bits_every_run():
    args = make(2, 8, 2, 700, 700, 64, "float32", False, seed=5)
    first = [cp.asnumpy(g) for g in run(*args, False, True)]
    for _ in range(3):
        assert all(np.array_equal(a, cp.asnumpy(b)) for a, b in zip(first, run(*args, False, True)))


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_the_operator_against_torchs_attention(dtype):
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    q = torch.randn(2, 8, 300, 128, device="cuda", dtype=torch_dtype, requires_grad=True)
    k, v = (torch.randn(2, 2, 300, 128, device="cuda", dtype=torch_dtype, requires_grad=True) for _ in range(2))
    g = torch.randn(2, 8, 300, 128, device="cuda", dtype=torch_dtype)
    ours = torch.autograd.grad(torch.ops.onlinesoftmax.attention(q, k, v, True, None, "bottom_right"), (q, k, v), g)
    theirs = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), is_causal=True), (q, k, v), g)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    exact = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
        q64, k64.repeat_interleave(4, 1), v64.repeat_interleave(4, 1), is_causal=True), (q64, k64, v64), g.double())
    for a, b, e in zip(ours, theirs, exact):
        ours_err, torch_err = float((a.double() - e).abs().max()), float((b.double() - e).abs().max())
        assert ours_err <= 2 * torch_err + 2 * checks.EPS[dtype] * float(e.abs().max())


def test_training_steps_match_torch():
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    torch.manual_seed(1)
    x = torch.randn(4, 64, 64, device="cuda")
    losses = []
    for attend in (lambda q, k, v: torch.ops.onlinesoftmax.attention(q, k, v, True, None, "bottom_right"),
                   lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)):
        torch.manual_seed(2)
        proj = torch.nn.Linear(64, 3 * 64).cuda()
        optimizer = torch.optim.SGD(proj.parameters(), lr=0.1)
        run_losses = []
        for _ in range(5):
            optimizer.zero_grad()
            q, k, v = proj(x).unsqueeze(1).chunk(3, dim=-1)
            loss = attend(q.contiguous(), k.contiguous(), v.contiguous()).square().mean()
            loss.backward()
            optimizer.step()
            run_losses.append(loss.item())
        losses.append(run_losses)
    assert np.allclose(losses[0], losses[1], rtol=1e-4)
