"""The kernels as PyTorch operators, with autograd: `torch.ops.onlinesoftmax.*`.

    import onlinesoftmax.torch_ops                      # registers the operators (imports torch)
    y = torch.ops.onlinesoftmax.softmax(x, -1)          # or onlinesoftmax.softmax(x): the same operator
    y.sum().backward()                                  # when x.requires_grad

| operator                                         | forward                 | backward                         |
|--------------------------------------------------|-------------------------|----------------------------------|
| softmax(x, dim), log_softmax(x, dim)             | the (log-)softmax kernels | (log_)softmax_backward(y, dy, dim) |
| logsumexp(x, dim, keepdim)                       | the log-sum-exp kernel  | softmax(x, dim) * dlse           |
| attention(q, k, v, causal, scale, causal_align)  | the attention kernels   | attention_backward (auto)        |
| cross_entropy(logits, targets, ignore_index, label_smoothing, z_loss, softcap, reduction) -> (loss, lse) | cross_entropy_02_cluster or _01_rows, the gradient written in the same launch | that gradient, scaled (the LSE has none) |
| softmax_backward(y, dy, dim), log_softmax_backward(y, dy, dim) | the backward kernels | torch's ops (double backward) |

Outputs are contiguous. Each operator is a `torch.library.Library` definition (CPU and CUDA kernels, a
fake implementation, so `torch.compile(fullgraph=True)` traces it without a graph break) with an
autograd kernel of its own: a plain tensor that needs no gradient goes straight to the kernels (about
1 us of Python over the public function; `torch.library.custom_op`'s wrappers cost about 15 us), one that
needs a gradient through a `torch.autograd.Function`, torch.compile's tensors below autograd to the
fake. CUDA tensors run the kernels on torch's current stream; CPU tensors the NumPy models (float64
exactly: `torch.autograd.gradcheck` runs without a GPU). cross_entropy checks its targets on the
device and raises in the backward.
"""
import inspect

import numpy as np
import torch
import torch.autograd.forward_ad as _forward_ad

from onlinesoftmax import api, attention_api, backward, loss

_lib = torch.library.Library("onlinesoftmax", "DEF")
_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_functorch_level = torch._C._functorch.maybe_current_level   # None unless a torch.func transform is active
_modes = torch._C._len_torch_dispatch_stack      # Python dispatch modes active (make_fx, FlopCounterMode, ...)


def _lse_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _same_shape(x, *_):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _lse_shape(x, dim, keepdim):
    shape = list(x.shape)
    shape[dim:(dim + 1) or None] = [1] if keepdim else []   # (dim = -1: the slice [-1:])
    return x.new_empty(shape, dtype=_lse_dtype(x))


# ---- the kernels, as each operator's CPU and CUDA implementation --------------------------------

def _values(x):
    """x, or inside a forward_ad.dual_level() its values alone: the public function must not send a dual
    x back to the operator."""
    return x if _forward_ad.__dict__["_current_level"] < 0 else x.detach()


def _softmax(x, dim):
    return api.softmax(_values(x), dim).contiguous()


def _log_softmax(x, dim):
    return api.log_softmax(_values(x), dim).contiguous()


def _logsumexp(x, dim, keepdim):
    return api.logsumexp(_values(x), dim, keepdims=keepdim).contiguous()


def _attention(q, k, v, causal, scale, causal_align="bottom_right"):
    return attention_api.attention(q, k, v, causal=causal, scale=scale, causal_align=causal_align)


def _cross_entropy(logits, targets, ignore_index, label_smoothing, z_loss, softcap, reduction):
    return loss.cross_entropy(logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing,
                              z_loss=z_loss, softcap=softcap or None, reduction=reduction, return_lse=True)


def _cross_entropy_shapes(logits, targets, ignore_index, label_smoothing, z_loss, softcap, reduction):
    dtype = _lse_dtype(logits)
    rows = logits.new_empty(logits.shape[:-1], dtype=dtype)
    return (rows if reduction == "none" else logits.new_empty((), dtype=dtype)), rows.new_empty(rows.shape)


def _softmax_backward(y, dy, dim):   # (dy of another dtype than y: a ValueError, as the public function's)
    return backward.softmax_backward(y, dy, dim).contiguous()


def _log_softmax_backward(y, dy, dim):
    return backward.log_softmax_backward(y, dy, dim).contiguous()


OPERATORS = {   # name: (schema, implementation, fake)
    "softmax": ("softmax(Tensor x, int dim) -> Tensor", _softmax, _same_shape),
    "log_softmax": ("log_softmax(Tensor x, int dim) -> Tensor", _log_softmax, _same_shape),
    "logsumexp": ("logsumexp(Tensor x, int dim, bool keepdim) -> Tensor", _logsumexp, _lse_shape),
    "attention": ("attention(Tensor q, Tensor k, Tensor v, bool causal, float? scale, "
                  "str causal_align=\"bottom_right\") -> Tensor", _attention, _same_shape),
    "cross_entropy": ("cross_entropy(Tensor logits, Tensor targets, int ignore_index, float label_smoothing, "
                      "float z_loss, float softcap, str reduction) -> (Tensor, Tensor)", _cross_entropy,
                      _cross_entropy_shapes),
    "softmax_backward": ("softmax_backward(Tensor y, Tensor dy, int dim) -> Tensor", _softmax_backward, _same_shape),
    "log_softmax_backward": ("log_softmax_backward(Tensor y, Tensor dy, int dim) -> Tensor", _log_softmax_backward,
                             _same_shape),
}
for _name, (_schema, _impl, _fake) in OPERATORS.items():
    _lib.define(_schema)
    _lib.impl(_name, _impl, "CPU")
    _lib.impl(_name, _impl, "CUDA")
    torch.library.register_fake(f"onlinesoftmax::{_name}", _fake, lib=_lib)
_ops = torch.ops.onlinesoftmax


# ---- autograd -----------------------------------------------------------------------------------

def _from_the_output(forward, backward, tangent):
    """An autograd rule whose gradients need only the output y: softmax's and log-softmax's. Reverse mode
    dx = backward(y, dy, dim) (one of the backward kernels); forward mode (forward_ad) the tangent of y
    is tangent(y, dx, dim)."""

    class FromTheOutput(torch.autograd.Function):
        @staticmethod
        def forward(x, dim):
            return forward(x, dim)

        @staticmethod
        def setup_context(ctx, inputs, y):
            ctx.dim = inputs[1]
            ctx.save_for_backward(y)
            ctx.save_for_forward(y)

        @staticmethod
        def backward(ctx, dy):
            (y,) = ctx.saved_tensors
            return backward(y, dy, ctx.dim), None

        @staticmethod
        def jvp(ctx, dx, _):
            (y,) = ctx.saved_tensors
            return tangent(y, dx, ctx.dim)
    return FromTheOutput


def _log_softmax_tangent(z, dx, dim):
    """z = x - lse(x): dz = dx - sum(e^z dx) (the Jacobian is not symmetric, so not the backward kernel)."""
    return dx - (z.exp() * dx).sum(dim, keepdim=True)


# softmax's Jacobian diag(y) - y y^T is symmetric: its tangent y (dx - sum y dx) is the backward kernel's formula
_Softmax = _from_the_output(_ops.softmax, _ops.softmax_backward, _ops.softmax_backward)
_LogSoftmax = _from_the_output(_ops.log_softmax, _ops.log_softmax_backward, _log_softmax_tangent)


class _LogSumExp(torch.autograd.Function):
    """d lse / dx = softmax(x): dx = softmax(x) * dlse, dlse broadcast along dim."""

    @staticmethod
    def forward(x, dim, keepdim):
        return _ops.logsumexp(x, dim, keepdim)

    @staticmethod
    def setup_context(ctx, inputs, _):
        x, ctx.dim, ctx.keepdim = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, dlse):
        (x,) = ctx.saved_tensors
        dlse = dlse if ctx.keepdim else dlse.unsqueeze(ctx.dim)
        return (_ops.softmax(x, ctx.dim) * dlse).to(x.dtype), None, None

    @staticmethod
    def jvp(ctx, dx, *_):
        """d lse = sum(softmax(x) dx) along dim, in float32 and in the LSE's dtype (float32 for 16-bit x)."""
        (x,) = ctx.saved_tensors
        p = _ops.softmax(x, ctx.dim)
        return (p.float() * dx.float()).sum(ctx.dim, keepdim=ctx.keepdim).to(_lse_dtype(x))


def _second_derivative(operator, rule, tangent):
    """An autograd rule for a backward operator (y, dy, dim) -> dx, differentiated again in torch's ops:
    rule(y, dy, g, dim) -> (d/dy, d/d(dy)) of <g, dx>; forward mode tangent(y, dy, ty, tdy, dim) -> the
    tangent of dx (ty or tdy None where that input carries none)."""

    class GradientOfGradient(torch.autograd.Function):
        @staticmethod
        def forward(y, dy, dim):
            return operator(y, dy, dim)

        @staticmethod
        def setup_context(ctx, inputs, _):
            y, dy, ctx.dim = inputs
            ctx.save_for_backward(y, dy)
            ctx.save_for_forward(y, dy)

        @staticmethod
        def backward(ctx, g):
            y, dy = ctx.saved_tensors
            return (*rule(y, dy, g, ctx.dim), None)

        @staticmethod
        def jvp(ctx, ty, tdy, _):
            y, dy = ctx.saved_tensors
            return tangent(y, dy, ty, tdy, ctx.dim)
    return GradientOfGradient


def _softmax_second(y, dy, g, dim):
    """dx = y (dy - s), s = sum y dy: d/dy of <g, dx> is g (dy - s) - (sum g y) dy; d/d(dy) is
    y (g - sum g y), the same kernel."""
    gy, s = (g * y).sum(dim, keepdim=True), (y * dy).sum(dim, keepdim=True)
    return g * (dy - s) - gy * dy, _ops.softmax_backward(y, g, dim)


def _log_softmax_second(z, dy, g, dim):
    """dx = dy - e^z S, S = sum dy: d/dz of <g, dx> is -g e^z S; d/d(dy) is g - sum(g e^z)."""
    p = z.exp()
    return -g * p * dy.sum(dim, keepdim=True), g - (g * p).sum(dim, keepdim=True)


def _softmax_backward_tangent(y, dy, ty, tdy, dim):
    """dx = y (dy - s), s = sum y dy: d(dx) = ty (dy - s) + y (tdy - ds), ds = sum(ty dy + y tdy)."""
    out = torch.zeros_like(y)
    if ty is not None:
        out = out + ty * (dy - (y * dy).sum(dim, keepdim=True)) - y * (ty * dy).sum(dim, keepdim=True)
    if tdy is not None:
        out = out + _ops.softmax_backward(y, tdy, dim)
    return out


def _log_softmax_backward_tangent(z, dy, tz, tdy, dim):
    """dx = dy - e^z S, S = sum dy: d(dx) = tdy - e^z tz S - e^z sum(tdy)."""
    out = torch.zeros_like(z)
    if tz is not None:
        out = out - z.exp() * tz * dy.sum(dim, keepdim=True)
    if tdy is not None:
        out = out + _ops.log_softmax_backward(z, tdy, dim)
    return out


_SoftmaxBackward = _second_derivative(_ops.softmax_backward, _softmax_second, _softmax_backward_tangent)
_LogSoftmaxBackward = _second_derivative(_ops.log_softmax_backward, _log_softmax_second, _log_softmax_backward_tangent)


class _Attention(torch.autograd.Function):
    """The forward keeps the LSE beside the output (a second output, never returned by the operator); the
    backward recomputes P from it (onlinesoftmax.attention_backward, head dimensions 64 and 128; any in float64).
    causal_align="top_left" with n_q != n_k is the bottom-right mask on the parts attention_api's
    _top_left cuts the problem into, and so is its gradient."""

    @staticmethod
    def forward(q, k, v, causal, scale, causal_align="bottom_right"):
        return attention_api.attention(q, k, v, causal=causal, scale=scale, causal_align=causal_align, return_lse=True)

    @staticmethod
    def setup_context(ctx, inputs, outputs):
        q, k, v, ctx.causal, ctx.scale, ctx.align = inputs
        ctx.save_for_backward(q, k, v, *outputs)
        ctx.mark_non_differentiable(outputs[1])

    @staticmethod
    def backward(ctx, dout, _):
        _first_order_only("attention")
        q, k, v, out, lse = ctx.saved_tensors
        if q.shape[-1] not in (64, 128) and q.dtype != torch.float64:   # (float64: exactly, any d)
            raise NotImplementedError(f"onlinesoftmax::attention's backward takes head dimensions 64 and 128, got "
                                      f"{q.shape[-1]}: use torch.nn.functional.scaled_dot_product_attention to train")
        parts = _attention_parts(q.shape[2], k.shape[2], ctx.causal, ctx.align)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for rows, keys, causal in parts:
            g = backward.attention_backward(dout[:, :, rows].contiguous(), q[:, :, rows].contiguous(),
                                            k[:, :, keys].contiguous(), v[:, :, keys].contiguous(),
                                            out[:, :, rows].contiguous(), lse[:, :, rows].contiguous(),
                                            causal=causal, scale=ctx.scale)
            dq[:, :, rows] += g[0]
            dk[:, :, keys] += g[1]
            dv[:, :, keys] += g[2]
        return dq, dk, dv, None, None, None


def _attention_parts(n_q: int, n_k: int, causal: bool, align: str):
    """(query rows, keys, causal) of the bottom-right problems an attention call is made of."""
    every_q, every_k = slice(0, n_q), slice(0, n_k)
    if not causal or align == "bottom_right" or n_q == n_k:
        return [(every_q, every_k, bool(causal))]
    if n_q < n_k:   # top-left: no query sees a key past n_q
        return [(every_q, slice(0, n_q), True)]
    return [(slice(0, n_k), every_k, True), (slice(n_k, n_q), every_k, False)]


class _CrossEntropy(torch.autograd.Function):
    """The forward kernel writes the loss's gradient as it computes it; no host synchronization: the
    targets' range is checked on the device and read in backward with the upstream gradient's "is it 1"
    test (one synchronization). The gradient is the Function's third output (saved, not returned)."""

    @staticmethod
    def forward(logits, targets, ignore_index, label_smoothing, z_loss, softcap, reduction):
        return loss.cross_entropy_with_grad_deferred(logits, targets, ignore_index=ignore_index, z_loss=z_loss,
                                                     label_smoothing=label_smoothing, softcap=softcap or None, reduction=reduction)

    @staticmethod
    def setup_context(ctx, inputs, outputs):
        ctx.reduction, ctx.ignore_index, ctx.n_classes = inputs[6], inputs[2], inputs[0].shape[-1]
        ctx.save_for_backward(outputs[2], outputs[3], inputs[1]), ctx.mark_non_differentiable(*outputs[2:])
        ctx.set_materialize_grads(False)   # else autograd fills a logits-sized zero gradient for the dropped output

    @staticmethod
    def backward(ctx, g, g_lse, *_):
        _first_order_only("cross_entropy")
        if g_lse is not None and bool(g_lse.any()):   # its gradient is the softmax: it would need the logits kept
            raise NotImplementedError("onlinesoftmax::cross_entropy: the LSE it returns has no gradient (the loss keeps "
                                      "its gradient, not the logits): pass z_loss= for a z-loss, or use lse.detach()")
        if g is None:
            return (None,) * 7
        grad, outside, targets = ctx.saved_tensors
        one = (g == 1).reshape(()).to(outside.dtype) if ctx.reduction != "none" else outside   # ("none": unused)
        is_one, bad = torch.stack([one, outside]).tolist()   # the one synchronization
        if bad:
            loss.check_target_range(targets, ctx.n_classes, ctx.ignore_index, "cross_entropy")
        if ctx.reduction == "none" or not is_one:
            grad = grad * (g.unsqueeze(-1) if ctx.reduction == "none" else g).to(grad.dtype)
        return grad, None, None, None, None, None, None


def _first_order_only(name: str) -> None:
    """A backward whose gradients carry no graph (kernels, a saved gradient) refuses create_graph=True, under
    which its gradient would be taken for a constant: a second derivative of zero, silently."""
    if torch.is_grad_enabled():
        raise NotImplementedError(f"onlinesoftmax::{name} has no second derivative (create_graph=True): use torch's own")


def _has_tangent(args) -> bool:
    return any(isinstance(a, _Tensor) and _forward_ad.unpack_dual(a).tangent is not None for a in args)


def _autograd_kernel(name: str, function, differentiable=lambda args: args[0].requires_grad, outputs=None,
                     forward_mode: bool = False):
    """The operator's kernel at the Autograd key: the Function when a gradient is wanted (its first
    `outputs` results, or with outputs=0 its first result alone; None: all of them) or, for an operator
    with a forward-mode rule (the Function's jvp), when an input carries a tangent; a plain
    tensor, with no dispatch mode active (a tracer, a FLOP counter), straight to the implementation;
    anything else (torch.compile's fake and functional tensors, a mode) below autograd, to the
    kernel of its mode."""
    implementation, op = OPERATORS[name][1], getattr(_ops, name).default
    # Function.apply binds the arguments to forward's signature each call: stored, it is not rebuilt
    function.forward.__signature__ = inspect.signature(function.forward)

    def kernel(*args):
        tangent = _forward_ad.__dict__["_current_level"] >= 0 and _has_tangent(args)   # inside a dual_level()
        if tangent and not forward_mode:   # an error, never a result whose tangent was silently dropped
            raise NotImplementedError(f"onlinesoftmax::{name} has no forward-mode AD rule (jvp): use "
                                      f"reverse mode (backward, torch.func.vjp or grad), or torch's own {name}")
        if _functorch_level() is not None and not torch.compiler.is_compiling():
            raise NotImplementedError(f"onlinesoftmax::{name} does not run under torch.func transforms (grad, vmap, "
                                      "jacrev, jvp): use torch.autograd (loss.backward(), torch.autograd.grad"
                                      + (", or forward_ad.dual_level() for forward mode)" if forward_mode else ")"))
        wanted = tangent or (_grad_enabled() and differentiable(args))
        if wanted:
            result = function.apply(*args)
            return result if outputs is None else result[0] if outputs == 0 else result[:outputs]
        if type(args[0]) is _Tensor and not _modes():
            return implementation(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args)
    _lib.impl(name, kernel, "Autograd")


_autograd_kernel("softmax", _Softmax, forward_mode=True)
_autograd_kernel("log_softmax", _LogSoftmax, forward_mode=True)
_autograd_kernel("logsumexp", _LogSumExp, forward_mode=True)
_autograd_kernel("attention", _Attention, lambda args: any(t.requires_grad for t in args[:3]), outputs=0)
_autograd_kernel("cross_entropy", _CrossEntropy, outputs=2)
_autograd_kernel("softmax_backward", _SoftmaxBackward, lambda args: args[0].requires_grad or args[1].requires_grad,
                 forward_mode=True)
_autograd_kernel("log_softmax_backward", _LogSoftmaxBackward, lambda args: args[0].requires_grad or args[1].requires_grad,
                 forward_mode=True)

softmax, log_softmax, logsumexp, attention = _ops.softmax, _ops.log_softmax, _ops.logsumexp, _ops.attention
softmax_backward, log_softmax_backward = _ops.softmax_backward, _ops.log_softmax_backward
cross_entropy = _ops.cross_entropy
