"""Launcher module of logsumexp_02_state: the online state (m, l) of every row, and a target's logit.

The kernel reads each row once, exactly as logsumexp_01_online does (the same lane groups, loads
and exp2 re-scaling: its NumPy model is that kernel's, `logsumexp_online.row_state`), and writes
planes of n_rows float32 each: m, l and, when targets are given, the logit of each row's target
column if this piece of the row holds it (0 otherwise). A piece of a row held by one GPU is
summarised by these three numbers; onlinesoftmax/distributed merges them across GPUs.

    planes = row_state_planes(x)                                  # (2, n_rows): m, l
    planes = row_state_planes(x, targets=t, vocab_start=v0)       # (3, n_rows): m, l, x[t - v0] or 0

numpy x runs the model; cupy x runs the kernel.
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax.kernels.logsumexp import online as lo
from onlinesoftmax.registry import Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

NAME = "logsumexp_02_state"
F32 = np.float32


def _check(x, targets, vocab_start) -> None:
    if x.ndim != 2 or x.shape[1] < 1 or x.shape[0] < 1:
        raise ValueError(f"{NAME}: x must be 2-D (rows, columns) with at least one of each, got shape {tuple(x.shape)}")
    if x.dtype.name not in lo.DTYPES:
        raise TypeError(f"{NAME}: x must be float32, float16 or bfloat16, got {x.dtype.name}")
    if x.strides[1] != x.itemsize:
        raise ValueError(f"{NAME}: x must have unit column stride")
    if targets is not None:
        if tuple(targets.shape) != (x.shape[0],) or targets.dtype != np.int64:
            raise ValueError(f"{NAME}: targets must be int64 of shape ({x.shape[0]},), "
                             f"got {targets.dtype} of shape {tuple(targets.shape)}")
        if type(targets) is not type(x):
            raise TypeError(f"{NAME}: x and targets must both be numpy or both cupy arrays")
    if isinstance(vocab_start, bool) or not isinstance(vocab_start, (int, np.integer)) or vocab_start < 0:
        raise ValueError(f"{NAME}: vocab_start must be a non-negative int, got {vocab_start!r}")


def simulate(x, targets=None, vocab_start: int = 0, group: int | None = None) -> np.ndarray:
    """The kernel's planes from its NumPy model: float32 of shape (2 or 3, n_rows)."""
    x = np.asarray(x)
    m, l = lo.row_state(x, group)
    if targets is None:
        return np.stack([m, l]).astype(F32)
    column = np.asarray(targets, dtype=np.int64) - int(vocab_start)
    owned = (column >= 0) & (column < x.shape[1])
    picked = np.zeros(x.shape[0], F32)
    rows = np.flatnonzero(owned)
    picked[rows] = x[rows, column[rows]].astype(F32)
    return np.stack([m, l, picked]).astype(F32)


def plan_state(variant: Variant, x, planes, targets=None, vocab_start: int = 0, group: int | None = None):
    """Runner writing the planes of cupy x into `planes` (float32, shape (2 or 3, n_rows), contiguous)."""
    n_rows, n_cols = x.shape
    dtype = x.dtype.name
    if planes.dtype != np.float32 or planes.ndim != 2 or planes.shape[1] != n_rows \
            or planes.shape[0] != (2 if targets is None else 3) or not planes.flags.c_contiguous:
        raise ValueError(f"{NAME}: planes must be contiguous float32 of shape ({2 if targets is None else 3}, "
                         f"{n_rows}), got {planes.dtype} {tuple(planes.shape)}")
    group = lo.group_size(n_cols, lo.LAYOUTS[dtype].vec) if group is None else group
    lo.check_group(group)
    geometry = lo.launch_for(n_rows, group)
    kernel = get_kernel(variant.path, variant.dtype_entry(dtype), variant.defines)
    types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
             ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int)
    launch = driver.prepare_launch(kernel, geometry.grid, geometry.block, 0, 1, types,
                                   fixed={3: int(vocab_start), 4: n_rows, 5: n_cols,
                                          6: x.strides[0] // x.itemsize, 7: n_rows, 8: group})

    def run(x, planes, targets=None, **_):
        launch(x.data.ptr, planes.data.ptr, None if targets is None else targets.data.ptr)
    return run


def row_state_planes(x, targets=None, vocab_start: int = 0, out=None):
    """(m, l[, target logit]) planes of each row of 2-D x; numpy runs the model, cupy the kernel."""
    _check(x, targets, vocab_start)
    if isinstance(x, np.ndarray):
        planes = simulate(x, targets, vocab_start)
        if out is not None:
            out[...] = planes
            return out
        return planes
    import cupy

    from onlinesoftmax.runtime.plan import get_runner

    planes = out if out is not None else cupy.empty((2 if targets is None else 3, x.shape[0]), dtype=cupy.float32)
    options = {"targets": targets, "vocab_start": int(vocab_start)}
    get_runner(STATE, x, planes, options)(x, planes, **options)
    return planes


STATE = register(Variant(
    name=NAME, family="row_state", file="logsumexp/logsumexp_02_state.cu",
    story="the state (m, l) itself and a target's logit, for a merge on another GPU: one read per element",
    geometry=lo.geometry_for("float32"), simulate=simulate, plan=plan_state,
    reads_per_element=1, writes_per_element=0, features=frozenset({lo.ONE_VALUE_PER_ROW}),
    dtypes=lo.DTYPES, entry="logsumexp_02_state_f32", entries=dtype_entries))
