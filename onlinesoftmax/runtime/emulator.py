"""The tensor-core attention kernels' own CUDA source, run on the CPU: build and drive the emulator
of kernels/emulator/ (simt.h: one fiber per thread, barriers, warp-collective mma.sync, ldmatrix
and shuffles computed from the PTX ISA's definitions, cp.async copies landing only at the wait,
shared memory poisoned with NaN, inputs and outputs followed by inaccessible pages, warps
interleaved at random; run_attention.cpp: the launcher's grid and arguments).

    binary = emulator.build("attention_05_pipelined")      # g++, cached under build/emulator/
    out, lse = emulator.run(binary, q, k, v, causal=True, shared_bytes=attention_mma.shared_bytes(name, d))

It needs a C++17 compiler with _Float16 (g++ 12 or newer; `CXX` overrides the name). Slow: a
warp-collective instruction costs 32 fiber switches, so keep shapes to a few hundred rows.
Used by tests/test_attention_emulated.py and by the kernel exercise of chapter 09.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from onlinesoftmax.runtime.loader import KERNELS_DIR, REPO_ROOT

EMULATOR_DIR = KERNELS_DIR / "emulator"
BUILD_DIR = REPO_ROOT / "build" / "emulator"
TAGS = {"bfloat16": "bf16", "float16": "f16"}
POISON_BITS = 0x7B7B      # run_attention.cpp fills the output with these bits before the launch
LOG2E = 1.4426950408889634


class EmulatorError(RuntimeError):
    """The emulated kernel failed: a build error, or what the emulator caught (its message)."""


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def available() -> bool:
    return compiler() is not None


def build(stem: str, source: str | None = None, flags=(), optimize: str = "-O2", source_path: Path | None = None) -> Path:
    """The emulator binary for kernel file `stem` (kernels/attention/<stem>.cu, or the text `source`,
    or the file `source_path`, in its place): entries <stem>_<bf16|f16>_d<64|128>. Cached by content."""
    if source is None:
        source = (source_path or KERNELS_DIR / "attention" / f"{stem}.cu").read_text()
    cxx = compiler()
    if cxx is None:
        raise EmulatorError("no C++ compiler (g++) for the CPU emulator; set CXX to one")
    headers = "".join(p.read_text() for p in sorted((KERNELS_DIR / "common").glob("*.cuh")))
    emulator = "".join(p.read_text() for p in sorted(EMULATOR_DIR.glob("*")) if p.is_file())
    key = hashlib.sha256("\0".join((source, headers, emulator, " ".join(flags), optimize)).encode()).hexdigest()[:16]
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    binary = BUILD_DIR / f"{stem}-{key}"
    if binary.exists():
        return binary
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tree:
        (Path(tree) / "attention").mkdir()
        (Path(tree) / "attention" / f"{stem}.cu").write_text(source)
        partial = binary.with_suffix(".partial")
        command = [cxx, "-std=c++17", optimize, f"-I{KERNELS_DIR / 'common'}", f"-I{tree}", f"-I{EMULATOR_DIR}",
                   f'-DKERNEL_SOURCE="attention/{stem}.cu"', f"-DKERNEL_STEM={stem}", *flags,
                   str(EMULATOR_DIR / "run_attention.cpp"), "-o", str(partial)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise EmulatorError(f"the emulator build of {stem} failed:\n{done.stderr[-6000:]}")
        partial.replace(binary)
    return binary


def run(binary: Path, q, k, v, causal: bool = False, scale: float | None = None, *, shared_bytes: int,
        seed: int = 1):
    """(out, lse) of one emulated launch: q (batch, heads, n_q, d), k and v (batch, kv_heads, n_k, d)
    numpy arrays in float16 or bfloat16; shared_bytes what the launcher gives the kernel
    (attention_mma.shared_bytes); out in their dtype, lse float32. Raises EmulatorError with
    the emulator's message when it catches something (or crashes: a guard page was touched)."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    scale = 1 / np.sqrt(d) if scale is None else scale
    with tempfile.TemporaryDirectory() as work:
        for name, a in (("q", q), ("k", k), ("v", v)):
            np.ascontiguousarray(a).view(np.uint16).tofile(Path(work) / f"{name}.bin")
        args = [binary, work, f"{TAGS[q.dtype.name]}_d{d}", batch, heads, kv_heads, n_q, n_k, d,
                repr(float(np.float32(scale * LOG2E))), int(bool(causal)), 1, shared_bytes, seed]
        done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            why = done.stderr.strip() or ("a segmentation fault: memory outside an array was touched"
                                           if done.returncode == -11 else f"exit status {done.returncode}")
            raise EmulatorError(f"the emulated kernel failed: {why}")
        out = np.fromfile(Path(work) / "out.bin", np.uint16).reshape(q.shape)
        lse = np.fromfile(Path(work) / "lse.bin", np.float32).reshape(q.shape[:3])
    if (out == POISON_BITS).any():
        raise EmulatorError(f"the emulated kernel left {int((out == POISON_BITS).sum())} outputs unwritten")
    return out.view(q.dtype), lse


def layouts(binary: Path) -> list[tuple]:
    """The emulator's own fragment maps: (operand, lane, register, half, row, col) per element."""
    done = subprocess.run([str(binary), "layouts"], capture_output=True, text=True, check=True)
    return [(w[0], *map(int, w[1:])) for w in (line.split() for line in done.stdout.splitlines() if line)]
