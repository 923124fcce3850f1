"""SASS of a kernel, built on the CPU: nvcc -> cubin (sm_90a) -> cuobjdump -sass.

cuobjdump comes from the PyPI package nvidia-cuda-cuobjdump (requirements.txt) and is
located through that package's installed files; a cuobjdump on PATH is the fallback.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from onlinesoftmax.runtime import loader


class ToolMissing(RuntimeError):
    """nvcc or cuobjdump is not installed; the message says how to get it."""


def cuobjdump_path() -> Path:
    """The cuobjdump binary: from the nvidia-cuda-cuobjdump package, else PATH."""
    try:
        for file in importlib.metadata.files("nvidia-cuda-cuobjdump") or ():
            if file.name == "cuobjdump":
                path = Path(file.locate())
                if path.is_file():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    found = shutil.which("cuobjdump")
    if found:
        return Path(found)
    raise ToolMissing("cuobjdump not found: pip install nvidia-cuda-cuobjdump==13.4.92 "
                      "'nvidia-cuda-nvdisasm==13.4.*' (see requirements.txt)")


CACHE_DIR = loader.REPO_ROOT / "build" / "disasm"   # cubins by what went into them (ignored by git)


@functools.lru_cache(maxsize=1)
def _nvcc_version() -> str:
    return subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout


def cubin(path, defines=()) -> bytes:
    """Compile a kernel file with nvcc exactly as the CPU-side checks do; return the cubin. A build is
    kept under build/disasm/, found again by the expanded source, the command line and nvcc's version
    (the tests and the book's pages ask for the same cubins)."""
    if not loader.nvcc_available():
        raise ToolMissing("nvcc not found: the disassembly needs the CUDA toolkit's nvcc on PATH")
    path = Path(path)
    if not path.is_absolute():
        path = loader.KERNELS_DIR / path
    flags = [*loader.COMPILE_OPTIONS, loader.NVCC_ARCH, "--cubin", *(f"-I{d}" for d in loader.INCLUDE_DIRS),
             *loader.define_flags(defines)]
    key = hashlib.sha256("\0".join((loader.expand_source(path)[0], *flags, _nvcc_version())).encode()).hexdigest()[:20]
    kept = CACHE_DIR / f"{path.stem}-{key}.cubin"
    if kept.is_file():
        return kept.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "kernel.cubin"
        done = subprocess.run(["nvcc", *flags, "-o", str(target), str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            raise loader.KernelCompileError(f"{path} failed to compile with nvcc:\n{done.stderr}")
        binary = target.read_bytes()
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{id(binary)}.part")
        partial.write_bytes(binary)
        partial.replace(kept)          # atomic: two processes building the same cubin never see half of one
    except OSError:
        pass                           # a read-only checkout: no cache, the same answer
    return binary


def sass(path, entry: str, defines=()) -> str:
    """cuobjdump -sass of `entry` in `path` (sm_90a)."""
    tool = cuobjdump_path()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "kernel.cubin"
        target.write_bytes(cubin(path, defines))
        done = subprocess.run([str(tool), "-sass", "-fun", entry, str(target)],
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {done.stderr}")
    return done.stdout


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def instructions(sass_text: str, opcodes=("LDG", "STG")) -> list[tuple[str, str]]:
    """(address, instruction) for every instruction whose opcode starts with one of `opcodes`."""
    found = []
    for address, text in _INSTRUCTION.findall(sass_text):
        opcode = text.split()[0] if not text.startswith("@") else text.split()[1]
        if opcode.startswith(tuple(opcodes)):
            found.append((address, text))
    return found


def load_widths(sass_text: str) -> dict[str, int]:
    """How many global loads/stores of each kind (e.g. 'LDG.E.64.CONSTANT': 2)."""
    counts: dict[str, int] = {}
    for _, text in instructions(sass_text):
        opcode = text.split()[1] if text.startswith("@") else text.split()[0]
        counts[opcode] = counts.get(opcode, 0) + 1
    return counts


def nvrtc_cubin(path, define_flags=()) -> bytes:
    """Compile a kernel file with NVRTC — the runtime compiler cupy uses — for sm_90 (sm_90a for a
    kernel of sm_90a's own instructions); return the cubin.

    nvcc and NVRTC can allocate differently (a local pointer array that nvcc keeps in registers went
    to the stack under NVRTC on the H200), so resource checks look at this build too."""
    try:
        import cuda.bindings.nvrtc  # noqa: F401
    except ImportError as error:
        raise ToolMissing("NVRTC bindings not found: pip install cuda-bindings nvidia-cuda-nvrtc") from error
    return loader.nvrtc_cubin(path, define_flags)


RESOURCE_LINE = re.compile(r"Function (\S+):\s*(.*)")


def resource_usage(binary: bytes) -> dict[str, dict[str, int]]:
    """{entry: {"REG": .., "STACK": .., "SHARED": .., "LOCAL": .., ...}} from cuobjdump --dump-resource-usage."""
    tool = cuobjdump_path()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "kernel.cubin"
        target.write_bytes(binary)
        out = subprocess.run([str(tool), "--dump-resource-usage", str(target)], capture_output=True,
                             text=True, check=True).stdout
    usage, entry = {}, None
    for line in out.splitlines():
        named = RESOURCE_LINE.search(line)
        if named:
            entry = named.group(1).rstrip(":")
            usage[entry] = {}
            line = named.group(2)
        if entry is not None:
            for key, value in re.findall(r"([A-Z_]+):(\d+)", line):
                usage[entry][key] = int(value)
    return usage
