"""The primer's first kernels (onlinesoftmax/book/first_kernel.py, chapters/00_first_kernel.md): a
kernel written as text runs on the CPU emulator, the emulator stops the two classic bugs the page
shows, and the row-sum warm-up's grader passes an answer and fails the wrong ones."""
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

ROW_SUM = r"""
extern "C" __global__ void row_sum(const float* x, float* out, int n_cols) {
    __shared__ float partial[256];
    const float* row = x + (long long)blockIdx.x * n_cols;
    float s = 0.0f;
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) s += row[j];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
"""


def test_a_kernel_in_text_runs_and_its_bugs_are_named():
    a, b, c = np.arange(300, dtype=np.float32), np.ones(300, np.float32), np.zeros(300, np.float32)
    assert first_kernel.run(ADD, "vector_add", (2,), (256,), (a, b, c, np.int32(300)), on="emulator") == "the CPU emulator"
    assert np.array_equal(c, a + 1)
    with pytest.raises(emulator.EmulatorOutOfBounds):
        first_kernel.run(ADD.replace("if (i < n) ", ""), "vector_add", (2,), (256,), (a, b, c, np.int32(300)),
                         on="emulator")
    assert first_kernel.entries(ADD) == ["vector_add"]


def test_the_row_sum_grader():
    assert first_kernel.check_row_sum(ROW_SUM, on="emulator")
    wrong = {
        "the untouched stub": 'extern "C" __global__ void row_sum(const float* x, float* out, int n_cols) {}',
        "no barrier after the writes": ROW_SUM.replace("    partial[threadIdx.x] = s;\n    __syncthreads();",
                                                       "    partial[threadIdx.x] = s;"),
        "the first element twice": ROW_SUM.replace("float s = 0.0f;", "float s = row[0];"),
        "one column past the row": ROW_SUM.replace("j < n_cols;", "j <= n_cols;"),
        "a compile error": ROW_SUM.replace("float s = 0.0f;", "float s = 0.0f"),
    }
    for name, source in wrong.items():
        assert not first_kernel.check_row_sum(source, on="emulator"), name


@pytest.mark.skipif(not loader.nvcc_available(), reason="needs nvcc")
def test_what_the_compiler_made():
    assert "ld.global.f32" in first_kernel.ptx(ADD, "vector_add")
    try:
        sass = first_kernel.sass(ADD, "vector_add")
    except disasm.ToolMissing:
        pytest.skip("needs cuobjdump")
    assert "LDG" in sass and "STG" in sass and "EXIT" in sass and "NOP" not in sass
    assert 4 <= first_kernel.registers(ADD, "vector_add") <= 32
