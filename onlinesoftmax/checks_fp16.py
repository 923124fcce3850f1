"""Checks for fp16 outputs (used by the CPU and GPU tiers and by chapter 03).

`checks.POISON` (1.2345e30) is not finite in fp16 (it rounds to +inf), so fp16 outputs
are poisoned with a finite value no probability can take. The strict check asks what
fp32 arithmetic followed by one rounding to fp16 can deliver: half an fp16 ulp of the
exact value, plus a little for the fp32 work, never more.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.reference import array_module

POISON_FP16 = 4321.0  # finite in fp16, > 1: no softmax output can equal it


def poisoned_like(x):
    """An output buffer for x's dtype, filled with a finite poison (fp16-aware)."""
    xp = array_module(x)
    value = POISON_FP16 if x.dtype == np.float16 else checks.POISON
    return xp.full(x.shape, value, dtype=x.dtype)


def unwritten(y) -> int:
    """How many outputs still hold the poison value."""
    xp = array_module(y)
    value = POISON_FP16 if y.dtype == np.float16 else np.float64(np.float32(checks.POISON))
    return int((y.astype(xp.float64) == value).sum())


def fp16_rounding_excess(y, ref) -> float:
    """max over elements of |y - ref| / (half an fp16 ulp of ref + fp32 slack); <= 1 passes.

    The slack 2^-16 * ref covers fp32 exp and sum error (long rows); 2^-25 is half the smallest
    fp16 subnormal spacing. NaN patterns must match exactly (else inf).
    """
    xp = array_module(y)
    y = y.astype(xp.float64)
    ref = xp.asarray(ref, dtype=xp.float64)
    if bool((xp.isnan(y) != xp.isnan(ref)).any()):
        return float("inf")
    keep = ~xp.isnan(ref)
    if not bool(keep.any()):
        return 0.0
    y, ref = y[keep], ref[keep]
    # half an ulp of fp16 at |ref| (normal range: 2^(e - 11)), with subnormals' fixed spacing below.
    exponent = xp.floor(xp.log2(xp.maximum(xp.abs(ref), 2.0**-14)))
    half_ulp = 2.0 ** (exponent - 11)
    allowed = half_ulp + 2.0**-16 * xp.abs(ref) + 2.0**-25
    return float((xp.abs(y - ref) / allowed).max())
