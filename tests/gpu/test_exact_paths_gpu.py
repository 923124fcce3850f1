"""GPU tier: what the CPU tier checks of the exact paths and today's conventions (tests/test_api_probes.py),
on CuPy arrays and CUDA tensors: float64 and empty top-k and attention (exact.py: top-k through the
host, bfloat16 by its 16-bit words; attention with CuPy's own kernels on q's GPU), a mean over no
counted token on the cross-entropy kernel (loss NaN, gradient 0), and attention routed to its
operator for CUDA tensors that need a gradient."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks

pytestmark = pytest.mark.gpu


def device_array(host32: np.ndarray, dtype: str):
    """float32 host values as a CuPy array of `dtype` (bfloat16 by its 16-bit words)."""
    return checks.on_device(cp, host32.astype(np.float64) if dtype == "float64" else checks.to_dtype(host32, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("shape, k", [((0, 10), 3), ((4, 10), 0), ((4, 0), 0)])
def test_top_k_of_empty_arrays_and_k_0_on_cupy(shape, k, dtype):
    x = device_array(np.ones(shape, np.float32), dtype)
    probs, indices, lse = osm.softmax_topk(x, k, return_lse=True)
    values, columns = osm.topk_logits(x, k)
    want = shape[:-1] + (k,)
    assert isinstance(probs, cp.ndarray) and probs.shape == values.shape == want
    assert probs.dtype == x.dtype and indices.dtype == columns.dtype == np.int64
    assert lse.shape == shape[:-1] and lse.dtype == (np.float64 if dtype == "float64" else np.float32)
    if shape[-1] == 0:
        assert bool((lse == -cp.inf).all())
    else:
        np.testing.assert_allclose(cp.asnumpy(lse), 1.0 + np.log(10.0), rtol=1e-6)   # ten ones


def test_top_k_in_float64_on_cupy_against_numpy():
    x = np.random.default_rng(1).standard_normal((3, 2000))
    for k in (1, 50, 1500):
        got = osm.softmax_topk(cp.asarray(x), k, return_lse=True)
        want = osm.softmax_topk(x, k, return_lse=True)
        for g, w in zip(got, want):
            assert isinstance(g, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(g), w)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_in_float64_on_cupy_against_numpy(causal):
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((2, 4, 5, 40)), rng.standard_normal((2, 2, 7, 40)), rng.standard_normal((2, 2, 7, 40))
    out, lse = osm.attention(*map(cp.asarray, (q, k, v)), causal=causal, return_lse=True)
    want_out, want_lse = osm.attention(q, k, v, causal=causal, return_lse=True)
    assert out.dtype == lse.dtype == np.float64
    np.testing.assert_allclose(cp.asnumpy(out), want_out, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(cp.asnumpy(lse), want_lse, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_attention_of_empty_arrays_on_cupy(dtype):
    q = device_array(np.ones((1, 2, 3, 64), np.float32), dtype)
    none = q[:, :, :0]
    out, lse = osm.attention(q, none, none, return_lse=True)   # no key: zeros, LSE -inf
    assert out.shape == q.shape and not bool(checks.as_float64(out).any()) and bool((lse == -cp.inf).all())
    out, lse = osm.attention(none, q, q, return_lse=True)      # no query: empty
    assert out.shape == none.shape and lse.shape == (1, 2, 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_mean_over_no_counted_row_on_the_kernel(dtype):
    x = device_array(np.random.default_rng(3).standard_normal((6, 300)).astype(np.float32), dtype)
    loss, _, grad = osm.cross_entropy_with_grad(x, cp.full(6, -100, cp.int64))
    assert bool(cp.isnan(loss)) and not bool(cp.isnan(checks.as_float64(grad)).any())
    assert not bool(checks.as_float64(grad).any())


def test_attention_on_cuda_tensors_that_need_a_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    q, k, v = (torch.randn(1, 2, 96, 64, device="cuda", requires_grad=True) for _ in range(3))
    osm.attention(q, k, v, causal=True).square().sum().backward()
    again = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*again, is_causal=True).square().sum().backward()
    for ours, theirs in zip((q, k, v), again):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=2e-3, atol=2e-4)


def test_masked_softmax_in_float64_on_cupy_against_numpy():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 300)) * 4
    additive = rng.standard_normal((5, 300)) / 3
    lengths = np.array([[0, 1, 299, 300, 7], [5, 400, 2, 3, 250]])
    for kwargs in ({"causal": True}, {"causal": True, "causal_align": "top_left"}, {"valid_lengths": lengths},
                   {"mask": additive, "valid_lengths": lengths}):
        on_gpu = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        got = osm.softmax(cp.asarray(x), **on_gpu)
        assert isinstance(got, cp.ndarray) and got.dtype == np.float64
        want = osm.softmax(x, **kwargs)
        np.testing.assert_allclose(cp.asnumpy(got), want, rtol=1e-13, atol=0, equal_nan=True)
        assert np.isnan(want).any() == ("valid_lengths" in kwargs)   # the rows of length 0 are NaN


def test_float64_attention_backward_on_cupy_and_through_the_operator():
    """float64 attention_backward on CuPy arrays (CuPy's own kernels on q's GPU) equals the NumPy exact
    path at 1e-12, causal and grouped; CUDA float64 tensors that need a gradient go through the operator
    to the same gradients; empty CuPy arrays give empty gradients."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 9, 24))
    k, v = (rng.standard_normal((2, 2, 13, 24)) for _ in range(2))
    out, lse = osm.attention(q, k, v, causal=True, return_lse=True)
    dout = rng.standard_normal(out.shape)
    want = osm.attention_backward(dout, q, k, v, out, lse, causal=True)
    got = osm.attention_backward(*(cp.asarray(a) for a in (dout, q, k, v, out, lse)), causal=True)
    for g, w in zip(got, want):
        assert isinstance(g, cp.ndarray) and g.dtype == np.float64
        np.testing.assert_allclose(cp.asnumpy(g), w, rtol=1e-12, atol=1e-12 * float(np.abs(w).max()))
    tq, tk, tv = (torch.tensor(a, device="cuda", requires_grad=True) for a in (q, k, v))
    osm.attention(tq, tk, tv, causal=True).backward(torch.tensor(dout, device="cuda"))
    for t, w in zip((tq, tk, tv), want):
        np.testing.assert_allclose(t.grad.cpu().numpy(), w, rtol=1e-10, atol=1e-10 * float(np.abs(w).max()))
    empty = cp.zeros((1, 2, 0, 64), cp.float32)
    kv = cp.zeros((1, 1, 5, 64), cp.float32)
    dq, dk, dv = osm.attention_backward(empty, empty, kv, kv, empty, cp.zeros((1, 2, 0), cp.float32))
    assert dq.shape == (1, 2, 0, 64) and dk.shape == (1, 1, 5, 64) and not bool(dk.any())
