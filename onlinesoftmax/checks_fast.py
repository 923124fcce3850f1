"""Checking tools for the three storage dtypes of the fast kernels (fp32, fp16, bf16).

`checks.py` covers fp32; here the same rule — error at most twice that of the same-dtype
baseline plus two ulps of the largest output — with each dtype's own epsilon, inputs made
on the host in float32 and rounded to the dtype (bf16 through ml_dtypes), and a poison that
every dtype can hold (a finite value > 1, which no probability can take). Unlike checks.py
the ulps are those of the largest output, not of 1: with 16-bit dtypes two ulps of 1 would
let a wrong small probability pass.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.reference import array_module

DTYPES = ("float32", "float16", "bfloat16")
EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
POISON = {"float32": checks.POISON, "float16": 1000.0, "bfloat16": 1.0e30}


def np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def to_dtype(x32: np.ndarray, name: str) -> np.ndarray:
    return np.asarray(x32, dtype=np.float32).astype(np_dtype(name))


def on_device(xp, host: np.ndarray):
    """numpy -> xp (cupy or numpy); bf16 travels as its 16-bit words and is viewed back."""
    if xp is np:
        return host
    if host.dtype.name == "bfloat16":
        return xp.asarray(host.view(np.uint16)).view(host.dtype)
    return xp.asarray(host)


def random_rows(xp, n_rows, n_cols, dtype="float32", seed=0, max_offset=30.0):
    """checks.random_rows in any dtype: random offset and scale per row, a few outliers.

    Large inputs are made where they live (cupy's generator on the GPU): the host would
    spend seconds on a 4000 x 65536 tensor.
    """
    if xp is np or n_rows * n_cols < 2**22:
        return on_device(xp, to_dtype(checks.random_rows(np, n_rows, n_cols, seed=seed,
                                                         max_offset=max_offset), dtype))
    rng = xp.random.default_rng(seed)
    offset = rng.uniform(-max_offset, max_offset, size=(n_rows, 1)).astype(xp.float32)
    scale = xp.asarray(np.random.default_rng(seed).choice([0.1, 1.0, 8.0], size=(n_rows, 1)), dtype=xp.float32)
    x = offset + scale * rng.standard_normal((n_rows, n_cols), dtype=xp.float32)
    hits = rng.random((n_rows, n_cols), dtype=xp.float32) < 0.002
    x = xp.where(hits, x + 15 * scale, x)
    return from_float32(x, dtype)


def from_float32(x32, dtype: str):
    """fp32 (numpy or cupy) -> dtype, rounding to nearest even."""
    xp = array_module(x32)
    if dtype == "bfloat16":
        bits = (round_to_bf16(x32).view(xp.uint32) >> 16).astype(xp.uint16)
        return bits.view(np_dtype("bfloat16"))
    return x32.astype(dtype)


def special_rows(xp, n_cols, dtype="float32", seed=1):
    x, nan_rows = checks.special_rows(np, n_cols, seed=seed)
    return on_device(xp, to_dtype(x, dtype)), nan_rows


def poisoned_like(x):
    xp = array_module(x)
    host = np.full(x.shape, POISON[x.dtype.name], dtype=np.float32).astype(np_dtype(x.dtype.name))
    return on_device(xp, host)


def as_float64(y):
    xp = array_module(y)
    if y.dtype.name == "bfloat16":  # widen through the bits: works with or without bf16 kernels
        bits = y.view(xp.uint16).astype(xp.uint32) << 16
        return bits.view(xp.float32).astype(xp.float64)
    return y.astype(xp.float64)


def poison_value(name: str) -> float:
    """The poison as the dtype holds it (bf16 rounds 1e30)."""
    return float(np.asarray(POISON[name], dtype=np.float32).astype(np_dtype(name)).astype(np.float64))


def unwritten(y) -> int:
    return int((as_float64(y) == poison_value(y.dtype.name)).sum())


def round_to_bf16(x32):
    """fp32 -> the nearest bf16 (ties to even), returned as fp32 values; works on numpy and cupy."""
    xp = array_module(x32)
    bits = xp.ascontiguousarray(x32, dtype=xp.float32).view(xp.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(xp.uint32).view(xp.float32)


def baseline(x):
    """The same-dtype safe softmax as float64: fp32 math rounded to x's dtype (fp32: computed in fp32)."""
    xp = array_module(x)
    x32 = as_float64(x).astype(xp.float32)
    s32 = reference.softmax_same_dtype(x32)
    if x.dtype.name == "float16":
        s32 = s32.astype(xp.float16).astype(xp.float32)
    elif x.dtype.name == "bfloat16":
        s32 = round_to_bf16(s32)
    return s32.astype(xp.float64)


def compare(y, x) -> tuple[bool, str]:
    """(passed, message): y against the float64 reference of x, with x's dtype's tolerance."""
    dtype = x.dtype.name
    x64 = as_float64(x)
    ref = reference.softmax(x64)
    err = checks.max_abs_error(as_float64(y), ref)
    base_err = checks.max_abs_error(baseline(x), ref)
    if not np.isfinite(base_err):
        base_err = 0.0
    xp = array_module(ref)
    finite = xp.abs(ref[xp.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 1.0
    tol = 2.0 * base_err + 2.0 * EPS[dtype] * scale  # two ulps of the largest output
    return bool(err <= tol), f"{dtype}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"
