"""Launcher module of cross_entropy_01_rows: the loss, the LSE and the gradient of cross-entropy
from logits, one block per row (kernels/cross_entropy/cross_entropy_01_rows.cu has the formulas).

Options (every function here takes them by name): targets (int64, one per row), ignore_index,
label_smoothing (eps), z_loss (z), softcap (c, 0 for none). `reference` is the float64 truth;
`simulate` is the kernel's arithmetic in float32 (not its order of summation), the CPU tier's
output for NumPy inputs.
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax.registry import DTYPES, Launch, Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

VEC = {"float32": 4, "float16": 8, "bfloat16": 8}   # elements per 16-byte vector
POINTER, INT, LONG, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float


def block_threads(n_cols: int, vec: int = 4) -> int:
    """A power of two, 32 .. 1024: about four vectors per thread, all 1024 threads from 16K columns
    (fp32) on; a short row does not leave most of a large block idle."""
    wanted = max(1, -(-n_cols // (4 * vec)))
    return int(min(1024, max(32, 1 << (wanted - 1).bit_length())))


def geometry(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(n_rows,), block=(block_threads(n_cols),))


def terms(x, targets, ignore_index, label_smoothing, z_loss, softcap, xp, dtype):
    """(loss per row, lse per row, d loss_row / d x) in `dtype` arithmetic, unscaled, 0 on ignored rows."""
    v = x.astype(dtype)
    with np.errstate(all="ignore"):
        s = (softcap * xp.tanh(v / softcap)).astype(dtype) if softcap else v
        m = s.max(axis=1)
        base = xp.where(xp.isneginf(m), 0, m)
        e = xp.exp(s - base[:, None])
        total = e.sum(axis=1)
        lse = (base + xp.log(total)).astype(dtype)
        ignored = targets == ignore_index
        rows = xp.arange(x.shape[0])
        s_t = xp.where(ignored, 0, s[rows, xp.where(ignored, 0, targets)])
        eps, n = dtype(label_smoothing), x.shape[1]
        # eps (m - mean(s)) as -eps/V sum(s - m), as the kernel (smooth_sum.cuh): m - sum(s) / V would
        # subtract two large numbers; never 0 * -inf without smoothing (a masked logit adds nothing then)
        smoothed = eps / n * (s - base[:, None]).sum(axis=1) if eps else 0
        # lse - (1 - eps) s_t - eps mean(s) around m, as the kernel: m + log l rounds back to m near 1e38
        loss = xp.log(total).astype(dtype) + (1 - eps) * (base - s_t) - smoothed + dtype(z_loss) * lse * lse
        p = e / total[:, None]   # not e^(s - lse): lse = m + log l rounds back to m where |m| ~ 1e38
        grad = p * (1 + 2 * dtype(z_loss) * lse)[:, None] - eps / n
        grad[rows, xp.where(ignored, 0, targets)] -= xp.where(ignored, 0, 1 - eps)
        if softcap:
            grad = grad * (1 - (s / softcap) ** 2)
        grad[ignored] = 0
    return xp.where(ignored, 0, loss).astype(dtype), lse.astype(dtype), grad.astype(dtype)


def reference(x, targets, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=0.0):
    """float64 (loss per row, lse per row, gradient of the summed loss) of logits x (numpy or cupy)."""
    from onlinesoftmax.reference import array_module

    xp = array_module(x)
    return terms(xp.asarray(x, dtype=xp.float64), xp.asarray(targets), ignore_index, label_smoothing, z_loss,
                  softcap, xp, np.float64)


def simulate(x, targets, grad_scale=None, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=0.0):
    """The kernel's results for NumPy logits: (loss per row, lse per row, dx or None), float32 math,
    dx in x's dtype scaled by grad_scale (None: no gradient)."""
    x = np.asarray(x)
    loss, lse, grad = terms(x.astype(np.float32), np.asarray(targets), ignore_index, label_smoothing, z_loss,
                             softcap, np, np.float32)
    dx = None if grad_scale is None else (grad * np.float32(grad_scale)).astype(x.dtype)
    return loss, lse, dx


def _vectors(*arrays) -> bool:
    return all(a.data.ptr % 16 == 0 and (a.shape[0] == 1 or a.strides[0] % 16 == 0) for a in arrays)


def plan(variant: Variant, x, loss, targets=None, lse=None, dx=None, grad_scale=None, ignore_index=-100,
         label_smoothing=0.0, z_loss=0.0, softcap=0.0):
    """runner(x, loss, targets=, lse=, dx=, grad_scale=): one launch over the (rows, V) logits. dx and
    grad_scale (a one-element float32 device array) together, or neither (no gradient)."""
    dtype = x.dtype.name
    if (dx is None) != (grad_scale is None):
        raise ValueError(f"{variant.name}: dx and grad_scale go together")
    if dx is not None and (dx.dtype != x.dtype or dx.shape != x.shape):
        raise TypeError(f"{variant.name}: dx must have x's shape and dtype")
    n_rows, n_cols = x.shape
    vec = VEC[dtype]
    vectors = int(n_cols >= vec and _vectors(x, *(() if dx is None else (dx,))))
    kernel = get_kernel(variant.path, variant.dtype_entry(dtype), variant.defines)
    # x, dx, targets, loss, lse, grad_scale, n_cols, x_stride, dx_stride, vectors, ignore_index,
    # label_smoothing, z_loss, softcap
    types = (POINTER,) * 6 + (INT, LONG, LONG, INT, LONG, FLOAT, FLOAT, FLOAT)
    fixed = {6: n_cols, 7: x.strides[0] // x.itemsize, 8: 0 if dx is None else dx.strides[0] // dx.itemsize,
             9: vectors, 10: int(ignore_index), 11: float(label_smoothing), 12: float(z_loss), 13: float(softcap)}
    launch = driver.prepare_launch(kernel, (n_rows,), (block_threads(n_cols, vec),), 0, 1, types, fixed=fixed)

    def run(x, loss, targets=None, lse=None, dx=None, grad_scale=None, **_):
        launch(x.data.ptr, None if dx is None else dx.data.ptr, targets.data.ptr, loss.data.ptr, lse.data.ptr,
               None if grad_scale is None else grad_scale.data.ptr)
    return run


# The public call's steps around the row kernel (either one), entries of this file: the targets checked
# on the device, and the loss reduced from the rows' losses (the .cu file's last two entries).
STEPS = ("cross_entropy_01_rows_targets", "cross_entropy_01_rows_reduce")


def step_threads(n_rows: int) -> int:
    """One block of 32 .. 1024 threads (a power of two) for a step over n_rows targets."""
    return int(min(1024, max(32, 1 << max(0, n_rows - 1).bit_length())))


def targets_on_device(targets, n_classes: int, ignore_index: int, mean: bool):
    """(clean, counts, grad_scale) of int64 CuPy targets, one launch on the current stream: clean the
    targets with ignore_index for any outside [0, n_classes); counts (int64[2]) the rows counted and
    1 if a target was outside; grad_scale (float32[1]) 1 / the rows counted for a mean, else 1."""
    import cupy

    n_rows = targets.shape[0]
    clean, counts, grad_scale = cupy.empty(n_rows, cupy.int64), cupy.empty(2, cupy.int64), cupy.empty(1, cupy.float32)
    CROSS_ENTROPY.kernel(STEPS[0])((1,), (step_threads(n_rows),), (
        targets, clean, np.int64(n_rows), np.int64(n_classes), np.int64(ignore_index), np.int32(bool(mean)), counts,
        grad_scale))
    return clean, counts, grad_scale


def reduce_on_device(rows, targets, n_classes: int, ignore_index: int, reduction: str, counts, mark_outside: bool):
    """The loss of the rows' float32 losses `rows` for `reduction` ("none": rows itself), one launch on the
    current stream (none where there is nothing to do); mark_outside: NaN, in rows too, on a row whose
    target is outside [0, n_classes) and not ignore_index. A sum or mean is a 0-d float32 array."""
    import cupy

    reduce = {"none": 0, "sum": 1, "mean": 2}[reduction]
    if not reduce and not mark_outside:
        return rows
    loss = rows if not reduce else cupy.empty((), cupy.float32)
    CROSS_ENTROPY.kernel(STEPS[1])((1,), (step_threads(rows.shape[0]),), (
        rows, targets, np.int64(rows.shape[0]), np.int64(n_classes), np.int64(ignore_index), np.int32(mark_outside),
        np.int32(reduce), counts, loss))
    return loss


CROSS_ENTROPY = register(Variant(
    name="cross_entropy_01_rows", family="cross_entropy", file="cross_entropy/cross_entropy_01_rows.cu",
    short="rows", story="the loss and the LSE in one online pass per row, the gradient (in place if asked) in a second",
    geometry=geometry, simulate=simulate, plan=plan, reads_per_element=2, writes_per_element=1, dtypes=DTYPES,
    entry="cross_entropy_01_rows_f32", entries=lambda variant: dtype_entries(variant) + STEPS))
