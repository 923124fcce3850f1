"""Launcher module of the teaching softmax kernels (one block per row, fp32).

Each variant pairs its `.cu` file with a NumPy model that follows the same schedule
(`onlinesoftmax.simulate`). The models are what the book runs on a machine without
a GPU; the GPU tier checks both against the float64 reference.

softmax_01_safe's sum and softmax_02_online's statistics are folded per thread in chunks merged
pairwise (kernels/common/thread_fold.cuh). `sequential=True` models the schedule before that,
one running value per thread, which `sequential_build` compiles (-DTHREAD_FOLD_SEQUENTIAL=1):
the book's before/after comparison of their accuracy on long peaked rows.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.registry import EXTRA_BUILDS, REGISTRY, Launch, Variant, register, register_build

BLOCK_THREADS = 256
SEQUENTIAL_DEFINE = "THREAD_FOLD_SEQUENTIAL=1"


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


def _add(a, b):
    return ((a[0] + b[0]).astype(np.float32),)


def simulate_safe(x: np.ndarray, sequential: bool = False) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        # the maximum is exact in any order: the kernel's chunks need no replay
        m = sim.block_max(sim.thread_partials(x, BLOCK_THREADS, lambda v: v, np.fmax, -np.inf))
        shifted = (x - m[:, None]).astype(np.float32)
        partial = sim.thread_fold(shifted, BLOCK_THREADS, (0.0,), lambda s, v: _add(s, (np.exp(v),)), _add,
                                  sequential=sequential)[0]
        total = sim.block_sum(partial)
        return (np.exp(x - m[:, None]) / total[:, None]).astype(np.float32)


def simulate_online(x: np.ndarray, guards: bool = True, sequential: bool = False) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    m, l = sim.online_row_state(x, BLOCK_THREADS, guards, chunked=not sequential)
    with np.errstate(all="ignore"):
        inv_l = np.float32(1) / l
        return (np.exp(x - m[:, None]) * inv_l[:, None]).astype(np.float32)


def sequential_build(variant: Variant, simulate) -> Variant:
    """`variant` built with one running value per thread (-DTHREAD_FOLD_SEQUENTIAL=1), `simulate` the
    model of that schedule: the "before" of the accuracy fix of softmax_01_safe, softmax_02_online
    and softmax_03_online_masked, for the comparison in the book and the teaching-accuracy suite.
    Not registered: the API never runs it; the compile check builds it (registry.EXTRA_BUILDS)."""
    return register_build(dataclasses.replace(variant, name=f"{variant.name}_sequential",
                                              defines=(*variant.defines, SEQUENTIAL_DEFINE), simulate=simulate))


def sequential_of(name: str) -> Variant:
    """The sequential build of a teaching kernel, by the kernel's name."""
    build = EXTRA_BUILDS.get(f"{name}_sequential")
    if build is None:
        known = ", ".join(b.removesuffix("_sequential") for b in EXTRA_BUILDS if b.endswith("_sequential"))
        raise ValueError(f"no sequential build of {name!r}; known: {known}")
    return build


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

sequential_build(REGISTRY["softmax_01_safe"], lambda x: simulate_safe(x, sequential=True))
sequential_build(REGISTRY["softmax_02_online"], lambda x: simulate_online(x, sequential=True))
