"""The primer's first kernels (onlinesoftmax/book/first_kernel.py, chapters/00_first_kernel.md): a
kernel written as text runs on the CPU emulator, the emulator stops the two classic bugs the page
shows, and the compiler's output is what the page says. The page's warm-up, row_sum, is a kernel
exercise: tests/test_kernel_exercises.py grades its solution, starter and wrong kernels."""
import numpy as np
import pytest

from onlinesoftmax.book import first_kernel
from onlinesoftmax.runtime import disasm, emulator, loader

pytestmark = pytest.mark.skipif(not emulator.available(), reason="the CPU emulator needs g++")

ADD = r"""
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""

def test_a_kernel_in_text_runs_and_its_bugs_are_named():
    a, b, c = np.arange(300, dtype=np.float32), np.ones(300, np.float32), np.zeros(300, np.float32)
    assert first_kernel.run(ADD, "vector_add", (2,), (256,), (a, b, c, np.int32(300)), on="emulator") == "the CPU emulator"
    assert np.array_equal(c, a + 1)
    with pytest.raises(emulator.EmulatorOutOfBounds):
        first_kernel.run(ADD.replace("if (i < n) ", ""), "vector_add", (2,), (256,), (a, b, c, np.int32(300)),
                         on="emulator")


@pytest.mark.skipif(not loader.nvcc_available(), reason="needs nvcc")
def test_what_the_compiler_made():
    assert "ld.global.f32" in first_kernel.ptx(ADD, "vector_add")
    try:
        sass = first_kernel.sass(ADD, "vector_add")
    except disasm.ToolMissing:
        pytest.skip("needs cuobjdump")
    assert "LDG" in sass and "STG" in sass and "EXIT" in sass and "NOP" not in sass
    assert 4 <= first_kernel.registers(ADD, "vector_add") <= 32


def test_the_bank_conflict_kernel_reads_the_words_the_suite_checks():
    """shared_reads (the first-kernel suite's bank-conflict probe) writes reps x the index of the word
    each lane reads, for a row, a column and a padded column; a kernel that ignores the stride (every
    lane its own bank: no conflict to measure) gives other sums, which the suite's check rejects."""
    from onlinesoftmax.bench.first_kernel import STRIDES, expected_sums

    source = first_kernel.source("shared_reads")
    for stride in STRIDES:
        out = np.full(2 * 64, np.nan, np.float32)
        first_kernel.run(source, "shared_reads", (2,), (64,), (out, np.int32(stride), np.int32(3)), on="emulator")
        assert np.array_equal(out, np.tile(expected_sums(stride, 3, 64), 2)), stride
    blind = source.replace("(threadIdx.x % 32) * stride", "(threadIdx.x % 32)")
    out = np.full(64, np.nan, np.float32)
    first_kernel.run(blind, "shared_reads", (1,), (64,), (out, np.int32(32), np.int32(3)), on="emulator")
    assert not np.array_equal(out, expected_sums(32, 3, 64))


@pytest.mark.skipif(not loader.nvcc_available(), reason="needs nvcc")
def test_the_bank_conflict_kernel_loads_on_every_read():
    """The probe times shared-memory loads only if the compiler keeps one per read: `volatile` makes it
    (the loop unrolled, an LDS per read); without it the one load is hoisted out of the loop."""
    source = first_kernel.source("shared_reads")
    try:
        loads = [sum("LDS" in line for line in first_kernel.sass(s, "shared_reads").splitlines())
                 for s in (source, source.replace("const volatile float* t", "const float* t"))]
    except disasm.ToolMissing:
        pytest.skip("needs cuobjdump")
    assert loads[0] >= 8 and loads[1] <= 1, loads
