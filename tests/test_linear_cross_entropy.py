"""CPU tier for linear_cross_entropy (onlinesoftmax/linear_loss.py): the loss and the gradients of
hidden, weight and bias, made chunk by chunk, against the float64 loss of the whole logits matrix
(NumPy) and against torch's autograd of F.cross_entropy(hidden @ weight.T + bias) (torch tensors), for
every option, chunk sizes that do and do not divide the tokens, ignored rows; wrong gradients
rejected by the comparison; the argument checks. weight_grad="recompute" (d weight a vocabulary block
at a time) the same, and its memory: the peak the NumPy path allocates beyond its inputs and outputs
(tracemalloc) stays under half of a float32 V x H sum, which weight_grad="sum" is shown holding."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax.kernels.cross_entropy import rows as kce


def problem(tokens=300, hidden=32, vocab=500, seed=0, ignore=-100):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((tokens, hidden)).astype(np.float32)
    w = (rng.standard_normal((vocab, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = rng.standard_normal(vocab).astype(np.float32)
    t = rng.integers(0, vocab, tokens)
    t[::7] = ignore
    return h, w, b, t


def exact(h, w, b, t, reduction="mean", **options):
    """float64 (loss, dh, dw, db) of the whole logits matrix (kernels/cross_entropy/rows.py's reference)."""
    h64, w64, b64 = (a.astype(np.float64) for a in (h, w, b))
    rows, _, grad = kce.reference(h64 @ w64.T + b64, t, **options)
    counted = (t != options.get("ignore_index", -100)).sum()
    scale = 1 / counted if reduction == "mean" else 1.0
    g = grad * scale
    return rows.sum() * scale, g @ w64, g.T @ h64, g.sum(0)


def close(got, want, rtol=2e-5):
    return all(float(np.abs(np.asarray(a, np.float64) - b).max()) <= rtol * max(1.0, float(np.abs(b).max()))
               for a, b in zip(got, want))


OPTIONS = [{}, {"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"softcap": 5.0}, {"reduction": "sum"}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize("chunk", (None, 64, 299, 1000))
def test_numpy_against_the_whole_matrix(options, chunk):
    h, w, b, t = problem()
    got = osm.linear_cross_entropy_with_grad(h, w, t, b, chunk=chunk, **options)
    assert close(got, exact(h, w, b, t, **options))
    assert close(osm.linear_cross_entropy_with_grad(h, w, t, None, chunk=chunk, **options)[:3],
                 exact(h, w, np.zeros_like(b), t, **options)[:3])


@pytest.mark.parametrize("options", OPTIONS + [{"label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 5.0}],
                         ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize("vocab_chunk", (None, 64, 77, 1000))
def test_recompute_against_the_whole_matrix(options, vocab_chunk):
    h, w, b, t = problem(seed=1)
    got = osm.linear_cross_entropy_with_grad(h, w, t, b, chunk=64, weight_grad="recompute", vocab_chunk=vocab_chunk,
                                             **options)
    assert close(got, exact(h, w, b, t, **options))
    got = osm.linear_cross_entropy_with_grad(h, w, t, None, chunk=100, weight_grad="recompute",
                                             vocab_chunk=vocab_chunk, **options)
    assert got[3] is None and close(got[:3], exact(h, w, np.zeros_like(b), t, **options)[:3])


def test_recompute_with_a_non_negative_ignore_index():
    """ignore_index=0: the token pass's run for log l (targets at each row's largest logit) must not
    take a row whose largest logit is entry 0 for an ignored one."""
    h, w, b, t = problem(seed=6, ignore=0)
    w[0] += 3.0                                           # entry 0 is the largest logit of many rows
    got = osm.linear_cross_entropy_with_grad(h, w, t, b, weight_grad="recompute", ignore_index=0)
    assert close(got, exact(h, w, b, t, ignore_index=0))


def test_recompute_wrong_gradients_are_rejected():
    """What a vocabulary block could get wrong, each caught by the same comparison."""
    h, w, b, t = problem(seed=2)
    options = {"label_smoothing": 0.1, "softcap": 5.0}
    want = exact(h, w, b, t, **options)
    loss, dh, dw, db = osm.linear_cross_entropy_with_grad(h, w, t, b, weight_grad="recompute", vocab_chunk=128,
                                                          **options)
    assert close((loss, dh, dw, db), want)
    shifted = np.roll(dw, 1, axis=0)                                 # a block's rows written one entry off
    last_block = dw.copy()
    last_block[:-(w.shape[0] % 128)] = 0                              # only the last block kept
    no_cap = osm.linear_cross_entropy_with_grad(h, w, t, b, weight_grad="recompute", label_smoothing=0.1)[2]
    for wrong in (shifted, last_block, no_cap):                       # ... or the cap's derivative left out
        assert not close((loss, dh, wrong, db), want)


def test_recompute_in_float16_keeps_the_small_gradients():
    """float16: the mean's 1/tokens would flush p's small values to 0 before the cast; recompute's d weight
    stays within twice the summing path's error against float64 (plus 2 ulps of its scale)."""
    h, w, b, t = problem(tokens=2048, hidden=4, vocab=16000, seed=4)   # p / 2048 under float16's range
    want = exact(h, w, b, t)
    h16, w16, b16 = (a.astype(np.float16) for a in (h, w, b))
    errors = {}
    for mode in ("sum", "recompute"):
        dw = osm.linear_cross_entropy_with_grad(h16, w16, t, b16, weight_grad=mode)[2]
        errors[mode] = float(np.abs(dw.astype(np.float64) - want[2]).max())
    floor = 2 * 2.0 ** -10 * float(np.abs(want[2]).max())
    assert errors["recompute"] <= 2 * errors["sum"] + floor, errors


def test_a_mean_over_no_token_is_nan_with_zero_gradients_in_both_paths():
    # As torch's: a batch of padding alone gives a NaN loss and gradients of 0, not NaN ones that
    # would poison the weights at the optimizer's step.
    h, w, b, t = problem(tokens=20, seed=5)
    t[:] = -100
    for mode in ("sum", "recompute"):
        loss, dh, dw, db = osm.linear_cross_entropy_with_grad(h, w, t, b, weight_grad=mode)
        assert np.isnan(loss), mode
        for name, grad in (("dh", dh), ("dw", dw), ("db", db)):
            assert not np.isnan(grad).any() and not grad.any(), (mode, name)


def peak_extra_bytes(call, *arrays) -> int:
    """The most the call had allocated at once beyond what it returned (tracemalloc sees NumPy's buffers)."""
    import tracemalloc

    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    result = call(*arrays)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    kept = sum(a.nbytes for a in result if isinstance(a, np.ndarray))
    return peak - kept


def test_recompute_never_holds_a_float32_sum_of_the_weight_gradient():
    h, w, b, t = problem(tokens=256, hidden=512, vocab=2000, seed=3)
    f32_sum = w.shape[0] * w.shape[1] * 4
    summed = peak_extra_bytes(lambda *a: osm.linear_cross_entropy_with_grad(*a, chunk=16), h, w, t, b)
    recomputed = peak_extra_bytes(lambda *a: osm.linear_cross_entropy_with_grad(
        *a, chunk=16, weight_grad="recompute", vocab_chunk=128), h, w, t, b)
    assert summed >= f32_sum, f"the float32 sum was not seen ({summed} bytes at peak)"
    assert recomputed <= f32_sum / 2, f"recompute held {recomputed} bytes at once, the float32 sum is {f32_sum}"


def test_wrong_gradients_are_rejected():
    h, w, b, t = problem()
    want = exact(h, w, b, t)
    loss, dh, dw, db = osm.linear_cross_entropy_with_grad(h, w, t, b)
    assert close((loss, dh, dw, db), want)
    for wrong in ((loss, dh, dw * 64, db),          # d weight of the last chunk only times the chunks
                  (loss, dh * (t != -100).sum(), dw, db),   # the sum's gradient under a mean loss
                  (loss, dh, dw, db * 0)):           # the bias forgotten
        assert not close(wrong, want)


def test_against_torch_autograd():
    torch = pytest.importorskip("torch")
    h, w, b, t = (torch.from_numpy(a) for a in problem(tokens=257))
    h, w, b = (a.clone().requires_grad_() for a in (h, w, b))
    t32 = t.to(torch.int32)   # int32 targets: the vocabulary pass indexes with them too
    for options, mode in (({}, {}), ({"label_smoothing": 0.05, "reduction": "sum"}, {}),
                          ({}, {"weight_grad": "recompute", "vocab_chunk": 128}),
                          ({"label_smoothing": 0.05, "reduction": "sum"}, {"weight_grad": "recompute"})):
        loss = osm.linear_cross_entropy(h, w, t32 if mode else t, b, chunk=100, **options, **mode)
        grads = torch.autograd.grad(loss * 3, (h, w, b))
        h64, w64, b64 = (a.detach().double().requires_grad_() for a in (h, w, b))
        ref = torch.nn.functional.cross_entropy(h64 @ w64.T + b64, t, **options)
        refs = torch.autograd.grad(ref * 3, (h64, w64, b64))
        assert abs(float(loss.detach()) - float(ref.detach())) <= 1e-5 * max(1, abs(float(ref.detach())))
        for got, want in zip(grads, refs):
            assert float((got.double() - want).abs().max()) <= 2e-5 * max(1.0, float(want.abs().max()))
    with pytest.raises(TypeError, match="^linear_cross_entropy: ignore_index must be an int"):
        osm.linear_cross_entropy(h, w, t, b, ignore_index=1.5)   # the autograd path checks them too


def test_the_weight_gradient_is_handed_over_not_copied():
    """.grad is the tensor the forward made (no copy as large as the weight: a gradient still referenced
    by the graph, as a saved tensor is, torch copies first); a second backward is refused by name."""
    torch = pytest.importorskip("torch")
    h, w, b, t = (torch.from_numpy(a) for a in problem(tokens=100))
    h, w = (a.clone().requires_grad_() for a in (h, w))
    made = []
    original = osm.linear_loss.linear_cross_entropy_with_grad

    def spy(*args, **kwargs):   # keeps the addresses only: a reference would make torch copy
        result = original(*args, **kwargs)
        made.append((result[1].data_ptr(), result[2].data_ptr()))
        return result

    osm.linear_loss.linear_cross_entropy_with_grad = spy
    try:
        loss = osm.linear_cross_entropy(h, w, t, weight_grad="recompute")
    finally:
        osm.linear_loss.linear_cross_entropy_with_grad = original
    loss.backward(retain_graph=True)
    assert (h.grad.data_ptr(), w.grad.data_ptr()) == made[0]
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()


def test_the_arguments_are_checked():
    h, w, b, t = problem()
    with pytest.raises(ValueError, match="must share H"):
        osm.linear_cross_entropy(h, w[:, :5], t)
    with pytest.raises(ValueError, match="targets must have hidden's shape"):
        osm.linear_cross_entropy(h, w, t[:5])
    with pytest.raises(ValueError, match="bias must have shape"):
        osm.linear_cross_entropy(h, w, t, b[:3])
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
        osm.linear_cross_entropy(h, w, t, reduction="none")
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        osm.linear_cross_entropy(h, w, t, chunk=0)
    with pytest.raises(ValueError, match="weight_grad must be 'sum' or 'recompute', got 'float32'"):
        osm.linear_cross_entropy(h, w, t, weight_grad="float32")
    with pytest.raises(ValueError, match="vocab_chunk must be a positive int or None, got 0"):
        osm.linear_cross_entropy(h, w, t, weight_grad="recompute", vocab_chunk=0)
    with pytest.raises(TypeError, match="share a dtype"):
        osm.linear_cross_entropy(h.astype(np.float16), w, t)
    # the options it shares with cross_entropy, each error naming linear_cross_entropy (a float
    # ignore_index compared unequal to every target and dropped none: the loss of every token)
    for options, error, message in (({"ignore_index": 1.5}, TypeError, "ignore_index must be an int"),
                                    ({"label_smoothing": 1.5}, ValueError, "label_smoothing must be a number"),
                                    ({"z_loss": -1.0}, ValueError, "z_loss must be a number"),
                                    ({"softcap": 0.0}, ValueError, "softcap must be None or a positive"),
                                    ({"chunk": 2.0}, ValueError, "chunk must be a positive int")):
        for function in (osm.linear_cross_entropy, osm.linear_cross_entropy_with_grad):
            with pytest.raises(error, match=f"^linear_cross_entropy: {message}"):
                function(h, w, t, **options)
    with pytest.raises(ValueError, match=r"linear_cross_entropy: target 1000000 of token 0 is outside \[0, "):
        osm.linear_cross_entropy(h, w, np.full_like(t, 10**6))
    late = t.copy()
    late[-1] = -2   # the last token's: every token is checked before the first chunk is computed
    with pytest.raises(ValueError, match=f"target -2 of token {t.size - 1} is outside"):
        osm.linear_cross_entropy(h, w, late, chunk=1)


def test_a_bridged_call_lets_go_of_its_tensors_when_it_returns():
    """A function called on torch tensors drops its views of them when it returns, not when the
    garbage collector next runs: a long loop of chunks (linear_cross_entropy's) held 15 chunks of
    logits on a GPU when the bridge's recursive helper kept them in a reference cycle."""
    import gc
    import weakref

    torch = pytest.importorskip("torch")
    gc.disable()
    try:
        logits = torch.randn(4, 10)
        gone = weakref.ref(logits)
        osm.cross_entropy_with_grad(logits, torch.randint(0, 10, (4,)), in_place=True)
        del logits
        assert gone() is None, "the logits outlive the call"
    finally:
        gc.enable()


def test_default_chunks_follow_the_memory_each_weight_grad_holds():
    """"sum" holds a float32 d weight anyway: `hidden` tokens a chunk, whose 16-bit logits are half of
    it; "recompute" is bounded by its chunk's logits: 1/64 (1.6 % of the logits); never fewer than 64."""
    from onlinesoftmax.linear_loss import default_chunk

    assert default_chunk(8192, 4096, "sum") == 4096 and default_chunk(8192, 4096, "recompute") == 128
    assert default_chunk(32768, 4096, "sum") * 128256 * 2 == 128256 * 4096 * 4 / 2   # half the float32 d weight
    assert default_chunk(1000, 4096, "sum") == 1000   # at most all the tokens
    assert default_chunk(100, 32, "sum") == default_chunk(100, 32, "recompute") == 64
    assert default_chunk(8193, 4096, "recompute") == 129   # rounded up: at most 64 chunks


def test_the_float32_sum_of_products_accumulates():
    """d weight's running sum: acc += a @ b into float32 for float32 and 16-bit operands (on a GPU the
    16-bit one is one addmm with out_dtype; here the product and an add), twice in a row."""
    torch = pytest.importorskip("torch")
    from onlinesoftmax.linear_loss import _add_product

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(5, 7, generator=g).to(dtype), torch.randn(7, 3, generator=g).to(dtype)
        acc = torch.ones(5, 3)
        _add_product(acc, a, b)
        _add_product(acc, a, b)
        want = 1 + 2 * (a.double() @ b.double())
        assert acc.dtype == torch.float32 and torch.allclose(acc.double(), want, rtol=2e-2 if dtype != torch.float32 else 1e-5)
