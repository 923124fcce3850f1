"""Kernel loader: `.cu` source under kernels/ -> cupy.RawModule.

The loader inlines every local `#include "..."` itself and marks each piece with a
`#line` directive. Two things follow: cupy's compile cache (keyed on the source
text) sees header edits, and compiler messages still name the original file and
line. Built modules are also memoized in-process by the hash of that text, and kernels by
(file, entry, defines) until `reload()`.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from onlinesoftmax.runtime import cache
from onlinesoftmax.runtime.cache import Cache

PACKAGE_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_DIR.parent
# A source checkout keeps the CUDA in the repository's kernels/; an installed wheel carries the same
# files as package data, onlinesoftmax/_kernels/ (pyproject.toml maps one onto the other).
KERNELS_DIR = REPO_ROOT / "kernels" if (REPO_ROOT / "kernels" / "common").is_dir() else PACKAGE_DIR / "_kernels"
INCLUDE_DIRS = (KERNELS_DIR / "common", KERNELS_DIR)
COMPILE_OPTIONS = ("-std=c++17",)
# What `nvcc` builds for the CPU-side checks (the lent GPU is an H200, sm_90).
NVCC_ARCH = "-gencode=arch=compute_90a,code=sm_90a"

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"\s*$')
# Headers of sm_90a's own instructions (wgmma): a kernel that includes one is built for sm_90a,
# which cupy's RawModule cannot ask NVRTC for, so the loader compiles it to a cubin itself.
ARCH_SPECIFIC_HEADERS = ("kernels/common/wgmma.cuh",)


class KernelCompileError(RuntimeError):
    """A kernel failed to compile; the message names the file and line."""


def _find_include(name: str, including: Path) -> Path:
    for folder in (including.parent, *INCLUDE_DIRS):
        candidate = folder / name
        if candidate.is_file():
            return candidate.resolve()
    raise KernelCompileError(f"{_rel(including)}: cannot find included file \"{name}\"")


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def expand_source(path: Path | str, text: str | None = None) -> tuple[str, tuple[str, ...]]:
    """Source of `path` (or `text` in its place, its includes found from path's folder) with local
    includes inlined, and the files it is made of.

    One loop over a stack of (file, its lines, the next line): an include pushes the included file
    (once: every header is `#pragma once`), the end of a file pops it and marks where the including
    file resumes with a #line directive."""
    path = Path(path)
    if not path.is_absolute():
        path = (KERNELS_DIR / path) if (KERNELS_DIR / path).is_file() else (REPO_ROOT / path)
    path = path.resolve()
    seen, out = [path], [f'#line 1 "{_rel(path)}"']
    stack = [(path, (path.read_text() if text is None else text).splitlines(), 0)]
    while stack:
        file, lines, number = stack.pop()
        while number < len(lines):
            line = lines[number]
            number += 1
            match = _INCLUDE.match(line)
            if match:
                included = _find_include(match.group(1), file)
                if included in seen:
                    out.append(f'#line {number + 1} "{_rel(file)}"')
                    continue
                seen.append(included)
                stack.append((file, lines, number))       # resume after the include
                stack.append((included, included.read_text().splitlines(), 0))
                out.append(f'#line 1 "{_rel(included)}"')
                break
            out.append("" if line.strip() == "#pragma once" else line)
        else:
            if stack:
                parent, _, resume = stack[-1]
                out.append(f'#line {resume + 1} "{_rel(parent)}"')
    return "\n".join(out) + "\n", tuple(_rel(p) for p in seen)


def source_key(path, defines=(), text: str | None = None) -> str:
    """Hash of everything a build depends on: the expanded source (given, or expanded here) and the defines."""
    text = expand_source(path)[0] if text is None else text
    return hashlib.sha256((text + "\0" + " ".join(defines)).encode()).hexdigest()[:16]


def define_flags(defines) -> tuple[str, ...]:
    return tuple(f"-D{d}" for d in defines)


_modules = Cache("compiled modules", 1024, about="one cupy.RawModule per (source text, defines)")


def nvrtc_arch(files) -> str:
    """The NVRTC arch of a build made of `files` (expand_source's second value): sm_90a for a kernel
    that uses sm_90a's own instructions, else sm_90 (what cupy builds on the H200)."""
    return "sm_90a" if any(f in ARCH_SPECIFIC_HEADERS for f in files) else "sm_90"


def nvrtc_cubin(path, flags=(), arch: str | None = None) -> bytes:
    """Compile a kernel file with NVRTC (the runtime compiler cupy uses) for `arch` (nvrtc_arch's
    choice when None); return the cubin."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise KernelCompileError("NVRTC bindings not found: pip install cuda-bindings nvidia-cuda-nvrtc") from error
    text, files = expand_source(path)
    path = Path(path)
    err, program = nvrtc.nvrtcCreateProgram(text.encode(), path.name.encode(), 0, [], [])
    options = [o.encode() for o in (*COMPILE_OPTIONS, f"-arch={arch or nvrtc_arch(files)}", *flags)]
    try:
        (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise KernelCompileError(f"{_rel(path)} failed to compile with NVRTC:\n{nvrtc_log(program)}")
        _, size = nvrtc.nvrtcGetCUBINSize(program)
        binary = bytearray(size)
        nvrtc.nvrtcGetCUBIN(program, binary)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return bytes(binary)


def nvrtc_log(program) -> str:
    """An NVRTC program's log as text (its C string's NUL dropped). NVRTC writes into the buffer it is
    given, so the buffer is a fresh bytearray: `b" " * size` would hand it, at size 1 (an empty log),
    CPython's shared one-byte object b" ", and every b" " in the process would read b"\\x00" after."""
    from cuda.bindings import nvrtc

    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(program, log)
    return bytes(log).rstrip(b"\x00").decode(errors="replace")


def _arch_specific_module(path, defines, files):
    """A cupy.RawModule of an sm_90a build (nvrtc_cubin), on an sm_90 GPU only."""
    import cupy

    capability = cupy.cuda.Device().compute_capability
    if capability != "90":
        raise KernelCompileError(f"{_rel(Path(path))} uses sm_90a instructions ({', '.join(ARCH_SPECIFIC_HEADERS)}): "
                                 f"it runs on compute capability 9.0 (H100, H200) only, not on this GPU's "
                                 f"{capability[:-1]}.{capability[-1]}")
    binary = nvrtc_cubin(path, define_flags(defines), "sm_90a")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(binary)
        module = cupy.RawModule(path=str(cubin))
        module.compile()      # loads the cubin now, while the file exists
    return module


def load_module(path, defines=()):
    """Compile (or fetch from the in-process memo) the module for `path` and `defines`."""
    import cupy

    text, files = expand_source(path)
    key = source_key(path, defines, text)
    module = _modules.get(key)
    if module is None:
        if nvrtc_arch(files) != "sm_90":
            module = _arch_specific_module(path, defines, files)
        else:
            module = cupy.RawModule(code=text, options=COMPILE_OPTIONS + define_flags(defines))
            try:
                module.compile()
            except cupy.cuda.compiler.CompileException as error:
                raise KernelCompileError(f"{_rel(Path(path))} failed to compile:\n{error}") from None
        _modules[key] = module
    return module


_kernels = Cache("kernels", 8192, about="one cupy.RawKernel per (file, entry, defines)")


def get_kernel(path, entry: str, defines=()):
    """The `cupy.RawKernel` for `entry` in `path` built with `defines`.

    Built once per process and then found with one dictionary lookup: no file is read or
    stat-ed after the first call. A kernel edited while the process runs is picked up by
    `reload()` (`onlinesoftmax.reload()`), which forgets every build and every launch plan.
    """
    key = (str(path), entry, tuple(defines))
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = load_module(path, defines).get_function(entry)
    return kernel


def reload() -> None:
    """Forget every compiled kernel and everything built from one: the next call re-reads the
    `.cu` files and their headers and compiles what changed (cupy's disk cache keeps the rest)."""
    cache.clear()          # every cache of runtime/cache.py: kernels, modules, plans, fast paths, device answers
    ptxas_reports.cache_clear()


class SpillWarning(UserWarning):
    """A build for an arch other than sm_90a spills registers (reported by the compile tests, not failed)."""


class MinCcWarning(UserWarning):
    """A build compiles for an arch below its variant's min_cc (reported by the compile tests, not failed)."""


@dataclass(frozen=True)
class ResourceReport:
    """What the compiler gave one kernel: registers, shared memory, local memory (spills)."""

    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    source: str  # "device" (cupy's function attributes) or "nvcc -Xptxas -v (sm_90a)"


def resources_from_device(kernel) -> ResourceReport:
    attributes = kernel.attributes
    return ResourceReport(
        registers=attributes["num_regs"],
        shared_bytes=attributes["shared_size_bytes"],
        stack_bytes=attributes["local_size_bytes"],
        spill_store_bytes=-1,  # the driver reports local memory, not spills
        spill_load_bytes=-1,
        source="device",
    )


_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def nvcc_available() -> bool:
    return shutil.which("nvcc") is not None


def nvcc_compile(path, defines=(), extra=()) -> str:
    """Compile with nvcc for sm_90a; return ptxas's verbose report. Raises on errors."""
    path = Path(path)
    if not path.is_absolute():
        path = KERNELS_DIR / path
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["nvcc", *COMPILE_OPTIONS, NVCC_ARCH, "--cubin", "-Xptxas", "-v",
               *(f"-I{d}" for d in INCLUDE_DIRS), *define_flags(defines), *extra,
               "-o", str(Path(tmp) / "k.cubin"), str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise KernelCompileError(f"{_rel(path)} failed to compile with nvcc:\n{done.stderr}")
    return done.stderr


@lru_cache(maxsize=None)
def ptxas_reports(path, defines=()) -> dict[str, ResourceReport]:
    """{entry: report} for every entry of one build: one nvcc run per (file, defines)."""
    return parse_ptxas(nvcc_compile(path, defines))


def resources_from_nvcc(path, entry: str, defines=()) -> ResourceReport | None:
    """Parse `nvcc -Xptxas -v` for `entry`; None where nvcc is not installed."""
    if not nvcc_available():
        return None
    report = ptxas_reports(path, tuple(defines)).get(entry)
    if report is None:
        raise KernelCompileError(f"ptxas reported nothing for entry {entry} in {path}")
    return report


def parse_ptxas(log: str) -> dict[str, ResourceReport]:
    reports, current, values = {}, None, {}
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current, values = m.group(1), {}
        elif current and (m := _PTXAS_STACK.search(line)):
            values["stack"] = tuple(int(g) for g in m.groups())
        elif current and (m := _PTXAS_USED.search(line)):
            stack, stores, loads = values.get("stack", (0, 0, 0))
            reports[current] = ResourceReport(
                registers=int(m.group(1)), shared_bytes=int(m.group(2) or 0), stack_bytes=stack,
                spill_store_bytes=stores, spill_load_bytes=loads,
                source="nvcc -Xptxas -v (sm_90a)")
            current = None
    return reports
