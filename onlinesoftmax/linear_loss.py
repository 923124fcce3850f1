"""Cross-entropy of a linear classifier without the logits in memory:

    loss = onlinesoftmax.linear_cross_entropy(hidden, weight, targets)      # F.cross_entropy(hidden @ weight.T, targets)
    loss.backward()                                                          # hidden.grad, weight.grad

hidden (..., H), weight (V, H) (a torch nn.Linear's layout), optional bias (V,), targets of hidden's
shape without the last axis; the options of onlinesoftmax.cross_entropy (ignore_index, label_smoothing,
z_loss, softcap, reduction "mean" or "sum"). The tokens are taken `chunk` at a time: the chunk's
logits (chunk x V) come from one matrix product, the loss kernel (loss.kernel_for) writes the
gradient of their loss over them in place, with the mean's scale over all the tokens, and two more products turn that into the chunk's rows of d hidden and its
share of d weight (and d bias). So the forward computes the gradients too, and keeps only them; the
logits of all the tokens never exist at once. `chunk` (default_chunk: as many tokens as the hidden size
for "sum", 1/64 of them for "recompute", at least 64) bounds the logits in memory to chunk x V.

d weight, two ways (`weight_grad`):
  "sum" (default)  each token chunk's share is added into a float32 sum (a 16-bit running sum would
                   round once per chunk): for 16-bit weights that sum, V x H x 4 bytes, is the largest
                   buffer the call holds besides its inputs and gradients, as large as the logits at
                   8192 tokens. Three matrix products in all.
  "recompute"      the token chunks give the loss, d hidden and each row's max m and log l (l the sum
                   of e^(s - m), from the loss kernel run with each row's largest logit as its
                   target); then the vocabulary is taken `vocab_chunk` entries at a time: that
                   block's logits of every token are made again, cross_entropy_03_from_lse writes
                   their gradient (p = e^((s - m) - log l) and the other terms of the loss, in float32)
                   over them in one pass, and the block's rows of d weight are one product over all the
                   tokens, written once in the weight's dtype. No running sum, at the price of a fourth
                   matrix product and a second read of each chunk's logits; the call holds one token
                   chunk's logits or one vocabulary block's, never both.

float64 inputs take the "sum" path with float64 sums and the loss's exact float64 path (as torch
computes them), whichever `weight_grad` is asked for.

torch tensors (CPU: the NumPy model of the loss kernel; CUDA: the kernel, torch's matrix products,
torch's stream) go through a torch.autograd.Function when they need a gradient; NumPy arrays return
(loss, d hidden, d weight, d bias or None), the gradients of the loss.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import loss as _loss_module
from onlinesoftmax.inputs import describe
from onlinesoftmax.kernels.cross_entropy.from_lse import gradient_from_lse
from onlinesoftmax.runtime import torch_bridge

REDUCTIONS = ("mean", "sum")


def default_chunk(tokens: int, hidden: int, weight_grad: str = "sum") -> int:
    """Tokens a chunk. "sum": `hidden` of them (at most all): a chunk's 16-bit logits, chunk x V x 2
    bytes, are then half the float32 d weight, V x H x 4, which this path holds anyway, so the chunk
    never sets the peak; on an H100 at 8192 x 4096 x {128256, 262144} bf16, 4096-token chunks took
    1.00 and 0.98 of 2048's time at the same peak memory, 1024-token ones 1.11
    (logs/h100/2026-12-07-linear-chunk-experiment-485e170.log). "recompute": 1/64 of the tokens (its
    chunk's logits are the buffer its memory bound is about). At least 64."""
    if weight_grad == "sum":
        return max(64, min(tokens, hidden))
    return max(64, -(-tokens // 64))


WEIGHT_GRADS = ("sum", "recompute")


def default_vocab_chunk(vocabulary: int, itemsize: int = 2) -> int:
    """A multiple of 128 entries whose block of every token's logits (`itemsize` bytes an element: the
    vocabulary pass writes their gradient over them and holds nothing else of that size) is about 1.5 %
    of the 16-bit logits' size (tokens x V x 2 bytes)."""
    return max(128, min(vocabulary, int(0.015 * 2 * vocabulary / itemsize) // 128 * 128))


def linear_cross_entropy_with_grad(hidden, weight, targets, bias=None, *, ignore_index: int = -100,
                                   label_smoothing: float = 0.0, z_loss: float = 0.0, softcap=None,
                                   reduction: str = "mean", chunk: int | None = None, weight_grad: str = "sum",
                                   vocab_chunk: int | None = None):
    """(loss, d hidden, d weight, d bias or None) of cross_entropy(hidden @ weight.T + bias, targets), the
    logits made `chunk` tokens at a time and never all at once; weight_grad "sum" or "recompute" (and
    its vocab_chunk): how d weight is made (see the module doc)."""
    check_options(ignore_index, label_smoothing, z_loss, softcap, reduction, chunk, weight_grad, vocab_chunk)
    check(hidden, weight, targets, bias)
    h = hidden.reshape(int(np.prod(hidden.shape[:-1])), hidden.shape[-1])   # (-1 cannot stand for 0 tokens at H = 0)
    t = targets.reshape(-1)
    # all the targets checked at once (one synchronization), none per chunk
    _loss_module.check_target_range(t, weight.shape[0], ignore_index, "linear_cross_entropy", "token")
    n_tokens = h.shape[0]
    chunk = default_chunk(n_tokens, h.shape[1], weight_grad) if chunk is None else int(chunk)
    tensor = torch_bridge.is_tensor(h)
    lib = _torch() if tensor else np
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "z_loss": z_loss, "softcap": softcap}
    if weight_grad == "recompute" and weight.dtype != lib.float64:   # (float64: the sum's float64 path, exact)
        loss, dh, dw, db = _recompute(h, weight, t, bias, lib, tensor, chunk, vocab_chunk, reduction, options)
        return loss, dh.reshape(hidden.shape), dw, db
    wide = lib.float64 if weight.dtype == lib.float64 else lib.float32   # the sums' dtype
    loss_scale, scale = _mean_scale(t, ignore_index, reduction)
    # the mean's scale in the loss kernel's gradient, so that neither d hidden nor the float32 d weight
    # is scaled afterwards (a pass over V x H x 4 bytes); fp16's smallest gradients would leave its
    # range if scaled before rounding: they are scaled at the end instead
    late = weight.dtype == lib.float16
    sums = {}

    def add_share(rows, dlogits):   # the chunk's share of d weight and d bias, into the float32 sums
        first = not sums
        if tensor:   # in place: no float32 copy of the chunk's product; the first chunk's product written
            if first:
                sums["dw"] = lib.empty_like(weight, dtype=wide)
            _add_product(sums["dw"], dlogits.T, h[rows], beta=0.0 if first else 1.0)
        else:
            product = _mm(dlogits.T, h[rows])
            sums["dw"] = product.astype(wide) if first else np.add(sums["dw"], product, out=sums["dw"], casting="unsafe")
        if bias is not None:
            share = dlogits.sum(0, dtype=wide)
            sums["db"] = share if first else sums["db"] + share
    total, dh = _token_pass(h, weight, t, bias, lib, tensor, chunk, options, after=add_share,
                            grad_scale=scale if not late else 1.0)
    loss = total * loss_scale
    dw = sums.get("dw")
    if dw is None:   # no tokens: zero gradients
        dw = lib.zeros_like(weight, dtype=wide)
        sums["db"] = None if bias is None else lib.zeros_like(bias, dtype=wide)
    if late and scale != 1.0:
        dh = dh * scale
        dw *= scale   # in place: a second float32 d weight would double the largest buffer
    as_weight = (lambda a: a.to(weight.dtype)) if tensor else (lambda a: a.astype(weight.dtype))
    dw = as_weight(dw)
    db = None if bias is None else as_weight(sums["db"] * scale if late else sums["db"])
    return loss, dh.reshape(hidden.shape), dw, db


def linear_cross_entropy(hidden, weight, targets, bias=None, *, ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap=None, reduction: str = "mean", chunk: int | None = None,
                         weight_grad: str = "sum", vocab_chunk: int | None = None):
    """cross_entropy(hidden @ weight.T + bias, targets) without the logits in memory; with torch tensors
    that need a gradient, differentiable with respect to hidden, weight and bias. weight_grad="recompute"
    makes d weight a vocabulary block at a time instead of a float32 sum (see the module doc)."""
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "z_loss": z_loss,
               "softcap": softcap, "reduction": reduction, "chunk": chunk, "weight_grad": weight_grad,
               "vocab_chunk": vocab_chunk}
    if torch_bridge.is_tensor(hidden):   # checked before autograd sees the arguments
        check_options(**options)
        check(hidden, weight, targets, bias)
        return _LinearCrossEntropy.apply(hidden, weight, targets, bias, options)
    return linear_cross_entropy_with_grad(hidden, weight, targets, bias, **options)[0]


_FP32_ADDMM = [True]   # torch's addmm with out_dtype (CUDA, 16-bit operands): cleared if it ever refuses


def _add_product(acc, a, b, beta: float = 1.0):
    """acc <- beta acc + a @ b, acc float32 and beta 1 or 0 (0: acc is not read, and may hold anything):
    one product summed into acc in float32 (cuBLAS's beta), where torch has addmm with out_dtype for
    16-bit a and b on a GPU and for float32 ones anywhere; else a @ b in a's dtype, then added or
    copied (a second pass over V x H)."""
    torch = _torch()
    if a.dtype == acc.dtype:
        acc.addmm_(a, b, beta=beta)
        return
    if a.is_cuda and _FP32_ADDMM[0]:
        try:
            torch.ops.aten.addmm.dtype_out(acc, a, b, torch.float32, beta=beta, out=acc)
            return
        except (RuntimeError, NotImplementedError, AttributeError):   # an older torch, or not these dtypes
            _FP32_ADDMM[0] = False
    if beta:
        acc.add_(a @ b)
    else:
        acc.copy_(a @ b)


def _mm(a, b):
    """a @ b as a GPU's 16-bit product computes it: float32 sums, one rounding to a's dtype at the end
    (NumPy's own float16 product is slow and sums in float16; torch tensors go straight to @)."""
    if isinstance(a, np.ndarray) and a.dtype.itemsize == 2:
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)
    return a @ b


def _mean_scale(t, ignore_index, reduction) -> tuple[float, float]:
    """(loss scale, gradient scale): what the summed loss and the gradients are multiplied by. For a
    mean, 1 / the counted tokens; over no counted token the loss is NaN and the gradients zero, as
    torch's (every ignored token's gradient is 0 already: scaled by 1). For a sum, 1. One
    synchronization on the GPU."""
    if reduction != "mean":
        return 1.0, 1.0
    counted = int((t != ignore_index).sum())
    return (1.0 / counted, 1.0 / counted) if counted else (float("nan"), 1.0)


def _token_pass(h, weight, t, bias, lib, tensor, chunk, options, before=None, after=None, grad_scale=1.0):
    """(summed loss, d hidden times grad_scale): `chunk` tokens at a time, the chunk's logits (one
    product), before(rows, logits), the loss kernel's gradient (times grad_scale) written over them,
    the chunk's rows of d hidden (a second product), after(rows, dlogits)."""
    dh = lib.empty_like(h)
    wide = lib.float64 if weight.dtype == lib.float64 else lib.float32   # (no token: the loss still in this dtype)
    total = lib.zeros((), dtype=wide, device=h.device) if tensor else wide(0)   # on h's device from the start
    for first in range(0, h.shape[0], chunk):
        rows = slice(first, min(h.shape[0], first + chunk))
        logits = _mm(h[rows], weight.T)
        if bias is not None:
            logits += bias
        if not tensor:
            logits = np.ascontiguousarray(logits.astype(h.dtype))
        if before is not None:
            before(rows, logits)
        part, _, dlogits = _loss_module.cross_entropy_with_grad(logits, t[rows], reduction="sum",
                                                               in_place=logits.dtype != lib.float64,   # (float64: exact, a copy)
                                                               check_targets=False, grad_scale=grad_scale, **options)
        total = total + part
        if tensor:
            _torch().matmul(dlogits, weight, out=dh[rows])
        else:
            dh[rows] = _mm(dlogits, weight)
        if after is not None:
            after(rows, dlogits)
        del logits, dlogits
    return total, dh


def _gradient(x, m, log_l, t, **options):
    """The block's gradient over x (cross_entropy_03_from_lse; torch tensors on torch's stream)."""
    if torch_bridge.is_tensor(x):
        return torch_bridge.call(gradient_from_lse, x, m, log_l, t, **options)
    return gradient_from_lse(x, m, log_l, t, **options)


def _softcap_(s, softcap, tensor):
    """s <- softcap tanh(s / softcap), in place."""
    if tensor:
        s.div_(softcap).tanh_().mul_(softcap)
    else:
        np.divide(s, softcap, out=s)
        np.tanh(s, out=s)
        np.multiply(s, softcap, out=s)


def _row_terms(logits, softcap, tensor, lib):
    """(m, log l) per row of a chunk's logits, float32: m the row's largest s, l the sum of e^(s - m).
    log l is the loss kernel's own, with no float32 copy of the chunk: the loss of a row whose target
    is its largest logit, with no smoothing and no z-loss, is log l + (m - s_t) = log l exactly. A row
    of -inf only gets NaN, as its loss does."""
    if tensor:
        top, where = logits.max(1)
        m = top.float()
    else:
        where = logits.argmax(1)
        m = logits[np.arange(logits.shape[0]), where].astype(np.float32)
    if softcap:
        _softcap_(m, softcap, tensor)
    log_l = _loss_module.cross_entropy(logits, where, ignore_index=-1, softcap=softcap, reduction="none",
                                       check_targets=False)   # no row ignored; `where` is in range
    return m, log_l


def _recompute(h, weight, t, bias, lib, tensor, chunk, vocab_chunk, reduction, options):
    """weight_grad="recompute": the token pass (loss, d hidden, m and log l per row), then the vocabulary
    pass (d weight and d bias a block at a time), as the module doc says."""
    n_tokens, vocabulary = h.shape[0], weight.shape[0]
    softcap, eps, z = options["softcap"], float(options["label_smoothing"]), float(options["z_loss"])
    loss_scale, scale = _mean_scale(t, options["ignore_index"], reduction)
    on = {"device": h.device} if tensor else {}   # torch makes new tensors on the CPU unless told
    m, log_l = lib.empty(n_tokens, dtype=lib.float32, **on), lib.empty(n_tokens, dtype=lib.float32, **on)

    def keep_row_terms(rows, logits):
        m[rows], log_l[rows] = _row_terms(logits, softcap, tensor, lib)
    total, dh = _token_pass(h, weight, t, bias, lib, tensor, chunk, options, before=keep_row_terms)
    dh *= scale
    # The vocabulary pass: d loss / d s = p (1 + 2 z lse) - eps / V - (1 - eps) [target], times 1 - (s / c)^2
    # under a soft cap, with p = e^((s - m) - log l); 0 on ignored rows; the mean's scale folded in: one
    # pass of cross_entropy_03_from_lse over each block's logits (its NumPy model for NumPy arrays)
    dw = lib.empty_like(weight)
    db = None if bias is None else lib.empty_like(bias)
    block = default_vocab_chunk(vocabulary, h.element_size() if tensor else h.itemsize) if vocab_chunk is None \
        else int(vocab_chunk)
    t_long = t.long().contiguous() if tensor else np.ascontiguousarray(t, dtype=np.int64)
    # fp16's smallest gradients would leave its range if scaled before rounding: the block's product is scaled instead
    late = h.dtype == lib.float16
    block_options = {"ignore_index": int(options["ignore_index"]), "uniform": eps / vocabulary, "hit": 1 - eps,
                     "z_loss": z, "softcap": float(softcap or 0.0), "scale": 1.0 if late else scale}
    for first in range(0, vocabulary, block):
        cols = slice(first, min(vocabulary, first + block))
        x = _mm(h, weight[cols].T)
        if bias is not None:
            x += bias[cols]
        if not tensor:
            x = x.astype(h.dtype, copy=False)   # the logits in the inputs' dtype
        # (made by a product of another shape than the token pass's, a logit may differ from that pass's
        # by a rounding: the block's p then sums with the others to 1 within that rounding)
        g = _gradient(x, m, log_l, t_long, first=first, **block_options)   # over x, in x's dtype
        if tensor:
            lib.matmul(g.T, h, out=dw[cols])
        else:
            dw[cols] = _mm(g.T, h).astype(dw.dtype, copy=False)
        if db is not None:
            db[cols] = (g.float().sum(0) * (scale if late else 1.0)).to(db.dtype) if tensor else \
                (g.astype(np.float32).sum(0) * (scale if late else 1.0)).astype(db.dtype)
        if late:
            dw[cols] *= scale
        del x, g
    loss = total * loss_scale
    return loss, dh, dw, db


def check_options(ignore_index, label_smoothing, z_loss, softcap, reduction, chunk, weight_grad, vocab_chunk):
    """The options alone, each error naming linear_cross_entropy (cross_entropy's checks for the options
    the two share)."""
    _loss_module.check_options("linear_cross_entropy", ignore_index, label_smoothing, z_loss, softcap, "mean", True)
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")
    for name, value in (("chunk", chunk), ("vocab_chunk", vocab_chunk)):
        if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
                                  or value < 1):
            raise ValueError(f"linear_cross_entropy: {name} must be a positive int or None, got {value!r}")
    if not isinstance(weight_grad, str) or weight_grad not in WEIGHT_GRADS:
        raise ValueError(f"linear_cross_entropy: weight_grad must be 'sum' or 'recompute', got {weight_grad!r}")


def check(hidden, weight, targets, bias):
    arrays = (hidden, weight, targets) + (() if bias is None else (bias,))
    kinds = {"torch" if torch_bridge.is_tensor(a) else type(a) for a in arrays}   # (a Parameter is a tensor)
    if len(kinds) != 1 or not all(isinstance(a, np.ndarray) or torch_bridge.is_tensor(a) for a in arrays):
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
        raise TypeError(f"linear_cross_entropy: hidden, weight and bias must share a dtype, got {hidden.dtype}, "
                        f"{weight.dtype}" + ("" if bias is None else f" and {bias.dtype}"))


def _torch():
    import torch

    return torch


def _function():
    torch = _torch()

    class LinearCrossEntropy(torch.autograd.Function):
        """The forward computes the loss and all the gradients chunk by chunk and keeps the gradients;
        the backward hands them over, scaled in place by the upstream gradient (not at all when it is 1).
        They are kept on ctx, not saved for backward, and dropped from it as they are handed over: a
        gradient torch finds referenced elsewhere it copies before storing it in .grad, and d weight is
        as large as the weight."""

        @staticmethod
        def forward(ctx, hidden, weight, targets, bias, options):
            with torch.no_grad():
                loss, dh, dw, db = linear_cross_entropy_with_grad(hidden.detach(), weight.detach(), targets,
                                                                  None if bias is None else bias.detach(), **options)
            ctx.gradients = (dh, dw, db)
            return loss

        @staticmethod
        def backward(ctx, g):
            if ctx.gradients is None:
                raise RuntimeError("linear_cross_entropy: a second backward through the same loss; its gradients "
                                   "were made once, in the forward, and handed to the first backward")
            dh, dw, db = ctx.gradients
            ctx.gradients = None
            if not bool(g == 1):
                for d in (dh, dw, db):
                    if d is not None:
                        d.mul_(g.to(d.dtype))
            return dh, dw, None, db, None
    return LinearCrossEntropy


class _Lazy:
    """The autograd Function, made when a tensor first arrives (torch is imported only then)."""
    function = None

    def apply(self, *args):
        if _Lazy.function is None:
            _Lazy.function = _function()
        return _Lazy.function.apply(*args)


_LinearCrossEntropy = _Lazy()
