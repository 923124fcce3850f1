"""CPU tier: what a probe of the torch paths found, each a silent wrong answer or an unclear error before.

- The LSE that cross_entropy returns has no gradient: using it in a loss is an error, never a term
  dropped from the gradient (it was marked non-differentiable: the gradient came out wrong).
- cross_entropy and attention have no second derivative: create_graph=True is an error, never a
  gradient penalty that silently adds zero.
- The backward operators refuse dy of another dtype than y, as the public functions do.
- A tensor x with a NumPy out=/mask, or a NumPy x with a tensor mask: a TypeError naming it.
- attention on a tensor that requires a gradient checks causal, scale, causal_align and the variant
  as the call without one does; softmax names an unknown variant before the gradient's own rule.
- linear_cross_entropy of no token in float64 returns a float64 loss.
The checkers take the function under test, so each keeps its wrong answer: a version with the old
behaviour must fail them.
"""
import numpy as np
import pytest

from test_distributed_ranks import import_torch

torch = import_torch()

import torch.nn.functional as F  # noqa: E402

import onlinesoftmax as osm  # noqa: E402

TARGETS = torch.tensor([0, 4, 2])


def logits(seed=0):
    return torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def lse_gradient_is_right_or_refused(cross_entropy) -> bool:
    """loss + mean(lse^2): its gradient equals torch's, or the backward raises NotImplementedError."""
    a, b = logits(), logits()
    loss, lse = cross_entropy(a, TARGETS)
    try:
        (loss + (lse ** 2).mean()).backward()
    except NotImplementedError:
        return True
    (F.cross_entropy(b, TARGETS) + (torch.logsumexp(b, -1) ** 2).mean()).backward()
    return a.grad is not None and torch.allclose(a.grad, b.grad)


def second_derivative_is_right_or_refused(loss_of) -> bool:
    """A gradient penalty |d loss / dx|^2: its gradient equals torch's, or create_graph=True raises."""
    a = logits(1)
    try:
        g, = torch.autograd.grad(loss_of(a), a, create_graph=True)
        penalty = (g ** 2).sum()
        if not penalty.requires_grad:
            return False   # the penalty is a constant: its gradient would be zero, silently
        penalty.backward()
    except NotImplementedError:
        return True
    b = logits(1)
    g_ref, = torch.autograd.grad(F.cross_entropy(b, TARGETS), b, create_graph=True)
    (g_ref ** 2).sum().backward()
    return torch.allclose(a.grad, b.grad)


def test_the_lse_of_cross_entropy_is_never_a_dropped_term():
    assert lse_gradient_is_right_or_refused(lambda x, t: osm.cross_entropy(x, t, return_lse=True))
    # the wrong answer: an LSE without a gradient, as before
    assert not lse_gradient_is_right_or_refused(
        lambda x, t: (lambda loss, lse: (loss, lse.detach()))(*osm.cross_entropy(x, t, return_lse=True)))
    a, b = logits(), logits()   # the loss alone still has torch's gradient
    osm.cross_entropy(a, TARGETS).backward()
    F.cross_entropy(b, TARGETS).backward()
    assert torch.allclose(a.grad, b.grad)


def test_no_second_derivative_is_ever_a_silent_zero():
    assert second_derivative_is_right_or_refused(lambda x: osm.cross_entropy(x, TARGETS))
    q_shape = (1, 1, 4, 64)
    k, v = torch.randn(q_shape, dtype=torch.float64), torch.randn(q_shape, dtype=torch.float64)
    q = torch.randn(q_shape, dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(osm.attention(q, k, v).sum(), q)   # the first derivative still works
    assert torch.isfinite(g).all()
    with pytest.raises(NotImplementedError, match="second derivative"):
        torch.autograd.grad(osm.attention(q, k, v).sum(), q, create_graph=True)
    # the wrong answer: a gradient computed without a graph, taken for the function's own
    assert not second_derivative_is_right_or_refused(
        lambda x: (x * osm.cross_entropy_with_grad(x.detach(), TARGETS)[-1]).sum())


def test_backward_operators_refuse_dy_of_another_dtype():
    y = torch.softmax(torch.randn(2, 3), -1)
    for op in (torch.ops.onlinesoftmax.softmax_backward, torch.ops.onlinesoftmax.log_softmax_backward):
        with pytest.raises(ValueError, match="dtype"):
            op(y, torch.randn(2, 3, dtype=torch.float64), -1)


def test_arrays_and_tensors_are_not_mixed():
    with pytest.raises(TypeError, match="out must be a torch tensor.*numpy"):
        osm.softmax(torch.randn(2, 3), out=np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="mask must be a torch tensor"):
        osm.softmax(torch.ones(3, 4), mask=np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="mask must be an array of x's kind"):
        osm.softmax(np.ones((3, 4), np.float32), mask=torch.zeros(4))
    y = osm.softmax(torch.ones(3, 4), mask=torch.tensor([0.0, 0.0, -np.inf, 0.0]))   # tensors together: computed
    assert torch.allclose(y, torch.tensor([1 / 3, 1 / 3, 0, 1 / 3]).expand(3, 4))


@pytest.mark.parametrize("options, error, match", [
    ({"causal": 1}, TypeError, "causal must be True or False"),
    ({"causal": "yes"}, TypeError, "causal must be True or False"),
    ({"scale": True}, TypeError, "scale must be a number"),
    ({"causal": True, "causal_align": "x"}, ValueError, "causal_align"),
    ({"variant": None}, TypeError, "variant must be a string"),
    ({"variant": "nope"}, ValueError, "unknown variant 'nope'"),
])
def test_attention_with_a_gradient_checks_its_options(options, error, match):
    q = torch.randn(1, 1, 4, 64, requires_grad=True)
    k, v = torch.randn(1, 1, 4, 64), torch.randn(1, 1, 4, 64)
    with pytest.raises(error, match=match):
        osm.attention(q, k, v, **options)
    with pytest.raises(error, match=match):   # as without a gradient
        osm.attention(q.detach(), k, v, **options)


def test_an_unknown_variant_is_named_before_the_gradient_rule():
    x = torch.randn(2, 3, requires_grad=True)
    for function in (osm.softmax, osm.log_softmax):
        with pytest.raises(ValueError, match="unknown variant 'nope'"):
            function(x, variant="nope")
        with pytest.raises(TypeError, match="plain call only"):   # a known one: the gradient's rule
            function(x, variant="online")


def test_linear_cross_entropy_of_no_token_keeps_float64():
    weight = np.random.default_rng(0).standard_normal((6, 3))
    for hidden, w in ((np.zeros((0, 3)), weight), (torch.zeros(0, 3, dtype=torch.float64), torch.from_numpy(weight))):
        targets = np.zeros(0, np.int64) if isinstance(hidden, np.ndarray) else torch.zeros(0, dtype=torch.int64)
        for loss in (osm.linear_cross_entropy(hidden, w, targets), osm.linear_cross_entropy_with_grad(hidden, w, targets)[0]):
            assert str(loss.dtype).endswith("float64") and np.isnan(float(loss))


@pytest.mark.parametrize("call", [
    lambda: osm.attention(torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4)),
    lambda: osm.softmax(torch.randn(2, 3), out=torch.zeros(2, 3, dtype=torch.float64)),
    lambda: osm.softmax_topk(torch.randn(2, 8), torch.tensor(2)),
    lambda: osm.softmax_backward(torch.randn(2, 3), torch.randn(2, 4)),
], ids=("attention q", "softmax out", "softmax_topk k", "softmax_backward dy"))
def test_an_error_names_the_tensor_the_caller_passed(call):
    """The functions see NumPy views of a caller's tensors; their errors named those views (`numpy.ndarray`),
    which the caller never passed."""
    with pytest.raises((TypeError, ValueError)) as error:
        call()
    assert "torch.Tensor" in str(error.value) and "numpy" not in str(error.value), str(error.value)


def test_float64_attention_names_an_unknown_variant():
    q = np.zeros((1, 1, 2, 8))
    with pytest.raises(ValueError, match="unknown variant 'x'"):
        osm.attention(q, q, q, variant="x")
    with pytest.raises(TypeError, match="runs a kernel"):   # a known kernel: it does not take float64
        osm.attention(q, q, q, variant="blocked")
