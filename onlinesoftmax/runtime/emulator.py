"""A kernel's own CUDA source, run on the CPU: g++ builds the .cu against the emulator in
kernels/emulator/ (simt.h: every thread a fiber; barriers, shuffles, votes, mma.sync, ldmatrix and
cp.async by CUDA's and the PTX ISA's rules; shared memory poisoned with NaN; a barrier or a
collective some threads never reach named with its threads and lines) into a shared library, and
`Module.launch` calls an entry with numpy arrays where a GPU takes cupy ones.

    module = emulator.Module(path, ["online_softmax"])       # g++ once; cached under build/emulator/
    module.launch("online_softmax", (n_rows,), (256,), (x, y, np.int32(n), np.int64(n), np.int64(n)))

schedule="fixed" (the default) runs the threads round robin in thread order, each until it waits:
the same result on every run, and a missing barrier shows every time. schedule="random" with a
seed runs a random runnable thread at every wait, and the blocks in a random order.
`launch(..., isolated=True)` runs the launch in a child process on copies of the arrays made by
`guarded` (each right before an inaccessible page), so that a read or write past an array's end
is a segmentation fault that ends the child, never the caller; the arrays are copied back after.

Errors: EmulatorError, and under it EmulatorBuildError (no compiler, or g++ rejected the source;
the message names the file's lines) and EmulatorFault (the emulator stopped the launch and says
why, or an isolated launch crashed or hung).

The source is compiled as written but for one rewrite: `extern __shared__` becomes `extern
SIMT_DYNAMIC_SHARED`, and the array's name another name of the emulator's dynamic shared memory
(see simt.h). It needs a C++17 compiler with _Float16 (g++ 12 or newer; `CXX` names another).
Slow: a warp-collective instruction costs 32 fiber switches, so keep launches to a few hundred rows.
"""
from __future__ import annotations

import ctypes
import faulthandler
import hashlib
import mmap
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from onlinesoftmax.runtime.loader import INCLUDE_DIRS, KERNELS_DIR, REPO_ROOT

EMULATOR_DIR = KERNELS_DIR / "emulator"
CACHE_DIR = REPO_ROOT / "build" / "emulator"
FLAGS = ("-std=c++17", "-fPIC", "-shared", "-fno-strict-aliasing", "-fvisibility=hidden", "-fno-gnu-unique", "-w")
SCHEDULES = ("fixed", "random")
TIMEOUT_S = 600.0
_EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\b")
_EXTERN_SHARED_NAME = re.compile(r"\bextern\s+__shared__\b[^;]*?\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")


class EmulatorError(RuntimeError):
    """The CPU emulator could not run the kernel (the subclasses say why)."""


class EmulatorBuildError(EmulatorError):
    """No C++ compiler, or g++ rejected the kernel (the message names the file's lines)."""


class EmulatorFault(EmulatorError):
    """The emulator stopped the launch (its message names the threads and lines), or an isolated
    launch touched memory outside its arrays, hung, or left outputs unwritten."""


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def available() -> bool:
    return compiler() is not None


# ---- building ---------------------------------------------------------------------------------

def _wrapper(path: Path, source: str, entries) -> str:
    """What g++ compiles: simt.h, the kernel's source (its file and lines kept), the exports."""
    names = sorted(set(_EXTERN_SHARED_NAME.findall(source)))
    aliases = "".join(f'asm(".globl {n}\\n\\t.hidden {n}\\n\\t.set {n}, simt_dynamic_shared");\n' for n in names)
    return ('#include "simt.h"\n' + f'#line 1 "{path}"\n' + _EXTERN_SHARED.sub("extern SIMT_DYNAMIC_SHARED", source)
            + '\n#line 1 "the emulator\'s exports"\n' + aliases + "".join(f"SIMT_EXPORT({e})\n" for e in entries)
            + "SIMT_LIBRARY\n")


def _compile_errors(path: Path, stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if path.name in line or "error" in line]
    return f"g++ (the CPU emulator) rejected {path.name}:\n" + "\n".join(lines[:20] or stderr.splitlines()[:20])


def build(path, entries, *, source: str | None = None, flags=(), optimize: str = "-O1") -> Path:
    """The shared library of the entries of the kernel file `path` (or of the text `source` in its
    place), built against the emulator; cached by everything that goes into it."""
    path = Path(path).resolve()
    text = path.read_text() if source is None else source
    cxx = compiler()
    if cxx is None:
        raise EmulatorBuildError("the CPU emulator needs a C++17 compiler (g++, or the one CXX names): none found")
    wrapper = _wrapper(path, text, entries)
    headers = "".join(p.read_text() for folder in (KERNELS_DIR / "common", EMULATOR_DIR) for p in sorted(folder.glob("*.*h")))
    key = hashlib.sha256("\0".join((wrapper, headers, cxx, optimize, *flags)).encode()).hexdigest()[:16]
    target = CACHE_DIR / f"{path.stem}-{key}.so"
    if target.exists():
        return target
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as work:   # parallel builds of one library: the last one wins
        cpp, partial = Path(work) / f"{path.stem}.cpp", Path(work) / "library.so"
        cpp.write_text(wrapper)
        command = [cxx, *FLAGS, optimize, f"-I{path.parent}", *(f"-I{d}" for d in INCLUDE_DIRS), f"-I{EMULATOR_DIR}",
                   *flags, str(cpp), "-o", str(partial)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise EmulatorBuildError(_compile_errors(path, done.stderr))
        os.replace(partial, target)
    return target


# ---- memory with a guard page -------------------------------------------------------------------

_LIBC = ctypes.CDLL(None, use_errno=True)
_PROT_NONE = 0


def guarded(shape, dtype, fill=0) -> np.ndarray:
    """A C-contiguous array filled with `fill` (a value or an array), 16-byte aligned and ending
    right before an inaccessible page (the at most 15 bytes between are 0xff: NaN to a float), in
    memory a child process shares (an isolated launch writes into it)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    count = int(np.prod(shape, dtype=np.int64))
    padded = -(-count * dtype.itemsize // 16) * 16
    span = -(-padded // mmap.PAGESIZE) * mmap.PAGESIZE + mmap.PAGESIZE
    memory = mmap.mmap(-1, span)                    # anonymous and shared
    start = span - mmap.PAGESIZE - padded
    memory[start:start + padded] = b"\xff" * padded
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    if _LIBC.mprotect(ctypes.c_void_p(address + span - mmap.PAGESIZE), ctypes.c_size_t(mmap.PAGESIZE), _PROT_NONE):
        raise OSError(ctypes.get_errno(), "mprotect: the guard page after an emulator array")
    array = np.frombuffer(memory, dtype, count, offset=start).reshape(shape)
    array[...] = fill
    return array


# ---- launching ----------------------------------------------------------------------------------

def _ctype(value):
    if value is None:
        return ctypes.c_void_p(None)
    if isinstance(value, np.ndarray):
        if not value.flags.c_contiguous:
            raise ValueError(f"a kernel argument array must be C-contiguous, got one of shape {value.shape} "
                             f"and strides {value.strides}")
        return ctypes.c_void_p(value.ctypes.data)
    for kind, ctype in ((np.int32, ctypes.c_int32), (np.int64, ctypes.c_int64), (np.uint32, ctypes.c_uint32),
                        (np.float32, ctypes.c_float)):
        if isinstance(value, kind):
            return ctype(value.item())
    raise TypeError(f"a kernel argument must be a numpy array, None (a null pointer), np.int32, np.int64, "
                    f"np.uint32 or np.float32, got {type(value).__name__}")


def _dims(value) -> tuple[int, int, int]:
    value = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(value) <= 3:
        raise ValueError(f"a grid or block has 1 to 3 dimensions, got {value!r}")
    return tuple(int(v) for v in value) + (1,) * (3 - len(value))


def _wait(pid: int, timeout_s: float) -> int | None:
    """The child's wait status, or None after killing it at the timeout."""
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(pause)
        pause = min(2 * pause, 0.02)


def _in_child(run, timeout_s: float) -> str:
    """run() (the emulator's error text, or "") in a forked child; what went wrong, or ""."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():   # the child calls into the library and leaves by os._exit: no locks taken
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        status = 2
        try:
            os.close(read_end)
            faulthandler.disable()        # a crash is the parent's to report, without a Python traceback
            os.write(write_end, run().encode()[:16384])
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        status = _wait(pid, timeout_s)
        message = b""
        while chunk := os.read(read_end, 65536):
            message += chunk
    finally:
        os.close(read_end)
    if status is None:
        return (f"did not finish in {timeout_s:g} s: a hang (a barrier or a collective that some threads never "
                "reach, or a loop that never ends)")
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        why = " (an access outside the arrays: each ends at an inaccessible page)" if name in ("SIGSEGV", "SIGBUS") else ""
        return f"the launch was killed by {name}{why}"
    if os.WEXITSTATUS(status):
        return f"the launch ended with exit status {os.WEXITSTATUS(status)}"
    return message.decode(errors="replace")


class Module:
    """The kernel entries of one .cu file (or of `source` in its place), built for the emulator,
    launched with the schedule "fixed" or "random" (with `seed`)."""

    def __init__(self, path, entries, *, source: str | None = None, flags=(), optimize: str = "-O1",
                 schedule: str = "fixed", seed: int = 0):
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        self.path, self.entries, self.schedule, self.seed = Path(path), tuple(entries), schedule, int(seed)
        self.library = ctypes.CDLL(str(build(self.path, self.entries, source=source, flags=flags, optimize=optimize)))
        self.library.simt_error.restype = ctypes.c_char_p
        self.library.simt_configure.argtypes = (ctypes.c_int, ctypes.c_uint)

    def _run(self, function, dims, shared_bytes: int, args) -> str:
        self.library.simt_configure(int(self.schedule == "random"), self.seed)
        values = [_ctype(a) for a in args]
        pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
                                                             for v in values])
        if function(dims, ctypes.c_uint(shared_bytes), pointers) != 0:
            return self.library.simt_error().decode(errors="replace")
        return ""

    def launch(self, entry: str, grid, block, args, shared_bytes: int = 0, *, isolated: bool = False,
               timeout_s: float = TIMEOUT_S) -> None:
        """Launch `entry` on `grid` blocks of `block` threads; args in the kernel's order (numpy
        arrays for pointers). EmulatorFault with the emulator's message when it stops the launch."""
        if entry not in self.entries:
            raise ValueError(f"no entry {entry!r} in this module; it has {', '.join(self.entries) or 'none'}")
        for a in args:
            _ctype(a)                                   # a bad argument: a Python error here, not in the child
        function = getattr(self.library, f"simt_launch__{entry}")
        function.restype = ctypes.c_int
        dims = (ctypes.c_uint * 6)(*_dims(grid), *_dims(block))
        if not isolated:
            fault = self._run(function, dims, shared_bytes, args)
        else:
            copies = [guarded(a.shape, a.dtype, a) if isinstance(a, np.ndarray) else a for a in args]
            fault = _in_child(lambda: self._run(function, dims, shared_bytes, copies), timeout_s)
            if not fault:
                for a, copy in zip(args, copies):
                    if isinstance(a, np.ndarray) and a.flags.writeable:
                        np.copyto(a, copy)
        if fault:
            raise EmulatorFault(fault)

    def fragment_maps(self) -> list[tuple]:
        """The emulator's own mma.m16n8k16 fragment maps, as its mma.sync reads and writes them:
        (operand, lane, register, half, row, col) for every element of A, B and C."""
        row, col = ctypes.c_int(), ctypes.c_int()
        found = []
        for operand, kind, count in ((0, "A", 8), (1, "B", 4), (2, "C", 4)):
            for lane in range(32):
                for i in range(count):
                    if self.library.simt_fragment_map(operand, lane, i, ctypes.byref(row), ctypes.byref(col)):
                        raise EmulatorError(f"the emulator has no element {i} of {kind} in lane {lane}")
                    found.append((kind, lane, *((i, 0) if kind == "C" else (i // 2, i % 2)), row.value, col.value))
        return found
