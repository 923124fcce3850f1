"""CPU tier: the machine code of the tensor-core attention kernels (nvcc for sm_90a, cuobjdump -sass)
holds what their headers promise. One pass of the key-tile loop is D HMMA.16816 (D / 2 for S = Q K^T,
D / 2 for O += P V: 8 n-tiles x D / 16 k-chunks, and D / 8 n-tiles x 4 k-chunks); attention_03
reads K with 32-bit and V with 16-bit shared loads; 04 and 05 with ldmatrix.x4 (LDSM.16.M88.4) and
ldmatrix.x4.trans (LDSM.16.MT88.4), D / 4 of each; 05 copies with 16-byte cp.async (LDGSTS.128),
03 and 04 load K and V with 16-byte global loads; nothing in local memory. attention_07 (two m-tiles
a warp, key tiles of `keys`): 2 keys D / 64 HMMA, (keys / 16 + 2) D / 16 LDSM.16.M88.4 (K, and Q's
two m-tiles), keys D / 256 LDSM.16.MT88.4, cp.async. Skipped without nvcc or cuobjdump, except
under CI=true."""
import collections
import os

import pytest

from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.runtime import disasm


def opcodes(variant, entry):
    try:
        text = disasm.sass(variant.path, entry)
    except disasm.ToolMissing as missing:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"CI must check the SASS: {missing}")
        pytest.skip(str(missing))
    counts = collections.Counter()
    for _, instruction in disasm.instructions(text, ("HMMA", "LDSM", "LDGSTS", "LDS", "LDG", "LDL", "STL")):
        words = instruction.split()
        counts[words[1] if words[0].startswith("@") else words[0]] += 1
    return counts


@pytest.mark.parametrize("variant", am.VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("tag, d", [("bf16", 128), ("f16", 64)])
def test_the_sass_has_tensor_core_instructions_and_the_intended_loads(variant, tag, d):
    ops = opcodes(variant, f"{variant.name}_{tag}_d{d}")
    hmma = sum(n for op, n in ops.items() if op.startswith("HMMA.16816.F32"))
    assert not any(op.startswith(("LDL", "STL")) for op in ops), f"local memory: {ops}"
    if variant is am.FRAGMENT_REUSE:
        keys = am.block_keys(variant.name, d)
        assert hmma == 2 * keys * d // 64, ops
        assert ops["LDSM.16.M88.4"] == (keys // 16 + 2) * d // 16 and ops["LDSM.16.MT88.4"] == keys * d // 256, ops
        assert any(op.startswith("LDGSTS") and op.endswith(".128") for op in ops), ops
        return
    assert hmma == d, ops
    if variant is am.MMA:
        assert ops["LDS"] == d and ops["LDS.U16"] == 2 * d, ops
        assert not any(op.startswith("LDSM") for op in ops)
    else:
        assert ops["LDSM.16.M88.4"] == d // 4 and ops["LDSM.16.MT88.4"] == d // 4, ops
        assert "LDS.U16" not in ops
    if variant is am.PIPELINED:
        assert any(op.startswith("LDGSTS") and op.endswith(".128") for op in ops), ops
        assert "LDG.E.128.CONSTANT" not in ops and "LDG.E.128" not in ops
    else:
        assert ops.get("LDG.E.128.CONSTANT", 0) + ops.get("LDG.E.128", 0) == 2 * (64 * d // 8 // 256), ops
