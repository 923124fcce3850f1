"""Launcher module of cross_entropy_03_from_lse: the gradient of cross-entropy over a block of each
row's columns, from each row's saved largest logit m and log l (kernels/cross_entropy/cross_entropy_03_from_lse.cu
has the formula), written over the block's logits. linear_cross_entropy's weight_grad="recompute"
makes its vocabulary blocks' gradients with it.

`gradient_from_lse` is the one call: NumPy arrays run `simulate` (the kernel's float32 arithmetic, in
its order), CuPy arrays the kernel on the current stream.
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax.kernels.cross_entropy.rows import VEC, block_threads
from onlinesoftmax.registry import DTYPES, Launch, Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

POINTER, INT, LONG, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float


def geometry(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(n_rows,), block=(block_threads(n_cols),))


def simulate(x, m, log_l, targets, first=0, scale=1.0, ignore_index=-100, uniform=0.0, hit=1.0, z_loss=0.0,
             softcap=0.0):
    """The kernel's dx for NumPy logits x (a block of columns from `first` on), in x's dtype: float32
    arithmetic in the kernel's order."""
    f32 = np.float32
    v = np.asarray(x).astype(f32)
    m, log_l = np.asarray(m, f32)[:, None], np.asarray(log_l, f32)[:, None]
    targets = np.asarray(targets)
    with np.errstate(all="ignore"):
        if softcap:
            t = np.tanh(v / f32(softcap)).astype(f32)
            s, slope = (f32(softcap) * t).astype(f32), (f32(1) - t * t).astype(f32)
        else:
            s = v
        g = np.exp((s - m) - log_l).astype(f32)
        if z_loss:
            g = g * (f32(1) + f32(2) * f32(z_loss) * (m + log_l))
        g = g - f32(uniform)
        ignored = targets == ignore_index
        column = np.where(ignored, -1, targets - first)
        g = g - np.where(np.arange(v.shape[1])[None, :] == column[:, None], f32(hit), f32(0))
        if softcap:
            g = g * slope
        g = np.where(ignored[:, None], f32(0), g * f32(scale))
    return g.astype(np.asarray(x).dtype)


def _vectors(x) -> bool:
    return x.shape[1] >= VEC[x.dtype.name] and x.data.ptr % 16 == 0 and (x.shape[0] == 1 or x.strides[0] % 16 == 0)


def plan(variant: Variant, x, y=None, ignore_index=-100, uniform=0.0, hit=1.0, z_loss=0.0, softcap=0.0):
    """runner(x, x, m=, log_l=, targets=, first=, scale=): one launch writing the gradient over the
    (rows, n_cols) block x (y is x: the kernel works in place)."""
    if y is not None and y is not x and (y.data.ptr != x.data.ptr or y.strides != x.strides):
        raise ValueError(f"{variant.name} writes the gradient over x: y must be x")
    dtype = x.dtype.name
    n_rows, n_cols = x.shape
    if x.strides[1] != x.itemsize:
        raise ValueError(f"{variant.name}: the block's columns must be adjacent (unit column stride)")
    kernel = get_kernel(variant.path, variant.dtype_entry(dtype), variant.defines)
    # x, stride, n_cols, m, log_l, targets, first, ignore_index, vectors, scale, uniform, hit, z_loss, softcap
    types = (POINTER, LONG, INT, POINTER, POINTER, POINTER, LONG, LONG, INT, FLOAT, FLOAT, FLOAT, FLOAT, FLOAT)
    fixed = {1: x.strides[0] // x.itemsize, 2: n_cols, 7: int(ignore_index), 8: int(_vectors(x)),
             10: float(uniform), 11: float(hit), 12: float(z_loss), 13: float(softcap)}
    launch = driver.prepare_launch(kernel, (n_rows,), (block_threads(n_cols, VEC[dtype]),), 0, 1, types, fixed=fixed)

    def run(x, y=None, m=None, log_l=None, targets=None, first=0, scale=1.0, **_):
        launch(x.data.ptr, m.data.ptr, log_l.data.ptr, targets.data.ptr, int(first), float(scale))
    return run


FROM_LSE = register(Variant(
    name="cross_entropy_03_from_lse", family="cross_entropy", file="cross_entropy/cross_entropy_03_from_lse.cu",
    short="from_lse", story="the gradient over a block of columns from the rows' saved m and log l, in one pass, "
    "written over the block", geometry=geometry, simulate=simulate, plan=plan, reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entry="cross_entropy_03_from_lse_f32", entries=dtype_entries))


def gradient_from_lse(x, m, log_l, targets, *, first: int = 0, scale: float = 1.0, ignore_index: int = -100,
                      uniform: float = 0.0, hit: float = 1.0, z_loss: float = 0.0, softcap: float = 0.0):
    """Writes the gradient of the block x (rows x n_cols, columns first .. of rows of logits) over x and
    returns x: m and log_l float32 per row, targets int64 per row (see the kernel's formula). NumPy
    arrays: the model; CuPy arrays: the kernel on the current stream."""
    n_rows = x.shape[0] if x.ndim == 2 else -1
    for name, a, dtype in (("m", m, np.float32), ("log_l", log_l, np.float32), ("targets", targets, np.int64)):
        if a.shape != (n_rows,) or a.dtype != dtype or (a.size > 1 and a.strides[0] != a.itemsize):
            raise TypeError(f"gradient_from_lse: x must be 2-D and {name} a contiguous {np.dtype(dtype).name} "
                            f"array of one value per row, got x of shape {x.shape} and {name} of shape "
                            f"{a.shape}, dtype {a.dtype}")
    options = {"ignore_index": int(ignore_index), "uniform": float(uniform), "hit": float(hit),
               "z_loss": float(z_loss), "softcap": float(softcap or 0.0)}
    if isinstance(x, np.ndarray):
        x[...] = simulate(x, m, log_l, targets, first, scale, **options)
        return x
    from onlinesoftmax.runtime.plan import get_runner

    if x.size:
        get_runner(FROM_LSE, x, x, options)(x, x, m=m, log_l=log_l, targets=targets, first=first, scale=scale)
    return x
