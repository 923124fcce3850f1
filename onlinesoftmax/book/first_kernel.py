"""The primer's first kernels, written in the page: run, inspected and graded.

    where = first_kernel.run(SOURCE, "vector_add", grid=(4,), block=(256,), args=(a, b, c, np.int32(n)))

`run` launches the entry `entry` of the CUDA text `source` on numpy arrays (updated in place, as
a GPU would leave them): on a GPU through CuPy (the arrays copied there and back), without one on
the book's CPU emulator (onlinesoftmax/runtime/emulator.py), which checks every access: a read past
an array, a race in shared memory or a barrier some threads never reach stops the launch with an
error naming it. `ptx` and `sass` are what nvcc makes of the text, `registers` what ptxas
allocates per thread. The page's warm-up, `row_sum`, is a kernel exercise (kernel_exercises.py).
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np

from onlinesoftmax.runtime import device, disasm, emulator, loader


PRIMER_KERNELS = loader.REPO_ROOT / "exercises" / "primer"


def source(name: str) -> str:
    """The text of the page's kernel `name` (exercises/primer/<name>.cu)."""
    return (PRIMER_KERNELS / f"{name}.cu").read_text()


def _file(source: str, tmp: str) -> Path:
    path = Path(tmp) / "first_kernel.cu"
    path.write_text(source)
    return path


def run(source: str, entry: str, grid, block, args, shared_bytes: int = 0, on: str | None = None) -> str:
    """Launch `entry` of `source` over grid x block threads; numpy array arguments are read and written
    in place. on: "gpu", "emulator" or None (the GPU when there is one). Returns where it ran."""
    on = on or ("gpu" if device.has_gpu() else "emulator")
    if on == "gpu":
        import cupy

        kernel = cupy.RawKernel(source, entry)
        on_device = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        kernel(tuple(grid), tuple(block), tuple(on_device), shared_mem=shared_bytes)
        cupy.cuda.Device().synchronize()
        for host, there in zip(args, on_device):
            if isinstance(host, np.ndarray):
                host[...] = there.get()
        return "a GPU (CuPy)"
    module = emulator.Module(Path("first_kernel.cu"), [entry], source=source)
    module.launch(entry, tuple(grid), tuple(block), tuple(args), shared_bytes)
    return "the CPU emulator"


def ptx(source: str, entry: str) -> str:
    """The PTX nvcc makes of `entry` (sm_90a), from its .entry line to its closing brace."""
    if not loader.nvcc_available():
        raise disasm.ToolMissing("nvcc not found: the PTX needs the CUDA toolkit's nvcc on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "kernel.ptx"
        done = subprocess.run(["nvcc", loader.NVCC_ARCH, "--ptx", "-o", str(target), str(_file(source, tmp))],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise loader.KernelCompileError(done.stderr)
        text = target.read_text()
    start = text.index(".entry " + entry) if (".entry " + entry) in text else text.index(".entry")
    return text[start:text.index("\n}", start) + 2]


def sass(source: str, entry: str) -> str:
    """The machine code (SASS, sm_90a) of `entry`, one instruction a line."""
    with tempfile.TemporaryDirectory() as tmp:
        text = disasm.sass(_file(source, tmp), entry)
    return "\n".join(f"{address}  {instruction}" for address, instruction in disasm.instructions(text, ("",))
                     if instruction != "NOP")


def registers(source: str, entry: str) -> int:
    """The 32-bit registers ptxas gives each thread of `entry`."""
    with tempfile.TemporaryDirectory() as tmp:
        usage = disasm.resource_usage(disasm.cubin(_file(source, tmp)))
    return usage[next(name for name in usage if entry in name)]["REG"]
