"""Attention over sequences of different lengths packed without padding (the API; the kernel is
attention_09_varlen):

    out = onlinesoftmax.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)

q (total_q, heads, d) and k, v (total_k, kv_heads, d), float16 or bfloat16, d = 64 or 128: the
sequences' tokens one after another, as flash-attention's varlen forward takes them. cu_seqlens_q
and cu_seqlens_k (batch + 1,) integers: sequence b owns query rows cu_seqlens_q[b] ..
cu_seqlens_q[b + 1] - 1 and key rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1; both start at 0,
never decrease and end at the token counts (checked on the host: one synchronization on the GPU).
Grouped heads as in attention(). causal=True aligns each sequence's diagonal bottom-right (query i
of n_q sees keys j <= i + n_k - n_q). return_lse gives the LSE as (heads, total_q) float32. A query
that sees no key gives zeros and an LSE of -inf. max_seqlen_q, an upper bound of the query
lengths, fixes the launch's grid: calls with the same shapes and bound reuse one plan (by default
it is the longest sequence of the call).

NumPy arrays run the kernel's NumPy model, CuPy arrays the kernel, torch tensors the kernel on
torch's current stream.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.inputs import check_flags_and_scale, check_same_kind, describe
from onlinesoftmax.kernels.attention import varlen as kvarlen
from onlinesoftmax.reference import array_module
from onlinesoftmax.registry import REGISTRY
from onlinesoftmax.runtime import torch_bridge
from onlinesoftmax.runtime.plan import get_runner


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q=None, causal: bool = False, scale=None,
                     return_lse: bool = False):
    """softmax(q k^T * scale) v per packed sequence; see the module doc."""
    arrays = (q, k, v, cu_seqlens_q, cu_seqlens_k)
    if any(map(torch_bridge.is_tensor, arrays)):
        return torch_bridge.call(varlen_attention, *arrays, max_seqlen_q=max_seqlen_q, causal=causal, scale=scale,
                                 return_lse=return_lse)
    cu_q, cu_k, longest, scale = check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, scale, return_lse)
    total_q, heads, d = q.shape
    if isinstance(q, np.ndarray):
        out, lse = kvarlen.simulate(q, k, v, cu_q, cu_k, causal=bool(causal), scale=scale)
        return (out, lse) if return_lse else out
    xp = array_module(q)
    q, k, v = (a if a.flags.c_contiguous and a.data.ptr % 16 == 0 else xp.array(a, order="C", copy=True)
               for a in (q, k, v))
    out = xp.empty(q.shape, q.dtype)
    lse = xp.empty((heads, total_q), np.float32) if return_lse else None
    if total_q:
        options = {"k": k, "v": v, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "lse": lse,
                   "max_seqlen_q": longest, "causal": bool(causal), "scale": scale}
        get_runner(REGISTRY[kvarlen.NAME], q, out, options)(q, out, **options)
    return (out, lse) if return_lse else out


def check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, scale, return_lse):
    """Every argument checked (the offsets on the host); returns the offsets as contiguous int32
    arrays, the grid's query length and the scale."""
    named = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k}
    check_same_kind(named, "attention", "q, k, v, cu_seqlens_q and cu_seqlens_k")
    if q.ndim != 3 or k.ndim != 3 or tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"attention: with cu_seqlens, q must be (total_q, heads, d) and k, v both (total_k, kv_heads, "
                         f"d), got q {describe(q)}, k {describe(k)}, v {describe(v)}")
    total_q, heads, d = q.shape
    total_k, kv_heads, kv_d = k.shape
    if q.dtype.name not in kvarlen.DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"attention: packed sequences take float16 or bfloat16 q, k and v of one dtype, got q "
                        f"{q.dtype.name}, k {k.dtype.name}, v {v.dtype.name}")
    if kv_d != d or d not in kvarlen.SUPPORTED_D:
        raise ValueError(f"attention: with cu_seqlens the head dimension must be one of {kvarlen.SUPPORTED_D}, the same "
                         f"for q, k and v; got q d = {d}, k d = {kv_d}")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"attention: heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if not isinstance(q, np.ndarray) and len({a.device.id for a in named.values()}) != 1:
        raise ValueError("attention: q, k, v and the cu_seqlens must be on the same GPU")
    for name, a in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if a.ndim != 1 or a.shape[0] < 2 or a.dtype.kind not in "iu":
            raise ValueError(f"attention: {name} must be integers of shape (batch + 1,) with batch >= 1, got {describe(a)}")
    if cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError(f"attention: cu_seqlens_q and cu_seqlens_k must have one length (batch + 1), got "
                         f"{cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}")
    scale = check_flags_and_scale("attention", scale, d, causal=causal, return_lse=return_lse)
    longest = 0
    for name, a, total in (("cu_seqlens_q", cu_seqlens_q, total_q), ("cu_seqlens_k", cu_seqlens_k, total_k)):
        host = np.asarray(a.get() if hasattr(a, "get") else a, np.int64)   # one synchronization on the GPU
        steps = np.diff(host)
        if host[0] != 0 or host[-1] != total or (steps < 0).any():
            where = "starts at " + str(host[0]) if host[0] != 0 else "ends at " + str(host[-1]) if host[-1] != total \
                else f"decreases at [{int(np.argmax(steps < 0)) + 1}]"
            raise ValueError(f"attention: {name} must start at 0, never decrease and end at {total} (the rows of "
                             f"{'q' if name.endswith('q') else 'k'}); it {where}")
        if name == "cu_seqlens_q":
            longest = int(steps.max())
    if max_seqlen_q is not None:
        if isinstance(max_seqlen_q, bool) or not isinstance(max_seqlen_q, (int, np.integer)) or max_seqlen_q < longest:
            raise ValueError(f"attention: max_seqlen_q must be an integer >= the longest query sequence ({longest}), "
                             f"got {max_seqlen_q!r}")
        longest = int(max_seqlen_q)
    xp = array_module(q)
    cu_q, cu_k = (xp.ascontiguousarray(a.astype(np.int32, copy=False)) for a in (cu_seqlens_q, cu_seqlens_k))
    return cu_q, cu_k, longest, float(scale)
