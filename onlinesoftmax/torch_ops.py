"""The kernels as PyTorch operators, with autograd: `torch.ops.onlinesoftmax.*`.

    import onlinesoftmax.torch_ops                      # registers the operators (imports torch)
    y = torch.ops.onlinesoftmax.softmax(x, -1)          # or onlinesoftmax.softmax(x): the same operator
    y.sum().backward()                                  # when x.requires_grad

| operator                                         | forward                      | backward                        |
|--------------------------------------------------|------------------------------|---------------------------------|
| softmax(x, dim)                                  | the softmax kernels          | softmax_backward(y, dy, dim)    |
| log_softmax(x, dim)                              | the log-softmax kernels      | log_softmax_backward(y, dy, dim)|
| logsumexp(x, dim, keepdim)                       | the log-sum-exp kernel       | softmax(x, dim) * dlse          |
| attention(q, k, v, causal, scale)                | the attention kernels        | none yet: an error says so      |
| softmax_backward(y, dy, dim), log_softmax_backward(y, dy, dim) | the backward kernels | (first order only)         |

Outputs are contiguous (along a dim other than the last, the kernels' result is copied into place).
Each is a `torch.library.custom_op` with a fake (shape and dtype only) implementation, so
`torch.compile(fullgraph=True)` traces a model that calls them without a graph break. CUDA tensors
run the CUDA kernels on torch's current stream; CPU tensors run the NumPy models (float64 exactly),
so `torch.autograd.gradcheck` runs on a machine without a GPU. `onlinesoftmax.softmax`,
`log_softmax` and `logsumexp` called on a tensor that requires a gradient go through these operators.
"""
from typing import Optional

import torch

from onlinesoftmax import api, attention_api
from onlinesoftmax import backward as kernels_backward

_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _lse_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# ---- forward operators ------------------------------------------------------------------------

@torch.library.custom_op("onlinesoftmax::softmax", mutates_args=())
def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return api.softmax(x.detach(), dim).contiguous()


@softmax.register_fake
def _(x, dim):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("onlinesoftmax::log_softmax", mutates_args=())
def log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return api.log_softmax(x.detach(), dim).contiguous()


@log_softmax.register_fake
def _(x, dim):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("onlinesoftmax::logsumexp", mutates_args=())
def logsumexp(x: torch.Tensor, dim: int, keepdim: bool) -> torch.Tensor:
    return api.logsumexp(x.detach(), dim, keepdims=keepdim).contiguous()


@logsumexp.register_fake
def _(x, dim, keepdim):
    shape = list(x.shape)
    if keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    return x.new_empty(shape, dtype=_lse_dtype(x))


@torch.library.custom_op("onlinesoftmax::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: Optional[float]) -> torch.Tensor:
    return attention_api.attention(q.detach(), k.detach(), v.detach(), causal=causal, scale=scale)


@attention.register_fake
def _(q, k, v, causal, scale):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


# ---- backward operators -----------------------------------------------------------------------

@torch.library.custom_op("onlinesoftmax::softmax_backward", mutates_args=())
def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    return kernels_backward.softmax_backward(y.detach(), dy.detach().to(y.dtype), dim).contiguous()


@softmax_backward.register_fake
def _(y, dy, dim):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


@torch.library.custom_op("onlinesoftmax::log_softmax_backward", mutates_args=())
def log_softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    return kernels_backward.log_softmax_backward(y.detach(), dy.detach().to(y.dtype), dim).contiguous()


@log_softmax_backward.register_fake
def _(y, dy, dim):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


# ---- autograd ---------------------------------------------------------------------------------

def _save_output(ctx, inputs, output):
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return softmax_backward(y, dy, ctx.dim), None


def _log_softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return log_softmax_backward(y, dy, ctx.dim), None


def _save_input_and_lse(ctx, inputs, output):
    x, dim, keepdim = inputs
    ctx.dim, ctx.keepdim = dim, keepdim
    ctx.save_for_backward(x)


def _logsumexp_grad(ctx, dlse):
    """d lse / dx = softmax(x): dx = softmax(x) * dlse, dlse broadcast along dim."""
    (x,) = ctx.saved_tensors
    if not ctx.keepdim:
        dlse = dlse.unsqueeze(ctx.dim)
    return (softmax(x, ctx.dim) * dlse).to(x.dtype), None, None


def _attention_grad(ctx, dout):
    raise NotImplementedError("onlinesoftmax::attention has no backward yet: call it under torch.no_grad(), "
                              "or use torch.nn.functional.scaled_dot_product_attention to train")


softmax.register_autograd(_softmax_grad, setup_context=_save_output)
log_softmax.register_autograd(_log_softmax_grad, setup_context=_save_output)
logsumexp.register_autograd(_logsumexp_grad, setup_context=_save_input_and_lse)
attention.register_autograd(_attention_grad, setup_context=lambda ctx, inputs, output: None)


def differentiable(function: str, x: torch.Tensor, dim, keepdim: bool = False, **options):
    """onlinesoftmax.<function>(x, dim) for an x that requires a gradient: through the operator. The
    operators take the plain call (variant "auto", no out=, no mask); other options say so."""
    asked = {name: value for name, value in options.items()
             if value is not None and not (name == "variant" and value == "auto")
             and not (name == "mask_value" and value == float("-inf"))}
    if asked:
        raise TypeError(f"{function}: gradients are computed for the plain call only (variant='auto', no out=, "
                        f"no mask); got {sorted(asked)} with a tensor that requires grad. "
                        f"Pass x.detach() for a forward-only call")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{function}: axis must be an int, got {type(dim).__name__} {dim!r}")
    operator = {"softmax": softmax, "log_softmax": log_softmax}.get(function)
    if operator is not None:
        return operator(x, dim)
    return logsumexp(x, dim, keepdim)
