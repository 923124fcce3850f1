"""Launcher module of the fp16 online softmax kernels with vectorized loads.

softmax_04_online_fp16_vec4 (uint2 = 4 halves per load) and softmax_05_online_fp16_vec8
(int4 = 8 halves). fp16 in and out, fp32 arithmetic inside. Each row splits into a
scalar head up to the row's first aligned address, whole vectors, and a scalar tail;
the NumPy model replays that split and each thread's push order.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.softmax.teaching import BLOCK_THREADS, block_per_row, plan_rows
from onlinesoftmax.registry import Variant, register

F32 = np.float32


def row_heads(x, vec: int) -> np.ndarray:
    """Per row: how many halves lie before the row's first (2 * vec)-byte aligned address."""
    return sim.row_heads(x, 2 * vec)


def schedule(n_cols: int, head: int, vec: int, n_threads: int = BLOCK_THREADS):
    """The kernel's push order: a list of (columns, valid) pairs, each of shape (threads,).

    Step 0 is the head (thread t owns column t < head); then, for each round of
    vectors, `vec` steps (thread t pushes column head + vec * v + k of vector v = round * T + t);
    last, the tail (thread t owns column tail + t < N).
    """
    head = min(head, n_cols)
    n_vec = (n_cols - head) // vec
    tail = head + n_vec * vec
    t = np.arange(n_threads)
    steps = [(t, t < head)]
    for start in range(0, n_vec, n_threads):
        v = start + t
        for k in range(vec):
            steps.append((head + vec * v + k, v < n_vec))
    steps.append((tail + t, tail + t < n_cols))
    return steps


def online_row_state_scheduled(x32: np.ndarray, steps, guards: bool = True):
    """(m, l) per row when each thread pushes the columns `steps` gives it, then the block reduce."""
    n_rows, n_cols = x32.shape
    m = np.full((n_rows, BLOCK_THREADS), sim.NEG_INF, F32)
    l = np.zeros((n_rows, BLOCK_THREADS), F32)
    with np.errstate(all="ignore"):
        for cols, valid in steps:
            values = np.zeros((n_rows, BLOCK_THREADS), F32)
            values[:, valid] = x32[:, cols[valid]]
            m_new, l_new = sim.online_push((m, l), values, guards)
            m, l = np.where(valid, m_new, m), np.where(valid, l_new, l)
        return sim.block_reduce((m, l), lambda a, b: sim.online_combine(a, b, guards), (sim.NEG_INF, F32(0)))


def simulate_fp16(x, vec: int, heads=None, guards: bool = True) -> np.ndarray:
    """NumPy model of the fp16 kernels: fp16 in, fp32 inside, fp16 out (round to nearest even).

    `heads` (per row) defaults to what the kernel would use for this numpy array's addresses.
    """
    x = np.asarray(x)
    if x.dtype != np.float16:
        raise TypeError(f"the fp16 kernels take float16, got {x.dtype}")
    if heads is None:
        heads = row_heads(x, vec) if x.strides[1] == x.itemsize else np.zeros(x.shape[0], np.int64)
    x32 = x.astype(F32)
    y = np.empty(x.shape, dtype=np.float16)
    for head in np.unique(heads):
        rows = np.flatnonzero(heads == head)
        part = x32[rows]
        m, l = online_row_state_scheduled(part, schedule(x.shape[1], int(head), vec), guards)
        with np.errstate(all="ignore"):
            inv_l = F32(1) / l
            y[rows] = (np.exp(part - m[:, None]) * inv_l[:, None]).astype(F32).astype(np.float16)
    return y


def simulate_vec4(x) -> np.ndarray:
    return simulate_fp16(x, 4)


def simulate_vec8(x) -> np.ndarray:
    return simulate_fp16(x, 8)


register(Variant(
    name="softmax_04_online_fp16_vec4", family="softmax", file="softmax/softmax_04_online_fp16_vec4.cu",
    short="online_fp16_vec4",
    story="softmax_02_online on fp16 rows (fp32 math inside), 4 halves per 8-byte uint2 load",
    geometry=block_per_row, simulate=simulate_vec4, plan=plan_rows,
    reads_per_element=2, writes_per_element=1, dtypes=("float16",)))

register(Variant(
    name="softmax_05_online_fp16_vec8", family="softmax", file="softmax/softmax_05_online_fp16_vec8.cu",
    short="online_fp16_vec8",
    story="softmax_04_online_fp16_vec4 with 8 halves per 16-byte int4 load",
    geometry=block_per_row, simulate=simulate_vec8, plan=plan_rows,
    reads_per_element=2, writes_per_element=1, dtypes=("float16",)))
