"""Fused softmax + top-k: softmax_topk_01_online (plan, NumPy model, registration).

The k largest probabilities of each row, their columns and the row's log-sum-exp, from one read of
the logits. Order: larger logit first, equal logits by the lower column, NaN above every number
(as torch.topk ranks it). The probabilities are e^(v - m) / l with the row's (m, l) (or divided by
the sum of the k kept, renormalize=True), in x's dtype; the columns int64; the LSE float32.

The kernels keep one sorted list per thread in registers, of a compile-time length K >= k (the
buckets K_BUCKETS), so k is at most 32 here: softmax_topk_01_online (a block per row, any N) and
softmax_topk_02_warp_rows (a warp per row for short rows, N <= 1024 and k <= 8: MoE gating).
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.registry import DTYPE_TAGS, DTYPES, Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

BLOCK_THREADS = 256
K_BUCKETS = (1, 4, 16, 32)
MAX_K = K_BUCKETS[-1]
POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


def bucket(k: int) -> int:
    """The list length the kernel is built with for k: the smallest bucket >= k."""
    return next(b for b in K_BUCKETS if b >= k)


def order(x: np.ndarray) -> np.ndarray:
    """Columns of each row in the kernel's order: NaN first, then larger, then the lower column."""
    x = np.asarray(x, dtype=np.float64)
    key = np.where(np.isnan(x), -np.inf, -x)          # ascending key: NaN and large values first
    nan_first = ~np.isnan(x)                           # False (NaN) sorts before True
    columns = np.broadcast_to(np.arange(x.shape[1]), x.shape)
    return np.lexsort((columns, key, nan_first), axis=-1)


def simulate_topk(x, k: int, renormalize: bool = False, threads: int = BLOCK_THREADS):
    """NumPy model: (probabilities in x's dtype, columns int64, LSE float32) per row, as the kernel
    computes them: (m, l) by the online kernel's schedule over `threads` threads per row (256 for
    softmax_topk_01, one warp for softmax_topk_02), the selection exact, each probability
    e^(v - m) in float32 times 1/l (or 1/sum of the k kept)."""
    x32 = np.asarray(x, dtype=np.float32)
    m, l = sim.online_row_state(x32, threads)
    columns = order(x32)[:, :k].astype(np.int64)
    kept = np.take_along_axis(x32, columns, axis=1)
    with np.errstate(all="ignore"):
        base = np.where(m == -np.inf, np.float32(0), m).astype(np.float32)
        e = np.exp(kept - base[:, None]).astype(np.float32)
        scale = (np.float32(1) / (e.sum(axis=1, dtype=np.float32) if renormalize else l)).astype(np.float32)
        probs = (e * scale[:, None]).astype(np.float32)
        lse = (m + np.log(l)).astype(np.float32)
    return probs.astype(x.dtype) if np.dtype(x.dtype) != np.float32 else probs, columns, lse


def geometry(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(n_rows,), block=(BLOCK_THREADS,))


def plan_topk(variant: Variant, x, probs, k: int = 1, renormalize: bool = False, columns=None, lse=None):
    """Runner on 2-D cupy arrays: x (rows, N), probs (rows, k) in x's dtype; `columns` (rows, k) int64
    and `lse` (rows,) float32 or None are passed on every call (their layouts are part of the plan)."""
    if probs.dtype != x.dtype:
        raise TypeError(f"{variant.name}: probs must have x's dtype {x.dtype.name}, got {probs.dtype.name}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"{variant.name}: k must lie in 1 .. {MAX_K}, got {k}")
    entry = f"{variant.path.stem}_{DTYPE_TAGS[x.dtype.name]}_k{bucket(k)}"
    geometry_ = variant.geometry(*x.shape)
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry), geometry_.grid, geometry_.block, 0, 1,
        (POINTER, POINTER, POINTER, POINTER, INT, LONG, INT, INT),
        fixed={4: x.shape[1], 5: x.strides[0] // x.itemsize, 6: k, 7: int(bool(renormalize))})

    def run(x, probs, columns=None, lse=None, **_):
        launch(x.data.ptr, probs.data.ptr, columns.data.ptr, None if lse is None else lse.data.ptr)
    return run


def entry_names(variant: Variant) -> tuple[str, ...]:
    return tuple(f"{variant.path.stem}_{DTYPE_TAGS[d]}_k{b}" for d in variant.dtypes for b in K_BUCKETS)


ONLINE_FUSED = register(Variant(
    name="softmax_topk_01_online", family="softmax_topk", file="topk/softmax_topk_01_online.cu",
    short="online_fused",
    story="one read: per-thread (m, l) and a sorted register list of k, merged by k block-wide argmax rounds",
    geometry=geometry, simulate=simulate_topk, plan=plan_topk, reads_per_element=1, writes_per_element=0,
    dtypes=DTYPES, entry="softmax_topk_01_online_f32_k1", entries=entry_names, min_cc=70))


# --- softmax_topk_02_warp_rows: a warp per row ------------------------------------------------
WARP_ROWS_PER_BLOCK = 8
WARP_K_BUCKETS = (1, 2, 4, 8)
WARP_MAX_K, WARP_MAX_COLS = WARP_K_BUCKETS[-1], 1024


def warp_bucket(k: int) -> int:
    return next(b for b in WARP_K_BUCKETS if b >= k)


def simulate_warp_rows(x, k: int, renormalize: bool = False):
    """NumPy model of softmax_topk_02_warp_rows: the same as softmax_topk_01's with one warp's schedule."""
    return simulate_topk(x, k, renormalize, threads=32)


def geometry_warp_rows(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(-(-n_rows // WARP_ROWS_PER_BLOCK),), block=(32 * WARP_ROWS_PER_BLOCK,))


def plan_warp_rows(variant: Variant, x, probs, k: int = 1, renormalize: bool = False, columns=None, lse=None):
    """Runner as plan_topk's, for rows of at most 1024 elements and k <= 8."""
    if probs.dtype != x.dtype:
        raise TypeError(f"{variant.name}: probs must have x's dtype {x.dtype.name}, got {probs.dtype.name}")
    if not 1 <= k <= WARP_MAX_K or x.shape[1] > WARP_MAX_COLS:
        raise ValueError(f"{variant.name} takes k in 1 .. {WARP_MAX_K} and rows of at most {WARP_MAX_COLS} "
                         f"elements, got k = {k}, N = {x.shape[1]}")
    entry = f"{variant.path.stem}_{DTYPE_TAGS[x.dtype.name]}_k{warp_bucket(k)}"
    geometry_ = variant.geometry(*x.shape)
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry), geometry_.grid, geometry_.block, 0, 1,
        (POINTER, POINTER, POINTER, POINTER, INT, INT, LONG, INT, INT),
        fixed={4: x.shape[0], 5: x.shape[1], 6: x.strides[0] // x.itemsize, 7: k, 8: int(bool(renormalize))})

    def run(x, probs, columns=None, lse=None, **_):
        launch(x.data.ptr, probs.data.ptr, columns.data.ptr, None if lse is None else lse.data.ptr)
    return run


WARP_ROWS = register(Variant(
    name="softmax_topk_02_warp_rows", family="softmax_topk", file="topk/softmax_topk_02_warp_rows.cu",
    short="warp_rows",
    story="short rows (MoE gating): a warp per row, 8 rows per block, k rounds of warp argmax, no barrier",
    geometry=geometry_warp_rows, simulate=simulate_warp_rows, plan=plan_warp_rows, reads_per_element=1,
    writes_per_element=0, dtypes=DTYPES, entry="softmax_topk_02_warp_rows_f32_k1", max_cols=WARP_MAX_COLS,
    entries=lambda variant: tuple(f"{variant.path.stem}_{DTYPE_TAGS[d]}_k{b}" for d in variant.dtypes
                                  for b in WARP_K_BUCKETS), min_cc=70))
