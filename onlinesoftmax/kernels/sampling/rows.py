"""Launcher module of sampling_01_rows: one token per row of logits from the softmax of x / temperature
after top-k, top-p and min-p (kernels/sampling/sampling_01_rows.cu has the definitions).

Parameters per row (`params`: arrays of n_rows, or scalars): temperature (>= 0; below GREEDY_BELOW
greedy), top_k (<= 0 or >= n: off), top_p (in (0, 1]; 1: off), min_p (in [0, 1]; 0: off); the random
numbers come from (seed, offset). `distribution` is the float64 truth of what a row samples from;
`simulate` is the kernel in NumPy: its float32 arithmetic and its own Philox noise, so that it picks
the kernel's token (but where two tokens' keys differ in the last bits of float32's log, or where
rounding moves a top-p boundary).
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax.kernels.sampling import philox
from onlinesoftmax.registry import DTYPES, Launch, Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

GREEDY_BELOW = 1e-5
POINTER, INT, UINT, LONG, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_longlong, ctypes.c_float
PARAMS = ("temperature", "top_k", "top_p", "min_p")
OFF = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}


def block_threads(n_cols: int) -> int:
    """A power of two, 32 .. 1024: about eight tokens per thread, all 1024 threads from 8K tokens on."""
    wanted = max(1, -(-n_cols // 8))
    return int(min(1024, max(32, 1 << (wanted - 1).bit_length())))


def geometry(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(n_rows,), block=(block_threads(n_cols),))


def row_params(n_rows: int, params: dict) -> dict:
    """The four parameters as arrays of n_rows (from scalars or arrays; host copies)."""
    host = {name: params.get(name, OFF[name]) for name in PARAMS}
    host = {name: (v.get() if hasattr(v, "get") else v) for name, v in host.items()}
    return {name: np.broadcast_to(np.asarray(v), (n_rows,)) for name, v in host.items()}


def kept(s: np.ndarray, m: np.ndarray, top_k, top_p, min_p, fixed_point: bool = False) -> np.ndarray:
    """The mask of the tokens each row keeps: values s (rows, n) of s's dtype, each row's maximum m,
    the parameters per row. Weights e^(s - m) summed in float64 against p times the total, or, with
    fixed_point (the kernel's arithmetic), as integers floor(e^(s - m) 2^32) against
    ceil(p total) (computed in float64 from a float32 p)."""
    n_rows, n = s.shape
    rows = np.arange(n_rows)
    ordered = -np.sort(-s, axis=1)                                       # each row, largest first
    use_k = (top_k > 0) & (top_k < n)
    kth = np.where(use_k, ordered[rows, np.clip(top_k, 1, n) - 1], -np.inf).astype(s.dtype)
    keep = s >= kth[:, None]
    use_p = top_p < 1
    if use_p.any():
        inside = ordered >= kth[:, None]
        if fixed_point:
            w = np.where(inside, np.floor(np.exp(ordered - m[:, None]) * np.float32(2.0 ** 32)), 0).astype(np.uint64)
            cumulative = np.cumsum(w, axis=1, dtype=np.uint64)
            target = np.maximum(1, np.ceil(np.float32(top_p).astype(np.float64) * cumulative[:, -1].astype(np.float64)))
            reaches = cumulative >= target.astype(np.uint64)[:, None]
        else:
            w = np.where(inside, np.exp(ordered - m[:, None]), 0).astype(np.float64)
            cumulative = np.cumsum(w, axis=1)
            reaches = cumulative >= top_p[:, None] * cumulative[:, -1:]
        # the mass at or above a value counts every token tied with it: look at the last of the ties
        last_of_ties = np.c_[ordered[:, 1:] != ordered[:, :-1], np.ones(n_rows, bool)]
        reached = last_of_ties & reaches & inside
        lowest = ordered[rows, np.maximum(0, (ordered >= kth[:, None]).sum(axis=1) - 1)]
        threshold = np.where(reached.any(axis=1), ordered[rows, reached.argmax(axis=1)], lowest)
        keep &= ~use_p[:, None] | (s >= threshold[:, None])
    use_min = min_p > 0
    if use_min.any():
        with np.errstate(divide="ignore"):
            floor = (m + np.log(np.where(use_min, min_p, 1).astype(s.dtype))).astype(s.dtype)
        keep &= ~use_min[:, None] | (s >= floor[:, None])
    return keep


def refused(s: np.ndarray) -> np.ndarray:
    """Rows the kernel gives -1: a NaN or +inf value, or no finite one."""
    return np.isnan(s).any(axis=1) | np.isposinf(s).any(axis=1) | np.isneginf(s).all(axis=1)


def distribution(x, **params) -> np.ndarray:
    """float64 (n_rows, n): the probability of each token under the parameters; NaN rows where the
    kernel writes -1 (a NaN or +inf logit, no finite logit), one-hot rows for greedy ones."""
    x = np.asarray(x, np.float64)
    p = row_params(x.shape[0], params)
    greedy = p["temperature"] < GREEDY_BELOW
    with np.errstate(all="ignore"):
        s = x / np.where(greedy, 1.0, p["temperature"])[:, None]
        bad = refused(s)
        m = np.where(bad, 0, s.max(axis=1))
        keep = kept(np.where(bad[:, None], 0, s), m, p["top_k"], p["top_p"], p["min_p"])
        w = np.where(keep, np.exp(s - m[:, None]), 0.0)
        out = w / w.sum(axis=1, keepdims=True)
    one_hot = np.zeros_like(out)
    one_hot[np.arange(x.shape[0]), np.argmax(np.where(np.isnan(x), -np.inf, x), axis=1)] = 1
    out = np.where(greedy[:, None], one_hot, out)
    out[bad] = np.nan
    return out


def simulate(x, seed: int = 0, offset: int = 0, **params) -> np.ndarray:
    """The kernel's tokens (int64, -1 for a row it refuses) for NumPy logits."""
    x = np.asarray(x)
    n_rows, n = x.shape
    if n_rows == 0:
        return np.full(0, -1, np.int64)
    p = {name: v.astype(np.float32) if name != "top_k" else v for name, v in row_params(n_rows, params).items()}
    greedy = p["temperature"] < np.float32(GREEDY_BELOW)          # the kernel's float32 parameters
    with np.errstate(all="ignore"):
        s = x.astype(np.float32) / np.where(greedy, np.float32(1), p["temperature"])[:, None]
        bad = refused(s)
        s = np.where(bad[:, None], np.float32(0), s)
        m = s.max(axis=1)
        keep = kept(s, m, p["top_k"], p["top_p"], p["min_p"], fixed_point=True)
        keys = np.where(keep, (s - m[:, None]) + philox.gumbel(n_rows, n, seed, offset), -np.inf)
    tokens = np.where(greedy, np.argmax(s, axis=1), np.argmax(keys.astype(np.float32), axis=1))
    return np.where(bad, -1, tokens).astype(np.int64)


def plan(variant: Variant, x, tokens, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, offset=0):
    """runner(x, tokens, temperature=, top_k=, top_p=, min_p=, seed=, offset=): one launch; each of the
    four parameters a float (int for top_k) or a device array of n_rows (float32; int32 for top_k)."""
    n_rows, n_cols = x.shape
    kernel = get_kernel(variant.path, variant.dtype_entry(x.dtype.name), variant.defines)
    # x, tokens, temperatures, top_ks, top_ps, min_ps, temperature, top_k, top_p, min_p, n, x_stride,
    # seed_lo, seed_hi, offset_lo, offset_hi
    types = (POINTER,) * 6 + (FLOAT, INT, FLOAT, FLOAT, INT, LONG, UINT, UINT, UINT, UINT)
    fixed = {10: n_cols, 11: x.strides[0] // x.itemsize}
    launch = driver.prepare_launch(kernel, (n_rows,), (block_threads(n_cols),), 0, 1, types, fixed=fixed)

    def run(x, tokens, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, offset=0, **_):
        launch(*launch_values(x, tokens, temperature, top_k, top_p, min_p, seed, offset))
    return run


def launch_values(x, tokens, temperature, top_k, top_p, min_p, seed, offset) -> tuple:
    """The kernel's first sixteen arguments: addresses, each parameter as a device array's address
    (its scalar argument then the filter's off value) or a scalar (a null address), seed and offset
    as 32-bit halves."""
    values = (temperature, top_k, top_p, min_p)
    pointers = [getattr(v, "data", None) for v in values]
    scalars = [OFF[name] if pointer is not None else v for name, v, pointer in zip(PARAMS, values, pointers)]
    return (x.data.ptr, tokens.data.ptr, *(None if pointer is None else pointer.ptr for pointer in pointers),
            float(scalars[0]), int(scalars[1]), float(scalars[2]), float(scalars[3]),
            seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF)


SAMPLING = register(Variant(
    name="sampling_01_rows", family="sampling", file="sampling/sampling_01_rows.cu", short="rows",
    story="Gumbel-max over the tokens the filters keep, thresholds by radix select, one block per row, no sort",
    geometry=geometry, simulate=simulate, plan=plan, reads_per_element=1, writes_per_element=0, dtypes=DTYPES,
    entry="sampling_01_rows_f32", entries=dtype_entries))
