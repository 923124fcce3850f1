"""attention(q, k, v): softmax(q k^T * scale) v without the score matrix (the API; the NumPy model
of the blocked forward is in kernels/attention/blocked.py, the float64 reference in reference.py).

    out = onlinesoftmax.attention(q, k, v, causal=True)             # numpy: the chosen kernel's model
    out, lse = onlinesoftmax.attention(q, k, v, return_lse=True)    # lse: (batch, heads, n_q), float32

Shapes: q (batch, heads, n_q, d); k and v (batch, kv_heads, n_k, d) with heads a multiple of
kv_heads (grouped-query attention: query head h reads kv head h // (heads // kv_heads)).
causal=True is aligned to the bottom-right corner as flash-attention does: query i sees keys
j <= i + n_k - n_q, so a single decoding query sees the whole cache; softmax(causal=True) aligns its
mask the same way. (torch's scaled_dot_product_attention(is_causal=True) is aligned top-left: query i
sees keys j <= i, causal_align="top_left" here; the two agree when n_q == n_k.) A query that sees no key (causal with n_q > n_k) gives an output of zeros
and an LSE of -inf (flash-attention's output is zeros too; its LSE is +inf).

cupy input runs a CUDA kernel (numpy input the same kernel's NumPy model). variant="auto"
(`choose`) takes, for n_q <= 8, attention_06_decode_mma when several heads share a kv head and
the inputs are float16 or bfloat16 with d = 64 or 128 (compute capability 8.0 or newer: the
heads of a kv head as the columns of tensor-core tiles); with one head per kv head it takes it
too where it was measured ahead of attention_02 (MHA_DECODE_MMA: at most 256 (batch, kv head)
caches, and 16K keys or more, or 64 caches or more), else attention_02_decode_split (both
split the cache over blocks and merge the pieces with a second kernel); for more queries in float16 or
bfloat16: with d = 128 on compute capability 9.0, attention_11_wgmma_tma (Hopper's wgmma fed by TMA),
else with d = 64 or 128 on compute capability 8.0 or newer the tensor-core kernel attention_mma.FASTEST
(products on tensor cores with fp32 accumulation, P rounded to the input dtype); in float32 with
d = 64 or 128, where a block may have its 116 / 196 KiB of shared memory (compute capability 8.0 or
newer), attention_13_fp32_pipelined; otherwise attention_01_blocked (fp32 on CUDA cores: other head
dimensions, older GPUs). A registry name or short name ("blocked", "decode", "decode_mma", "mma",
"ldmatrix", "pipelined", "wgmma_tma", "fp32_pipelined", ...) chooses one; the tensor-core kernels
take float16 and bfloat16 with d = 64 or 128 only. Softmax arithmetic is fp32 for every dtype;
the output is in q's dtype. A NaN in a query (or in a key it sees) makes that query's output and LSE
NaN, as torch's. The kernels work in the base-2 domain (scores times scale log2 e): a scaled score
beyond float32's range there, |q.k| scale > 2.4e38, needs scale > ln 2 (the default 1/sqrt(d) never
reaches it) and is outside what they accept. Views that are not contiguous or not 16-byte aligned are copied first.

A repeated call on cupy arrays of the same layouts, with the same options, on the same stream, is one
dictionary lookup, two allocations (out, lse) and the launches: the checks, the choice and the plan
were made on the first call (as softmax's and softmax_topk's; calls whose inputs had to be copied
are never cached).
"""
from __future__ import annotations

import contextlib

import numpy as np

from onlinesoftmax import api, exact
from onlinesoftmax.kernels.attention import blocked as kernels
from onlinesoftmax.inputs import check_flags_and_scale, describe
from onlinesoftmax.kernels.dispatch import Choice
from onlinesoftmax.reference import array_module
from onlinesoftmax.kernels.attention import decode_mma as attention_decode_mma
from onlinesoftmax.kernels.attention import mma as attention_mma
from onlinesoftmax.kernels.attention import wgmma as attention_wgmma
from onlinesoftmax.kernels.attention import fp32_pipelined as attention_fp32
from onlinesoftmax.registry import DTYPES, Variant, resolve, variants
from onlinesoftmax.runtime import device, torch_bridge
from onlinesoftmax.runtime.plan import fast_path_cache, get_runner

SUPPORTED_D = kernels.SUPPORTED_D
DECODE_MAX_QUERIES = 8     # auto: up to this many queries per head take the split decode kernel
_fast_path = fast_path_cache("attention fast path", "attention: a repeated call's plan")   # key -> (runner, LSE shape)


def _describe(a) -> str:   # (an array viewing the caller's tensor: the tensor, as inputs.describe names it)
    if torch_bridge.tensor_behind(a) is not None or not hasattr(a, "shape"):
        return describe(a)[2:] if hasattr(a, "shape") else type(a).__name__
    return f"{type(a).__module__.split('.')[0]}.{type(a).__name__} of shape {tuple(a.shape)} and dtype {a.dtype}"


def check_inputs(q, k, v, scale, exact_ok: bool = False):
    """Validate q, k, v (numpy or cupy, same kind, dtype and device; shapes as in the module doc);
    return (batch, heads, kv_heads, n_q, n_k, d, scale). exact_ok: float64 and empty arrays, and any
    head dimension for them, pass (attention computes them exactly)."""
    arrays = {"q": q, "k": k, "v": v}
    for name, a in arrays.items():
        if not (isinstance(a, np.ndarray) or device.is_cupy_array(a)):
            raise TypeError(f"attention: {name} must be a numpy or cupy array, got {_describe(a)}")
        if a.ndim != 4:
            raise ValueError(f"attention: {name} must have 4 dimensions (batch, heads, seq, d), got {_describe(a)}")
        if a.dtype.name not in DTYPES and not (exact_ok and a.dtype.name == "float64"):
            accepted = "float32, float16, bfloat16 or float64" if exact_ok else "float32, float16 or bfloat16"
            raise TypeError(f"attention: {name} must be {accepted}, got {a.dtype.name}")
    if len({type(a) for a in arrays.values()}) != 1:
        raise TypeError("attention: q, k and v must all be numpy or all cupy arrays, got "
                        + ", ".join(f"{n}: {_describe(a)}" for n, a in arrays.items()))
    if len({a.dtype for a in arrays.values()}) != 1:
        raise TypeError("attention: q, k and v must share a dtype, got "
                        + ", ".join(f"{n}: {a.dtype.name}" for n, a in arrays.items()))
    if not isinstance(q, np.ndarray) and len({a.device.id for a in arrays.values()}) != 1:
        raise ValueError("attention: q, k and v must be on the same GPU")
    batch, heads, n_q, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"attention: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    kv_batch, kv_heads, n_k, kv_d = k.shape
    if kv_batch != batch or kv_d != d:
        raise ValueError(f"attention: k and v must be (batch={batch}, kv_heads, n_k, d={d}), got {tuple(k.shape)}")
    if (kv_heads == 0 and not (exact_ok and heads == 0)) or (kv_heads and heads % kv_heads):
        raise ValueError(f"attention: heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    exact = exact_ok and (q.dtype == np.float64 or min(batch, heads, n_q, n_k) == 0)
    if min(batch, heads, n_q, n_k) == 0 and not exact:
        raise ValueError(f"attention: empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if d not in SUPPORTED_D and not (exact and d > 0):
        raise ValueError(f"attention: head dimension d = {d} is not supported; supported: {SUPPORTED_D}"
                         + (" (and any d > 0 in float64)" if exact_ok else ""))
    return batch, heads, kv_heads, n_q, n_k, d, check_flags_and_scale("attention", scale, d)


# Multi-head decode (one head per kv head) on attention_06 where the suite attention-decode
# (2026-12-02, bf16, d = 128) had it ahead of attention_02: batch 1 with 32K keys or more, batch 8
# (256 caches) at every length; behind at batch 1 with 4K keys and at batch 32 (1024 caches). The
# recording of 2026-12-04 has the two level on these shapes (attention_06 at 0.987-0.997 of
# attention_02's rate): a tie, which the decode page reports from the data.
MHA_DECODE_MMA = {"max_caches": 256, "min_keys": 16384, "min_caches": 64}


def choose(dtype: str, n_q: int, d: int, cc: int | None = None, group: int = 1, caches: int | None = None,
           n_k: int | None = None) -> Choice:
    """The kernel variant="auto" runs, with the reason (dispatch.Choice, as every chooser returns; cc:
    the device's compute capability, None: the current one; group: heads per kv head; caches: batch x
    kv heads and n_k the keys, for decoding)."""
    cc = device.compute_capability() if cc is None else cc
    if n_q <= DECODE_MAX_QUERIES:
        grouped = attention_decode_mma.DECODE_MMA
        if dtype in grouped.dtypes and d in attention_decode_mma.SUPPORTED_D and cc >= grouped.min_cc:
            rule = MHA_DECODE_MMA
            if group > 1 or (caches is not None and n_k is not None and caches <= rule["max_caches"]
                             and (n_k >= rule["min_keys"] or caches >= rule["min_caches"])):
                return Choice(grouped, "decoding, grouped heads (or measured ahead for these caches): "
                                       "the heads of a kv head as tensor-core columns")
        return Choice(kernels.DECODE, "decoding: the cache split over blocks, fp32 on CUDA cores")
    hopper = attention_wgmma.WGMMA_TMA
    if dtype in hopper.dtypes and d == 128 and hopper.min_cc <= cc <= hopper.max_cc:
        return Choice(hopper, "16-bit inputs, d = 128, compute capability 9.0: wgmma fed by TMA (measured ahead "
                              "of attention_07 at every prefill shape of attention-prefill-mma on an H100)")
    fastest = attention_mma.FASTEST
    if dtype in fastest.dtypes and d in attention_mma.SUPPORTED_D and cc >= fastest.min_cc:
        return Choice(fastest, "16-bit inputs, d of 64 or 128: tensor cores")
    fed = attention_fp32.PIPELINED
    if dtype in fed.dtypes and attention_fp32.runs_here(d, cc):
        return Choice(fed, "float32, d of 64 or 128, room for its tiles: CUDA cores fed by cp.async (measured "
                           "ahead of attention_01 at every prefill shape to n = 16384 on an H100)")
    return Choice(kernels.BLOCKED, "float32, another head dimension or an older GPU: CUDA cores")


def _check_variant(chosen: Variant, dtype: str, d: int, on_gpu: bool) -> None:
    if dtype not in chosen.dtypes:
        raise TypeError(f"attention: variant {chosen.name!r} takes {' or '.join(chosen.dtypes)}, got {dtype} "
                        f"(variant='blocked' takes every dtype)")
    tensor_core_d = attention_decode_mma.SUPPORTED_D if chosen is attention_decode_mma.DECODE_MMA else \
        attention_mma.SUPPORTED_D if chosen in (*attention_mma.VARIANTS, *attention_wgmma.HOPPER) else \
        attention_fp32.SUPPORTED_D if chosen is attention_fp32.PIPELINED else SUPPORTED_D
    if d not in tensor_core_d:
        raise ValueError(f"attention: variant {chosen.name!r} takes head dimension d in {tensor_core_d}, "
                         f"got d = {d} (variant='blocked' takes {SUPPORTED_D})")
    if on_gpu and device.compute_capability() < chosen.min_cc:
        raise RuntimeError(f"attention: variant {chosen.name!r} needs compute capability {chosen.min_cc / 10:.1f}, "
                           f"this GPU has {device.compute_capability() / 10:.1f}")
    if on_gpu and chosen.shared_bytes is not None:
        device.check_shared_room("attention", chosen.name, d, chosen.shared_bytes(d), "blocked")
    if on_gpu and chosen.max_cc is not None and device.compute_capability() > chosen.max_cc:
        raise RuntimeError(f"attention: variant {chosen.name!r} uses instructions of compute capability "
                           f"{chosen.max_cc / 10:.1f} only (sm_90a's wgmma: H100, H200); this GPU has "
                           f"{device.compute_capability() / 10:.1f}")


def _call_key(q, k, v, causal, scale, return_lse, variant):
    """What a repeated call is found by (None: no fast path for these arguments): the three arrays'
    layouts (shape, strides, dtype, 16-byte phase, device), the options as written, the stream."""
    if type(causal) is not bool or type(return_lse) is not bool or type(variant) is not str or \
            not (scale is None or type(scale) is float):
        return None
    return (q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, q.dtype, k.dtype, v.dtype,
            q.data.ptr & 15, k.data.ptr & 15, v.data.ptr & 15, q.data.device_id, k.data.device_id,
            v.data.device_id, causal, scale, return_lse, variant, api.current_stream().ptr)


def attention(q, k=None, v=None, *, causal: bool = False, scale=None, return_lse: bool = False, variant: str = "auto",
              causal_align: str = "bottom_right", kv_cache=None, page_table=None, cache_lengths=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, check_cache: bool = True):
    """softmax(q k^T * scale [+ causal mask]) v per (batch, head), in q's dtype; see the module doc.
    causal=True: query i keeps keys j <= i + n_k - n_q, the diagonal aligned bottom-right (the last
    query sees every key: decoding against a cache), as softmax(causal=True) and FlashAttention;
    causal_align="top_left" keeps j <= i (torch's is_causal); the two agree when n_q == n_k.
    kv_cache=(k_pages, v_pages) with page_table and cache_lengths in place of k and v: decoding
    against a paged cache (onlinesoftmax/attention_paged.py; check_cache=False skips the host's check of
    the pages and lengths and its synchronization: a wrong one then gives NaN rows). cu_seqlens_q and cu_seqlens_k with q
    (total_q, heads, d) and k, v (total_k, kv_heads, d): sequences of different lengths packed
    without padding (onlinesoftmax/attention_varlen.py)."""
    if check_cache is not True and kv_cache is None and page_table is None and cache_lengths is None:
        raise TypeError(f"attention: check_cache applies to a paged cache (kv_cache=...), got {check_cache!r} without one")
    if cu_seqlens_q is not None or cu_seqlens_k is not None or max_seqlen_q is not None:
        return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, scale, return_lse, variant,
                       causal_align, kv_cache is not None or page_table is not None or cache_lengths is not None)
    if kv_cache is not None or page_table is not None or cache_lengths is not None:
        return _paged(q, k, v, kv_cache, page_table, cache_lengths, causal, scale, return_lse, variant, causal_align,
                      check_cache)
    if k is None or v is None:
        raise TypeError("attention: give k and v, or kv_cache=(k_pages, v_pages) with page_table and cache_lengths")
    if type(q) is not api.CUPY_ARRAY and any(map(torch_bridge.is_tensor, (q, k, v))):
        if not all(map(torch_bridge.is_tensor, (q, k, v))):
            raise TypeError("attention: q, k and v must be all torch tensors or all arrays, got "
                            + ", ".join(f"{n}: {_describe(a)}" for n, a in zip("qkv", (q, k, v))))
        if any(map(torch_bridge.wants_operator, (q, k, v))):   # the operator's arguments checked as the arrays' are
            check_flags_and_scale("attention", scale, q.shape[-1] if q.dim() else 1, causal=causal, return_lse=return_lse)
            if causal_align not in ("bottom_right", "top_left"):
                raise ValueError(f"attention: causal_align must be 'bottom_right' or 'top_left', got {causal_align!r}")
            if variant != "auto":   # an unknown variant named as such, before the gradient's rule refuses a named one
                if not isinstance(variant, str):
                    raise TypeError(f"attention: variant must be a string, got {variant!r}")
                _named(variant)
        if any(map(torch_bridge.wants_operator, (q, k, v))) and not return_lse and variant == "auto":   # the operator
            if str(q.dtype) not in ("torch.float32", "torch.float16", "torch.bfloat16", "torch.float64") or \
                    0 in (*q.shape, *k.shape):
                raise TypeError(f"attention: the gradient takes non-empty float32, float16, bfloat16 and float64 tensors, got "
                                f"{_describe(q)}: pass x.detach() for the exact forward alone")
            return torch_bridge.autograd("attention", q, (k, v), causal=causal, scale=scale, causal_align=causal_align)
        return torch_bridge.call(attention, q, k, v, causal=causal, scale=scale, return_lse=return_lse, variant=variant,
                                 causal_align=causal_align)
    if causal_align != "bottom_right":
        return _top_left(q, k, v, causal, scale, return_lse, variant, causal_align)
    key = None
    if type(q) is api.CUPY_ARRAY and type(k) is api.CUPY_ARRAY and type(v) is api.CUPY_ARRAY:
        key = _call_key(q, k, v, causal, scale, return_lse, variant)
        hit = None if key is None else _fast_path.get(key)
        if hit is not None and api.current_device() == q.data.device_id:
            runner, lse_shape = hit
            out = api.new_cupy_array(q.shape, q.dtype)
            lse = api.new_cupy_array(lse_shape, np.float32) if return_lse else None
            runner(q, out, k=k, v=v, lse=lse)                 # the runner reads only the addresses
            return (out, lse) if return_lse else out
    batch, heads, kv_heads, n_q, n_k, d, scale = check_inputs(q, k, v, scale, exact_ok=True)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"attention: causal must be True or False, got {causal!r}")
    if not isinstance(return_lse, (bool, np.bool_)):
        raise TypeError(f"attention: return_lse must be True or False, got {return_lse!r}")
    if q.dtype == np.float64 or min(batch, heads, n_q, n_k) == 0:   # no kernel: exactly
        if variant != "auto":
            if not isinstance(variant, str):
                raise TypeError(f"attention: variant must be a string, got {variant!r}")
            _named(variant)   # an unknown one named as such
            raise TypeError(f"attention: variant {variant!r} runs a kernel, which takes non-empty float32, float16 "
                            f"and bfloat16 arrays; got {_describe(q)}: variant='auto' computes it exactly")
        with contextlib.nullcontext() if isinstance(q, np.ndarray) else q.device:   # (q's GPU, as the kernels)
            out, lse = exact.attention(q, k, v, causal=bool(causal), scale=scale)
        return (out, lse) if return_lse else out
    if not isinstance(variant, str):
        raise TypeError(f"attention: variant must be a string, got {variant!r}")
    if variant == "auto":
        chosen = choose(q.dtype.name, n_q, d, group=heads // kv_heads, caches=batch * kv_heads, n_k=n_k).variant
    else:
        chosen = _named(variant)
        _check_variant(chosen, q.dtype.name, d, not isinstance(q, np.ndarray))
    if isinstance(q, np.ndarray):
        out, lse = chosen.simulate(q, k, v, causal=bool(causal), scale=scale)
        return (out, lse) if return_lse else out
    on_its_device = api.current_device() == q.data.device_id
    with contextlib.nullcontext() if on_its_device else q.device:
        given = (q, k, v)
        q, k, v = (a if a.flags.c_contiguous and a.data.ptr % 16 == 0 else _contiguous_copy(a) for a in given)
        out = api.new_cupy_array(q.shape, q.dtype)
        lse = api.new_cupy_array((batch, heads, n_q), np.float32) if return_lse else None
        options = {"k": k, "v": v, "lse": lse, "causal": bool(causal), "scale": scale}
        runner = get_runner(chosen, q, out, options)
        runner(q, out, **options)
    if key is not None and on_its_device and all(a is b for a, b in zip((q, k, v), given)):
        _fast_path.put(key, (runner, (batch, heads, n_q)))
    return (out, lse) if return_lse else out


def _paged(q, k, v, kv_cache, page_table, cache_lengths, causal, scale, return_lse, variant, align, check_cache):
    from onlinesoftmax.attention_paged import paged_attention
    from onlinesoftmax.kernels.attention import paged

    if k is not None or v is not None or not isinstance(kv_cache, tuple) or len(kv_cache) != 2 \
            or page_table is None or cache_lengths is None:
        raise TypeError("attention: a paged cache is kv_cache=(k_pages, v_pages) with page_table= and cache_lengths=, "
                        "and no k or v")
    if variant not in ("auto", paged.NAME, "paged") or align != "bottom_right":
        raise ValueError(f"attention: a paged cache runs {paged.NAME} (variant 'auto' or 'paged'), causal aligned "
                         f"bottom-right to each sequence; got variant={variant!r}, causal_align={align!r}")
    return paged_attention(q, *kv_cache, page_table, cache_lengths, causal=causal, scale=scale, return_lse=return_lse,
                           check_cache=check_cache)


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, scale, return_lse, variant, align, paged):
    from onlinesoftmax.attention_varlen import varlen_attention
    from onlinesoftmax.kernels.attention import varlen

    if cu_seqlens_q is None or cu_seqlens_k is None or k is None or v is None or paged:
        raise TypeError("attention: packed sequences are q, k, v with both cu_seqlens_q= and cu_seqlens_k= (and no "
                        "paged cache)")
    if variant not in ("auto", varlen.NAME, "varlen") or align != "bottom_right":
        raise ValueError(f"attention: packed sequences run {varlen.NAME} (variant 'auto' or 'varlen'), causal aligned "
                         f"bottom-right to each sequence; got variant={variant!r}, causal_align={align!r}")
    return varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_seqlen_q, causal=causal, scale=scale,
                            return_lse=return_lse)


def _named(variant: str):
    """The attention kernel of a registry name or short name; ValueError naming the known ones."""
    try:
        return resolve(variant, "attention")
    except ValueError:
        known = ", ".join(repr(name) for v in variants("attention") for name in (v.short, v.name))
        raise ValueError(f"attention: unknown variant {variant!r}; known: 'auto', {known}") from None


def _top_left(q, k, v, causal, scale, return_lse, variant, align):
    """causal_align="top_left" from the bottom-right kernels. With n_q < n_k no query sees a key past
    n_q, so it is the bottom-right (square) mask over the first n_q keys; with n_q > n_k the first n_k
    queries see the square's mask and the others every key (two calls, joined along the queries)."""
    if align != "top_left":
        raise ValueError(f"attention: causal_align must be 'bottom_right' or 'top_left', got {align!r}")
    n_q, n_k = check_inputs(q, k, v, scale, exact_ok=True)[3:5]
    same = {"scale": scale, "return_lse": return_lse, "variant": variant}
    if not isinstance(causal, (bool, np.bool_)) or not causal or n_q == n_k:
        return attention(q, k, v, causal=causal, **same)
    if n_q < n_k:
        return attention(q, k[:, :, :n_q], v[:, :, :n_q], causal=True, **same)
    xp = array_module(q)
    same["return_lse"] = True
    head = attention(q[:, :, :n_k], k, v, causal=True, **same)
    tail = attention(q[:, :, n_k:], k, v, causal=False, **same)
    out, lse = (xp.concatenate(pair, axis=2) for pair in zip(head, tail))
    return (out, lse) if return_lse else out


def _contiguous_copy(a):
    import cupy

    return cupy.array(a, order="C", copy=True)
