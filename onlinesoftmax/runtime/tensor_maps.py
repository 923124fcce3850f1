"""Tensor maps for the TMA copies of kernels/common/tma.cuh: a [heads][rows][columns] tensor of 16-bit
elements, boxes of 64 columns (128 bytes, the swizzle's width) by `box_rows` rows of one head, stored
in shared memory with the 128-byte swizzle; box elements outside the tensor arrive as zeros.

`encode` makes the driver's CUtensorMap (cuTensorMapEncodeTiled, through cuda-bindings; compute
capability 9.0 or newer), `emulated` the emulator's version of the same 128 bytes (the fields
kernels/emulator/simt_tma.h reads). A map names its tensor's address, so a launch makes its maps
for the tensors it is given.
"""
from __future__ import annotations

import ctypes

import numpy as np

BOX_COLUMNS = 64
MAP_BYTES = 128
TENSOR_MAP = ctypes.c_ubyte * MAP_BYTES     # a kernel parameter passed by value


def _shape_problem(heads: int, rows: int, columns: int, box_rows: int) -> str | None:
    if columns % BOX_COLUMNS or not 1 <= box_rows <= 256 or heads < 1 or rows < 1:
        return (f"a tensor map takes [heads][rows][columns] with columns a multiple of {BOX_COLUMNS}, at least one "
                f"head and row, and boxes of 1 to 256 rows; got heads {heads}, rows {rows}, columns {columns}, "
                f"box rows {box_rows}")
    return None


def emulated(heads: int, rows: int, columns: int, box_rows: int) -> bytes:
    """The emulator's map: dims (columns, rows, heads), byte strides of a row and a head, box rows,
    element bytes, swizzle bytes, then zeros to 128 bytes."""
    problem = _shape_problem(heads, rows, columns, box_rows)
    if problem:
        raise ValueError(problem)
    fields = np.zeros(MAP_BYTES // 8, np.uint64)
    fields[:8] = (columns, rows, heads, 2 * columns, 2 * columns * rows, box_rows, 2, 128)
    return fields.tobytes()


def encode(address: int, dtype: str, heads: int, rows: int, columns: int, box_rows: int) -> bytes:
    """The driver's CUtensorMap for the tensor at device `address` (16-byte aligned), as 128 bytes."""
    problem = _shape_problem(heads, rows, columns, box_rows)
    if problem:
        raise ValueError(problem)
    if address % 16:
        raise ValueError(f"a TMA copy needs a 16-byte aligned tensor; this one starts at {address:#x}")
    from cuda.bindings import driver as cu

    from onlinesoftmax.runtime.driver import check

    kind = {"bfloat16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            "float16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16}[dtype]
    (tensor_map,) = check(cu.cuTensorMapEncodeTiled(
        kind, 3, address, [columns, rows, heads], [2 * columns, 2 * columns * rows], [BOX_COLUMNS, box_rows, 1],
        [1, 1, 1], cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B, cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    return ctypes.string_at(tensor_map.getPtr(), MAP_BYTES)
