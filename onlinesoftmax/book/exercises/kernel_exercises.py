"""CUDA exercises: the reader edits a copy of a starter kernel, the grader builds and runs it.

    path = kernel_exercises.start("fix_missing_guard")   # exercises/fix_missing_guard.cu, yours to edit
    kernel_exercises.grade("fix_missing_guard")           # build, run, check, measure

The starters live in exercises/starters/ (the book's own kernels under kernels/ are never
touched), the solutions in exercises/solutions/. Grading a kernel:

1. builds it with nvcc when it is installed and with NVRTC (the compiler cupy runs it with): a
   compile error is shown with the line numbers of your file;
2. runs it **in a separate process with a timeout** (kernel_runner.py), so an illegal address, a
   hang or a poisoned CUDA context ends that process, never the notebook: the report says which.
   On a GPU it runs the real kernel, then the CPU emulator's checks too; without one, the emulator
   (kernels/emulator/: every thread a fiber) alone, so a missing barrier or a shuffle some lanes
   never reach fails every time, and, where the emulator has them, races in shared memory,
   accesses outside an array and misaligned vector loads fail, and its counts of global reads
   check the exercise's design (KernelExercise.design);
3. checks every case of the exercise's task (kernel_tasks.py: the edge matrix of sizes 1 .. 4097,
   -inf, all -inf, +inf, NaN, logits near +-1000, rows off a 16-byte boundary, then hidden cases
   drawn from a fresh seed: unseen lengths, scores of order 1e4, rows near -1e7) against the float64
   reference, each launch on fresh inputs and on outputs poisoned beforehand and followed by a
   guard band, and quotes the first wrong value of the first failing case;
4. on a GPU, times it against a copy measured in the same run and checks the timed launch's
   output too (a speed above the copy fails: ABOVE_COPY; the copy-ceiling exercise passes only
   above its fraction of the copy), and runs compute-sanitizer's racecheck on every kernel that
   declares shared memory when it is installed.

`compare("three_pass_softmax", "online_softmax")` times two answers in one process on a GPU
(without one it prints the recorded H200 numbers of the book's kernels of the same design).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onlinesoftmax.book.exercises import kernel_tasks as kt
from onlinesoftmax.book.exercises import kernel_tasks_attention as kt_attention
from onlinesoftmax.book.exercises.kernel_recorded import recorded_comparison, recorded_expectation, recorded_row  # noqa: F401
from onlinesoftmax.runtime import loader

EXERCISES_DIR = loader.REPO_ROOT / "exercises"
STARTERS, SOLUTIONS = EXERCISES_DIR / "starters", EXERCISES_DIR / "solutions"
TIMEOUT_S = 180                 # the GPU run, then the emulator (its first build of a kernel takes a while)
RACECHECK_TIMEOUT_S, STARTER_GPU_TIMEOUT_S = 120, 12   # the latter: a GPU starter that hangs (a skipped shuffle) fails

DIFFICULTIES = ("warm-up", "core", "challenge")


@dataclass(frozen=True)
class KernelExercise:
    name: str                     # = the starter's stem = its extern "C" entry (or entries' prefix)
    chapter: str
    story: str
    task: object
    difficulty: str = "core"      # one of DIFFICULTIES
    min_fraction_of_copy: float | None = None   # graded by bandwidth on a GPU too
    design: str | None = None     # checked on the emulator's counts: kernel_runner.check_design

    @property
    def entries(self) -> tuple[str, ...]:
        return self.task.entries(self.name)


def uses_shared_memory(path: Path) -> bool:
    """Whether a kernel file declares shared memory: such a kernel runs under racecheck on a GPU."""
    return "__shared__" in Path(path).read_text()


_ROWS, _SPLIT, _LSE, _TOPK, _SCALE = kt.SoftmaxRows(), kt.SplitMerge(), kt.LseRows(), kt.TopK(), kt.ScaleVector()
_ATTENTION = kt_attention.Attention()
EXERCISES = {e.name: e for e in (
    KernelExercise("scale_vector", "00", "your first kernel: one thread per element, y = a * x", _SCALE, "warm-up"),
    KernelExercise("row_sum", "00", "a row sum: one block per row, its threads' sums combined", kt.RowSum(), "warm-up"),
    KernelExercise("online_softmax", "03", "write the online softmax kernel: one pass for (m, l), one for the output",
                   _ROWS, design="two passes"),
    KernelExercise("three_pass_softmax", "03", "write the three-pass softmax kernel: max, sum, output", _ROWS),
    KernelExercise("fix_missing_guard", "03", "NaN on short rows: the combine of two empty states", _ROWS),
    KernelExercise("fix_max_init_zero", "03", "NaN on large negative logits: the state's first maximum", _ROWS, "warm-up"),
    KernelExercise("fix_tail", "03", "wrong unless N is a multiple of the block: the last partial stride", _ROWS, "warm-up"),
    KernelExercise("fix_shared_oob", "03", "run-to-run garbage: warp 0 reads shared slots no warp wrote", _ROWS),
    KernelExercise("fix_early_return", "03", "short rows: threads leave before the block's barrier and shuffles", _ROWS),
    KernelExercise("fix_shuffle_mask", "03", "a full-warp shuffle that only some lanes reach", _ROWS),
    KernelExercise("split_merge", "04", "two blocks per row: write the kernel that merges their states", _SPLIT,
                   design="split"),
    KernelExercise("lse_rows", "05", "write the log-sum-exp kernel: one number per row", _LSE),
    KernelExercise("row_in_registers", "06", "reach 0.75 of the copy: 16-byte loads, the row in registers", _ROWS,
                   "challenge", min_fraction_of_copy=0.75),
    KernelExercise("fix_topk_ties", "07", "softmax + top-k: equal logits name the wrong columns", _TOPK),
    KernelExercise("fix_topk_insert", "07", "softmax + top-k: the list insertion loses pairs", _TOPK),
    KernelExercise("fix_attention_barrier", "08", "attention: the next tile overwrites shared memory still in use",
                   _ATTENTION, "challenge"),
    KernelExercise("fix_attention_tail", "08", "attention: wrong unless the keys fill whole tiles", _ATTENTION),
)}
ABOVE_COPY = 1.10   # a measured speed above 1.10 of the copy is no speed a right kernel reaches: a failure

def _exercise(name: str) -> KernelExercise:
    if name not in EXERCISES:
        raise ValueError(f"no kernel exercise {name!r}; known: {', '.join(EXERCISES)}")
    return EXERCISES[name]


def your_copy(name: str) -> Path:
    return EXERCISES_DIR / f"{_exercise(name).name}.cu"


def start(name: str, overwrite: bool = False) -> Path:
    """Copy the starter to exercises/<name>.cu (kept if it is there already) and return its path."""
    path = your_copy(name)
    if overwrite or not path.exists():
        shutil.copyfile(STARTERS / path.name, path)
    return path


def missing_entries(path: Path, name: str) -> list[str]:
    """The kernel entries the grader launches that the file does not define."""
    text = Path(path).read_text()
    return [e for e in _exercise(name).entries
            if not re.search(r'extern\s+"C"\s+__global__\s+void\s+' + e + r"\s*\(", text)]


def build(path: Path, name: str | None = None) -> tuple[bool, str]:
    """Compile one exercise kernel: (ok, the compiler's messages, naming your file's lines).
    With NVRTC, the compiler cupy runs it with (no math.h there, for one), and with nvcc when it
    is installed (its messages are the clearer ones)."""
    path = Path(path)
    if name is not None and (missing := missing_entries(path, name)):
        return False, "the grader launches " + ", ".join(f'extern "C" __global__ void {e}(...)' for e in missing) + \
            f", which {path.name} does not define"
    built = []
    if loader.nvcc_available():
        try:
            loader.nvcc_compile(path)
            built.append("nvcc (sm_90a)")
        except loader.KernelCompileError as error:
            return False, str(error)
    from onlinesoftmax.runtime import disasm  # NVRTC through cuda-bindings, no GPU needed

    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        if built:
            return True, "built with " + built[0]
        raise disasm.ToolMissing("no nvcc and no NVRTC: pip install cuda-bindings nvidia-cuda-nvrtc") from error
    text, _ = loader.expand_source(path)
    err, program = nvrtc.nvrtcCreateProgram(text.encode(), path.name.encode(), 0, [], [])
    try:
        options = [b"-std=c++17", b"-arch=sm_80"]
        (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = loader.nvrtc_log(program)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False, "NVRTC (what cupy compiles with): " + log.strip()
    return True, "built with " + " and ".join(built + ["NVRTC (sm_80)"])


# ---- the run, in its own process -------------------------------------------------------------

def _backend_here() -> str:
    from onlinesoftmax.runtime import device

    return "gpu" if device.has_gpu() else "cpu"


def _subprocess(command, timeout_s: float) -> dict:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=loader.REPO_ROOT)
    except subprocess.TimeoutExpired:
        return {"passed": False, "fault": f"did not finish in {timeout_s:.0f} s: a hang (a barrier or a shuffle "
                                          "that some threads never reach, or a loop that never ends)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines and (done.returncode == 0 or not json.loads(lines[-1]).get("passed")):
        return json.loads(lines[-1])          # a failure it reported itself (a CUDA error, a wrong row)
    if done.returncode != 0 or not lines:
        if done.returncode < 0:
            name = signal.Signals(-done.returncode).name
            why = " (an access outside the arrays)" if name in ("SIGSEGV", "SIGBUS") else ""
            return {"passed": False, "fault": f"the run was killed by {name}{why}"}
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        return {"passed": False, "fault": f"the run ended with an error (exit {done.returncode}):\n{tail}"}
    return {"passed": False, "fault": f"the run reported a pass, then ended with exit {done.returncode}"}


def _command(mode: str, items, backend: str, measure: bool, seed: int | None = None, emulate: bool = True) -> list[str]:
    """The subprocess's command line; the hidden cases are drawn from `seed` (a fresh one by default)."""
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    spec = {"mode": mode, "backend": backend, "items": [[n, str(p)] for n, p in items], "measure": measure,
            "seed": seed, "emulate": emulate}
    return [sys.executable, "-m", "onlinesoftmax.book.exercises.kernel_runner", json.dumps(spec)]


def run(path: Path, name: str, timeout_s: float = TIMEOUT_S, measure: bool = True, backend: str | None = None,
        seed: int | None = None, emulate: bool = True) -> dict:
    """Check (and on a GPU time) the kernel in a subprocess; never raises for the kernel's faults. backend:
    "gpu" or "cpu" (the emulator); by default the GPU when there is one. seed: the hidden cases' (a fresh
    one each run by default). emulate=False: no emulator checks after a GPU run's values pass."""
    backend = backend or _backend_here()
    return _subprocess(_command("grade", [(name, path)], backend, measure, seed, emulate), timeout_s) | {"backend": backend}


def run_many(jobs, workers: int = 8) -> list[dict]:
    """run(**job) for every job (a dict of run's arguments), `workers` subprocesses at a time."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda job: run(**job), jobs))


def racecheck(path: Path, name: str, timeout_s: float = RACECHECK_TIMEOUT_S) -> dict:
    """One small launch under compute-sanitizer --tool racecheck (GPU): {"passed", "hazards"}."""
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        return {"passed": None, "note": "compute-sanitizer is not installed: racecheck not run"}
    command = [sanitizer, "--tool", "racecheck", "--error-exitcode", "3"] + _command("racecheck", [(name, path)], "gpu", False)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=loader.REPO_ROOT)
    except subprocess.TimeoutExpired:
        return {"passed": False, "fault": f"racecheck did not finish in {timeout_s:.0f} s"}
    output = done.stdout + "\n" + done.stderr
    details = [line.strip("= ") for line in output.splitlines() if "Race reported" in line]
    summary = re.search(r"(\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", output)
    found = int(summary.group(2)) + int(summary.group(3)) if summary else len(details)
    if done.returncode == 3 or found:
        return {"passed": False, "hazards": details[:4] or [summary.group(0) if summary else "racecheck exit 3"]}
    if done.returncode != 0:
        return {"passed": False, "fault": "racecheck ended with an error:\n" + "\n".join(output.strip().splitlines()[-6:])}
    return {"passed": True, "hazards": []}


# ---- what the reader reads -------------------------------------------------------------------

def _fmt(v) -> str: return np.array2string(np.asarray(v, dtype=np.float64), precision=7, threshold=10, edgeitems=3)


def _measured(result: dict) -> str:
    rows, cols = result["shape"]
    bytes_per_element = result["ideal_bytes"] / (rows * cols)
    return (f"{rows} x {cols} fp32 in {result['ms'] * 1e3:.1f} us: {result['GBps']:.0f} GB/s counting the ideal "
            f"{bytes_per_element:.3g} bytes per element, {result['GBps'] / result['copy_GBps']:.2f} of a copy measured "
            "in the same run")


def _pair(value: float, expected: float) -> tuple[str, str]:
    """The two numbers with as many digits as it takes to tell them apart (9 at least, 17 at most)."""
    for digits in range(9, 18):
        a, b = f"{value:.{digits}g}", f"{expected:.{digits}g}"
        if a != b:
            break
    return a, b


def report(name: str, result: dict) -> str:
    where = " on the CPU emulator" if result.get("backend") == "cpu" or result.get("emulator") else ""
    if result.get("fault"):
        case = f" on {result['case']}" if result.get("case") else ""
        return f"{name}: FAILED{case}{where}: {result['fault']}\n(the notebook's own GPU context is unaffected: it ran elsewhere)"
    if not result["passed"]:
        index = ", ".join(map(str, result["index"]))
        unwritten = (f" ({result['unwritten']} of {result.get('outputs', '?')} outputs never written: they still "
                     "hold the poison the grader filled them with)") if result.get("unwritten") else ""
        value, expected = _pair(result["value"], result["expected_value"])
        lines = [f"{name}: FAILED on {result['case']}{where}: {result['output']}[{index}] is {value}, "
                 f"expected {expected}{unwritten}"]
        if "yours" in result:
            lines += [f"  yours:    {_fmt(result['yours'])}", f"  expected: {_fmt(result['expected'])}"]
        if "input" in result:
            lines.append(f"  {result['input_label']}: {_fmt(result['input'])}")
        return "\n".join(lines)
    exercise = EXERCISES.get(name)
    if "GBps" in result:
        text = f"{name}: passed; " + _measured(result)
        goal = exercise.min_fraction_of_copy if exercise else None
        if result["GBps"] > ABOVE_COPY * result["copy_GBps"]:
            return (f"{name}: FAILED: right values, but {result['GBps'] / result['copy_GBps']:.2f} of the copy: faster "
                    f"than moving the bytes the exercise needs ({_measured(result)}); what was timed did not do the work")
        if goal and result["GBps"] / result["copy_GBps"] < goal:
            return (f"{name}: FAILED: right on every case, but {result['GBps'] / result['copy_GBps']:.2f} of the copy; "
                    f"the exercise asks for {goal:.2f} ({_measured(result)})")
        return text
    if result.get("backend") == "cpu":
        text = f"{name}: passed on the CPU emulator (every case); timing it needs an NVIDIA GPU"
        if exercise and exercise.min_fraction_of_copy:
            text = (f"{name}: right on every case on the CPU emulator; not graded yet: the goal, "
                    f"{exercise.min_fraction_of_copy:.2f} of the copy, needs an NVIDIA GPU to measure")
        return text
    return f"{name}: passed"


def grade(name: str, path: Path | None = None, timeout_s: float = TIMEOUT_S, measure: bool = True) -> bool:
    """Build your copy (or `path`), run and check it (on the GPU, or on the CPU emulator without
    one); print what happened; True if it passed everything that can be checked here."""
    from onlinesoftmax.runtime import emulator

    exercise = _exercise(name)
    path = Path(path) if path is not None else your_copy(name)
    if not path.exists():
        print(f"{name}: no file {path}; start with kernel_exercises.start({name!r})")
        return False
    ok, log = build(path, name)
    if not ok:
        print(f"{name}: does not compile:\n{log}")
        return False
    backend = _backend_here()
    if backend == "cpu" and not emulator.available():
        print(f"{name}: {log}; running it needs an NVIDIA GPU or, for the CPU emulator, g++ (neither is here)")
        return False
    print(f"{name} ({exercise.difficulty}, chapter {exercise.chapter}): {exercise.story}")
    result = run(path, name, timeout_s, measure, backend)
    text = report(name, result)
    passed = result.get("passed") is True and "FAILED" not in text
    if passed and uses_shared_memory(path) and backend == "gpu":
        race = racecheck(path, name)
        if race["passed"] is False:
            text = f"{name}: FAILED: the values passed this time, but racecheck reports a shared-memory race:\n  " + \
                "\n  ".join(race.get("hazards") or [race.get("fault", "")])
            passed = False
        elif race["passed"] is None:
            text += f" ({race['note']}: a missing barrier can pass the values by luck)"
        else:
            text += "; racecheck: no shared-memory race"
    print(text)
    if backend == "cpu" and exercise.min_fraction_of_copy:
        print(recorded_expectation(name))
    return passed and not (backend == "cpu" and exercise.min_fraction_of_copy)


def verify_chapter(chapter: str) -> list[str]:
    """What a chapter's hidden cell runs: every solution of its kernel exercises builds and passes (on the
    GPU, else on the CPU emulator when g++ is there), and every starter but the slow one of the copy-ceiling
    exercise is rejected; one right by luck on a GPU (a missing barrier) goes to the emulator's race check
    (compute-sanitizer's racecheck where g++ is missing). AssertionError names the first that does not."""
    from onlinesoftmax.runtime import emulator
    names = [n for n, e in EXERCISES.items() if e.chapter == chapter]
    for name in names:
        ok, log = build(SOLUTIONS / f"{name}.cu", name)
        assert ok, f"solutions/{name}.cu: {log}"
    if _backend_here() == "cpu" and not emulator.available():
        return names
    jobs = [(folder / f"{n}.cu", n, folder is SOLUTIONS or bool(EXERCISES[n].min_fraction_of_copy))
            for n in names for folder in (SOLUTIONS, STARTERS)]
    # on a GPU: 8 subprocesses at once, a starter cut at STARTER_GPU_TIMEOUT_S, a solution judged by its
    # values there (the emulator's slow pass over a solution is a CPU-tier test)
    gpu = _backend_here() == "gpu"
    results = run_many([{"path": p, "name": n, "measure": False, "emulate": p.parent == STARTERS, "timeout_s":
                         STARTER_GPU_TIMEOUT_S if gpu and p.parent == STARTERS and not ok else TIMEOUT_S}
                        for p, n, ok in jobs], workers=8 if gpu else 4)
    for (path, n, should_pass), result in zip(jobs, results):
        passed = bool(result["passed"])
        if passed and not should_pass and uses_shared_memory(path) and gpu:
            # a missing barrier can give the right values by luck on a GPU: the race is the defect
            race = run(path, n, measure=False, backend="cpu") if emulator.available() else racecheck(path, n)
            if race["passed"] is None:
                print(f"{path.parent.name}/{path.name}: the values passed by luck and no race check ran here "
                      f"({race.get('note', 'no verdict')})")
            passed = race["passed"] is not False
        assert passed == should_pass, f"{path.parent.name}/{path.name}: {report(n, result)}"
    return names


# ---- timing two answers against each other ---------------------------------------------------

def run_compare(items, timeout_s: float = TIMEOUT_S) -> dict:
    """Check, then time, every (exercise, path) of `items` in one GPU subprocess, with one copy
    measured after them: {"passed", "results": [one run() result per item]} or {"fault"}."""
    return _subprocess(_command("compare", items, "gpu", True), timeout_s)


def compare(first: str, second: str, paths: dict | None = None, timeout_s: float = TIMEOUT_S) -> dict | None:
    """Time two answers at 4000 x 4096 fp32 in one process on a GPU, each checked first, and print
    their times and fractions of the same copy. Without a GPU, print the recorded times of the
    book's kernels of the same designs (labelled as such) and return None."""
    paths = paths or {}
    items = [(n, Path(paths.get(n, your_copy(n)))) for n in (first, second)]
    if _backend_here() == "cpu":
        print(recorded_comparison(first, second))
        return None
    for name, path in items:
        ok, log = build(path, name)
        if not ok:
            print(f"{name}: does not compile:\n{log}")
            return None
    result = run_compare(items, timeout_s)
    if result.get("fault"):
        print(report(f"{first} and {second}", result))
        return result
    for item in result["results"]:
        print(report(item["exercise"], item))
    if result["passed"]:
        a, b = result["results"]
        print(f"{first} takes {a['ms'] / b['ms']:.2f} times as long as {second}")
    return result

