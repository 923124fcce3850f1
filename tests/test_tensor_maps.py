"""CPU tier: the emulator's tensor maps (onlinesoftmax/runtime/tensor_maps.py) hold the fields
kernels/emulator/simt_tma.h reads, in 128 bytes; shapes a TMA box cannot take are refused by both
kinds of map, with the shape named (the driver's map itself needs a GPU: tests/gpu)."""
import numpy as np
import pytest

from onlinesoftmax.runtime import tensor_maps


def test_the_emulated_map_holds_dims_strides_and_box():
    raw = tensor_maps.emulated(6, 300, 128, 128)
    assert len(raw) == tensor_maps.MAP_BYTES == 128
    fields = np.frombuffer(raw, np.uint64)
    assert fields[:8].tolist() == [128, 300, 6, 256, 256 * 300, 128, 2, 128] and not fields[8:].any()


@pytest.mark.parametrize("heads, rows, columns, box_rows", [(1, 10, 96, 128), (1, 10, 64, 0), (1, 10, 64, 257),
                                                            (0, 10, 64, 64), (1, 0, 64, 64)])
def test_shapes_a_box_cannot_take_are_refused(heads, rows, columns, box_rows):
    with pytest.raises(ValueError, match=f"got heads {heads}, rows {rows}, columns {columns}"):
        tensor_maps.emulated(heads, rows, columns, box_rows)
    with pytest.raises(ValueError, match="a tensor map takes"):
        tensor_maps.encode(0, "bfloat16", heads, rows, columns, box_rows)


def test_an_unaligned_tensor_is_refused_before_the_driver_is_asked():
    with pytest.raises(ValueError, match="16-byte aligned"):
        tensor_maps.encode(0x1008, "float16", 1, 10, 64, 64)


def test_the_driver_enums_are_cuda_bindings_ones():
    cu = pytest.importorskip("cuda.bindings.driver")
    assert tensor_maps.DATA_TYPE == {"float16": int(cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16),
                                     "bfloat16": int(cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)}
    assert tensor_maps.INTERLEAVE_NONE == int(cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE)
    assert tensor_maps.SWIZZLE_128B == int(cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B)
    assert tensor_maps.L2_PROMOTION_256B == int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
    assert tensor_maps.OOB_FILL_NONE == int(cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def test_without_a_driver_the_encoding_says_so():
    """On a machine without libcuda the call gets as far as loading the driver, and says what is missing
    (a wrong argument type would fail earlier, with a TypeError)."""
    import ctypes.util

    if ctypes.util.find_library("cuda"):
        pytest.skip("this machine has the CUDA driver library")
    with pytest.raises(RuntimeError, match="libcuda"):
        tensor_maps.encode(0x10000, "bfloat16", 4, 300, 128, 128)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        tensor_maps.encode(0x10000, "float32", 4, 300, 128, 128)
