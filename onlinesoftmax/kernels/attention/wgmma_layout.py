"""Hopper's warpgroup matrix multiply (wgmma.mma_async, sm_90a) in NumPy: where its operands sit in
shared memory, which thread holds which accumulator, and the instruction itself on a byte image of
shared memory. kernels/common/wgmma.cuh is the CUDA side; the CPU emulator's version
(kernels/emulator/simt_wgmma.h) follows the same rules, and tests/test_wgmma_layout.py checks the
three against each other (and, on a GPU, against the hardware).

The rules (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate", sections on the
matrix descriptor, the canonical layouts and the register fragments):

- A warpgroup is 4 consecutive warps (128 threads). One instruction computes D (64 x N, fp32) +=
  A (64 x 16) B (16 x N), N a multiple of 8 up to 256. Warp w of the group owns rows 16w .. 16w+15.
- D, and A when it comes from registers, are laid out per warp as mma.sync's m16n8k16 fragments
  (g = lane // 4, t = lane % 4): accumulator i of a thread is row 16w + g + 8 * (i % 4 >= 2),
  column 8 * (i // 4) + 2t + i % 2, so a thread holds N / 2 floats. A's four registers hold row g
  (registers 0 and 2) and g + 8 (1 and 3), k 2t, 2t+1 (registers 0, 1) and 2t+8, 2t+9 (2, 3).
- An operand in shared memory is named by a 64-bit descriptor: bits 0-13 its start address / 16,
  bits 16-29 the leading byte offset / 16, bits 32-45 the stride byte offset / 16, bits 62-63 the
  swizzle (1: 128 bytes). This model, like the kernels, uses only the 128-byte swizzle, whose atom
  is 8 rows of 128 bytes (1024 bytes, 1024-aligned): the 16-byte chunk c of row r of an atom is
  stored at chunk c ^ r. On the address: bits 4-6 XOR bits 7-9.
- K-major operand (A, and B when its rows are the N dimension: K^T of Q K^T): row mn of the
  operand holds its 16 k values contiguously inside a 128-byte row (64 elements, the atom's width),
  rows 8 apart are `stride` bytes apart; a step of 16 in k within the 64 moves the start by 32 bytes.
- MN-major operand (B stored with N contiguous: V of P V, `transpose_b`): row k holds 64
  consecutive n; 8 consecutive k rows make an atom, the next 8 are `stride` bytes on; the next 64 n
  are `leading` bytes on.
"""
from __future__ import annotations

import numpy as np

WARPGROUP = 128
SWIZZLE_128B = 1
ATOM_ROW_BYTES = 128          # one row of the 128-byte swizzle: 64 16-bit elements
ATOM_BYTES = 8 * ATOM_ROW_BYTES


# ---- the descriptor ------------------------------------------------------------------------------

def descriptor(start: int, leading: int, stride: int, swizzle: int = SWIZZLE_128B) -> int:
    """The 64-bit shared-memory matrix descriptor of an operand at byte address `start`."""
    for name, value in (("start", start), ("leading", leading), ("stride", stride)):
        if value % 16:
            raise ValueError(f"{name} = {value} bytes: the descriptor holds multiples of 16 bytes")
    return (((start & 0x3FFFF) >> 4) | (((leading >> 4) & 0x3FFF) << 16) | (((stride >> 4) & 0x3FFF) << 32)
            | (swizzle << 62))


def decode(desc: int) -> dict:
    """The fields of a descriptor, in bytes."""
    return {"start": (desc & 0x3FFF) << 4, "leading": ((desc >> 16) & 0x3FFF) << 4,
            "stride": ((desc >> 32) & 0x3FFF) << 4, "swizzle": (desc >> 62) & 3}


def swizzle(address):
    """The 128-byte swizzle on a byte address (array or int): bits 4-6 XOR bits 7-9."""
    return address ^ (((address >> 7) & 7) << 4)


def operand_address(desc: int, mn, k, *, mn_major: bool):
    """Byte address of element (mn, k) (mn: row of A / column of B; k within the instruction's 16)
    of the operand `desc` names."""
    f = decode(desc)
    if f["swizzle"] != SWIZZLE_128B:
        raise ValueError("this model knows only the 128-byte swizzle")
    mn, k = np.asarray(mn), np.asarray(k)
    if mn_major:
        linear = f["start"] + (mn // 64) * f["leading"] + (k // 8) * f["stride"] + (k % 8) * ATOM_ROW_BYTES + (mn % 64) * 2
    else:
        linear = f["start"] + (mn // 8) * f["stride"] + (mn % 8) * ATOM_ROW_BYTES + k * 2
    return swizzle(linear)


# ---- how the kernels store a tile -----------------------------------------------------------------

def tile_offsets(rows: int, cols: int):
    """Byte offset of element (r, c) of a [rows][cols] 16-bit tile as the kernels store it: columns
    in blocks of 64 (one atom width), each block a [rows][64] tile of its own, 128-byte swizzled;
    blocks `rows * 128` bytes apart. This is the leading offset of an MN-major operand and the step
    of a K-major one past k = 64."""
    if cols % 64 or rows % 8:
        raise ValueError(f"a {rows} x {cols} tile: rows a multiple of 8, columns of 64")
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return swizzle((c // 64) * rows * ATOM_ROW_BYTES + r * ATOM_ROW_BYTES + (c % 64) * 2)


def store_tile(memory: np.ndarray, base: int, tile: np.ndarray) -> None:
    """Write the 16-bit tile `tile` (uint16 bits) into the byte image `memory` at 1024-aligned `base`."""
    if base % ATOM_BYTES:
        raise ValueError(f"a swizzled tile starts on a 1024-byte boundary, not at {base}")
    offsets = base + tile_offsets(*tile.shape)
    view = memory.view(np.uint16)
    view[offsets // 2] = tile


def k_major_descriptor(base: int, rows: int, k0: int) -> int:
    """Descriptor of the k-step starting at column k0 (a multiple of 16) of a K-major [rows][K] tile at `base`."""
    block, within = divmod(k0, 64)
    return descriptor(base + block * rows * ATOM_ROW_BYTES + within * 2, 0, ATOM_BYTES)


def mn_major_descriptor(base: int, rows: int, k0: int) -> int:
    """Descriptor of the k-step at row k0 (a multiple of 16) of an MN-major [K rows][N] tile at `base`."""
    return descriptor(base + k0 * ATOM_ROW_BYTES, rows * ATOM_ROW_BYTES, ATOM_BYTES)


# ---- who holds what -------------------------------------------------------------------------------

def accumulator_position(thread, i):
    """(row, column) of accumulator i of warpgroup thread `thread` (0..127)."""
    thread, i = np.asarray(thread), np.asarray(i)
    lane, warp = thread % 32, thread // 32
    row = 16 * warp + lane // 4 + 8 * ((i % 4) >= 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return row, col


def a_register_position(thread, register, half):
    """(row, k) of half `half` of A register `register` (0..3) of warpgroup thread `thread`."""
    thread, register, half = np.asarray(thread), np.asarray(register), np.asarray(half)
    lane, warp = thread % 32, thread // 32
    row = 16 * warp + lane // 4 + 8 * (register % 2)
    k = 2 * (lane % 4) + half + 8 * (register // 2)
    return row, k


def gather_accumulators(d: np.ndarray) -> np.ndarray:
    """[128][N/2] what each thread holds of the 64 x N matrix d."""
    n = d.shape[1]
    t, i = np.meshgrid(np.arange(WARPGROUP), np.arange(n // 2), indexing="ij")
    return d[accumulator_position(t, i)]


def scatter_accumulators(held: np.ndarray) -> np.ndarray:
    """The 64 x N matrix from every thread's accumulators."""
    n = 2 * held.shape[1]
    out = np.full((64, n), np.nan)
    t, i = np.meshgrid(np.arange(WARPGROUP), np.arange(n // 2), indexing="ij")
    out[accumulator_position(t, i)] = held
    return out


def a_registers_from_accumulators(held: np.ndarray, step: int) -> np.ndarray:
    """[128][4][2] the A registers of k-step `step` (16 columns) made from a thread's own
    accumulators of a 64 x N product (P of S, as the attention kernels pass it on): accumulators
    8 step .. 8 step + 7, in pairs."""
    return held[:, 8 * step: 8 * step + 8].reshape(WARPGROUP, 4, 2)


# ---- the instruction ------------------------------------------------------------------------------

def read_operand(memory: np.ndarray, desc: int, mn_count: int, *, mn_major: bool, decode16) -> np.ndarray:
    """The [mn_count][16] operand the descriptor names, values decoded from 16-bit bits."""
    mn, k = np.meshgrid(np.arange(mn_count), np.arange(16), indexing="ij")
    address = operand_address(desc, mn, k, mn_major=mn_major)
    return decode16(memory.view(np.uint16)[address // 2])


def wgmma(d, memory, b_desc, *, a_desc=None, a_registers=None, transpose_b=False, accumulate=True, decode16):
    """D (64 x N) = A B + D (or A B without `accumulate`). A from its descriptor or from every
    thread's [128][4][2] registers; B from its descriptor, K-major or (transpose_b) MN-major."""
    n = d.shape[1]
    if a_registers is not None:
        a = np.zeros((64, 16))
        t, reg, half = np.meshgrid(np.arange(WARPGROUP), np.arange(4), np.arange(2), indexing="ij")
        a[a_register_position(t, reg, half)] = decode16(a_registers)
    else:
        a = read_operand(memory, a_desc, 64, mn_major=False, decode16=decode16)
    b = read_operand(memory, b_desc, n, mn_major=transpose_b, decode16=decode16)   # [n][16]
    product = a.astype(np.float64) @ b.astype(np.float64).T
    return (product + (d if accumulate else 0)).astype(np.float32)
