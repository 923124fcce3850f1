"""Tensor maps for the TMA copies of kernels/common/tma.cuh: a [heads][rows][columns] tensor of 16-bit
elements, boxes of 64 columns (128 bytes, the swizzle's width) by `box_rows` rows of one head, stored
in shared memory with the 128-byte swizzle; box elements outside the tensor arrive as zeros.

`encode` makes the driver's CUtensorMap (cuTensorMapEncodeTiled, through ctypes; compute
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


# The driver's enum values (cuda.h; tests/test_tensor_maps.py compares them with cuda-bindings').
DATA_TYPE = {"float16": 6, "bfloat16": 9}
INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_256B, OOB_FILL_NONE = 0, 3, 3, 0
_driver_library = []


def _encode_function():
    """cuTensorMapEncodeTiled of the CUDA driver library, with its C signature."""
    if not _driver_library:
        try:
            library = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise RuntimeError(f"a tensor map needs the CUDA driver library (libcuda.so.1): {error}") from None
        function = library.cuTensorMapEncodeTiled
        function.restype = ctypes.c_int
        function.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                             ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                             ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int)
        _driver_library.append(function)
    return _driver_library[0]


def encode(address: int, dtype: str, heads: int, rows: int, columns: int, box_rows: int) -> bytes:
    """The driver's CUtensorMap for the tensor at device `address` (16-byte aligned), as 128 bytes.

    Called through ctypes, not cuda-bindings: the driver wants the map written at a 64-byte aligned
    address, which a cuda-bindings CUtensorMap object does not guarantee."""
    problem = _shape_problem(heads, rows, columns, box_rows)
    if problem:
        raise ValueError(problem)
    if address % 16:
        raise ValueError(f"a TMA copy needs a 16-byte aligned tensor; this one starts at {address:#x}")
    if dtype not in DATA_TYPE:
        raise ValueError(f"a tensor map here holds float16 or bfloat16, got {dtype}")
    function = _encode_function()
    buffer = (ctypes.c_ubyte * (MAP_BYTES + 64))()
    where = ctypes.addressof(buffer) + (-ctypes.addressof(buffer)) % 64
    status = function(where, DATA_TYPE[dtype], 3, address, (ctypes.c_uint64 * 3)(columns, rows, heads),
                      (ctypes.c_uint64 * 2)(2 * columns, 2 * columns * rows), (ctypes.c_uint32 * 3)(BOX_COLUMNS, box_rows, 1),
                      (ctypes.c_uint32 * 3)(1, 1, 1), INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_256B, OOB_FILL_NONE)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {status} for a {dtype} tensor of "
                           f"[{heads}][{rows}][{columns}] at {address:#x}, boxes of {BOX_COLUMNS} x {box_rows}")
    return ctypes.string_at(where, MAP_BYTES)
