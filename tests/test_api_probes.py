"""Calls a probe of the public API sent, each of which once gave a silently wrong answer, a raw
internal error or a refusal torch does not make; each test names what used to happen."""
import re

import numpy as np
import pytest

import onlinesoftmax as osm


def test_logsumexp_keepdims_checks_out_against_the_kept_shape():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    for wrong in (np.empty((2, 3), np.float32), np.empty((2, 1, 3), np.float32), [0.0] * 6):
        with pytest.raises(ValueError, match=r"keepdims=True, out must be a ndarray of shape \(2, 3, 1\)"):
            osm.logsumexp(x, keepdims=True, out=wrong)   # (2, 3) was accepted and returned as it was
    for axis, shape in ((-1, (2, 3, 1)), (1, (2, 1, 4))):
        out = np.empty(shape, np.float32)
        assert osm.logsumexp(x, axis, keepdims=True, out=out) is out
        np.testing.assert_allclose(out, np.log(np.exp(x.astype(np.float64)).sum(axis, keepdims=True)), rtol=1e-6)
    assert osm.logsumexp(x, keepdims=np.True_).shape == (2, 3, 1)     # NumPy's booleans, as numpy takes them
    assert osm.logsumexp(x, keepdims=np.False_).shape == (2, 3)
    with pytest.raises(TypeError, match="keepdims must be True or False, got 1"):
        osm.logsumexp(x, keepdims=1)


def test_an_empty_input_takes_an_empty_out():
    # "out must have unit stride along its last axis": NumPy gives empty arrays strides of 0
    x = np.ones((0, 4), np.float32)
    assert osm.softmax(x, out=np.empty((0, 4), np.float32)).shape == (0, 4)
    assert osm.log_softmax(x, out=np.empty((0, 4), np.float32)).shape == (0, 4)
    assert osm.logsumexp(x, out=np.empty((0,), np.float32)).shape == (0,)
    with pytest.raises(ValueError, match="out must be a ndarray of shape"):
        osm.softmax(x, out=np.empty((0, 5), np.float32))


def test_paged_attention_of_no_sequence_on_the_model():
    # a ZeroDivisionError in the model, where the GPU path returned empty results
    q, pages = np.zeros((0, 4, 1, 64), np.float16), np.zeros((6, 4, 2, 64), np.float16)
    out, lse = osm.attention(q, kv_cache=(pages, pages), page_table=np.zeros((0, 3), np.int32),
                             cache_lengths=np.zeros(0, np.int32), return_lse=True)
    assert out.shape == (0, 4, 1, 64) and lse.shape == (0, 4, 1)


def test_linear_cross_entropy_in_float64_is_exact_whichever_weight_grad():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    h, w, b = rng.standard_normal((40, 8)), rng.standard_normal((50, 8)), rng.standard_normal(50)
    t = rng.integers(0, 50, 40)
    hh, ww, bb = (torch.from_numpy(a).requires_grad_() for a in (h, w, b))
    want = torch.nn.functional.cross_entropy(hh @ ww.T + bb, torch.from_numpy(t), label_smoothing=0.1)
    want.backward()
    for mode in ("sum", "recompute"):   # recompute refused float64 ("in_place=True needs ... float32")
        loss, dh, dw, db = osm.linear_cross_entropy_with_grad(h, w, t, b, weight_grad=mode, label_smoothing=0.1)
        assert dw.dtype == np.float64 and abs(float(loss) - float(want.detach())) < 1e-13
        for got, grad in ((dh, hh.grad), (dw, ww.grad), (db, bb.grad)):
            np.testing.assert_allclose(got, grad.numpy(), rtol=0, atol=1e-13)   # (the float32 sum erred by 1e-8)


def test_linear_cross_entropy_at_no_hidden_feature_and_with_arrays_of_two_kinds():
    torch = pytest.importorskip("torch")
    t = np.array([0, 1, 2, 3])
    # hidden of width 0: every logit 0, the loss log V ("cannot reshape array of size 0")
    assert abs(float(osm.linear_cross_entropy(np.ones((4, 0), np.float32), np.ones((5, 0), np.float32), t))
               - np.log(5)) < 1e-6
    h, w = np.ones((4, 8), np.float32), np.ones((5, 8), np.float32)
    for args in ((torch.from_numpy(h).requires_grad_(), w, torch.from_numpy(t)),   # 'ndarray' has no 'detach'
                 (h.tolist(), w.tolist(), t.tolist())):                           # 'list' has no 'ndim'
        with pytest.raises(TypeError, match="must be all numpy arrays or all torch tensors"):
            osm.linear_cross_entropy(*args)
    with pytest.raises(TypeError, match="share a dtype, got float32, float32 and float64"):
        osm.linear_cross_entropy(h, w, t, np.zeros(5))   # the bias's dtype was left out of the message


def test_cross_entropy_checks_its_options_on_the_operator_path_too():
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    x = torch.randn(4, 6)
    t = torch.tensor([0, 5, 2, 1])
    wrong = [({"softcap": 0}, ValueError, "softcap must be None or a positive number"),   # accepted as "no cap"
             ({"label_smoothing": "0.1"}, ValueError, "label_smoothing must be a number"),   # accepted
             ({"label_smoothing": True}, ValueError, "label_smoothing must be a number"),     # accepted
             ({"z_loss": True}, ValueError, "z_loss must be a number"),                      # accepted
             ({"ignore_index": 5.0}, TypeError, "ignore_index must be an int"),              # torch's schema error
             ({"ignore_index": 2**70}, TypeError, "ignore_index must be an int"),
             ({"reduction": None}, ValueError, "reduction must be one of"),
             ({"return_lse": 1}, TypeError, "return_lse must be True or False"),             # accepted
             ({"check_targets": "no"}, TypeError, "check_targets must be True or False")]    # accepted
    for kwargs, error, match in wrong:
        with pytest.raises(error, match=match):
            osm.cross_entropy(x.clone().requires_grad_(), t, **kwargs)
    for logits, targets in ((x.numpy(), t), (x.clone().requires_grad_(), t.numpy()), (x, [0, 5, 2, 1])):
        with pytest.raises(ValueError, match="logits and targets must be arrays of one kind"):
            osm.cross_entropy(logits, targets)                  # 'ndarray' object has no attribute 'requires_grad'
    with pytest.raises(ValueError, match="logits and targets must be arrays of one kind"):
        osm.cross_entropy_with_grad(x.numpy(), t)
    assert torch.isfinite(osm.cross_entropy(x.clone().requires_grad_(), t, softcap=np.int64(30)))


def test_a_numpy_integer_axis_on_a_tensor_that_requires_a_gradient():
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    for function, reference in ((osm.softmax, torch.softmax), (osm.log_softmax, torch.log_softmax)):
        y = function(x, np.int64(0))    # a TypeError; the call without a gradient took it
        assert torch.allclose(y, reference(x, 0))
    assert osm.logsumexp(x, np.int64(0), keepdims=np.True_).shape == (1, 4)
    with pytest.raises(TypeError, match="axis must be an int"):
        osm.softmax(x, np.float64(0))


@pytest.mark.parametrize("shape, k", [((0, 10), 3), ((4, 10), 0), ((4, 0), 0), ((2, 0, 5), 2), ((3, 5, 7), 3)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_top_k_of_empty_arrays_and_k_0_as_torch_shapes_them(shape, k, dtype):
    # "needs a non-empty array" and "k must lie in 1 .. N" where torch.topk returns empty results
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    if x.size and k:
        x[..., 0] = 0.5   # (a row's tie-free top: the exact path's order is the kernels')
    for axis in (-1, 0):
        if not 0 <= k <= shape[axis]:
            continue
        want = torch.topk(torch.softmax(torch.from_numpy(x.astype(np.float64)), axis), k, dim=axis)
        probs, indices, lse = osm.softmax_topk(x, k, axis, return_lse=True)
        values, columns = osm.topk_logits(x, k, axis)
        assert probs.shape == values.shape == tuple(want.values.shape) and probs.dtype == values.dtype == x.dtype
        assert indices.dtype == columns.dtype == np.int64 and indices.shape == probs.shape
        assert lse.shape == tuple(s for i, s in enumerate(shape) if i != axis % len(shape))
        assert lse.dtype == (np.float64 if dtype == "float64" else np.float32)
        if x.shape[axis] == 0:
            assert (lse == -np.inf).all()   # the log of an empty sum


def test_top_k_in_float64_is_exact_for_any_k():
    # "float64 is not computed here" (and no k above 1024 on any path)
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((2, 3000))
    for k, axis in ((2000, -1), (1, -1), (2, 0)):
        probs, indices, lse = osm.softmax_topk(x, k, axis, return_lse=True)
        want = torch.topk(torch.softmax(torch.from_numpy(x), axis), k, dim=axis)
        np.testing.assert_allclose(probs, want.values.numpy(), rtol=1e-14, atol=0)
        assert (indices == want.indices.numpy()).all() and probs.dtype == np.float64
        np.testing.assert_allclose(lse, torch.logsumexp(torch.from_numpy(x), axis).numpy(), rtol=1e-14)
        values, columns = osm.topk_logits(x, k, axis)
        want = torch.topk(torch.from_numpy(x), k, dim=axis)
        assert (values == want.values.numpy()).all() and (columns == want.indices.numpy()).all()
    kept = osm.softmax_topk(x, 5, renormalize=True)[0]
    np.testing.assert_allclose(kept.sum(axis=1), 1.0, rtol=1e-14)
    special = np.array([[1.0, np.inf, 3.0], [-np.inf] * 3, [np.nan, 1.0, 2.0]])
    probs, indices, lse = osm.softmax_topk(special, 2, return_lse=True)
    assert np.isnan(probs).all() and indices.tolist() == [[1, 2], [0, 1], [0, 2]]
    assert np.isnan(lse[0]) and lse[1] == -np.inf and np.isnan(lse[2])   # the kernels' conventions


@pytest.mark.parametrize("shape", [(0, 2, 3, 4), (1, 2, 0, 4), (1, 2, 3, 0), (1, 0, 3, 4)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_attention_of_empty_arrays(shape, dtype):
    # "attention: empty input" where torch's scaled_dot_product_attention returns empty results (and
    # zeros for queries with no key)
    batch, heads, n_q, n_k = shape
    rng = np.random.default_rng(4)
    q = rng.standard_normal((batch, heads, n_q, 64)).astype(dtype)
    k, v = (rng.standard_normal((batch, heads, n_k, 64)).astype(dtype) for _ in range(2))
    out, lse = osm.attention(q, k, v, return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (batch, heads, n_q)
    assert lse.dtype == (np.float64 if dtype == "float64" else np.float32)
    assert not out.any() and (lse == -np.inf).all()


@pytest.mark.parametrize("causal, align", [(False, "bottom_right"), (True, "bottom_right"), (True, "top_left")])
@pytest.mark.parametrize("n_q, n_k, d, heads, kv_heads", [(5, 7, 64, 4, 2), (7, 5, 40, 2, 1), (3, 3, 8, 1, 1)])
def test_attention_in_float64_against_torch(causal, align, n_q, n_k, d, heads, kv_heads):
    # "q must be float32, float16 or bfloat16, got float64", and d = 40 or 8 refused
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(n_q * n_k + d)
    q = rng.standard_normal((2, heads, n_q, d))
    k, v = (rng.standard_normal((2, kv_heads, n_k, d)) for _ in range(2))
    out, lse = osm.attention(q, k, v, causal=causal, causal_align=align, return_lse=True)
    keys, values = (torch.from_numpy(np.repeat(a, heads // kv_heads, axis=1)) for a in (k, v))
    shift = n_k - n_q if align == "bottom_right" else 0
    keep = torch.from_numpy(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + shift) if causal else None
    scores = torch.from_numpy(q) @ keys.transpose(-1, -2) / np.sqrt(d)
    if keep is not None:
        scores = scores.masked_fill(~keep, -np.inf)
    want_lse = torch.logsumexp(scores, -1)
    want = torch.nan_to_num(torch.softmax(scores, -1)) @ values   # a query with no key: zeros
    assert out.dtype == lse.dtype == np.float64
    np.testing.assert_allclose(out, want.numpy(), rtol=0, atol=1e-13)
    np.testing.assert_allclose(lse, want_lse.numpy(), rtol=1e-13)


def test_attention_scale_errors_name_the_problem():
    q = np.zeros((1, 1, 2, 64), np.float32)
    assert osm.attention(q, q, q, scale=np.int64(1)).shape == q.shape       # "must be a finite number", refused
    with pytest.raises(ValueError, match="scale must be finite, got nan"):   # a TypeError before
        osm.attention(q, q, q, scale=float("nan"))
    with pytest.raises(TypeError, match="scale must be a number or None, got '1'"):
        osm.attention(q, q, q, scale="1")


def test_attention_on_tensors_that_require_a_gradient_goes_through_the_operator():
    # a RuntimeError saying only softmax, log_softmax and logsumexp have gradients
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    generator = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 2, 5, 64, generator=generator).requires_grad_() for _ in range(3))
    osm.attention(q, k, v, causal=True).square().sum().backward()
    again = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*again, is_causal=True).square().sum().backward()
    for ours, theirs in zip((q, k, v), again):   # two float32 computations: within 10x their worst seen gap
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-3, atol=1e-4)
    with pytest.raises(RuntimeError, match="attention .variant='auto', no return_lse. have gradients"):
        osm.attention(q, k, v, return_lse=True)


def test_messages_name_what_was_passed_and_what_is_accepted():
    x = np.random.default_rng(5).standard_normal((4, 100)).astype(np.float32)
    with pytest.raises(ValueError, match="softmax_topk.x, k. takes k up to 1024"):
        osm.topk_logits(x, 33)       # advised variant='auto', which topk_logits does not take
    with pytest.raises(TypeError, match="softmax with a mask takes float32, float16, bfloat16 or float64, got int64"):
        osm.softmax(x.astype(np.int64), mask=np.zeros(100))
    assert osm.softmax(x.astype(np.float64)).dtype == np.float64
    with pytest.raises(ValueError, match=r"one value per row \(shape \(4,\)\), got"):
        osm.sample(x, temperature=np.ones((4, 1), np.float32))   # "shape (4,) or (4,)"
    for generator in ((1.5, -3), ("a", "b")):   # a tuple was taken as a drawn (seed, offset)
        with pytest.raises(TypeError, match="generator must be None, an int seed, a numpy or a torch Generator"):
            osm.sample(x, generator=generator)


def test_arrays_of_two_kinds_are_refused_not_bridged():
    # a NumPy call given torch tensors beside its arrays returned torch tensors
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(6).standard_normal((4, 100)).astype(np.float32)
    with pytest.raises(TypeError, match="per-row parameter must be an array of the logits' kind.*temperature"):
        osm.sample(x, temperature=torch.ones(4))
    with pytest.raises(TypeError, match="per-row parameter must be an array of the logits' kind.*temperature"):
        osm.sample(torch.from_numpy(x), temperature=np.ones(4, np.float32))   # taken on the CPU, refused on a GPU
    q = np.zeros((1, 2, 3, 64), np.float32)
    with pytest.raises(TypeError, match="q, k and v must be all torch tensors or all arrays"):
        osm.attention(q, torch.from_numpy(q), torch.from_numpy(q))
    assert osm.sample(torch.from_numpy(x), temperature=torch.ones(4)).shape == (4,)


def test_what_a_review_of_these_paths_found():
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401

    # an nn.Parameter is a tensor, not a second kind of array (the lm head's weight was refused)
    head = torch.nn.Linear(8, 5, bias=False)
    hidden, targets = torch.randn(4, 8, requires_grad=True), torch.tensor([0, 1, 2, 3])
    osm.linear_cross_entropy(hidden, head.weight, targets).backward()
    assert head.weight.grad.shape == (5, 8)
    assert torch.isfinite(osm.cross_entropy(torch.nn.Parameter(torch.randn(4, 5)), targets))
    # a gradient of float64 attention is computed exactly; of empty attention, refused up front, not in backward
    q = torch.randn(1, 2, 3, 64, dtype=torch.float64, requires_grad=True)
    osm.attention(q, q, q).sum().backward()
    assert q.grad.dtype == torch.float64 and bool(torch.isfinite(q.grad).all())
    empty = torch.zeros(1, 2, 0, 64, requires_grad=True)
    with pytest.raises(TypeError, match="the gradient takes non-empty float32, float16, bfloat16 and float64"):
        osm.attention(empty, empty, empty)
    # the exact path's LSE is NaN for a row holding NaN (it was -inf)
    x = np.random.default_rng(7).standard_normal((1, 1, 3, 8))
    x[0, 0, 1, 0] = np.nan
    assert np.isnan(osm.attention(x, x, x, return_lse=True)[1]).all()
    # a variant on the exact paths is refused, as softmax's is (it was ignored); an unknown one is named so
    with pytest.raises(TypeError, match="variant='auto' computes it exactly"):
        osm.attention(np.ones((1, 1, 2, 8)), np.ones((1, 1, 2, 8)), np.ones((1, 1, 2, 8)), variant="blocked")
    with pytest.raises(ValueError, match="unknown variant 'bogus'"):
        osm.attention(np.ones((1, 1, 2, 8)), np.ones((1, 1, 2, 8)), np.ones((1, 1, 2, 8)), variant="bogus")
    with pytest.raises(TypeError, match="variant='auto' computes it exactly"):
        osm.softmax_topk(np.ones((2, 5)), 2, variant="bogus")
    with pytest.raises(ValueError, match="keeps at most 32 logits a row"):   # "at most 1024" said before
        osm.topk_logits(np.ones((2, 2000), np.float32), 2000)
    # an out= tensor of logsumexp(keepdims=True) is seen written by autograd
    out = torch.empty(3, 1)
    osm.logsumexp(torch.randn(3, 4), keepdims=True, out=out)
    assert out._version == 1
    # float64 cross-entropy's gradient is float64-exact (scaled by a float32 1/count before)
    logits, labels = np.random.default_rng(8).standard_normal((4, 6)), np.array([0, 1, 2, 3])
    grad = osm.cross_entropy_with_grad(logits, labels)[2]
    a = torch.from_numpy(logits).requires_grad_()
    torch.nn.functional.cross_entropy(a, torch.from_numpy(labels)).backward()
    np.testing.assert_allclose(grad, a.grad.numpy(), rtol=0, atol=1e-15)
    # the paged path takes a NumPy integer scale and calls a NaN one a ValueError, as the dense path
    pools = (np.zeros((2, 4, 1, 64), np.float16),) * 2
    paged = {"kv_cache": pools, "page_table": np.zeros((1, 1), np.int32), "cache_lengths": np.array([2], np.int32)}
    assert osm.attention(np.zeros((1, 1, 2, 64), np.float16), scale=np.int64(1), **paged).shape == (1, 1, 2, 64)
    with pytest.raises(ValueError, match="scale must be finite"):
        osm.attention(np.zeros((1, 1, 2, 64), np.float16), scale=float("nan"), **paged)


def test_tensors_the_arrays_cannot_view_are_named():
    # torch's own "Got unsupported ScalarType Float8_e4m3fn" and the sparse layout's numpy error
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 4)
    if hasattr(torch, "float8_e4m3fn"):
        with pytest.raises(TypeError, match="takes float32, float16, bfloat16 or float64 tensors, got torch.float8"):
            osm.softmax(x.to(torch.float8_e4m3fn))
    with pytest.raises(TypeError, match="takes dense .strided. tensors, got a torch.sparse_coo one"):
        osm.softmax(x.to_sparse())
    assert osm.cross_entropy(x, torch.tensor([0, 1, 2])).dtype == torch.float32   # integer targets still pass


def masked_by_hand(x, keep, additive=0.0):
    """float64 softmax of explicitly masked logits (a row with no column kept is NaN, as torch's)."""
    v = np.where(keep, x + additive, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def test_masked_softmax_in_float64_is_computed_exactly():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 7)) * 5
    rows, cols = np.arange(3)[:, None], np.arange(7)[None, :]
    lengths = np.array([[0, 4, 7], [2, 9, 1]])
    additive = rng.standard_normal((3, 7)) / 3   # values float32 cannot hold: a mask rounded to float32 fails
    cases = [({"causal": True}, cols <= rows + 4),
             ({"causal": True, "causal_align": "top_left"}, cols <= rows),
             ({"valid_lengths": lengths}, cols < lengths[..., None]),
             ({"mask": additive}, np.ones((3, 7), bool))]
    for kwargs, keep in cases:
        want = masked_by_hand(x, keep, additive if "mask" in kwargs else 0.0)
        got = osm.softmax(x, **kwargs)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-13, atol=0)
        # the wrong answers: the float32 kernels' model, and the mask in float32
        in_float32 = osm.softmax(x.astype(np.float32), **kwargs).astype(np.float64)
        assert not np.allclose(in_float32[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-13, atol=0)
    rounded = masked_by_hand(x, True, additive.astype(np.float32).astype(np.float64))
    assert not np.allclose(rounded, osm.softmax(x, mask=additive), rtol=1e-13, atol=0)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x)
    got = osm.softmax(t, causal=True)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    want = torch.softmax(t.masked_fill(torch.from_numpy(~(cols <= rows + 4)), float("-inf")), dim=-1)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=0)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (2, 0, 4)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_masked_softmax_of_an_empty_array_is_empty(shape, dtype):
    x = np.zeros(shape, dtype)
    for kwargs in ({"causal": True}, {"valid_lengths": np.zeros(shape[:-1], np.int64)}, {"mask": np.zeros(shape[-1:])}):
        y = osm.softmax(x, **kwargs)
        assert y.shape == shape and y.dtype == dtype, kwargs
    if shape[-1]:   # (rows of no column have nothing to mask: their options are not looked at)
        with pytest.raises(ValueError, match="valid_lengths must have one entry per row"):
            osm.softmax(x, valid_lengths=np.zeros(7, np.int64))


@pytest.mark.parametrize("call, message", [
    (lambda q, x: osm.attention(q, q, q, return_lse="yes"), "attention: return_lse must be True or False, got 'yes'"),
    (lambda q, x: osm.attention(q, q, q, causal=1), "attention: causal must be True or False, got 1"),
    (lambda q, x: osm.softmax(x, causal="yes"), "softmax: causal must be True or False, got 'yes'"),
    (lambda q, x: osm.logsumexp(x, keepdims="yes"), "logsumexp: keepdims must be True or False, got 'yes'"),
    (lambda q, x: osm.softmax_topk(x, 2, return_lse="yes"), "softmax_topk: return_lse must be True or False, got 'yes'"),
])
def test_a_flag_that_is_not_a_bool_is_a_type_error(call, message):
    """A truthy string or an int where a flag goes is refused by name, never read as True ("yes") or
    as a number."""
    q, x = np.zeros((1, 1, 3, 64), np.float32), np.zeros((2, 8), np.float32)
    with pytest.raises(TypeError, match=re.escape(message)):
        call(q, x)
