"""softmax_topk_05_warp_rows: fused softmax + top-k for short rows (MoE gating), a warp per row
(plan, NumPy model, registration).

Rows of at most 1024 elements (8 to 512 experts), k <= 8: 8 rows per block of 256 threads, the row in
registers (E elements a lane: 16-byte vectors t, t + 32, ... when every row starts on a 16-byte
boundary and N is a multiple of a vector, else columns t, t + 32, ...), each lane's (m, l) over its
elements in that order, the warp's butterfly, then k rounds of warp argmax by two 32-bit maximum
reductions. The order and the outputs are softmax_topk_04's (softmax_topk.py).
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.topk import keys as tk
from onlinesoftmax.kernels.topk.softmax_topk import ROW_IDS, to_dtype
from onlinesoftmax.registry import DTYPE_ITEMSIZE, DTYPE_TAGS, DTYPES, Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

ROWS_PER_BLOCK = 8
E_BUCKETS = (4, 8, 16, 32)       # elements a lane holds (entries ..._e<E>, ..._e<E>_vec)
MAX_K, MAX_COLS = 8, 32 * E_BUCKETS[-1]
POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
F32 = np.float32


def vector_width(dtype: str) -> int:
    """Elements of one 16-byte vector."""
    return 16 // DTYPE_ITEMSIZE[dtype]


def uses_vectors(address: int, row_stride_bytes: int, n_cols: int, dtype: str) -> bool:
    """The 16-byte build: every row starts on a 16-byte boundary and N is a multiple of a vector."""
    return address % 16 == 0 and row_stride_bytes % 16 == 0 and n_cols % vector_width(dtype) == 0


def elements_per_lane(n_cols: int, dtype: str, vectors: bool) -> int:
    """E: the smallest bucket with 32 E >= N (at least one vector a lane in the 16-byte build)."""
    need = max(-(-n_cols // 32), vector_width(dtype) if vectors else 1)
    return next(e for e in E_BUCKETS if e >= need)


def lane_columns(n_cols: int, dtype: str, vectors: bool) -> np.ndarray:
    """(E, 32): the column lane t folds j-th (padding past N: -1), as register_column in the kernel."""
    e = elements_per_lane(n_cols, dtype, vectors)
    j, t = np.arange(e)[:, None], np.arange(32)[None, :]
    vec = vector_width(dtype)
    columns = (j // vec) * 32 * vec + t * vec + j % vec if vectors else j * 32 + t
    return np.where(columns < n_cols, columns, -1)


def simulate_warp_rows(x, k: int, renormalize: bool = False, replay: bool = False, vectors: bool | None = None):
    """NumPy model: (m, l) by one warp's schedule (lane t folds its registers in order with expf, then
    the butterfly), the selection exact, e^(v - m) in float32 times 1 / l (or 1 / the lanes' sum).
    vectors: the load order of the 16-byte build (None: as a contiguous, 16-byte aligned array would be
    loaded, i.e. when N is a multiple of a vector)."""
    x32 = np.asarray(x).astype(F32)
    dtype = np.asarray(x).dtype.name
    vectors = x32.shape[1] % vector_width(dtype) == 0 if vectors is None else vectors
    columns = lane_columns(x32.shape[1], dtype, vectors)                  # (E, 32): position j * 32 + t
    order = columns.reshape(-1)
    lanes = np.where(order >= 0, x32[:, np.maximum(order, 0)], -np.inf).astype(F32)   # padding adds nothing
    m, l = sim.online_row_state(lanes, 32)
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
    vectors = uses_vectors(x.data.ptr, x.strides[0], x.shape[1], x.dtype.name)
    e = elements_per_lane(x.shape[1], x.dtype.name, vectors)
    entry = f"{variant.path.stem}_{DTYPE_TAGS[x.dtype.name]}_e{e}{'_vec' if vectors else ''}"
    geometry_ = variant.geometry(*x.shape)
    defines = (f"TOPK_BUILD_ROW={ROW_IDS[x.dtype.name]}", f"TOPK_BUILD_K={e}")   # topk_build.cuh: K is E here
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry, defines), geometry_.grid, geometry_.block, 0, 1,
        (POINTER, POINTER, POINTER, POINTER, INT, INT, LONG, INT, INT),
        fixed={4: x.shape[0], 5: x.shape[1], 6: x.strides[0] // x.itemsize, 7: k, 8: int(bool(renormalize))})

    def run(x, probs, columns=None, lse=None, **_):
        launch(x.data.ptr, probs.data.ptr, columns.data.ptr, None if lse is None else lse.data.ptr)
    run.entry = entry            # for the tests: which load order this layout gets
    return run


WARP_ROWS = register(Variant(
    name="softmax_topk_05_warp_rows", family="softmax_topk", file="topk/softmax_topk_05_warp_rows.cu",
    short="warp_rows",
    story="short rows (MoE gating): a warp per row held in registers, 8 rows per block, k rounds of warp argmax "
          "by 32-bit max reductions, no barrier",
    geometry=geometry, simulate=simulate_warp_rows, plan=plan_warp_rows, reads_per_element=1,
    writes_per_element=0, dtypes=DTYPES, entry="softmax_topk_05_warp_rows_f32_e4", max_cols=MAX_COLS,
    entries=lambda variant: tuple(f"{variant.path.stem}_{DTYPE_TAGS[d]}_e{e}{suffix}" for d in variant.dtypes
                                  for e in E_BUCKETS for suffix in ("", "_vec")
                                  if not (suffix and e % vector_width(d))), min_cc=70))
