"""Launcher module of the backward kernels: softmax_backward_01_rows, log_softmax_backward_01_rows.

    softmax:      dx = y * (dy - s),    s = sum_j y_j dy_j
    log-softmax:  dx = dy - e^y * s,    s = sum_j dy_j

Both take the forward's output y and the upstream gradient dy, never x. A row belongs to a group of
`group` consecutive lanes (a power of two, 4 .. 1024, enough that each lane keeps its at most 4 vectors
of y and dy in registers between the passes; longer rows are read twice);
the NumPy models below follow the kernels' order of summation (kernels/common/backward_rows.cuh):
lane t's vectors t, t + group, ..., then its tail elements, an xor butterfly over the warp and, for
groups above 32, the group's warps summed in order. All arithmetic is float32; dx is in y's dtype.
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax.registry import DTYPES, Launch, Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

F32 = np.float32
VEC = {"float32": 4, "float16": 8, "bfloat16": 8}   # elements per 16-byte vector
MIN_BLOCK_THREADS = 256
CACHED = 4                # vectors of y and of dy a lane keeps in registers (BACKWARD_CACHE)


def group_size(n_cols: int, vec: int) -> int:
    """Lanes per row: enough that each lane keeps its vectors in registers (at most CACHED, so the
    second pass reads no memory), within 4 .. 1024; longer rows get 1024 lanes and are read twice."""
    wanted = max(1, -(-(n_cols // vec) // CACHED))
    return int(min(1024, max(4, 1 << (wanted - 1).bit_length())))


def launch_for(n_rows: int, group: int) -> Launch:
    block = max(MIN_BLOCK_THREADS, group)
    return Launch(grid=(-(-n_rows // (block // group)),), block=(block,))


def geometry(n_rows: int, n_cols: int) -> Launch:
    return launch_for(n_rows, group_size(n_cols, VEC["float32"]))


def _address(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def vectors_fit(*arrays) -> bool:
    """Every row of every array starts on a 16-byte boundary (the kernels then move 16-byte vectors)."""
    return all(_address(a) % 16 == 0 and a.strides[0] % 16 == 0 for a in arrays)


# --- the models --------------------------------------------------------------------------------

def _row_sums(terms, vec: int, group: int, vectors: bool) -> np.ndarray:
    """The kernels' sum of `terms` (float32, (rows, N)) per row, in their order."""
    n_rows, n_cols = terms.shape
    n_vec = n_cols // vec if vectors else 0
    tail = n_vec * vec
    steps = -(-n_vec // group)
    body = np.zeros((n_rows, steps * group * vec), F32)      # zeros past the last vector add nothing
    body[:, :tail] = terms[:, :tail]
    body = body.reshape(n_rows, steps, group, vec)
    lanes = np.zeros((n_rows, group), F32)
    for step in range(steps):                                   # lane t: vectors t, t + group, ...
        for k in range(vec):
            lanes = lanes + body[:, step, :, k]
    for i in range(tail, n_cols):                               # then the tail, element by element
        lanes[:, (i - tail) % group] += terms[:, i]
    index = np.arange(group)
    for offset in (16, 8, 4, 2, 1):                              # the xor butterfly within a warp
        if offset < group:
            lanes = lanes + lanes[:, index ^ offset]
    if group <= 32:
        return lanes[:, 0]
    total = np.zeros(n_rows, F32)                                # the group's warps, in order
    for warp in range(group // 32):
        total = total + lanes[:, 32 * warp]
    return total


def _simulate(y, dy, log: bool, group=None, vectors=None):
    y, dy = np.asarray(y), np.asarray(dy)
    if y.shape != dy.shape or y.dtype != dy.dtype:
        raise ValueError(f"y and dy must have one shape and dtype, got {y.shape} {y.dtype} and {dy.shape} {dy.dtype}")
    vec = VEC[y.dtype.name]
    group = group_size(y.shape[1], vec) if group is None else group
    vectors = vectors_fit(y, dy) if vectors is None else vectors
    a, b = y.astype(F32), dy.astype(F32)
    with np.errstate(all="ignore"):
        s = _row_sums(b if log else (a * b).astype(F32), vec, group, vectors)[:, None]
        dx = b - np.exp(a) * s if log else a * (b - s)
    return dx.astype(F32).astype(y.dtype)


def simulate_softmax_backward(y, dy, group=None, vectors=None):
    """dx = y * (dy - sum y dy) as the kernel computes it (float32 math, dx in y's dtype)."""
    return _simulate(y, dy, False, group, vectors)


def simulate_log_softmax_backward(y, dy, group=None, vectors=None):
    """dx = dy - e^y * sum dy as the kernel computes it (float32 math, dx in y's dtype)."""
    return _simulate(y, dy, True, group, vectors)


# --- the launchers -----------------------------------------------------------------------------

def plan_backward(variant: Variant, y, dx, dy=None, group=None):
    """runner(y, dx, dy=dy): one launch over (rows, N) views with unit column stride."""
    dtype = y.dtype.name
    if dx.dtype != y.dtype or dy is None or dy.dtype != y.dtype or dy.shape != y.shape or dx.shape != y.shape:
        raise TypeError(f"{variant.name}: y, dy and dx must share one shape and dtype")
    n_rows, n_cols = y.shape
    group = group_size(n_cols, VEC[dtype]) if group is None else group
    geometry_ = launch_for(n_rows, group)
    kernel = get_kernel(variant.path, variant.dtype_entry(dtype), variant.defines)
    vectors = int(vectors_fit(y, dy, dx))
    types = (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 2 + (ctypes.c_longlong,) * 3 + (ctypes.c_int,) * 2
    fixed = dict(enumerate((n_rows, n_cols, y.strides[0] // y.itemsize, dy.strides[0] // dy.itemsize,
                            dx.strides[0] // dx.itemsize, group, vectors), start=3))
    launch = driver.prepare_launch(kernel, geometry_.grid, geometry_.block, 0, 1, types, fixed=fixed)

    def run(y, dx, dy=None, **_):
        launch(y.data.ptr, dy.data.ptr, dx.data.ptr)
    return run


register(Variant(
    name="softmax_backward_01_rows", family="softmax_backward", file="softmax/softmax_backward_01_rows.cu",
    short="rows", story="softmax's gradient y (dy - sum y dy): one row sum, then one output pass",
    geometry=geometry, simulate=simulate_softmax_backward, plan=plan_backward,
    reads_per_element=4, writes_per_element=1, dtypes=DTYPES,
    entry="softmax_backward_01_rows_f32", entries=dtype_entries))

register(Variant(
    name="log_softmax_backward_01_rows", family="log_softmax_backward",
    file="softmax/log_softmax_backward_01_rows.cu",
    short="rows", story="log-softmax's gradient dy - e^y sum dy: one row sum, then one output pass",
    geometry=geometry, simulate=simulate_log_softmax_backward, plan=plan_backward,
    reads_per_element=4, writes_per_element=1, dtypes=DTYPES,
    entry="log_softmax_backward_01_rows_f32", entries=dtype_entries))
