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
`launch(..., isolated=True)` runs the launch in a child process (shared memory carries the arrays
and counters back), so that a crash ends the child, never the caller.

Every load and store of the kernel is checked (kernels/emulator/simt_checks.h; g++ instruments
them): a launch runs on copies of its arrays, each between guard regions, and stops with
EmulatorOutOfBounds at the first access outside an array (argument, element offset, source line);
EmulatorMisaligned at a 2/4/8/16-byte access (float2, float4, uint4 ...) at an address not a
multiple of its size; EmulatorRace at two threads touching one shared byte, one of them writing,
in one barrier interval (check_races=False turns this one off). The race check does not depend on
the schedule: both orders of a conflicting pair are reported. `launch(..., stats=True)` counts
what the kernel touched (LaunchStats). `launch_schedules(entry, grid, block, make_args, seeds)`
runs the fixed schedule and a random one per seed on fresh arguments and raises
EmulatorScheduleDependent at the first whose outputs differ.

Errors: EmulatorError, and under it EmulatorBuildError (no compiler, or g++ rejected the source;
the message names the file's lines) and EmulatorFault (the emulator stopped the launch and says
why, or an isolated launch crashed or hung), with EmulatorRace, EmulatorOutOfBounds,
EmulatorMisaligned and EmulatorScheduleDependent under it.

The source is compiled as written but for two rewrites: `extern __shared__` becomes `extern
SIMT_DYNAMIC_SHARED`, and the array's name another name of the emulator's dynamic shared memory
(see simt.h); a static `__shared__ T name[...];` is renamed and `name` made a reference to it that
g++ cannot see through (so that its accesses are checked), on the same line. It needs a C++17 compiler with _Float16 (g++ 12 or newer; `CXX` names another).
Slow: a warp-collective instruction costs 32 fiber switches, so keep launches to a few hundred rows.
"""
from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import hashlib
import os
import pickle
import re
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from onlinesoftmax.runtime.emulator_pch import precompiled_header
from onlinesoftmax.runtime.loader import INCLUDE_DIRS, KERNELS_DIR, REPO_ROOT, expand_source

EMULATOR_DIR = KERNELS_DIR / "emulator"
CACHE_DIR = REPO_ROOT / "build" / "emulator"
FLAGS = ("-std=c++17", "-fPIC", "-shared", "-fno-strict-aliasing", "-fvisibility=hidden", "-fno-gnu-unique", "-w", "-g1",
         # every load and store calls simt_checks.h (races, bounds, alignment, counters); no sanitizer runtime
         "-fsanitize=kernel-address", "--param=asan-instrumentation-with-call-threshold=0", "--param=asan-stack=0",
         "--param=asan-globals=0",
         "-fno-tree-sink")   # a load written before a branch stays before it (a read past n, masked after, is read)
UNCHECKED_FLAGS = tuple(f for f in FLAGS if "sanitize" not in f and "asan" not in f)
SCHEDULES = ("fixed", "random")
_instrumented = [True]       # uninstrumented(): builds without the per-access checks


@contextlib.contextmanager
def uninstrumented():
    """Modules built inside run without the per-access checks (races, bounds, alignment, counters), about
    5x faster: for a kernel already checked on smaller shapes, on the shapes that check its numbers. The
    guard regions after each array still fault on a read or write past it."""
    _instrumented.append(False)
    try:
        yield
    finally:
        _instrumented.pop()
TIMEOUT_S = 600.0
_EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\b")
# A block's static `__shared__ T name[...];` (in the kernel file or a header it includes): its storage
# is taken once, at the first run of its declaration, from simt_static_arena (in the section of the
# block's shared memory, so it is poisoned before every block and its accesses are race-checked; a
# static variable of its own would not be, inside a template: g++ drops the section attribute of a
# template's static locals), and `name` becomes a reference to it that g++ cannot see through
# (simt_shared_ref: g++ does not instrument accesses at constant offsets of a variable), on one line.
_STATIC_SHARED = re.compile(r"\b__shared__\s+([^;{}=]*?)\b([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*);")
_ALIGN = re.compile(r"__align__\s*\(\s*(\d+)\s*\)")
_EXTERN_SHARED_NAME = re.compile(r"\bextern\s+__shared__\b[^;]*?\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")


from onlinesoftmax.runtime.emulator_faults import (  # noqa: F401 (the emulator's public names)
    EmulatorBuildError, EmulatorError, EmulatorFault, EmulatorMisaligned, EmulatorOutOfBounds, EmulatorRace,
    EmulatorScheduleDependent, LaunchStats, _fault, _source_lines)


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def available() -> bool:
    return compiler() is not None


# ---- building ---------------------------------------------------------------------------------

def _wrapper(path: Path, source: str, entries) -> str:
    """What g++ compiles: simt.h, the kernel's source (its file and lines kept), the exports."""
    expanded = expand_source(path, source)[0]   # the headers' declarations are rewritten too
    names = sorted(set(_EXTERN_SHARED_NAME.findall(expanded)))
    aliases = "".join(f'asm(".globl {n}\\n\\t.hidden {n}\\n\\t.set {n}, simt_dynamic_shared");\n' for n in names)
    body = _EXTERN_SHARED.sub("extern SIMT_DYNAMIC_SHARED", expanded)
    body = _STATIC_SHARED.sub(_static_shared, body)
    return ('#include "simt.h"\n' + body
            + '\n#line 1 "the emulator\'s exports"\n' + aliases + "".join(f"SIMT_EXPORT({e})\n" for e in entries)
            + "SIMT_LIBRARY\n")


def _static_shared(m) -> str:
    align = _ALIGN.search(m[1])
    kind, name = _ALIGN.sub("", m[1]).strip(), m[2]
    return (f"typedef {kind} {name}__simt_t{m[3]}; static {name}__simt_t* const {name}__simt_slot = "
            f"simt_static_shared<{name}__simt_t>({align[1] if align else 1}); auto& {name} = simt_shared_ref(*{name}__simt_slot);")


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
    headers = "".join(p.read_text() for p in sorted(EMULATOR_DIR.glob("*.*h")))   # the kernel's own are in the wrapper
    base_flags = FLAGS if _instrumented[-1] else UNCHECKED_FLAGS
    key = hashlib.sha256("\0".join((wrapper, headers, cxx, optimize, *base_flags, *flags)).encode()).hexdigest()[:16]
    target = CACHE_DIR / f"{path.stem}-{key}.so"
    if target.exists():
        return target
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as work:   # parallel builds of one library: the last one wins
        cpp, partial = Path(work) / f"{path.stem}.cpp", Path(work) / "library.so"
        cpp.write_text(wrapper)
        pch = precompiled_header(cxx, [*base_flags, optimize, *flags], EMULATOR_DIR, CACHE_DIR, TIMEOUT_S)
        command = [cxx, *base_flags, optimize, *([f"-I{pch}"] if pch else []), f"-I{path.parent}",
                   *(f"-I{d}" for d in INCLUDE_DIRS), f"-I{EMULATOR_DIR}", *flags, str(cpp), "-o", str(partial)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise EmulatorBuildError(_compile_errors(path, done.stderr))
        os.replace(partial, target)
    return target


from onlinesoftmax.runtime.emulator_memory import GUARD_BYTES, _fenced, _shared_zeros, guarded  # noqa: F401


# ---- launching ----------------------------------------------------------------------------------

def _ctype(value):
    if value is None:
        return ctypes.c_void_p(None)
    if isinstance(value, bytes):   # a struct passed by value (an emulated tensor map), its bytes
        return (ctypes.c_char * len(value)).from_buffer_copy(value)
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
                    f"np.uint32, np.float32 or bytes (a struct by value), got {type(value).__name__}")


def _dims(value) -> tuple[int, int, int]:
    value = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(value) <= 3:
        raise ValueError(f"a grid or block has 1 to 3 dimensions, got {value!r}")
    return tuple(int(v) for v in value) + (1,) * (3 - len(value))


def _wait(pid: int, timeout_s: float, drain=lambda: None) -> int | None:
    """The child's wait status, or None after killing it at the timeout (drain() between polls)."""
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while True:
        drain()
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(pause)
        pause = min(2 * pause, 0.02)


def _in_child(run, timeout_s: float):
    """run() in a forked child: (what went wrong or "", what run() returned besides or None).
    run() returns (the emulator's error text or "", anything picklable)."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():   # the child calls into the library and leaves by os._exit: no locks taken
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        status = 2
        try:
            os.close(read_end)
            faulthandler.disable()        # a crash is the parent's to report, without a Python traceback
            data = pickle.dumps(run())
            while data:
                data = data[os.write(write_end, data):]
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    os.set_blocking(read_end, False)
    received = bytearray()

    def drain():
        try:
            while chunk := os.read(read_end, 1 << 20):
                received.extend(chunk)
        except BlockingIOError:
            pass
    try:
        status = _wait(pid, timeout_s, drain)
        os.set_blocking(read_end, True)
        while chunk := os.read(read_end, 1 << 20):
            received.extend(chunk)
    finally:
        os.close(read_end)
    if status is None:
        return (f"did not finish in {timeout_s:g} s: a hang (a barrier or a collective that some threads never "
                "reach, or a loop that never ends)"), None
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        why = " (an access outside the arrays: each ends at an inaccessible page)" if name in ("SIGSEGV", "SIGBUS") else ""
        return f"the launch was killed by {name}{why}", None
    if os.WEXITSTATUS(status):
        return f"the launch ended with exit status {os.WEXITSTATUS(status)}", None
    return pickle.loads(bytes(received))


class Module:
    """The kernel entries of one .cu file (or of `source` in its place), built for the emulator,
    launched with the schedule "fixed" or "random" (with `seed`)."""

    def __init__(self, path, entries, *, source: str | None = None, flags=(), optimize: str = "-O1",
                 schedule: str = "fixed", seed: int = 0):
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        self.path, self.entries, self.schedule, self.seed = Path(path), tuple(entries), schedule, int(seed)
        self.instrumented = _instrumented[-1]
        self.so = build(self.path, self.entries, source=source, flags=flags, optimize=optimize)
        self.library = ctypes.CDLL(str(self.so))
        self.library.simt_error.restype = ctypes.c_char_p
        self.library.simt_configure.argtypes = (ctypes.c_int, ctypes.c_uint)
        self.library.simt_configure_checks.argtypes = (ctypes.c_int, ctypes.c_int)
        self.library.simt_add_array.argtypes = (ctypes.c_size_t,) * 4 + (ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                                                          ctypes.c_void_p)
        self.library.simt_shared_bytes_touched.restype = ctypes.c_ulonglong
        self.library.simt_block_reads.restype = ctypes.c_ulonglong
        self.library.simt_block_reads.argtypes = (ctypes.c_void_p,)

    def _run(self, function, dims, shared_bytes: int, args, schedule, seed, check_races, stats, fences):
        """One launch in this process: (the emulator's error text or "", (shared_bytes, block_reads))."""
        lib = self.library
        lib.simt_configure(int(schedule == "random"), seed)
        lib.simt_configure_checks(int(check_races), int(stats is not None))
        for i, (low, high) in fences.items():
            a = args[i]
            reads, writes = (stats[i] if stats is not None else (None, None))
            lib.simt_add_array(a.ctypes.data, a.ctypes.data + a.nbytes, low, high, i, a.dtype.itemsize,
                               None if reads is None else reads.ctypes.data,
                               None if writes is None else writes.ctypes.data)
        values = [_ctype(a) for a in args]
        pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
                                                             for v in values])
        error = ""
        if function(dims, ctypes.c_uint(shared_bytes), pointers) != 0:
            error = lib.simt_error().decode(errors="replace")
        block_reads = None
        if stats is not None:
            count = lib.simt_block_reads(None)
            block_reads = np.zeros(count, np.int64)
            lib.simt_block_reads(block_reads.ctypes.data)
        return error, (int(lib.simt_shared_bytes_touched()), block_reads)

    def launch(self, entry: str, grid, block, args, shared_bytes: int = 0, *, isolated: bool = False,
               timeout_s: float = TIMEOUT_S, schedule: str | None = None, seed: int | None = None,
               check_races: bool = True, stats: bool = False) -> LaunchStats:
        """Launch `entry` on `grid` blocks of `block` threads; args in the kernel's order (numpy
        arrays for pointers). The kernel runs on copies of the arrays, each between guard regions
        (copied back after). EmulatorFault (or EmulatorRace, EmulatorOutOfBounds,
        EmulatorMisaligned) with the emulator's message when it stops the launch; the arrays are
        then left as they were. schedule/seed: this launch's, in place of the module's.
        check_races=False skips the shared-memory race check (bounds and alignment are always
        checked). stats=True counts each element's reads and writes (LaunchStats)."""
        if entry not in self.entries:
            raise ValueError(f"no entry {entry!r} in this module; it has {', '.join(self.entries) or 'none'}")
        if stats and not self.instrumented:
            raise ValueError("stats=True needs a module built with the per-access checks (not uninstrumented())")
        schedule = self.schedule if schedule is None else schedule
        seed = self.seed if seed is None else int(seed)
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        for a in args:
            _ctype(a)                                   # a bad argument: a Python error here, not in the child
        function = getattr(self.library, f"simt_launch__{entry}")
        function.restype = ctypes.c_int
        dims = (ctypes.c_uint * 6)(*_dims(grid), *_dims(block))
        copies, fences = list(args), {}
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                copies[i], low, high = _fenced(a)
                fences[i] = (low, high)
        counts = ({i: (_shared_zeros(args[i].size), _shared_zeros(args[i].size)) for i in fences} if stats else None)

        def run():
            return self._run(function, dims, shared_bytes, copies, schedule, seed, check_races, counts, fences)
        if not isolated:
            fault, extra = run()
        else:
            fault, extra = _in_child(run, timeout_s)
        if fault:
            raise _fault(_source_lines(self.so, fault))
        for a, copy in zip(args, copies):
            if isinstance(a, np.ndarray) and a.flags.writeable:
                np.copyto(a, copy)
        result = LaunchStats(shared_bytes=extra[0])
        if stats:
            triples = extra[1].reshape(-1, 3)
            for i, (reads, writes) in counts.items():
                result.reads[i] = np.array(reads)
                result.writes[i] = np.array(writes)
                mine = triples[triples[:, 1] == i]
                n_blocks = int(np.prod(_dims(grid)))
                result.block_reads[i] = [np.unique(mine[mine[:, 0] == b, 2]) for b in range(n_blocks)]
        return result

    def launch_schedules(self, entry: str, grid, block, make_args, seeds=(1, 2, 3), shared_bytes: int = 0,
                         **options) -> list:
        """Launch `entry` under the fixed schedule and then the random one with each of `seeds`,
        each on fresh arguments from make_args(); the fixed launch's arguments (after it) when every
        schedule gave bit-identical array outputs. A fault under any schedule is raised with the
        schedule named in front of the message (same class); outputs that differ raise
        EmulatorScheduleDependent naming the schedule, the argument and the first element that
        differs. options: what launch() takes besides (isolated, check_races, stats ...)."""
        reference = None
        for schedule, seed in [("fixed", 0)] + [("random", int(s)) for s in seeds]:
            name = "the fixed schedule" if schedule == "fixed" else f"the random schedule with seed {seed}"
            args = list(make_args())
            try:
                self.launch(entry, grid, block, args, shared_bytes, schedule=schedule, seed=seed, **options)
            except EmulatorFault as fault:
                raise type(fault)(f"under {name}: {fault}") from None
            if reference is None:
                reference = args
                continue
            for i, (a, b) in enumerate(zip(reference, args)):
                if not isinstance(a, np.ndarray):
                    continue
                bytes_a = a.reshape(-1).view(np.uint8).reshape(a.size, -1)
                bytes_b = b.reshape(-1).view(np.uint8).reshape(b.size, -1)
                differ = np.flatnonzero((bytes_a != bytes_b).any(axis=1))
                if differ.size:
                    k = int(differ[0])
                    raise EmulatorScheduleDependent(
                        f"{name} gave other outputs than the fixed schedule: argument {i}, {differ.size} element(s) "
                        f"differ, the first at flat index {k}: {a.reshape(-1)[k]!r} (fixed) vs {b.reshape(-1)[k]!r} "
                        "(a result that depends on how the warps interleave: a race or an order-dependent reduction)")
        return reference

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
