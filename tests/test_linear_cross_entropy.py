"""CPU tier for linear_cross_entropy (onlinesoftmax/linear_loss.py): the loss and the gradients of
hidden, weight and bias, made chunk by chunk, against the float64 loss of the whole logits matrix
(NumPy) and against torch's autograd of F.cross_entropy(hidden @ weight.T + bias) (torch tensors), for
every option, chunk sizes that do and do not divide the tokens, ignored rows; wrong gradients
rejected by the comparison; the argument checks."""
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
    for options in ({}, {"label_smoothing": 0.05, "reduction": "sum"}):
        loss = osm.linear_cross_entropy(h, w, t, b, chunk=100, **options)
        grads = torch.autograd.grad(loss * 3, (h, w, b))
        h64, w64, b64 = (a.detach().double().requires_grad_() for a in (h, w, b))
        ref = torch.nn.functional.cross_entropy(h64 @ w64.T + b64, t, **options)
        refs = torch.autograd.grad(ref * 3, (h64, w64, b64))
        assert abs(float(loss.detach()) - float(ref.detach())) <= 1e-5 * max(1, abs(float(ref.detach())))
        for got, want in zip(grads, refs):
            assert float((got.double() - want).abs().max()) <= 2e-5 * max(1.0, float(want.abs().max()))


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
    with pytest.raises(TypeError, match="share a dtype"):
        osm.linear_cross_entropy(h.astype(np.float16), w, t)
    with pytest.raises(ValueError, match="outside"):
        osm.linear_cross_entropy(h, w, np.full_like(t, 10**6))
