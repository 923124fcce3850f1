"""Graders for the exercises of the page "The backward on Hopper's warpgroup instruction".

`check_ds_offset(fn)` grades where a reader stores each value of dS^T, by what dQ's instruction would
then read: fn(group, warp, lane, j, e) -> the element offset, in the block's dS tile, of accumulator
e of n-tile j of that thread (key 64 group + 16 warp + lane // 4 + 8 (e >> 1), query
8 j + 2 (lane % 4) + (e & 1)). Every value is stored at the reader's offset into a byte image of
shared memory, and the eight k-steps of dQ = dS K read it back through the kernel's descriptors (the
model of onlinesoftmax/kernels/attention/wgmma_layout.py, which the CPU emulator and the GPU tests
check): each must be dS with the queries as rows. Prints "passed" or the first problem and returns
True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import not_answered
from onlinesoftmax.kernels.attention import wgmma_layout as wl

QUERIES, KEYS = 64, 128          # the tile of one query tile by the block's keys
THREAD_VALUES = [(group, warp, lane, j, e) for group in range(2) for warp in range(4) for lane in range(32)
                 for j in range(8) for e in range(4)]


def key_and_query(group: int, warp: int, lane: int, j: int, e: int) -> tuple[int, int]:
    """Which dS^T value a thread holds: the accumulator layout of wgmma (mma.sync's, per warp)."""
    return 64 * group + 16 * warp + lane // 4 + 8 * (e >> 1), 8 * j + 2 * (lane % 4) + (e & 1)


def ds_offset(group: int, warp: int, lane: int, j: int, e: int) -> int:
    """The kernel's store: block `group` of [64 queries][64 keys], 16-byte chunks swizzled by the row."""
    key, query = key_and_query(group, warp, lane, j, e)
    local = key % 64
    return group * QUERIES * 64 + query * 64 + (((local >> 3) ^ (query & 7)) << 3) + (local & 7)


def ds_offset_problem(fn) -> str | None:
    """None when the k-steps of dQ = dS K read dS from where fn stores the values, else what is wrong."""
    memory = np.zeros(QUERIES * KEYS * 2, np.uint8)
    words = memory.view(np.uint16)
    stored_by = {}
    for args in THREAD_VALUES:
        key, query = key_and_query(*args)
        where = "group {}, warp {}, lane {}, j {}, e {} (key {}, query {})".format(*args, key, query)
        try:
            offset = fn(*args)
        except Exception as error:   # the reader's bug, reported with its case
            return f"{where}: your function raised {type(error).__name__}: {error}"
        if not isinstance(offset, (int, np.integer)):
            return f"{where}: an offset is an integer (in 16-bit elements), got {offset!r}"
        if not 0 <= int(offset) < QUERIES * KEYS:
            return f"{where}: offset {offset} is outside the 64 x 128 tile (0 to {QUERIES * KEYS - 1})"
        if int(offset) in stored_by:
            return (f"{where}: offset {offset} was already taken by {stored_by[int(offset)]}; each of the tile's "
                    f"{QUERIES * KEYS} values needs an element of its own")
        stored_by[int(offset)] = f"key {key}, query {query}"
        words[int(offset)] = 1 + query * KEYS + key          # 0: never written
    for step in range(KEYS // 16):
        got = wl.read_operand(memory, wl.k_major_descriptor(0, QUERIES, 16 * step), QUERIES, mn_major=False,
                              decode16=lambda bits: bits).astype(np.int64)
        want = 1 + np.arange(QUERIES)[:, None] * KEYS + 16 * step + np.arange(16)[None, :]
        if not np.array_equal(got, want):
            r, c = map(int, np.argwhere(got != want)[0])
            value = int(got[r, c]) - 1
            found = f"key {value % KEYS}, query {value // KEYS}"
            return (f"k-step {step} of dQ: its row {r}, column {c} should be dS of query {r}, key {16 * step + c}; "
                    f"the descriptor reads there the value of {found} (dS is read with the queries as rows, "
                    "in blocks of 64 keys, each [64][64] with its 16-byte chunks swizzled by the row)")
    return None


def check_ds_offset(fn, quiet: bool = False) -> bool:
    """fn(group, warp, lane, j, e) -> the element offset of that thread's dS^T value in the dS tile."""
    try:
        untouched = fn(0, 0, 0, 0, 0) is None
    except Exception:   # reported with its case below
        untouched = False
    problem = None if untouched else ds_offset_problem(fn)
    if not quiet:
        print(not_answered("ds_offset") if untouched else
              f"ds_offset: FAILED: {problem}" if problem else "ds_offset: passed")
    return not untouched and problem is None
