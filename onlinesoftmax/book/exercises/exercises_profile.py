"""Graders for two exercises that read what a GPU did rather than compute a softmax.

- Which kernel does `torch.softmax` launch for a row of N elements? `check_torch_dispatch(fn)`
  grades a prediction against the dispatch in PyTorch's aten/src/ATen/native/cuda/SoftMax.cu
  (`host_softmax`), and `kernels_launched(n_cols)` asks torch.profiler on a GPU (or Nsight Compute,
  `ncu=True`, where `ncu` is installed).
- What fraction of the copy ceiling does `softmax_08_registers` reach at a given shape?
  `check_copy_fraction(fn)` grades a computation from the recorded softmax-fast data
  (onlinesoftmax.measure.results), with the derived fields taken out so the bytes are counted.

Each check prints "passed" or the first problem with a hint, and returns True or False.
"""
from __future__ import annotations

import copy
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade, not_answered

# ---- which kernel torch.softmax launches ------------------------------------------------------

PERSISTENT, SHARED, BLOCK = "softmax_warp_forward", "cunn_SoftMaxForwardSmem", "cunn_SoftMaxForward"
# Newer PyTorch (the one on the book's H200 among them) keeps a row of at most 9 elements per
# thread of a 1024-thread block in registers before it considers shared memory.
REGISTERS = "cunn_SoftMaxForwardReg"
TORCH_KERNELS = (PERSISTENT, SHARED, BLOCK, REGISTERS)
MAX_REGISTER_COUNT = 9
SHARED_PER_BLOCK_BYTES = 48 * 1024   # cudaDeviceProp::sharedMemPerBlock, without an opt-in
WARP, MAX_THREADS = 32, 1024


def torch_softmax_kernel_reference(n_cols: int, element_bytes: int) -> str:
    """The kernel host_softmax (SoftMax.cu) picks for a contiguous softmax over the last axis of
    rows of n_cols elements, with 16-byte aligned input and output."""
    if n_cols <= 1024 and n_cols * element_bytes <= 4096:
        return PERSISTENT                      # dispatch_softmax_forward, PersistentSoftmax.cuh
    block = min(n_cols, MAX_THREADS)
    block = block if block % WARP == 0 else (block // WARP + 1) * WARP   # SoftMaxForward_getBlockSize
    accumulator_bytes = 4                      # float for fp32, fp16 and bf16
    max_elements = (SHARED_PER_BLOCK_BYTES - (block // WARP) * accumulator_bytes) // element_bytes
    vector = 16 // element_bytes               # ILP = sizeof(float4) / sizeof(scalar_t)
    if n_cols < max_elements and n_cols % vector == 0:
        return SHARED                          # the row is kept in shared memory: read once
    return BLOCK                               # a block per row that reads it from global memory


def torch_softmax_kernels_accepted(n_cols: int, element_bytes: int) -> tuple[str, ...]:
    """The kernels a PyTorch release may launch for this row: the dispatch above, and, where the
    row fits MAX_REGISTER_COUNT elements per thread of its block, cunn_SoftMaxForwardReg (the
    register path of newer releases, tested before shared memory)."""
    chosen = torch_softmax_kernel_reference(n_cols, element_bytes)
    if chosen == PERSISTENT:
        return (chosen,)
    block = -(-min(n_cols, MAX_THREADS) // WARP) * WARP
    return (chosen, REGISTERS) if -(-n_cols // block) <= MAX_REGISTER_COUNT else (chosen,)


def solution_torch_softmax_kernel(n_cols, element_bytes):
    """The solution, in the order SoftMax.cu tests: registers of one warp, then shared memory."""
    if n_cols <= 1024 and n_cols * element_bytes <= 4096:
        return "softmax_warp_forward"
    threads = min(n_cols, 1024)
    threads = -(-threads // 32) * 32
    fits = n_cols < (48 * 1024 - (threads // 32) * 4) // element_bytes
    if fits and n_cols % (16 // element_bytes) == 0:
        return "cunn_SoftMaxForwardSmem"
    return "cunn_SoftMaxForward"


def torch_dispatch_cases():
    pairs = [(1024, 4), (4096, 4), (65536, 4), (1025, 4), (2048, 2), (1024, 2), (4097, 4),
             (12288, 4), (16384, 2), (100, 4)]
    return [Case(f"N = {n_cols}, {element_bytes}-byte elements", (n_cols, element_bytes), rows_arg=None)
            for n_cols, element_bytes in pairs]


def check_torch_dispatch(fn, quiet: bool = False) -> bool:
    """fn(n_cols, element_bytes) -> the name of the kernel torch.softmax launches, one of
    TORCH_KERNELS, for a contiguous last-axis softmax of 16-byte aligned rows."""
    def say(text):
        if not quiet:
            print(text)

    exercise, cases = "torch_dispatch", torch_dispatch_cases()
    rng = np.random.default_rng()
    cases += [Case(f"N = {n}, {b}-byte elements (a hidden case)", (n, b), rows_arg=None)
              for n, b in ((int(rng.integers(1025, 70000)), 4), (int(rng.integers(1, 1025)), 2),
                           (16 * int(rng.integers(65, 1500)), 2))]
    for number, case in enumerate(cases):
        expected = torch_softmax_kernel_reference(*case.args)
        accepted = torch_softmax_kernels_accepted(*case.args)
        try:
            yours = fn(*case.args)
        except Exception as error:
            say(f"{exercise}: FAILED on {case.name}: your function raised {type(error).__name__}: {error}")
            return False
        if yours is None and number == 0:
            say(not_answered(exercise))
            return False
        if not isinstance(yours, str):
            say(f"{exercise}: FAILED on {case.name}: expected a kernel name (a str), got {type(yours).__name__}")
            return False
        if yours not in TORCH_KERNELS:
            say(f"{exercise}: FAILED on {case.name}: {yours!r} is none of {', '.join(TORCH_KERNELS)}")
            return False
        if yours not in accepted:
            say(f"{exercise}: FAILED on {case.name}: yours is {yours}, SoftMax.cu launches "
                f"{' or, in newer releases, '.join(accepted)}")
            return False
    say(f"{exercise}: passed")
    return True


NCU_FILTER = "regex:[Ss]oft[Mm]ax"    # torch's softmax kernels, not the one that fills the input


def parse_ncu_kernels(text: str) -> list[str]:
    """The kernel names of an `ncu --csv` log, once each, in launch order."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    records = sorted(csv.DictReader(io.StringIO("\n".join(lines))), key=lambda r: int(r["ID"]))
    return list(dict.fromkeys(r["Kernel Name"] for r in records))


def kernels_launched_ncu(n_cols: int, n_rows: int = 4000, dtype: str = "float32") -> list[str] | None:
    """The softmax kernels one torch.softmax(x, dim=-1) launches, from Nsight Compute (ncu) on a
    child process; None when ncu is not installed or cannot profile here (then say why)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return None
    script = (f"import torch; x = torch.randn({int(n_rows)}, {int(n_cols)}, device='cuda', dtype=torch.{dtype}); "
              "torch.softmax(x, dim=-1); torch.cuda.synchronize()")
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "ncu.csv")
        command = [ncu, "--kernel-name", NCU_FILTER, "--metrics", "gpu__time_duration.sum", "--csv",
                   "--log-file", log, sys.executable, "-c", script]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            print("kernels_launched: ncu did not finish in 180 s; asking torch.profiler instead")
            return None
        text = open(log).read() if os.path.exists(log) else ""
    names = parse_ncu_kernels(text or done.stdout) if done.returncode == 0 else []
    if not names:
        print(f"kernels_launched: ncu profiled nothing (exit {done.returncode}: "
              f"{(done.stdout + done.stderr).strip().splitlines()[-1:] or ''}); asking torch.profiler instead")
        return None
    return names


def kernels_launched(n_cols: int, n_rows: int = 4000, dtype: str = "float32", *, ncu: bool = False) -> list[str] | None:
    """The names of the GPU kernels one torch.softmax(x, dim=-1) launches on an (n_rows, n_cols)
    tensor, from torch.profiler in this process (about a second); ncu=True asks Nsight Compute in a
    child process instead where `ncu` is installed (several seconds a call), torch.profiler if it
    cannot. None (and a message) without torch or without a GPU."""
    try:
        import torch
    except Exception as error:   # not installed, or an installation whose import fails in this process
        print(f"kernels_launched: needs torch and a GPU (torch could not be imported here: "
              f"{type(error).__name__}: {str(error).strip().splitlines()[0]})")
        return None
    if not torch.cuda.is_available():
        print("kernels_launched: needs torch and a GPU (torch sees no CUDA device here)")
        return None
    if ncu:
        names = kernels_launched_ncu(n_cols, n_rows, dtype)
        if names is not None:
            return names
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(n_rows, n_cols, device="cuda", dtype=getattr(torch, dtype))
    torch.softmax(x, dim=-1)                   # warm-up: the first call may load modules
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.softmax(x, dim=-1)
        torch.cuda.synchronize()
    names = [event.name for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA]
    return list(dict.fromkeys(names))          # in launch order, each once


def short_kernel_name(full_name: str) -> str | None:
    """Which of TORCH_KERNELS a profiler's (demangled, templated) kernel name is."""
    for name in (SHARED, REGISTERS, PERSISTENT, BLOCK):   # cunn_SoftMaxForward is a prefix of ...Smem, ...Reg
        if name + "<" in full_name or full_name.endswith(name) or name + "(" in full_name:
            return name
    return None


# ---- the fraction of the copy ceiling, from the recorded data ---------------------------------

COPY_KERNEL = "softmax_08_registers"
DERIVED_FIELDS = ("GBps", "fraction_of_copy", "bytes", "model_bytes")
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def load_softmax_fast() -> dict:
    """The newest recorded softmax-fast suite (data/h200), as the chapter reads it."""
    from onlinesoftmax.measure import results

    return results.load_recorded("softmax-fast")


def copy_fraction_reference(data: dict, dtype: str, n_rows: int, n_cols: int) -> float:
    """Bytes moved (each element read once and written once) per second by softmax_08_registers
    at this shape, over the bandwidth of the copy recorded in the same run."""
    row = next(r for r in data["rows"] if r.get("kernel") == COPY_KERNEL and r.get("dtype") == dtype
               and r.get("n_rows") == n_rows and r.get("n_cols") == n_cols and "ms" in r)
    copy_GBps = float(np.median([r["GBps"] for r in data["rows"] if r.get("kernel") == "copy"]))
    moved_bytes = 2 * n_rows * n_cols * ELEMENT_BYTES[dtype]
    return moved_bytes / (row["ms"] * 1e-3) / 1e9 / copy_GBps


def solution_copy_fraction(data, dtype, n_rows, n_cols):
    """The solution: count the bytes, divide by the time, compare with the recorded copy."""
    element_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    row = [r for r in data["rows"] if r.get("kernel") == "softmax_08_registers" and r.get("dtype") == dtype
           and r.get("n_rows") == n_rows and r.get("n_cols") == n_cols][0]
    copy_row = [r for r in data["rows"] if r.get("kernel") == "copy"][0]
    GBps = 2 * n_rows * n_cols * element_bytes / (row["ms"] * 1e-3) / 1e9   # read once, written once
    return GBps / copy_row["GBps"]


def without_derived_fields(data: dict) -> dict:
    """A copy of the recorded data whose kernel rows keep their shape and time but not the bytes,
    bandwidth or fraction worked out from them (the copy's own row keeps its bandwidth)."""
    stripped = copy.deepcopy(data)
    for row in stripped["rows"]:
        if row.get("kernel") != "copy":
            for field in DERIVED_FIELDS:
                row.pop(field, None)
    return stripped


def copy_fraction_cases(data: dict):
    stripped = without_derived_fields(data)
    shapes = [("float32", 4000, 4096), ("bfloat16", 4000, 1024), ("float16", 64, 16384), ("float32", 10, 1024)]
    return [Case(f"{dtype}, {n_rows} x {n_cols}", (stripped, dtype, n_rows, n_cols), rows_arg=None)
            for dtype, n_rows, n_cols in shapes]


def _copy_fraction_hint(ratio: float) -> str:
    for factor, text in ((0.5, "counted only the bytes read (or only those written); a softmax moves both"),
                         (2.0, "counted each element's bytes twice over, or the copy's bytes once"),
                         (1e-3, "a time in ms used as seconds"), (1e3, "a time in seconds used as ms")):
        if np.isclose(ratio, factor, rtol=0.02):
            return f"hint: yours is {ratio:.3g} times the expected fraction: {text}"
    return ""


def check_copy_fraction(fn, data: dict | None = None, quiet: bool = False) -> bool:
    """fn(data, dtype, n_rows, n_cols) -> the fraction of the copy bandwidth that
    softmax_08_registers reached at that shape in the recorded run, from the rows' times alone."""
    data = load_softmax_fast() if data is None else data
    cases = copy_fraction_cases(data)
    def hidden(rng):   # a shape the recorded run holds, other than the visible ones, drawn at random
        visible = {case.args[1:] for case in cases}
        shapes = sorted({(r["dtype"], r["n_rows"], r["n_cols"]) for r in data["rows"]
                         if r.get("kernel") == COPY_KERNEL and "ms" in r and r.get("dtype") in ELEMENT_BYTES} - visible)
        if not shapes:
            return []
        dtype, n_rows, n_cols = shapes[int(rng.integers(len(shapes)))]
        return [Case(f"{dtype}, {n_rows} x {n_cols}", (cases[0].args[0], dtype, n_rows, n_cols), rows_arg=None)]

    passed = grade("copy_fraction", fn, cases, lambda d, *shape: copy_fraction_reference(data, *shape),
                   ("fraction",), Tolerance(rtol=1e-3, atol=0.0), copy_args=False, quiet=quiet, hidden=hidden)
    if not passed and not quiet:
        try:
            ratio = float(fn(*cases[0].args)) / copy_fraction_reference(data, *cases[0].args[1:])
            hint = _copy_fraction_hint(ratio)
        except Exception:   # the failure was reported already
            hint = ""
        if hint:
            print(f"  {hint}")
    return passed
