"""Launcher module of softmax_06_split_merge: one row split over several blocks (fp32).

Launch 1 writes one partial (m, l) state per chunk of a row; launch 2 merges a row's
partials in every block and writes that block's chunk of the output. The NumPy model
follows the same chunks, the same per-block schedule (`onlinesoftmax.simulate`) and the
same merge order.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.registry import Launch, Variant, register

BLOCK_THREADS = 256
TARGET_BLOCKS = 1024        # about 8 resident blocks of 256 threads on each of an H200's 132 SMs
MIN_CHUNK_COLS = 4096       # 16 columns per thread: below that a block is mostly overhead
MAX_BLOCKS_PER_ROW = 1024
MAX_GRID_Y = 65535          # grid.y limit: taller inputs are launched in slabs of rows


def split_geometry(n_rows: int, n_cols: int, blocks_per_row: int | None = None) -> tuple[int, int]:
    """(blocks_per_row, chunk_cols) for a (n_rows, n_cols) input.

    By default: enough blocks to fill the GPU (about TARGET_BLOCKS in all), but no chunk
    shorter than MIN_CHUNK_COLS. An explicit `blocks_per_row` is honoured exactly, even
    when it leaves chunks past the end of the row empty.
    """
    if blocks_per_row is None:
        blocks_per_row = max(1, min(-(-TARGET_BLOCKS // n_rows), -(-n_cols // MIN_CHUNK_COLS),
                                    MAX_BLOCKS_PER_ROW))
    if isinstance(blocks_per_row, (bool, np.bool_)) or not isinstance(blocks_per_row, (int, np.integer)):
        raise TypeError(f"blocks_per_row must be an int, got {type(blocks_per_row).__name__} {blocks_per_row!r}")
    if not 1 <= blocks_per_row <= MAX_BLOCKS_PER_ROW:
        raise ValueError(f"blocks_per_row must be an integer in 1 .. {MAX_BLOCKS_PER_ROW}, got {blocks_per_row!r}")
    chunk_cols = -(-n_cols // int(blocks_per_row))
    return int(blocks_per_row), chunk_cols


def geometry(n_rows: int, n_cols: int) -> Launch:
    blocks_per_row, _ = split_geometry(n_rows, n_cols)
    return Launch(grid=(blocks_per_row, min(n_rows, MAX_GRID_Y)), block=(BLOCK_THREADS,))


def plan_split_merge(variant: Variant, x, y, blocks_per_row: int | None = None):
    """Runner of both launches on 2-D cupy arrays; inputs taller than 65535 rows go in slabs."""
    import cupy

    from onlinesoftmax.runtime.loader import get_kernel

    n_rows, n_cols = x.shape
    blocks_per_row, chunk_cols = split_geometry(n_rows, n_cols, blocks_per_row)
    partials_kernel = get_kernel(variant.path, "softmax_06_split_merge_partials", variant.defines)
    normalize_kernel = get_kernel(variant.path, "softmax_06_split_merge_normalize", variant.defines)
    x_stride = np.int64(x.strides[0] // x.itemsize)
    y_stride = np.int64(y.strides[0] // y.itemsize)
    n_cols32, chunk32 = np.int32(n_cols), np.int32(chunk_cols)
    slabs = [(first, min(n_rows, first + MAX_GRID_Y)) for first in range(0, n_rows, MAX_GRID_Y)]
    x_row_bytes, y_row_bytes = x.strides[0], y.strides[0]
    partial_row_bytes = blocks_per_row * 2 * 4
    block = (BLOCK_THREADS,)

    def run(x, y, **_):
        partials = cupy.empty((n_rows, blocks_per_row, 2), dtype=cupy.float32)  # (m, l) per chunk
        x_ptr, y_ptr, p_ptr = x.data.ptr, y.data.ptr, partials.data.ptr
        for first, last in slabs:
            grid = (blocks_per_row, last - first)
            xs = np.uint64(x_ptr + first * x_row_bytes)
            ps = np.uint64(p_ptr + first * partial_row_bytes)
            ys = np.uint64(y_ptr + first * y_row_bytes)
            partials_kernel(grid, block, (xs, ps, n_cols32, x_stride, chunk32))
            normalize_kernel(grid, block, (xs, ps, ys, n_cols32, x_stride, y_stride, chunk32))
    return run


def partial_states(x: np.ndarray, blocks_per_row: int | None = None):
    """Model of launch 1: (m, l) of every chunk, each shaped (n_rows, blocks_per_row), float32.

    A chunk is padded to chunk_cols with -inf: pushing -inf into a state changes nothing
    (bit for bit), so this is the kernel's loop that stops at the end of the row.
    """
    x = np.asarray(x, dtype=np.float32)
    n_rows, n_cols = x.shape
    blocks_per_row, chunk_cols = split_geometry(n_rows, n_cols, blocks_per_row)
    padded = np.full((n_rows, blocks_per_row * chunk_cols), -np.inf, dtype=np.float32)
    padded[:, :n_cols] = x
    m, l = sim.online_row_state(padded.reshape(n_rows * blocks_per_row, chunk_cols), BLOCK_THREADS)
    return m.reshape(n_rows, blocks_per_row), l.reshape(n_rows, blocks_per_row)


def merge_states(m: np.ndarray, l: np.ndarray):
    """Model of launch 2's merge: thread t combines chunks t, t + 256, ... then the block reduces."""
    n_rows, blocks_per_row = m.shape
    state = (np.full((n_rows, BLOCK_THREADS), sim.NEG_INF, np.float32), np.zeros((n_rows, BLOCK_THREADS), np.float32))
    with np.errstate(all="ignore"):
        for first in range(0, blocks_per_row, BLOCK_THREADS):
            count = min(BLOCK_THREADS, blocks_per_row - first)
            own = (state[0][:, :count], state[1][:, :count])
            merged = sim.online_combine(own, (m[:, first:first + count], l[:, first:first + count]))
            state[0][:, :count], state[1][:, :count] = merged
        return sim.block_reduce(state, sim.online_combine, (sim.NEG_INF, np.float32(0)))


def simulate_split_merge(x: np.ndarray, blocks_per_row: int | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    m, l = merge_states(*partial_states(x, blocks_per_row))
    with np.errstate(all="ignore"):
        inv_l = np.float32(1) / l
        return (np.exp(x - m[:, None]) * inv_l[:, None]).astype(np.float32)



# --- reduction trees over the same row (float32), for comparing groupings ------------------

def tree_sequential(x: np.ndarray):
    """Left fold: the online recurrence, one element after another (one thread, no tree)."""
    x = np.asarray(x, dtype=np.float32)
    state = (np.full(x.shape[0], sim.NEG_INF, np.float32), np.zeros(x.shape[0], np.float32))
    with np.errstate(all="ignore"):
        for column in x.T:
            state = sim.online_push(state, column)
    return state


def tree_pairwise(x: np.ndarray):
    """Balanced tree: combine neighbours (x_1, 1) + (x_2, 1), then pairs of pairs, ..."""
    x = np.asarray(x, dtype=np.float32)
    m, l = x, np.ones_like(x)  # the state of one element x is (x, 1)
    with np.errstate(all="ignore"):
        while m.shape[1] > 1:
            if m.shape[1] % 2:  # an odd count: pad with the identity (-inf, 0)
                m = np.concatenate([m, np.full((m.shape[0], 1), sim.NEG_INF, np.float32)], axis=1)
                l = np.concatenate([l, np.zeros((l.shape[0], 1), np.float32)], axis=1)
            m, l = sim.online_combine((m[:, 0::2], l[:, 0::2]), (m[:, 1::2], l[:, 1::2]))
    return m[:, 0], l[:, 0]


def tree_warp(x: np.ndarray):
    """One warp: 32 lanes scan columns t, t + 32, ... then one xor butterfly."""
    return sim.online_row_state(x, n_threads=32)


def tree_block(x: np.ndarray):
    """softmax_02_online's layout: 256 strided lanes (each folding chunks of 16 columns, merged
    pairwise), a butterfly per warp, then warp 0."""
    return sim.online_row_state(x, n_threads=BLOCK_THREADS, chunked=True)


def tree_split(x: np.ndarray, blocks_per_row: int = 4):
    """softmax_06_split_merge's layout: one tree_block per chunk, then the merge."""
    return merge_states(*partial_states(x, blocks_per_row))


TREES = {"sequential": tree_sequential, "pairwise": tree_pairwise, "warp butterfly": tree_warp,
         "block (softmax_02)": tree_block, "split over 4 blocks (softmax_06)": tree_split}


register(Variant(
    name="softmax_06_split_merge", family="softmax", file="softmax/softmax_06_split_merge.cu",
    entry="softmax_06_split_merge_partials", short="split_merge",
    entries=("softmax_06_split_merge_partials", "softmax_06_split_merge_normalize"),
    story="split a row over several blocks: partial (m, l) per block, merged by a second launch",
    geometry=geometry, simulate=simulate_split_merge, plan=plan_split_merge,
    reads_per_element=2, writes_per_element=1))
