"""Run an exercise kernel on the CPU: g++ builds the .cu against cpu_emulator.h (the CUDA the
exercises use, every thread a fiber scheduled in a fixed order; see the header) into a shared
library, and `Module.launch` calls an entry with numpy arrays where the GPU takes cupy ones.

    module = cpu_emulator.Module(path, ["online_softmax"])
    module.launch("online_softmax", (n_rows,), (256,), (x, y, np.int32(n), np.int64(n), np.int64(n)))

A launch the emulator cannot finish (a barrier or a full-mask shuffle some threads never reach)
raises EmulatorFault with the emulator's message. Built libraries are kept under build/ keyed by
the source, the header and the entries, so a second run of the same kernel does not compile.
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np

from onlinesoftmax.runtime import loader

HEADER = Path(__file__).with_name("cpu_emulator.h")
CACHE_DIR = loader.REPO_ROOT / "build" / "cpu_emulator"
COMPILER = "g++"
FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-fno-strict-aliasing", "-fvisibility=hidden", "-fno-gnu-unique", "-w")


class EmulatorFault(RuntimeError):
    """The emulator stopped a launch (a deadlock, a barrier some threads never reach)."""


class EmulatorCompileError(RuntimeError):
    """g++ rejected the kernel (the message names the file's lines)."""


def available() -> bool:
    return shutil.which(COMPILER) is not None


def _library(path: Path, entries) -> Path:
    source = path.read_bytes()
    key = hashlib.sha256(source + HEADER.read_bytes() + " ".join(entries).encode() + " ".join(FLAGS).encode())
    target = CACHE_DIR / f"{path.stem}-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    if not available():
        raise EmulatorCompileError(f"the CPU emulator needs {COMPILER} (not found)")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    wrapper = target.with_suffix(".cpp")
    includes = "".join(f' -I{d}' for d in loader.INCLUDE_DIRS)
    wrapper.write_text(f'#include "{path.resolve()}"\n' + "".join(f"EMU_EXPORT({e})\n" for e in entries)
                       + "EMU_ERROR\n")
    partial = target.with_suffix(".so.partial")
    command = [COMPILER, *FLAGS, "-include", str(HEADER), *includes.split(), str(wrapper), "-o", str(partial)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if str(path.name) in line or "error" in line]
        raise EmulatorCompileError("g++ (the CPU emulator): " + "\n".join(lines[:20] or done.stderr.splitlines()[:20]))
    partial.rename(target)
    return target


def _ctype(value):
    if isinstance(value, np.ndarray):
        return ctypes.c_void_p(value.ctypes.data)
    if isinstance(value, np.int32):
        return ctypes.c_int32(int(value))
    if isinstance(value, np.int64):
        return ctypes.c_int64(int(value))
    if isinstance(value, np.float32):
        return ctypes.c_float(float(value))
    if isinstance(value, np.uint32):
        return ctypes.c_uint32(int(value))
    raise TypeError(f"a kernel argument must be a numpy array, np.int32, np.int64, np.uint32 or np.float32, "
                    f"got {type(value).__name__}")


def _dims(value) -> tuple[int, int, int]:
    value = (value,) if isinstance(value, int) else tuple(value)
    return tuple(int(v) for v in value) + (1,) * (3 - len(value))


class Module:
    """The kernel entries of one .cu file, built for the CPU emulator."""

    def __init__(self, path, entries):
        self.path = Path(path)
        self.entries = tuple(entries)
        self.library = ctypes.CDLL(str(_library(self.path, self.entries)))
        self.library.emu_error.restype = ctypes.c_char_p

    def launch(self, entry: str, grid, block, args, shared_bytes: int = 0) -> None:
        if entry not in self.entries:
            raise ValueError(f"no entry {entry!r} in this module; it has {', '.join(self.entries)}")
        values = [_ctype(a) for a in args]
        pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
                                                             for v in values])
        dims = (ctypes.c_uint * 6)(*_dims(grid), *_dims(block))
        function = getattr(self.library, f"emu_launch__{entry}")
        function.restype = ctypes.c_int
        if function(dims, ctypes.c_uint(shared_bytes), pointers) != 0:
            raise EmulatorFault(self.library.emu_error().decode(errors="replace"))
