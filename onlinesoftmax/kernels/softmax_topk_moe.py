"""softmax_topk_05_warp_rows: fused softmax + top-k for short rows (MoE gating), a warp per row
(plan, NumPy model, registration).

Rows of at most 1024 elements (8 to 512 experts), k <= 8: 8 rows per block of 256 threads, each
lane a strided slice of its row with its own (m, l) and register list, k rounds of warp argmax.
The order and the outputs are softmax_topk_04's (softmax_topk.py).
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels import topk_keys as tk
from onlinesoftmax.kernels.softmax_topk import ROW_IDS, to_dtype
from onlinesoftmax.registry import DTYPE_TAGS, DTYPES, Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

ROWS_PER_BLOCK = 8
K_BUCKETS = (1, 2, 4, 8)
MAX_K, MAX_COLS = K_BUCKETS[-1], 1024
POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
F32 = np.float32


def bucket(k: int) -> int:
    return next(b for b in K_BUCKETS if b >= k)


def simulate_warp_rows(x, k: int, renormalize: bool = False, replay: bool = False):
    """NumPy model: (m, l) by one warp's schedule (lane t folds columns t, t + 32, ... with expf, then
    the butterfly), the selection exact, e^(v - m) in float32 times 1 / l (or 1 / the lanes' sum)."""
    x32 = np.asarray(x).astype(F32)
    m, l = sim.online_row_state(x32, 32)
    keys = tk.top_keys(tk.row_keys(x32), k)
    with np.errstate(all="ignore"):
        base = np.where(m == -np.inf, F32(0), m).astype(F32)
        e = np.exp(tk.key_values(keys) - base[:, None]).astype(F32)
        lanes = np.zeros((e.shape[0], 32), F32)
        lanes[:, :k] = e
        total = sim.warp_butterfly((lanes,), lambda a, b: ((a[0] + b[0]).astype(F32),))[0][:, 0]
        probs = (e * (F32(1) / (total if renormalize else l)).astype(F32)[:, None]).astype(F32)
        lse = (m + np.log(l)).astype(F32)
    return to_dtype(probs, x.dtype), tk.key_columns(keys), lse


def geometry(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(-(-n_rows // ROWS_PER_BLOCK),), block=(32 * ROWS_PER_BLOCK,))


def check_shape(variant: Variant, k: int, n_cols: int) -> None:
    if not 1 <= k <= MAX_K or n_cols > MAX_COLS:
        raise ValueError(f"{variant.name} takes k in 1 .. {MAX_K} and rows of at most {MAX_COLS} elements, "
                         f"got k = {k}, N = {n_cols}; variant='auto' chooses for you")


def plan_warp_rows(variant: Variant, x, probs, k: int = 1, renormalize: bool = False, columns=None, lse=None):
    """Runner on 2-D cupy arrays as softmax_topk.plan_fused's, for rows of at most 1024 elements and k <= 8."""
    if probs.dtype != x.dtype:
        raise TypeError(f"{variant.name}: probs must have x's dtype {x.dtype.name}, got {probs.dtype.name}")
    check_shape(variant, k, x.shape[1])
    entry = f"{variant.path.stem}_{DTYPE_TAGS[x.dtype.name]}_k{bucket(k)}"
    geometry_ = variant.geometry(*x.shape)
    defines = (f"TOPK_BUILD_ROW={ROW_IDS[x.dtype.name]}", f"TOPK_BUILD_K={bucket(k)}")   # topk_build.cuh
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry, defines), geometry_.grid, geometry_.block, 0, 1,
        (POINTER, POINTER, POINTER, POINTER, INT, INT, LONG, INT, INT),
        fixed={4: x.shape[0], 5: x.shape[1], 6: x.strides[0] // x.itemsize, 7: k, 8: int(bool(renormalize))})

    def run(x, probs, columns=None, lse=None, **_):
        launch(x.data.ptr, probs.data.ptr, columns.data.ptr, None if lse is None else lse.data.ptr)
    return run


WARP_ROWS = register(Variant(
    name="softmax_topk_05_warp_rows", family="softmax_topk", file="topk/softmax_topk_05_warp_rows.cu",
    short="warp_rows",
    story="short rows (MoE gating): a warp per row, 8 rows per block, k rounds of warp argmax, no barrier",
    geometry=geometry, simulate=simulate_warp_rows, plan=plan_warp_rows, reads_per_element=1,
    writes_per_element=0, dtypes=DTYPES, entry="softmax_topk_05_warp_rows_f32_k1", max_cols=MAX_COLS,
    entries=lambda variant: tuple(f"{variant.path.stem}_{DTYPE_TAGS[d]}_k{b}" for d in variant.dtypes
                                  for b in K_BUCKETS), min_cc=70))
