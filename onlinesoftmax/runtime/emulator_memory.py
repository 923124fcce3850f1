"""Memory for the CPU emulator's arrays (emulator.py): copies fenced by guard regions and inaccessible
pages, in anonymous memory that an isolated launch's child process shares."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np

GUARD_BYTES = 1 << 16                 # the guard region on each side of a global array (then inaccessible pages)
_LIBC = ctypes.CDLL(None, use_errno=True)
_PROT_NONE = 0


def guarded(shape, dtype, fill=0) -> np.ndarray:
    """A C-contiguous array filled with `fill` (a value or an array), 16-byte aligned and ending
    right before an inaccessible page (the at most 15 bytes between are 0xff: NaN to a float), in
    memory a child process shares (an isolated launch writes into it)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    count = int(np.prod(shape, dtype=np.int64))
    padded = -(-count * dtype.itemsize // 16) * 16
    span = -(-padded // mmap.PAGESIZE) * mmap.PAGESIZE + mmap.PAGESIZE
    memory = mmap.mmap(-1, span)                    # anonymous and shared
    start = span - mmap.PAGESIZE - padded
    memory[start:start + padded] = b"\xff" * padded
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    if _LIBC.mprotect(ctypes.c_void_p(address + span - mmap.PAGESIZE), ctypes.c_size_t(mmap.PAGESIZE), _PROT_NONE):
        raise OSError(ctypes.get_errno(), "mprotect: the guard page after an emulator array")
    array = np.frombuffer(memory, dtype, count, offset=start).reshape(shape)
    array[...] = fill
    return array


def _fenced(array: np.ndarray):
    """A copy of `array` in shared anonymous memory: page-aligned, GUARD_BYTES of guard region on
    each side (out of bounds to the emulator's checks), then an inaccessible page on each side.
    (copy, low, high): the copy and the span the checks watch."""
    page = mmap.PAGESIZE
    nbytes = array.nbytes
    body = max(page, -(-nbytes // page) * page)
    guard = -(-GUARD_BYTES // page) * page
    span = page + guard + body + guard + page
    memory = mmap.mmap(-1, span)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    for at in (0, span - page):
        if _LIBC.mprotect(ctypes.c_void_p(base + at), ctypes.c_size_t(page), _PROT_NONE):
            raise OSError(ctypes.get_errno(), "mprotect: the guard page around an emulator array")
    start = page + guard
    memory[start:start + body] = b"\xff" * body
    copy = np.frombuffer(memory, array.dtype, array.size, offset=start).reshape(array.shape)
    copy[...] = array
    return copy, base + page, base + span - page


def _shared_zeros(count: int) -> np.ndarray:
    """int64 zeros in memory a child process shares."""
    memory = mmap.mmap(-1, max(8, 8 * count))
    return np.frombuffer(memory, np.int64, count)
