"""CPU tier for attention_backward_01_blocked (the gradients of attention from its output and LSE): the
NumPy model and the kernels' own CUDA source on the CPU emulator against the float64 gradients (at
most twice the model's error plus two ulps of the gradient's scale), over odd lengths, n_q != n_k,
grouped heads, causal (with queries that see no key), every dtype, atomic and deterministic dq; the
comparison shown failing on a recompute that forgets the causal mask, on D left out and on dk without
its scale; deterministic dq the same bits under random schedules; the operator's gradients against
torch's own attention (where torch is installed); the API's checks."""

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import backward_blocked as bb
from onlinesoftmax.kernels.attention import blocked as ab


def make(batch, heads, kv_heads, n_q, n_k, d, dtype, causal, seed=0):
    """dout, q, k, v, and the forward's out (in the dtype) and LSE (float32) from the float64 forward."""
    rng = np.random.default_rng(seed)
    f = lambda shape: checks.to_dtype(rng.standard_normal(shape).astype(np.float32), dtype)   # noqa: E731
    q, k, v, dout = f((batch, heads, n_q, d)), f((batch, kv_heads, n_k, d)), f((batch, kv_heads, n_k, d)), \
        f((batch, heads, n_q, d))
    out, lse = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
    return dout, q, k, v, checks.to_dtype(out.astype(np.float32), dtype), lse.astype(np.float32)


def judge(grads, dout, q, k, v, out, lse, causal):
    """Each gradient within checks.tolerance of the model's error against float64, no NaN."""
    refs = bb.reference(dout, q, k, v, causal)
    model = bb.simulate(dout, q, k, v, out, lse, causal)
    for name, got, ref, mod in zip(("dq", "dk", "dv"), grads, refs, model):
        y = checks.as_float64(got)
        assert not np.isnan(y).any(), f"{name}: NaN"
        model_err = float(np.abs(checks.as_float64(mod) - ref).max())
        err = float(np.abs(y - ref).max())
        assert err <= checks.tolerance(model_err, ref, q.dtype.name), f"{name}: error {err:.3g}, the model's {model_err:.3g}"


# batch, heads, kv_heads, n_q, n_k, d, dtype, causal, deterministic
SHAPES = [(1, 2, 1, 37, 45, 64, "float32", False, False),
          (1, 2, 2, 40, 33, 64, "float32", True, True),         # n_q > n_k causal: queries that see no key
          (2, 4, 2, 5, 70, 64, "bfloat16", True, False),
          (1, 2, 1, 1, 1, 128, "float16", False, True),         # one query, one key
          (1, 1, 1, 65, 65, 128, "float32", True, False)]       # tiles of 32 and a remainder


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_model_is_within_the_rule(shape):
    *dims, dtype, causal, _ = shape
    args = make(*dims, dtype, causal, seed=sum(dims))
    refs = bb.reference(*args[:4], causal)
    for got, ref in zip(bb.simulate(*args, causal), refs):
        assert float(np.abs(checks.as_float64(got) - ref).max()) <= 8 * checks.EPS[dtype] * max(1, float(np.abs(ref).max()))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernel_source_on_the_emulator(shape, needs_emulator):
    *dims, dtype, causal, deterministic = shape
    args = make(*dims, dtype, causal, seed=sum(dims))
    judge(bb.emulate(*args, causal, deterministic), *args, causal)


def test_deterministic_dq_is_the_same_bits_under_any_schedule(needs_emulator):
    args = make(1, 2, 1, 40, 70, 64, "float32", True, seed=3)
    first = bb.emulate(*args, True, True, schedule="random", seed=1)
    again = bb.emulate(*args, True, True, schedule="random", seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


def test_the_comparison_rejects_wrong_gradients():
    dout, q, k, v, out, lse = make(1, 2, 1, 30, 40, 64, "float32", True, seed=4)
    right = bb.simulate(dout, q, k, v, out, lse, True)
    judge(right, dout, q, k, v, out, lse, True)
    no_mask = bb.simulate(dout, q, k, v, out, lse, False)                # the recompute forgets the causal mask
    without_d = bb.terms(dout, q, k, v, np.zeros_like(out), lse, True, 1 / 8, np.float32)   # D = 0
    unscaled = (right[0], right[1] * 8, right[2])                       # dk without its scale
    for name, wrong in (("no causal mask", no_mask), ("D left out", without_d), ("dk unscaled", unscaled)):
        with pytest.raises(AssertionError):
            judge(wrong, dout, q, k, v, out, lse, True)
            pytest.fail(f"{name} passed")


def test_the_operator_matches_torchs_attention_gradients():
    torch = pytest.importorskip("torch")
    import onlinesoftmax.torch_ops  # noqa: F401  (registers the operators)

    torch.manual_seed(0)
    for n_q, n_k, causal, align, heads, kv_heads in ((37, 45, False, "bottom_right", 4, 2), (20, 50, True, "bottom_right", 2, 1),
                                                     (20, 50, True, "top_left", 2, 2), (50, 20, True, "top_left", 2, 2)):
        q = torch.randn(2, heads, n_q, 64, requires_grad=True)
        k, v = (torch.randn(2, kv_heads, n_k, 64, requires_grad=True) for _ in range(2))
        out = torch.ops.onlinesoftmax.attention(q, k, v, causal, None, align)
        g = torch.randn_like(out)
        grads = torch.autograd.grad(out, (q, k, v), g)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        group = heads // kv_heads
        mask = None if not causal else torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + (
            n_k - n_q if align == "bottom_right" else 0)
        ref = torch.nn.functional.scaled_dot_product_attention(q64, k64.repeat_interleave(group, 1),
                                                               v64.repeat_interleave(group, 1), attn_mask=mask)
        refs = torch.autograd.grad(torch.nan_to_num(ref), (q64, k64, v64), g.double())
        for got, want in zip(grads, refs):
            assert float((got.double() - want).abs().max()) <= 1e-5 * max(1.0, float(want.abs().max()))


def test_the_api_checks_its_arguments():
    dout, q, k, v, out, lse = make(1, 2, 1, 5, 7, 64, "float32", False)
    dq, dk, dv = osm.attention_backward(dout, q, k, v, out, lse)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.dtype == v.dtype
    with pytest.raises(ValueError, match="lse must be an array of q's kind with shape"):
        osm.attention_backward(dout, q, k, v, out, lse.astype(np.float64))
    with pytest.raises(ValueError, match="dout must be"):
        osm.attention_backward(dout[:, :, :4], q, k, v, out, lse)
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        osm.attention_backward(dout, q, k, v, out, lse, deterministic="yes")
    small = make(1, 1, 1, 3, 3, 32, "float32", False)
    with pytest.raises(ValueError, match="d = 32 is not supported"):
        osm.attention_backward(*small)


def test_the_row_backward_grader_passes_the_answer_and_rejects_wrong_ones():
    from onlinesoftmax.book.exercises import exercises_attention_backward as eb

    assert eb.check_row_backward(eb.row_backward, quiet=True)

    def without_d(q, K, V, dout, lse, scale):           # dS = P dP: D forgotten
        dq, dk, dv = eb.row_backward(q, K, V, dout, lse, scale)
        p = np.exp(scale * (K @ q) - lse)
        ds = p * (V @ dout)
        return scale * (ds @ K), scale * np.outer(ds, q), dv

    def max_not_lse(q, K, V, dout, lse, scale):         # P = e^(s - max s): not normalised
        s = scale * (K @ q)
        return eb.row_backward(q, K, V, dout, s.max(), scale)

    def unscaled(q, K, V, dout, lse, scale):            # the chain rule's scale forgotten in dq and dK
        dq, dk, dv = eb.row_backward(q, K, V, dout, lse, scale)
        return dq / scale, dk / scale, dv

    wrong = {"the stub": lambda *a: None, "D forgotten": without_d, "max, not the LSE": max_not_lse,
             "scale forgotten": unscaled,
             "dV transposed": lambda q, K, V, dout, lse, scale: (*eb.row_backward(q, K, V, dout, lse, scale)[:2],
                                                                   eb.row_backward(q, K, V, dout, lse, scale)[2].T),
             "right on the visible shapes only": lambda q, K, V, dout, lse, scale: eb.row_backward(q, K, V, dout, lse, scale)
             if K.shape in ((3, 2), (50, 16), (20, 8), (1, 4), (60, 32)) else (np.zeros_like(q), np.zeros_like(K),
                                                                                 np.zeros_like(V)),
             "P below 1e-8 dropped": _small_p_dropped, "a second softmax, lse never read": _second_softmax,
             "P below 1e-14 dropped": lambda *a: _small_p_dropped(*a, below=1e-14),
             "lse read, then a second softmax": _lse_touched_then_a_second_softmax}
    for name, fn in wrong.items():
        assert not eb.check_row_backward(fn, quiet=True), name


def _small_p_dropped(q, K, V, dout, lse, scale, below=1e-8):
    p = np.exp(scale * (K @ q) - lse)
    p[p < below] = 0.0
    ds = p * (V @ dout - dout @ (p @ V))
    return scale * (ds @ K), scale * np.outer(ds, q), np.outer(p, dout)


def _lse_touched_then_a_second_softmax(q, K, V, dout, lse, scale):
    _ = lse + 0.0     # the grader sees lse read; the float32-saved lse tells the second softmax apart
    return _second_softmax(q, K, V, dout, lse, scale)


def _top_left_tile_skip(Q, K, V, dO, lse, scale, tile=64):
    """A blocked backward with the element mask right but whole key tiles skipped by the top-left rule
    (a key tile starting past the query tile's last row): the keys a bottom-right query sees past it
    are dropped when n_k > n_q."""
    n_q, n_k = Q.shape[0], K.shape[0]
    dq, dk, dv = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    seen_all = eb_visible(n_q, n_k) & np.isfinite(lse)[:, None]
    for q0 in range(0, n_q, tile):
        rows = slice(q0, min(n_q, q0 + tile))
        for k0 in range(0, n_k, tile):
            if k0 > rows.stop - 1:
                continue
            cols = slice(k0, min(n_k, k0 + tile))
            seen = seen_all[rows, cols]
            p = np.where(seen, np.exp(np.where(seen, scale * (Q[rows] @ K[cols].T) - lse[rows, None], 0.0)), 0.0)
            full = np.where(seen_all[rows], np.exp(np.where(seen_all[rows], scale * (Q[rows] @ K.T)
                                                            - lse[rows, None], 0.0)), 0.0)
            delta = (dO[rows] * (full @ V)).sum(axis=1, keepdims=True)
            ds = p * (dO[rows] @ V[cols].T - delta)
            dq[rows] += scale * ds @ K[cols]
            dk[cols] += scale * ds.T @ Q[rows]
            dv[cols] += p.T @ dO[rows]
    return dq, dk, dv


def eb_visible(n_q, n_k):
    from onlinesoftmax.book.exercises import exercises_attention_backward as eb
    return eb.visible(n_q, n_k)


def _second_softmax(q, K, V, dout, lse, scale):
    s = scale * (K @ q)
    p = np.exp(s - s.max())
    p /= p.sum()
    ds = p * (V @ dout - dout @ (p @ V))
    return scale * (ds @ K), scale * np.outer(ds, q), np.outer(p, dout)


def test_the_causal_backward_grader_passes_the_answer_and_rejects_wrong_ones():
    from onlinesoftmax.book.exercises import exercises_attention_backward as eb

    assert eb.check_causal_backward(eb.causal_backward, quiet=True)

    def top_left(Q, K, V, dO, lse, scale):              # torch's is_causal alignment instead of bottom-right
        seen = (np.arange(K.shape[0])[None, :] <= np.arange(Q.shape[0])[:, None]) & np.isfinite(lse)[:, None]
        p = np.where(seen, np.exp(np.where(seen, scale * (Q @ K.T) - lse[:, None], 0.0)), 0.0)
        ds = p * (dO @ V.T - (dO * (p @ V)).sum(axis=1, keepdims=True))
        return scale * (ds @ K), scale * (ds.T @ Q), p.T @ dO

    def mask_in_ds_only(Q, K, V, dO, lse, scale):       # dS masked, but dV still takes the unmasked P
        dq, dk, _ = eb.causal_backward(Q, K, V, dO, lse, scale)
        with np.errstate(all="ignore"):
            p = np.exp(scale * (Q @ K.T) - lse[:, None])
        return dq, dk, np.nan_to_num(p).T @ dO

    wrong = {"the stub": lambda *a: None, "the mask forgotten": eb.causal_backward_unmasked, "top-left": top_left,
             "all zeros": lambda Q, K, V, dO, lse, scale: (np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)),
             "the mask in dS only": mask_in_ds_only,
             "right on the visible shapes only": lambda Q, K, V, dO, lse, scale: eb.causal_backward(Q, K, V, dO, lse, scale)
             if Q.shape in ((4, 2), (3, 8), (9, 4), (70, 8)) else (np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)),
             "key tiles of 64 skipped by the top-left rule": _top_left_tile_skip}
    for name, fn in wrong.items():
        assert not eb.check_causal_backward(fn, quiet=True), name
    assert eb.check_causal_backward(lambda *a: _top_left_tile_skip(*a, tile=10**6), quiet=True)   # one tile: right


def test_float64_and_empty_arrays_are_computed_exactly():
    """float64 q, k, v (with attention's float64 LSE, any d) give float64 gradients equal to torch's
    float64 autograd of its attention at 1e-12; the float32 model of the kernels, off by ~1e-7, is the
    wrong answer the tolerance rejects. Empty arrays give empty gradients; a kernel variant is refused."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    for n_q, n_k, causal, heads, kv_heads, d in ((7, 11, False, 4, 2, 24), (9, 9, True, 2, 1, 64), (6, 13, True, 2, 2, 3)):
        q = rng.standard_normal((2, heads, n_q, d))
        k, v = (rng.standard_normal((2, kv_heads, n_k, d)) for _ in range(2))
        out, lse = osm.attention(q, k, v, causal=causal, return_lse=True)
        assert out.dtype == lse.dtype == np.float64
        dout = rng.standard_normal(out.shape)
        got = osm.attention_backward(dout, q, k, v, out, lse, causal=causal)
        group = heads // kv_heads
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
        mask = None if not causal else torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + (n_k - n_q)
        ref = torch.nn.functional.scaled_dot_product_attention(tq, tk.repeat_interleave(group, 1),
                                                               tv.repeat_interleave(group, 1), attn_mask=mask)
        want = [t.numpy() for t in torch.autograd.grad(ref, (tq, tk, tv), torch.tensor(dout))]
        for g, w in zip(got, want):
            assert g.dtype == np.float64 and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * float(np.abs(w).max()))
        model = bb.simulate(*(a.astype(np.float32) for a in (dout, q, k, v, out, lse)), causal=causal)
        assert max(float(np.abs(m - w).max() / np.abs(w).max()) for m, w in zip(model, want)) > 1e-9
    empty = [np.zeros((1, 2, 0, 64), np.float32), np.zeros((1, 2, 0, 64), np.float32),
             np.zeros((1, 1, 5, 64), np.float32), np.zeros((1, 1, 5, 64), np.float32),
             np.zeros((1, 2, 0, 64), np.float32), np.zeros((1, 2, 0), np.float32)]
    dq, dk, dv = osm.attention_backward(*empty)
    assert dq.shape == (1, 2, 0, 64) and dk.shape == dv.shape == (1, 1, 5, 64) and not dk.any()
    with pytest.raises(ValueError, match="variant 'auto' computes them exactly"):
        osm.attention_backward(dout, q, k, v, out, lse, causal=True, variant="mma")
    with pytest.raises(ValueError, match="lse must be an array of q's kind"):
        osm.attention_backward(dout, q, k, v, out, lse.astype(np.float32), causal=True)
