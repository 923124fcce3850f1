"""CUDA exercises: the reader edits a copy of a starter kernel, the grader builds and runs it.

    path = kernel_exercises.start("fix_missing_guard")   # exercises/fix_missing_guard.cu, yours to edit
    kernel_exercises.grade("fix_missing_guard")           # build, run, check, measure

The starters live in exercises/starters/ (the book's own kernels under kernels/ are never
touched), the solutions in exercises/solutions/. Grading a kernel:

1. builds it (nvcc when it is installed, else NVRTC): a compile error is shown with the line
   numbers of your file;
2. on a GPU, runs it **in a separate process with a timeout**, so an illegal address, a hang or
   a poisoned CUDA context ends that process, never the notebook: the report says which;
3. checks every row of the edge matrix (sizes 1 .. 4097, rows with -inf, all -inf, +inf, NaN,
   logits near +-1000) against the float64 softmax, outputs poisoned beforehand, with the
   tests' tolerance, and quotes the first wrong row;
4. reports bytes moved per element and the bandwidth against a copy measured in the same run.

Without a GPU it builds the kernel and says plainly that running it needs one.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onlinesoftmax.runtime import loader

EXERCISES_DIR = loader.REPO_ROOT / "exercises"
STARTERS, SOLUTIONS = EXERCISES_DIR / "starters", EXERCISES_DIR / "solutions"
TIMEOUT_S = 60
BLOCK = 256
EDGE_SIZES = (1, 2, 3, 31, 33, 100, 257, 4097)
TIMED_SHAPE = (4000, 4096)


@dataclass(frozen=True)
class KernelExercise:
    name: str       # = the starter's stem = its extern "C" entry
    story: str


EXERCISES = {e.name: e for e in (
    KernelExercise("online_softmax", "write the online softmax kernel: one pass for (m, l), one for the output"),
    KernelExercise("fix_missing_guard", "NaN on short rows: the combine of two empty states"),
    KernelExercise("fix_max_init_zero", "NaN on rows of large negative logits: the state's first maximum"),
    KernelExercise("fix_tail", "wrong unless N is a multiple of the block: the last, partial stride"),
    KernelExercise("fix_shared_oob", "run-to-run garbage: warp 0 reads shared slots no warp wrote"),
    KernelExercise("fix_early_return", "short rows: threads leave before the block's barrier and shuffles"),
    KernelExercise("fix_shuffle_mask", "a full-warp shuffle that only some lanes reach"),
)}


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


def build(path: Path) -> tuple[bool, str]:
    """Compile one exercise kernel: (ok, the compiler's messages, naming your file's lines).
    With NVRTC, the compiler cupy runs it with (no math.h there, for one), and with nvcc when it
    is installed (its messages are the clearer ones)."""
    path = Path(path)
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
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False, "NVRTC (what cupy compiles with): " + log.decode(errors="replace").strip("\x00 \n")
    return True, "built with " + " and ".join(built + ["NVRTC (sm_80)"])


# ---- the run, in its own process -------------------------------------------------------------

def edge_rows() -> list[tuple[str, np.ndarray]]:
    from onlinesoftmax import checks

    cases = [(f"{n_rows} rows of {n}", checks.random_rows(np, n_rows, n, seed=n))
             for n, n_rows in zip(EDGE_SIZES, (3, 3, 3, 5, 5, 7, 3, 2))]
    special, _ = checks.special_rows(np, 300)
    cases.append(("rows with -inf, all -inf, +inf and NaN", special))
    rng = np.random.default_rng(7)
    cases.append(("logits near +1000 and near -1000",
                  np.concatenate([rng.standard_normal((2, 500)) + 1000, rng.standard_normal((2, 500)) - 1000])
                  .astype(np.float32)))
    return cases


def _child(path: str, name: str, measure: bool) -> dict:
    """Runs in the grading subprocess: build, launch on every case, check, time. One JSON dict."""
    import cupy

    from onlinesoftmax import checks, reference
    from onlinesoftmax.book.grading import Tolerance, first_mismatch

    text, _ = loader.expand_source(Path(path))
    kernel = cupy.RawModule(code=text, options=("-std=c++17",)).get_function(name)

    def launch(x, y):
        kernel((x.shape[0],), (BLOCK,), (x, y, np.int32(x.shape[1]), np.int64(x.shape[1]), np.int64(y.shape[1])))

    for case, host in edge_rows():
        x = cupy.asarray(host)
        y = checks.poisoned_like(x)
        launch(x, y)
        cupy.cuda.Device().synchronize()
        yours, expected = y.get(), reference.softmax(host)
        base = checks.max_abs_error(reference.softmax_same_dtype(host), expected)
        rule = Tolerance(rtol=0.0, atol=checks.tolerance(base if np.isfinite(base) else 0.0, expected, np.float32))
        index = first_mismatch(yours, expected, rule)
        if index is not None:
            row = index[0]
            return {"passed": False, "case": case, "index": list(index), "yours": yours[row].tolist(),
                    "expected": expected[row].tolist(), "input": host[row].tolist(),
                    "unwritten": int(checks.unwritten(y))}
    result = {"passed": True}
    if measure:
        from onlinesoftmax.measure import timer

        x = cupy.asarray(np.random.default_rng(0).standard_normal(TIMED_SHAPE, dtype=np.float32))
        y = cupy.empty_like(x)
        ms = timer.time_gpu(lambda: launch(x, y), [()])["ms"]
        copy = timer.copy_bandwidth(2**28)
        result.update(ms=ms, GBps=x.nbytes * 2 / ms / 1e6, copy_GBps=copy["GBps"], bytes_per_element_ideal=8)
    return result


def run(path: Path, name: str, timeout_s: float = TIMEOUT_S, measure: bool = True) -> dict:
    """Build and check the kernel in a subprocess; never raises for the kernel's faults."""
    command = [sys.executable, "-m", "onlinesoftmax.book.kernel_exercises", str(path), name] + \
              ([] if measure else ["--no-measure"])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              cwd=loader.REPO_ROOT)
    except subprocess.TimeoutExpired:
        return {"passed": False, "fault": f"did not finish in {timeout_s:.0f} s: a hang (a barrier or a shuffle "
                                          "that some threads never reach, or a loop that never ends)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        return {"passed": False, "fault": f"the run ended with an error (exit {done.returncode}):\n{tail}"}
    return json.loads(lines[-1])


def report(name: str, result: dict) -> str:
    if result.get("fault"):
        return f"{name}: FAILED: {result['fault']}\n(the notebook's own GPU context is unaffected: it ran elsewhere)"
    if not result["passed"]:
        fmt = lambda v: np.array2string(np.asarray(v, dtype=np.float64), precision=7, threshold=10, edgeitems=3)
        lines = [f"{name}: FAILED on {result['case']}: y{tuple(result['index'])} is wrong"
                 + (f" ({result['unwritten']} outputs never written)" if result["unwritten"] else ""),
                 f"  yours:    {fmt(result['yours'])}", f"  expected: {fmt(result['expected'])}",
                 f"  input row: {fmt(result['input'])}"]
        return "\n".join(lines)
    text = f"{name}: passed"
    if "GBps" in result:
        text += (f"; {TIMED_SHAPE[0]} x {TIMED_SHAPE[1]} fp32 in {result['ms'] * 1e3:.1f} us: "
                 f"{result['GBps']:.0f} GB/s counting the ideal 8 bytes per element, "
                 f"{result['GBps'] / result['copy_GBps']:.2f} of a copy measured in the same run")
    return text


def grade(name: str, path: Path | None = None, timeout_s: float = TIMEOUT_S, measure: bool = True) -> bool:
    """Build your copy (or `path`), run and check it on a GPU; print what happened; True if it passed."""
    from onlinesoftmax.runtime import device

    exercise = _exercise(name)
    path = Path(path) if path is not None else your_copy(name)
    if not path.exists():
        print(f"{name}: no file {path}; start with kernel_exercises.start({name!r})")
        return False
    ok, log = build(path)
    if not ok:
        print(f"{name}: does not compile:\n{log}")
        return False
    if not device.has_gpu():
        print(f"{name}: {log}; running and checking it needs an NVIDIA GPU (none here)")
        return False
    text = report(exercise.name, run(path, exercise.name, timeout_s, measure))
    print(text)
    return text.startswith(f"{name}: passed")


if __name__ == "__main__":   # the grading subprocess
    arguments = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(json.dumps(_child(arguments[0], arguments[1], "--no-measure" not in sys.argv)))
