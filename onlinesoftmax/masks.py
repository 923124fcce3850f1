"""softmax's mask arguments as the masked kernels' options: the causal alignment on top of
kernels/softmax/masked.py's `prepare`.

causal=True keeps, in row i of each (q, N) matrix, the columns j <= i + N - q (causal_align
"bottom_right", the default: attention's causal=True and FlashAttention's) or j <= i ("top_left",
torch's is_causal); the two are the same when q == N. The kernels' own causal limit is the top-left
one, so bottom-right runs as that limit when q == N and otherwise as per-row lengths
min(i mod q + 1 + N - q, valid_lengths[i]) made on x's device (a few element-wise kernels, no
synchronization), which the kernels take as padding.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.kernels.softmax import masked as softmax_masked
from onlinesoftmax.reference import array_module

ALIGNS = ("bottom_right", "top_left")


def check(mask, causal, causal_align) -> None:
    """TypeError / ValueError for a mask given as a string, a causal flag that is not a bool, or an
    unknown alignment."""
    if isinstance(mask, str):
        hint = ("; for a causal mask pass causal=True (aligned bottom-right, as attention(causal=True); "
                "causal_align='top_left' for torch's is_causal)" if mask == "causal" else "")
        raise ValueError(f"softmax: mask must be None or an additive float array, got {mask!r}{hint}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"softmax: causal must be True or False, got {causal!r}")
    if causal_align not in ALIGNS:
        raise ValueError(f"softmax: causal_align must be 'bottom_right' or 'top_left', got {causal_align!r}")


def options(rows, mask=None, valid_lengths=None, mask_value=-np.inf, shape=None, causal=False,
            causal_align="bottom_right") -> dict:
    """The masked kernels' options for the rows (rows, N) of x of `shape` (default the rows' own)."""
    check(mask, causal, causal_align)
    prepared = softmax_masked.prepare(rows, mask, valid_lengths, mask_value, shape=shape)
    if not causal:
        return prepared
    q, n_cols = prepared["causal_rows"], rows.shape[1]
    if causal_align == "top_left" or q == n_cols:
        return {**prepared, "causal": True}
    xp = array_module(rows)
    limits = xp.clip(xp.arange(rows.shape[0], dtype=xp.int64) % q + 1 + (n_cols - q), 0, n_cols)
    if prepared["valid_lengths"] is not None:
        limits = xp.minimum(limits, prepared["valid_lengths"])
    return {**prepared, "valid_lengths": xp.ascontiguousarray(limits.astype(xp.int32))}


def public_kwargs(kwargs: dict) -> dict:
    """softmax keyword arguments for masked.example_mask's (whose causal kind is the kernels' own,
    top-left): {"mask": "causal"} becomes {"causal": True, "causal_align": "top_left"}."""
    if isinstance(kwargs.get("mask"), str) and kwargs["mask"] == "causal":
        return {**{k: v for k, v in kwargs.items() if k != "mask"}, "causal": True, "causal_align": "top_left"}
    return kwargs
