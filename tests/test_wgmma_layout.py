"""CPU tier: Hopper's wgmma in NumPy (onlinesoftmax/kernels/attention/wgmma_layout.py) and in the CPU
emulator (kernels/emulator/simt_wgmma.h), on the probe kernel tests/probes/wgmma_probe.cu.

- The model: descriptors encode and decode; a tile stored as the kernels store it reads back, through
  the descriptors the kernels build, as the operand of every k-step (K-major and MN-major); each
  accumulator is held by exactly one thread, and the accumulators of one product, paired, are the A
  registers of the next. Wrong layouts (no swizzle, the wrong stride, B read with the other major)
  read back something else.
- The emulator: every entry of the probe computes A B exactly (small integers), as the model does on
  the same shared-memory image. Broken probes are rejected: the swizzle left out of the store, a
  wrong stride in B's descriptor, the accumulators stored before the wait, the wait left out, the
  first step adding the NaN the accumulators start with.
tests/gpu/test_wgmma_gpu.py runs the same probe on the GPU: equal answers there say the emulator reads
descriptors and fragments as the hardware does.
"""
import os
from pathlib import Path

import numpy as np
import pytest

from onlinesoftmax.kernels.attention import wgmma_layout as wl
from onlinesoftmax.runtime import emulator

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "probes" / "wgmma_probe.cu"
ENTRIES = ("wgmma_probe_bf16_ss_k", "wgmma_probe_bf16_ss_mn", "wgmma_probe_bf16_rs_k", "wgmma_probe_bf16_rs_mn",
           "wgmma_probe_f16_ss_k", "wgmma_probe_f16_rs_mn")
SHARED_BYTES = (64 + 128) * 128 * 2 + 1024
needs_emulator = pytest.mark.skipif(not emulator.available(), reason="the CPU emulator needs a C++17 compiler")


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """16-bit bits of x (small integers: exact in both types)."""
    if dtype == "f16":
        return x.astype(np.float16).view(np.uint16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bits(dtype: str):
    if dtype == "f16":
        return lambda bits: bits.view(np.float16).astype(np.float64)
    return lambda bits: (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def probe_inputs(seed: int):
    """A (64 x 128) and B (128 x 128) of small integers, and B as the entry stores it."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 9, size=(64, 128)).astype(np.float64)
    b = rng.integers(-8, 9, size=(128, 128)).astype(np.float64)
    return a, b


def stored_b(b: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(b.T if layout == "k" else b)   # K-major: [n][k]


def run_probe(entry: str, a: np.ndarray, b: np.ndarray, *, source: str | None = None) -> np.ndarray:
    dtype, layout = entry.split("_")[2], entry.split("_")[4]
    module = emulator.Module(PROBE, [entry], source=source)
    d = np.full((64, 128), np.nan, np.float32)
    module.launch(entry, 1, 128, [to_bits(a, dtype), to_bits(stored_b(b, layout), dtype), d], SHARED_BYTES)
    return d


# ---- the model ------------------------------------------------------------------------------------

def test_a_descriptor_encodes_and_decodes():
    desc = wl.descriptor(4096 + 32, 16384, 1024)
    assert wl.decode(desc) == {"start": 4096 + 32, "leading": 16384, "stride": 1024, "swizzle": 1}
    assert desc >> 62 == 1 and desc & 0x3FFF == (4096 + 32) >> 4
    with pytest.raises(ValueError, match="multiples of 16"):
        wl.descriptor(8, 0, 1024)


@pytest.mark.parametrize("rows", [64, 128])
def test_a_stored_tile_reads_back_as_every_k_step(rows):
    rng = np.random.default_rng(rows)
    tile = rng.integers(0, 60000, size=(rows, 128)).astype(np.uint16)
    memory = np.zeros(1 << 16, np.uint8)
    wl.store_tile(memory, 2048, tile)
    ident = lambda bits: bits  # noqa: E731
    for k0 in range(0, 128, 16):    # K-major: row mn of the operand is the tile's row mn, k0 .. k0 + 15
        got = wl.read_operand(memory, wl.k_major_descriptor(2048, rows, k0), rows, mn_major=False, decode16=ident)
        np.testing.assert_array_equal(got, tile[:, k0:k0 + 16])
    for k0 in range(0, rows, 16):   # MN-major: column mn of the operand is the tile's column, rows k0 .. k0 + 15
        got = wl.read_operand(memory, wl.mn_major_descriptor(2048, rows, k0), 128, mn_major=True, decode16=ident)
        np.testing.assert_array_equal(got, tile[k0:k0 + 16, :].T)


def test_wrong_layouts_read_back_something_else():
    rng = np.random.default_rng(7)
    tile = rng.integers(0, 60000, size=(64, 128)).astype(np.uint16)
    memory = np.zeros(1 << 16, np.uint8)
    wl.store_tile(memory, 0, tile)
    ident = lambda bits: bits  # noqa: E731
    right = wl.k_major_descriptor(0, 64, 16)
    f = wl.decode(right)
    wrong_stride = wl.descriptor(f["start"], 0, 512)
    assert not np.array_equal(wl.read_operand(memory, wrong_stride, 64, mn_major=False, decode16=ident), tile[:, 16:32])
    assert not np.array_equal(wl.read_operand(memory, right, 64, mn_major=True, decode16=ident)[:64].T, tile[:16, :64])
    plain = np.zeros_like(memory)       # stored without the swizzle
    plain.view(np.uint16)[: tile.size] = np.concatenate([tile[:, :64].reshape(-1), tile[:, 64:].reshape(-1)])
    assert not np.array_equal(wl.read_operand(plain, right, 64, mn_major=False, decode16=ident), tile[:, 16:32])
    with pytest.raises(ValueError, match="1024-byte"):
        wl.store_tile(memory, 512, tile)


def test_every_accumulator_is_held_once_and_pairs_make_the_next_a_operand():
    d = np.arange(64 * 128, dtype=float).reshape(64, 128)
    held = wl.gather_accumulators(d)
    np.testing.assert_array_equal(wl.scatter_accumulators(held), d)
    t, i = np.meshgrid(np.arange(128), np.arange(64), indexing="ij")
    rows, cols = wl.accumulator_position(t, i)
    assert len(set(zip(rows.ravel(), cols.ravel()))) == 64 * 128
    # thread 37 (warp 1, lane 5: g 1, t 1): accumulators 0..3 are rows 17 and 25, columns 2 and 3
    assert [tuple(map(int, wl.accumulator_position(37, k))) for k in range(4)] == [(17, 2), (17, 3), (25, 2), (25, 3)]
    for step in range(8):    # P's accumulators of columns 16 step .. 16 step + 15 are A's registers of k-step `step`
        regs = wl.a_registers_from_accumulators(held, step)
        reg, half = np.meshgrid(np.arange(4), np.arange(2), indexing="ij")
        for thread in (0, 37, 127):
            row, k = wl.a_register_position(thread, reg, half)
            np.testing.assert_array_equal(regs[thread], d[row, 16 * step + k])
    # the registers in mma.sync's order (0: row g, 1: row g + 8) are not the accumulators' (0, 1: row g)
    swapped = held[:, :8].reshape(128, 4, 2)[:, [0, 2, 1, 3]]
    row, k = wl.a_register_position(37, *np.meshgrid(np.arange(4), np.arange(2), indexing="ij"))
    assert not np.array_equal(swapped[37], d[row, k])


def test_the_model_instruction_is_a_matrix_product():
    a, b = probe_inputs(3)
    memory = np.zeros(1 << 16, np.uint8)
    wl.store_tile(memory, 0, to_bits(a, "bf16"))
    wl.store_tile(memory, 16384, to_bits(b, "bf16"))      # B as [k][n]: MN-major
    decode = from_bits("bf16")
    d = np.zeros((64, 128), np.float32)
    for k0 in range(0, 128, 16):
        d = wl.wgmma(d, memory, wl.mn_major_descriptor(16384, 128, k0), a_desc=wl.k_major_descriptor(0, 64, k0),
                     transpose_b=True, decode16=decode)
    np.testing.assert_array_equal(d, a @ b)


# ---- the emulator on the probe --------------------------------------------------------------------

@needs_emulator
@pytest.mark.parametrize("entry", ENTRIES)
def test_the_probe_on_the_emulator_is_a_matrix_product(entry):
    a, b = probe_inputs(11)
    np.testing.assert_array_equal(run_probe(entry, a, b), a @ b)


def mutate(*pairs: str) -> str:
    text = PROBE.read_text()
    for old, new in zip(pairs[::2], pairs[1::2]):
        assert text.count(old) >= 1, old
        text = text.replace(old, new)
    return text


BROKEN = {
    "the store without the swizzle": ("swizzled<64>(r, c % 64)", "r * 64 + c % 64"),
    "B's 8-row groups 512 bytes apart": ("PROBE_K * 128, 1024)", "PROBE_K * 128, 512)"),
    "the accumulators stored before the wait": (
        "    wgmma_commit();\n    wgmma_wait<0>();\n", "    wgmma_commit();\n",
        "+ i % 2] = acc[i];\n", "+ i % 2] = acc[i];\n    wgmma_wait<0>();\n"),
    "the first step adding the NaN it starts with": ("step > 0);", "1);"),
}


@needs_emulator
@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_probe_is_rejected(name):
    a, b = probe_inputs(12)
    source = mutate(*BROKEN[name])
    entry = "wgmma_probe_bf16_ss_mn" if "B's" in name else "wgmma_probe_bf16_ss_k"
    assert not np.array_equal(run_probe(entry, a, b, source=source), a @ b)


@needs_emulator
def test_a_wait_left_out_is_an_error():
    a, b = probe_inputs(13)
    source = mutate("    wgmma_wait<0>();\n", "")
    with pytest.raises(emulator.EmulatorFault, match="never waited"):
        run_probe("wgmma_probe_bf16_rs_mn", a, b, source=source)


# ---- the sm_90a build -----------------------------------------------------------------------------

def test_the_probe_builds_for_sm_90a_into_hgmma_without_local_memory():
    """nvcc (the loader's flags) and NVRTC (the loader's sm_90a path): every entry compiled, no stack,
    and the instructions are the warpgroup's HGMMA, not mma.sync's HMMA. Built for sm_80 it stops at
    the header's #error."""
    import subprocess
    import tempfile

    from onlinesoftmax.runtime import disasm, loader

    if not loader.nvcc_available():
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("CI must compile: nvcc not found")
        pytest.skip("nvcc not installed")
    reports = loader.parse_ptxas(loader.nvcc_compile(PROBE))
    assert set(reports) == set(ENTRIES)
    assert all(r.stack_bytes == 0 and r.spill_store_bytes == 0 for r in reports.values()), reports
    binary = loader.nvrtc_cubin(PROBE)
    assert all(usage["LOCAL"] == 0 for usage in disasm.resource_usage(binary).values())
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "probe.cubin"
        cubin.write_bytes(binary)
        sass = subprocess.run([disasm.cuobjdump_path(), "-sass", str(cubin)], capture_output=True, text=True).stdout
    assert sass.count("HGMMA") == 8 * len(ENTRIES) and "HMMA" not in sass.replace("HGMMA", "")
    with pytest.raises(loader.KernelCompileError, match="needs sm_90a"):
        loader.nvrtc_cubin(PROBE, arch="sm_80")


# ---- the page's pictures --------------------------------------------------------------------------

def test_the_pictures_draw_the_model():
    import matplotlib

    matplotlib.use("Agg")
    from onlinesoftmax.book.readings import wgmma_figures as wf

    _, stored = wf.atom_figure(step=1)
    for r in range(8):                     # chunk c of row r sits in slot c ^ r
        assert [int(stored[r, c ^ r]) for c in range(8)] == list(range(8))
    _, owners = wf.accumulator_figure(16)
    assert (owners >= 0).all()
    assert owners[17, 2] == 37 and owners[25, 3] == 37 and owners[0, 0] == 0    # thread 37: warp 1, lane 5
    assert set(np.unique(owners[:16] // 32)) == {0} and set(np.unique(owners[48:] // 32)) == {3}
