"""Launcher module of the teaching softmax kernels (one block per row, fp32).

Each variant pairs its `.cu` file with a NumPy model that follows the same schedule
(`onlinesoftmax.simulate`). The models are what the book runs on a machine without
a GPU; the GPU tier checks both against the float64 reference.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.registry import Launch, Variant, register

BLOCK_THREADS = 256


def block_per_row(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(n_rows,), block=(BLOCK_THREADS,))


def plan_rows(variant: Variant, x, y):
    """Runner of a (x, y, n_cols, x_row_stride, y_row_stride) kernel on 2-D cupy arrays."""
    geometry = variant.geometry(*x.shape)
    kernel = variant.kernel()
    grid, block, shared = geometry.grid, geometry.block, geometry.shared_bytes
    sizes = (np.int32(x.shape[1]), np.int64(x.strides[0] // x.itemsize), np.int64(y.strides[0] // y.itemsize))

    def run(x, y):
        kernel(grid, block, (x, y, *sizes), shared_mem=shared)
    return run


def simulate_naive(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        partial = sim.thread_partials(x, BLOCK_THREADS, np.exp, np.add, 0.0)
        total = sim.block_sum(partial)
        return (np.exp(x) / total[:, None]).astype(np.float32)


def simulate_safe(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        m = sim.block_max(sim.thread_partials(x, BLOCK_THREADS, lambda v: v, np.fmax, -np.inf))
        partial = sim.thread_partials(x - m[:, None], BLOCK_THREADS, np.exp, np.add, 0.0)
        total = sim.block_sum(partial)
        return (np.exp(x - m[:, None]) / total[:, None]).astype(np.float32)


def simulate_online(x: np.ndarray, guards: bool = True) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    m, l = sim.online_row_state(x, BLOCK_THREADS, guards)
    with np.errstate(all="ignore"):
        inv_l = np.float32(1) / l
        return (np.exp(x - m[:, None]) * inv_l[:, None]).astype(np.float32)


register(Variant(
    name="softmax_00_naive", family="softmax", file="softmax/softmax_00_naive.cu", short="naive",
    story="the definition as written: no max subtraction, overflows past x ~ 88.72",
    geometry=block_per_row, simulate=simulate_naive, plan=plan_rows,
    reads_per_element=2, writes_per_element=1))

register(Variant(
    name="softmax_01_safe", family="softmax", file="softmax/softmax_01_safe.cu", short="safe",
    story="subtract the row max: three passes (max, sum, normalize)",
    geometry=block_per_row, simulate=simulate_safe, plan=plan_rows,
    reads_per_element=3, writes_per_element=1))

register(Variant(
    name="softmax_02_online", family="softmax", file="softmax/softmax_02_online.cu", short="online",
    story="online (m, l) recurrence: max and sum in one pass, then normalize",
    geometry=block_per_row, simulate=simulate_online, plan=plan_rows,
    reads_per_element=2, writes_per_element=1))

register(Variant(
    name="softmax_02_online_unguarded", family="softmax", file="softmax/softmax_02_online.cu",
    short="online_unguarded", defines=("ONLINE_SOFTMAX_GUARDS=0",),
    story="softmax_02_online built without the -inf guards (wrong on purpose)",
    geometry=block_per_row, simulate=lambda x: simulate_online(x, guards=False),
    plan=plan_rows, reads_per_element=2, writes_per_element=1))
