"""Cross-entropy of a linear classifier without the logits in memory:

    loss = onlinesoftmax.linear_cross_entropy(hidden, weight, targets)      # F.cross_entropy(hidden @ weight.T, targets)
    loss.backward()                                                          # hidden.grad, weight.grad

hidden (..., H), weight (V, H) (a torch nn.Linear's layout), optional bias (V,), targets of hidden's
shape without the last axis; the options of onlinesoftmax.cross_entropy (ignore_index, label_smoothing,
z_loss, softcap, reduction "mean" or "sum"). The tokens are taken `chunk` at a time: the chunk's
logits (chunk x V) come from one matrix product, cross_entropy_01_rows writes the gradient of their
loss over them in place, and two more products turn that into the chunk's rows of d hidden and its
share of d weight (and d bias). So the forward computes the gradients too, and keeps only them; the
logits of all the tokens never exist at once. `chunk` (default: about 1/64 of the tokens, at least
64) bounds the logits in memory to chunk x V. d weight is summed over the chunks in float32 (a 16-bit
running sum would round once per chunk): for 16-bit weights that float32 sum, V x H x 4 bytes, is the
largest buffer the call holds besides its inputs and gradients.

torch tensors (CPU: the NumPy model of the loss kernel; CUDA: the kernel, torch's matrix products,
torch's stream) go through a torch.autograd.Function when they need a gradient; NumPy arrays return
(loss, d hidden, d weight, d bias or None), the gradients of the loss.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import loss as _loss_module
from onlinesoftmax.inputs import describe
from onlinesoftmax.runtime import torch_bridge

REDUCTIONS = ("mean", "sum")


def default_chunk(tokens: int) -> int:
    return max(64, -(-tokens // 64))


def linear_cross_entropy_with_grad(hidden, weight, targets, bias=None, *, ignore_index: int = -100,
                                   label_smoothing: float = 0.0, z_loss: float = 0.0, softcap=None,
                                   reduction: str = "mean", chunk: int | None = None):
    """(loss, d hidden, d weight, d bias or None) of cross_entropy(hidden @ weight.T + bias, targets), the
    logits made `chunk` tokens at a time and never all at once (see the module doc)."""
    check(hidden, weight, targets, bias, reduction, chunk)
    h = hidden.reshape(-1, hidden.shape[-1])
    t = targets.reshape(-1)
    n_tokens = h.shape[0]
    chunk = default_chunk(n_tokens) if chunk is None else int(chunk)
    tensor = torch_bridge.is_tensor(h)
    lib = _torch() if tensor else np
    dh = lib.empty_like(h)
    dw = lib.zeros_like(weight, dtype=lib.float32)
    db = None if bias is None else lib.zeros_like(bias, dtype=lib.float32)
    total = lib.zeros((), dtype=lib.float32) if tensor else np.float32(0)
    counted = int((t != ignore_index).sum())   # one synchronization on the GPU: the mean's divisor
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "z_loss": z_loss, "softcap": softcap}
    for first in range(0, n_tokens, chunk):
        rows = slice(first, min(n_tokens, first + chunk))
        logits = h[rows] @ weight.T
        if bias is not None:
            logits = logits + bias
        if not tensor:
            logits = np.ascontiguousarray(logits.astype(h.dtype))
        part, _, dlogits = _loss_module.cross_entropy_with_grad(logits, t[rows], reduction="sum", in_place=True,
                                                               **options)
        total = total + part
        dh[rows] = dlogits @ weight
        if tensor:   # added into the float32 sums in place: no float32 copy of the chunk's product
            dw.add_(dlogits.T @ h[rows])
            if db is not None:
                db.add_(dlogits.sum(0))
        else:
            dw += (dlogits.T @ h[rows]).astype(dw.dtype)
            if db is not None:
                db += dlogits.sum(0).astype(db.dtype)
    scale = 1.0 / max(counted, 1) if reduction == "mean" else 1.0
    if reduction == "mean" and counted == 0:
        scale = float("nan")          # a mean over no counted token, as torch's
    loss = total * scale
    dh = dh * scale if scale != 1.0 else dh
    as_weight = (lambda a: a.to(weight.dtype)) if tensor else (lambda a: a.astype(weight.dtype))
    dw = as_weight(dw * scale)
    db = None if db is None else as_weight(db * scale)
    return loss, dh.reshape(hidden.shape), dw, db


def linear_cross_entropy(hidden, weight, targets, bias=None, *, ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap=None, reduction: str = "mean", chunk: int | None = None):
    """cross_entropy(hidden @ weight.T + bias, targets) without the logits in memory; with torch tensors
    that need a gradient, differentiable with respect to hidden, weight and bias."""
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "z_loss": z_loss,
               "softcap": softcap, "reduction": reduction, "chunk": chunk}
    if torch_bridge.is_tensor(hidden):
        return _LinearCrossEntropy.apply(hidden, weight, targets, bias, options)
    return linear_cross_entropy_with_grad(hidden, weight, targets, bias, **options)[0]


def check(hidden, weight, targets, bias, reduction, chunk):
    kinds = {type(a) for a in (hidden, weight, targets) + (() if bias is None else (bias,))}
    if len(kinds) != 1:
        raise TypeError("linear_cross_entropy: hidden, weight, targets (and bias) must be all numpy arrays or all "
                        f"torch tensors, got {', '.join(describe(a) for a in (hidden, weight, targets))}")
    if hidden.ndim < 2 or weight.ndim != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy: hidden (..., H) and weight (V, H) must share H, got hidden "
                         f"{describe(hidden)} and weight {describe(weight)}")
    if tuple(targets.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"linear_cross_entropy: targets must have hidden's shape without its last axis "
                         f"{tuple(hidden.shape[:-1])}, got {describe(targets)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"linear_cross_entropy: bias must have shape ({weight.shape[0]},), got {describe(bias)}")
    if hidden.dtype != weight.dtype or (bias is not None and bias.dtype != weight.dtype):
        raise TypeError(f"linear_cross_entropy: hidden, weight and bias must share a dtype, got {hidden.dtype} and "
                        f"{weight.dtype}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1):
        raise ValueError(f"linear_cross_entropy: chunk must be a positive int or None, got {chunk!r}")


def _torch():
    import torch

    return torch


def _function():
    torch = _torch()

    class LinearCrossEntropy(torch.autograd.Function):
        """The forward computes the loss and all the gradients chunk by chunk and keeps the gradients;
        the backward scales them by the upstream gradient (not at all when it is 1)."""

        @staticmethod
        def forward(ctx, hidden, weight, targets, bias, options):
            with torch.no_grad():
                loss, dh, dw, db = linear_cross_entropy_with_grad(hidden.detach(), weight.detach(), targets,
                                                                  None if bias is None else bias.detach(), **options)
            ctx.save_for_backward(dh, dw, *(() if db is None else (db,)))
            return loss

        @staticmethod
        def backward(ctx, g):
            dh, dw, *db = ctx.saved_tensors
            if not bool(g == 1):
                dh, dw, db = dh * g.to(dh.dtype), dw * g.to(dw.dtype), [d * g.to(d.dtype) for d in db]
            return dh, dw, None, db[0] if db else None, None
    return LinearCrossEntropy


class _Lazy:
    """The autograd Function, made when a tensor first arrives (torch is imported only then)."""
    function = None

    def apply(self, *args):
        if _Lazy.function is None:
            _Lazy.function = _function()
        return _Lazy.function.apply(*args)


_LinearCrossEntropy = _Lazy()
