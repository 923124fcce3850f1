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
