"""Decoding attention against a paged KV cache (the API; the kernel is attention_08_paged_decode):

    out = onlinesoftmax.attention(q, kv_cache=(k_pages, v_pages), page_table=table, cache_lengths=lengths)

q (batch, heads, n_q, d), float16 or bfloat16, d = 64 or 128; the pools k_pages and v_pages
(pages, page_size, kv_heads, d) in q's dtype, contiguous and starting on a 16-byte boundary (the kernel reads
them in 16-byte vectors and never copies them), any page size; page_table (batch, pages_per_seq)
integers: sequence b's key j is slot j % page_size of page page_table[b, j // page_size];
cache_lengths (batch,) integers, each in [0, pages_per_seq * page_size] (at most 2^30 keys). Grouped heads as in
attention(): heads a multiple of kv_heads. causal=True aligns each sequence's diagonal to its own
length (bottom-right): with n_q queries, query i sees keys j <= i + length - n_q. A sequence of
length 0 gives zeros and an LSE of -inf. The page numbers a sequence uses and the lengths are
checked on the host (one synchronization on the GPU): a wrong page is a ValueError, never a read
outside the pool. check_cache=False skips that check and its synchronization (a decode loop's
choice): the kernel still reads nothing outside the pool or the table, and a sequence whose
length or used page number is out of range comes out NaN (outputs and LSE; an entry past int32 counts as
out of range, never wrapped). The launch depends on the shapes, not on the lengths, so a decode loop that
appends a token a step to its pages reuses one plan.

NumPy arrays run the kernel's NumPy model, CuPy arrays the kernel, torch tensors the kernel on
torch's current stream.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.inputs import check_flags_and_scale, check_same_kind, describe
from onlinesoftmax.kernels.attention import paged as kpaged
from onlinesoftmax.reference import array_module
from onlinesoftmax.registry import REGISTRY
from onlinesoftmax.runtime import torch_bridge
from onlinesoftmax.runtime.plan import get_runner


def paged_attention(q, k_pages, v_pages, page_table, cache_lengths, *, causal: bool = False, scale=None,
                    return_lse: bool = False, check_cache: bool = True):
    """softmax(q k^T * scale) v per sequence over its pages; see the module doc."""
    arrays = (q, k_pages, v_pages, page_table, cache_lengths)
    if any(map(torch_bridge.is_tensor, arrays)):
        return torch_bridge.call(paged_attention, *arrays, causal=causal, scale=scale, return_lse=return_lse,
                                 check_cache=check_cache)
    table, lengths, scale = check(q, k_pages, v_pages, page_table, cache_lengths, causal, scale, return_lse,
                                  check_cache)
    batch, heads, n_q, d = q.shape
    xp = array_module(q)
    if batch == 0:   # no sequence: empty results, on either path
        out, lse = xp.empty(q.shape, q.dtype), xp.empty((0, heads, n_q), np.float32)
    elif isinstance(q, np.ndarray):
        out, lse = kpaged.simulate(q, k_pages, v_pages, table, lengths, causal=bool(causal), scale=scale)
    else:
        q = q if q.flags.c_contiguous and q.data.ptr % 16 == 0 else xp.array(q, order="C", copy=True)
        out = xp.empty(q.shape, q.dtype)
        lse = xp.empty((batch, heads, n_q), np.float32) if return_lse else None
        options = {"k_pages": k_pages, "v_pages": v_pages, "page_table": table, "cache_lengths": lengths,
                   "lse": lse, "causal": bool(causal), "scale": scale}
        get_runner(REGISTRY[kpaged.NAME], q, out, options)(q, out, **options)
    return (out, lse) if return_lse else out


def check(q, k_pages, v_pages, page_table, cache_lengths, causal, scale, return_lse, check_cache=True):
    """Every argument checked (the page numbers in use and the lengths on the host, unless check_cache
    is False); returns the page table and the lengths as contiguous int32 arrays, and the scale."""
    named = {"q": q, "k_pages": k_pages, "v_pages": v_pages, "page_table": page_table, "cache_lengths": cache_lengths}
    check_same_kind(named, "attention", "q, the pools, page_table and cache_lengths")
    if q.ndim != 4 or k_pages.ndim != 4 or tuple(k_pages.shape) != tuple(v_pages.shape):
        raise ValueError(f"attention: q must be (batch, heads, n_q, d) and k_pages, v_pages both (pages, page_size, "
                         f"kv_heads, d), got q {describe(q)}, k_pages {describe(k_pages)}, v_pages {describe(v_pages)}")
    batch, heads, n_q, d = q.shape
    pages, page_size, kv_heads, kv_d = k_pages.shape
    if q.dtype.name not in kpaged.DTYPES or k_pages.dtype != q.dtype or v_pages.dtype != q.dtype:
        raise TypeError(f"attention: a paged cache takes float16 or bfloat16 q and pools of q's dtype, got q "
                        f"{q.dtype.name}, k_pages {k_pages.dtype.name}, v_pages {v_pages.dtype.name}")
    if kv_d != d or d not in kpaged.SUPPORTED_D:
        raise ValueError(f"attention: the pools' head dimension must be q's, one of {kpaged.SUPPORTED_D}: q has d = {d}, "
                         f"the pools {kv_d}")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"attention: heads ({heads}) must be a multiple of the pools' kv_heads ({kv_heads})")
    if min(heads, n_q, pages, page_size) == 0:
        raise ValueError(f"attention: empty input: q {tuple(q.shape)}, pools {tuple(k_pages.shape)}")
    if not (k_pages.flags.c_contiguous and v_pages.flags.c_contiguous):
        raise ValueError("attention: the pools must be contiguous (a paged cache is written in place, never copied)")
    offsets = {name: start_offset(pool) for name, pool in (("k_pages", k_pages), ("v_pages", v_pages))}
    if any(offsets.values()):   # the kernel reads 16-byte vectors of the pools, never copied to realign them
        raise ValueError("attention: the pools must start on a 16-byte boundary (the kernel reads them in 16-byte "
                         "vectors), got " + ", ".join(f"{name} {offset} bytes past one" for name, offset in offsets.items()))
    if page_table.ndim != 2 or page_table.shape[0] != batch or page_table.dtype.kind not in "iu":
        raise ValueError(f"attention: page_table must be integers of shape (batch={batch}, pages_per_seq), got "
                         f"{describe(page_table)}")
    if tuple(cache_lengths.shape) != (batch,) or cache_lengths.dtype.kind not in "iu":
        raise ValueError(f"attention: cache_lengths must be integers of shape ({batch},), got {describe(cache_lengths)}")
    scale = check_flags_and_scale("attention", scale, d, causal=causal, return_lse=return_lse)
    if not isinstance(check_cache, (bool, np.bool_)):
        raise TypeError(f"attention: check_cache must be True or False, got {check_cache!r}")
    capacity = page_table.shape[1] * page_size
    if capacity > MAX_CAPACITY:
        raise ValueError(f"attention: a sequence's pages hold at most {MAX_CAPACITY} keys (the kernel's 32-bit key "
                         f"arithmetic), got pages_per_seq {page_table.shape[1]} x page_size {page_size} = {capacity}")
    table, lengths = as_int32(page_table), as_int32(cache_lengths)
    if batch and check_cache:   # one synchronization on the GPU: a wrong length or page is an error
        per_seq = page_table.shape[1]
        code = first_bad_entry(page_table, cache_lengths, pages, page_size)
        if code < batch:
            raise ValueError(f"attention: cache_lengths[{code}] = {int(cache_lengths[code])} is outside "
                             f"[0, {capacity}] (pages_per_seq {per_seq} x page_size {page_size})")
        if code < batch + batch * per_seq:
            b, i = divmod(code - batch, per_seq)
            raise ValueError(f"attention: page_table[{b}, {i}] = {int(page_table[b, i])} is not a page of the pools "
                             f"(0 .. {pages - 1}); sequence {b} uses its first "
                             f"{-(-int(cache_lengths[b]) // page_size)} entries")
    return table, lengths, float(scale)


def start_offset(array) -> int:
    """Bytes by which a GPU array's first element lies past a 16-byte boundary (0 for a NumPy array, which
    the model reads element by element)."""
    return 0 if isinstance(array, np.ndarray) else int(array.data.ptr % 16)


MAX_CAPACITY = 2**30   # keys a sequence's pages may hold: the kernel's key, split and rounding sums stay in int32


def as_int32(values):
    """Contiguous int32 values on the array's device, without a synchronization: a value outside int32
    becomes -1 (a page number or a length the kernel refuses), never a wrapped valid-looking one."""
    xp = array_module(values)
    if values.dtype != np.int32:
        info = np.iinfo(values.dtype)
        outside = None   # (each comparison only where the dtype reaches past int32: no bound out of its range)
        if info.min < -2**31:
            outside = values < -2**31
        if info.max > 2**31 - 1:
            outside = values > 2**31 - 1 if outside is None else outside | (values > 2**31 - 1)
        if outside is not None:
            values = xp.where(outside, -1, values)
    return xp.ascontiguousarray(values.astype(np.int32, copy=False))


def first_bad_entry(page_table, cache_lengths, pages: int, page_size: int) -> int:
    """The first wrong argument as one integer: b < batch when cache_lengths[b] is outside [0, capacity]
    (lengths first), batch + b * pages_per_seq + i when sequence b's i-th page, one it uses, is not in
    [0, pages); batch + batch * pages_per_seq when all are right. On CuPy arrays one kernel and one
    reduction, the only synchronization of a paged call (the NumPy lines say the same thing)."""
    batch, per_seq = page_table.shape
    if not isinstance(page_table, np.ndarray):
        xp = array_module(page_table)   # the kernel indexes both flat: contiguous copies where they are not
        keys = _bad_keys_kernel()(xp.ascontiguousarray(page_table), xp.ascontiguousarray(cache_lengths), per_seq,
                                  page_size, pages, batch, size=batch * max(per_seq, 1))
        return int(keys.min())
    lengths = cache_lengths.astype(np.int64)
    none = batch + batch * per_seq
    bad_length = (lengths < 0) | (lengths > per_seq * page_size)
    if bad_length.any():
        return int(np.argmax(bad_length))
    used = np.arange(per_seq)[None, :] < -(-lengths // page_size)[:, None]
    bad_page = used & ((page_table < 0) | (page_table >= pages))
    return batch + int(np.argmax(bad_page.reshape(-1))) if bad_page.any() else none


_BAD_KEYS = []


def _bad_keys_kernel():
    """A cupy elementwise kernel over (sequence, page entry): each entry's key as first_bad_entry
    numbers it, or the none value; the smallest key is the first wrong argument."""
    if not _BAD_KEYS:
        import cupy

        _BAD_KEYS.append(cupy.ElementwiseKernel(
            "raw T table, raw L lengths, int64 per_seq, int64 page_size, int64 pages, int64 batch", "int64 key", """
            const long long b = per_seq > 0 ? i / per_seq : i, p = per_seq > 0 ? i % per_seq : 0;
            const long long n = (long long)lengths[b];
            key = batch + batch * per_seq;
            if (n < 0 || n > per_seq * page_size) {
                if (p == 0) key = b;
            } else if (p < per_seq && p < (n + page_size - 1) / page_size) {
                const long long page = (long long)table[i];
                if (page < 0 || page >= pages) key = batch + i;
            }""", "onlinesoftmax_paged_bad_keys"))
    return _BAD_KEYS[0]
