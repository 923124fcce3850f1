"""Fused softmax + top-k, one block per row: the paper's four kernels (plans, NumPy models, registration).

    softmax_topk_01_topk_only     the k largest logits alone (no softmax): what any top-k costs
    softmax_topk_02_safe_unfused  a safe softmax writes all probabilities, a top-k reads them back
    softmax_topk_03_safe_fused    a maximum pass, then the sum and the lists in one more pass
    softmax_topk_04_online_fused  one pass: the online (m, l) and the lists together

Order: larger logit first, equal logits by the lower column, NaN above every number (as torch.topk
ranks it). Probabilities e^(v - m) / l (or over the sum of the k kept, renormalize=True) in x's
dtype; columns int64; the LSE float32. Each thread keeps a sorted list of K >= k keys in registers
(K a compile-time bucket, K_BUCKETS), so these kernels take k <= 32; softmax_topk_05_warp_rows
(short rows, moe.py) and softmax_topk_06_split (few long rows and k up to 1024,
split.py) are the others.

The models (simulate_*) return what the kernels return, computed in the kernels' schedule:
the (m, l) or the sum in the order of topk_rows.cuh (topk_rows_model.py), the selection exact.
With replay=True they also replay every thread's list and the shared threshold
(topk_rows_model.thread_lists) and take the selection from the replayed lists; the tests check
that both give the same columns (the proof in chapter 07 says they must).
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.topk import keys as tk
from onlinesoftmax.kernels.topk import rows_model as rm
from onlinesoftmax.registry import DTYPE_TAGS, DTYPES, Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

BLOCK_THREADS = rm.THREADS
K_BUCKETS = (1, 4, 8, 16, 32)
MAX_K = K_BUCKETS[-1]
MODEL_ROWS = 64            # rows the models take at a time (the replay holds 256 lists per row)
POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
F32 = np.float32


def bucket(k: int) -> int:
    """The list length a kernel is built with for k: the smallest bucket >= k."""
    return next(b for b in K_BUCKETS if b >= k)


def order(x) -> np.ndarray:
    """Columns of each row in the kernels' order (the float64 definition, reference.topk_order)."""
    return reference.topk_order(x)


def to_dtype(p32, dtype) -> np.ndarray:
    return p32 if np.dtype(dtype) == np.float32 else checks.to_dtype(p32, np.dtype(dtype).name)


def block_threads(n_rows: int, n_cols: int, k: int) -> int:
    """Threads per row (the block) of softmax_topk_01 .. 04 for n_rows rows of n_cols, k kept.

    From the H200 probe of softmax_topk_04 at 128, 64 and 32 threads (data/h200/2026-12-02-topk-threads-
    probe.log): with a thousand rows or more and rows shorter than 128K, 64 threads a row were as fast
    or faster than 128 for k <= 8 (4000 x 8192, k = 5: 83 against 108 us), and 32 faster still for the
    list of 8 at 3000 rows or more (69 us there; 175 against 210 us at 4000 x 32768). Fewer rows,
    longer rows or the lists of 16 and 32: 128."""
    K = bucket(k)
    if K >= 16 or n_rows < 1024 or n_cols >= 131072:
        return BLOCK_THREADS
    return 32 if K == 8 and n_rows >= 3000 else 64


def selected_keys(x, k: int, replay: bool, threads: int = BLOCK_THREADS) -> np.ndarray:
    """The k best keys of each row (rows, k): exact, or from the replayed lists (replay=True)."""
    if not replay:
        return tk.top_keys(tk.row_keys(x), k)
    return rm.block_top(rm.thread_lists(x, k, bucket(k), threads), k)


def _by_blocks(x, model):
    """model(rows of x) over blocks of MODEL_ROWS rows, the results stacked."""
    parts = [model(x[i:i + MODEL_ROWS]) for i in range(0, x.shape[0], MODEL_ROWS)]
    return tuple(np.concatenate(p) for p in zip(*parts))


def simulate_topk_only(x, k: int, replay: bool = False):
    """softmax_topk_01_topk_only: (the k largest logits in x's dtype, their columns int64)."""
    threads = block_threads(*np.shape(x), k)

    def model(rows):
        columns = tk.key_columns(selected_keys(rows, k, replay, threads))
        return np.take_along_axis(rows, columns, axis=1), columns
    return _by_blocks(x, model)


def simulate_safe_unfused(x, k: int, renormalize: bool = False, replay: bool = False):
    """softmax_topk_02_safe_unfused: the probabilities as the softmax kernel stores them (x's dtype),
    then the k largest of those stored values (ties, rounded ones included, to the lower column)."""
    threads = block_threads(*np.shape(x), k)

    def model(rows):
        m = rm.row_max(rows)
        base = rm.base_of(m)
        l = rm.row_sums(rows, base, threads)
        with np.errstate(all="ignore"):
            p32 = (rm.exp_terms(np.asarray(rows).astype(F32), base[:, None]) * (F32(1) / l)[:, None]).astype(F32)
            stored = to_dtype(p32, rows.dtype)
            columns = tk.key_columns(selected_keys(stored, k, replay, threads))
            kept = np.take_along_axis(stored, columns, axis=1)
            if renormalize:
                kept32 = np.asarray(kept).astype(F32)
                kept = to_dtype((kept32 * (F32(1) / rm.warp_total(kept32))[:, None]).astype(F32), rows.dtype)
            lse = (m + np.log(l)).astype(F32)
        return kept, columns, lse
    return _by_blocks(x, model)


def _fused_model(x, k, renormalize, replay, state):
    threads = block_threads(*np.shape(x), k)

    def model(rows):
        m, l = state(rows, threads)
        keys = selected_keys(rows, k, replay, threads)
        with np.errstate(all="ignore"):
            probs = rm.probabilities(keys, m, l, renormalize)
            lse = (m + np.log(l)).astype(F32)
        return to_dtype(probs, rows.dtype), tk.key_columns(keys), lse
    return _by_blocks(x, model)


def safe_state(rows, threads: int = BLOCK_THREADS):
    m = rm.row_max(rows)
    return m, rm.row_sums(rows, rm.base_of(m), threads)


def simulate_safe_fused(x, k: int, renormalize: bool = False, replay: bool = False):
    """softmax_topk_03_safe_fused: (probabilities in x's dtype, columns int64, LSE float32)."""
    return _fused_model(x, k, renormalize, replay, safe_state)


def simulate_online_fused(x, k: int, renormalize: bool = False, replay: bool = False):
    """softmax_topk_04_online_fused: the same answers with the online (m, l) of one pass."""
    return _fused_model(x, k, renormalize, replay, rm.online_state)


def geometry(n_rows: int, n_cols: int) -> Launch:
    """The launch for k = 1 (the block size follows k too: block_threads)."""
    return Launch(grid=(n_rows,), block=(block_threads(n_rows, n_cols, 1),))


def check_k(variant: Variant, k: int) -> None:
    if not 1 <= k <= MAX_K:
        raise ValueError(f"{variant.name} keeps a register list of at most {MAX_K} per thread, so it takes k in "
                         f"1 .. {MAX_K}, got k = {k}; softmax_topk_06_split (variant='auto') takes k up to 1024")


ROW_IDS = {"float32": 0, "float16": 1, "bfloat16": 2}   # row_id<Row>() in topk_rows.cuh


def _entry(variant: Variant, dtype: str, k: int, kernel: str = "") -> str:
    return f"{variant.path.stem}{kernel}_{DTYPE_TAGS[dtype]}_k{bucket(k)}"


MIN_BLOCKS_32 = 16   # blocks per SM asked of the compiler for 32-thread blocks (the probe's build)


def build_defines(dtype: str, k: int | None = None, threads: int = BLOCK_THREADS) -> tuple[str, ...]:
    """The defines of a build with only the entry of (dtype, bucket(k)) compiled (topk_rows.cuh:
    topk_builds): a process compiles what it launches, not every bucket of every dtype. A block of
    other than 128 threads sets TOPK_THREADS (and, for 32, the blocks per SM of its bucket)."""
    defines = (f"TOPK_BUILD_ROW={ROW_IDS[dtype]}",) + (() if k is None else (f"TOPK_BUILD_K={bucket(k)}",))
    if threads != BLOCK_THREADS:
        defines += (f"TOPK_THREADS={threads}",)
        if threads == 32 and k is not None:
            defines += (f"TOPK_MIN_BLOCKS_{bucket(k)}={MIN_BLOCKS_32}",)
    return defines


def _launch(variant, entry, n_rows, arg_types, fixed, defines, threads: int = BLOCK_THREADS):
    return driver.prepare_launch(get_kernel(variant.path, entry, defines), (n_rows,), (threads,), 0, 1,
                                 arg_types, fixed=fixed)


def plan_fused(variant: Variant, x, probs, k: int = 1, renormalize: bool = False, columns=None, lse=None):
    """Runner of softmax_topk_03 / 04 on 2-D cupy arrays: x (rows, N), probs (rows, k) in x's dtype;
    `columns` (rows, k) int64 and `lse` (rows,) float32 or None are passed on every call."""
    if probs.dtype != x.dtype:
        raise TypeError(f"{variant.name}: probs must have x's dtype {x.dtype.name}, got {probs.dtype.name}")
    check_k(variant, k)
    threads = block_threads(*x.shape, k)
    launch = _launch(variant, _entry(variant, x.dtype.name, k), x.shape[0],
                     (POINTER, POINTER, POINTER, POINTER, INT, LONG, INT, INT),
                     {4: x.shape[1], 5: x.strides[0] // x.itemsize, 6: k, 7: int(bool(renormalize))},
                     build_defines(x.dtype.name, k, threads), threads)

    def run(x, probs, columns=None, lse=None, **_):
        launch(x.data.ptr, probs.data.ptr, columns.data.ptr, None if lse is None else lse.data.ptr)
    return run


def plan_topk_only(variant: Variant, x, values, k: int = 1, columns=None, **_):
    """Runner of softmax_topk_01: values (rows, k) in x's dtype, columns (rows, k) int64."""
    if values.dtype != x.dtype:
        raise TypeError(f"{variant.name}: values must have x's dtype {x.dtype.name}, got {values.dtype.name}")
    check_k(variant, k)
    threads = block_threads(*x.shape, k)
    launch = _launch(variant, _entry(variant, x.dtype.name, k), x.shape[0], (POINTER, POINTER, POINTER, INT, LONG, INT),
                     {3: x.shape[1], 4: x.strides[0] // x.itemsize, 5: k}, build_defines(x.dtype.name, k, threads),
                     threads)

    def run(x, values, columns=None, **_):
        launch(x.data.ptr, values.data.ptr, columns.data.ptr)
    return run


def plan_unfused(variant: Variant, x, probs, k: int = 1, renormalize: bool = False, columns=None, lse=None):
    """Runner of softmax_topk_02's two launches; the probabilities go to a buffer of x's dtype with x's
    row stride and 16-byte phase, allocated on every call (the pool's, on the current stream)."""
    import cupy

    if probs.dtype != x.dtype:
        raise TypeError(f"{variant.name}: probs must have x's dtype {x.dtype.name}, got {probs.dtype.name}")
    check_k(variant, k)
    n_rows, n_cols = x.shape
    stride = x.strides[0] // x.itemsize
    tag = DTYPE_TAGS[x.dtype.name]
    threads = block_threads(n_rows, n_cols, k)
    softmax = _launch(variant, f"{variant.path.stem}_softmax_{tag}", n_rows, (POINTER, POINTER, POINTER, INT, LONG),
                      {3: n_cols, 4: stride}, build_defines(x.dtype.name, None, threads), threads)
    select = _launch(variant, _entry(variant, x.dtype.name, k, "_select"), n_rows,
                     (POINTER, POINTER, POINTER, INT, LONG, INT, INT),
                     {3: n_cols, 4: stride, 5: k, 6: int(bool(renormalize))}, build_defines(x.dtype.name, k, threads),
                     threads)
    phase = x.data.ptr % 16
    nbytes = ((n_rows - 1) * stride + n_cols) * x.itemsize + 16

    def run(x, probs, columns=None, lse=None, **_):
        buffer = cupy.cuda.alloc(nbytes)         # 256-byte aligned: + phase gives x's 16-byte phase
        p = buffer.ptr + phase
        softmax(x.data.ptr, p, None if lse is None else lse.data.ptr)
        select(p, probs.data.ptr, columns.data.ptr)
    return run


def entries(variant: Variant, kernels=("",)) -> tuple[str, ...]:
    return tuple(f"{variant.path.stem}{kernel}_{DTYPE_TAGS[d]}_k{b}" for kernel in kernels for d in variant.dtypes
                 for b in K_BUCKETS)


TOPK_ONLY = register(Variant(
    name="softmax_topk_01_topk_only", family="softmax_topk", file="topk/softmax_topk_01_topk_only.cu",
    short="topk_only", story="the k largest logits alone, no softmax: per-thread register lists with a shared "
                             "threshold, merged by rounds of argmax (the baseline)",
    geometry=geometry, simulate=simulate_topk_only, plan=plan_topk_only, reads_per_element=1, writes_per_element=0,
    dtypes=DTYPES, entry="softmax_topk_01_topk_only_f32_k1", entries=entries, min_cc=70,
    features=frozenset({"logits_only"})))

SAFE_UNFUSED = register(Variant(
    name="softmax_topk_02_safe_unfused", family="softmax_topk", file="topk/softmax_topk_02_safe_unfused.cu",
    short="safe_unfused", story="a safe softmax writes every probability (3 reads, 1 write), then a top-k reads "
                                "them back (1 read): the unfused path",
    geometry=geometry, simulate=simulate_safe_unfused, plan=plan_unfused, reads_per_element=4, writes_per_element=1,
    dtypes=DTYPES, entry="softmax_topk_02_safe_unfused_softmax_f32",
    entries=lambda v: tuple(f"{v.path.stem}_softmax_{DTYPE_TAGS[d]}" for d in v.dtypes) + entries(v, ("_select",)),
    min_cc=70))

SAFE_FUSED = register(Variant(
    name="softmax_topk_03_safe_fused", family="softmax_topk", file="topk/softmax_topk_03_safe_fused.cu",
    short="safe_fused", story="a maximum pass, then the sum and the register lists in a second pass: 2 reads",
    geometry=geometry, simulate=simulate_safe_fused, plan=plan_fused, reads_per_element=2, writes_per_element=0,
    dtypes=DTYPES, entry="softmax_topk_03_safe_fused_f32_k1", entries=entries, min_cc=70))

ONLINE_FUSED = register(Variant(
    name="softmax_topk_04_online_fused", family="softmax_topk", file="topk/softmax_topk_04_online_fused.cu",
    short="online_fused", story="one read: per-thread online (m, l) and a sorted register list of k, merged by "
                                "rounds of argmax",
    geometry=geometry, simulate=simulate_online_fused, plan=plan_fused, reads_per_element=1, writes_per_element=0,
    dtypes=DTYPES, entry="softmax_topk_04_online_fused_f32_k1", entries=entries, min_cc=70))

PAPER_VARIANTS = (TOPK_ONLY, SAFE_UNFUSED, SAFE_FUSED, ONLINE_FUSED)
