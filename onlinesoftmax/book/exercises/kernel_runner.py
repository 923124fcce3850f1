"""The grading subprocess of the CUDA exercises: kernel_exercises starts it, so that an illegal
address, a hang or a poisoned CUDA context ends this process and never the reader's notebook.

    python -m onlinesoftmax.book.exercises.kernel_runner '<spec as JSON>'

spec: {"mode": "grade" | "compare" | "racecheck", "backend": "gpu" | "cpu",
       "items": [[exercise, path], ...], "measure": true | false}

It builds the kernel (cupy's NVRTC on a GPU; on the CPU, g++ and the emulator of kernels/emulator/),
runs it on every case of its task (kernel_tasks.py: the chapter's and hidden ones drawn from
spec["seed"]), checks every output against the float64 reference and every guard band, runs the
emulator's checks (on a GPU too, unless spec["emulate"] is false) and the exercise's design check,
and on a GPU times it (onlinesoftmax.measure.timer) against a device-to-device copy measured in the
same process, checking the timed launch's output as well. It prints one JSON line: what
kernel_exercises.report reads.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from onlinesoftmax.book.exercises import kernel_tasks as kt
from onlinesoftmax.book.exercises.grading import first_mismatch

COPY_BYTES = 2**28


# Shared memory is not cleared between kernels: a block that reads a slot no thread of it wrote sees
# whatever an earlier kernel left there, often harmless zeros. Before every checked launch this
# kernel fills the shared memory of every SM with NaN (as the CPU emulator fills each block's), so
# such a read shows in the output on the GPU too.
POISON_SHARED = r"""
extern "C" __global__ void poison_shared(int n_words) {
    extern __shared__ unsigned int words[];
    for (int i = threadIdx.x; i < n_words; i += blockDim.x) words[i] = 0xffffffffu;  // a NaN
}
"""


class GpuBackend:
    def __init__(self, path, entries):
        import cupy

        from onlinesoftmax.runtime import loader

        self.xp = cupy
        text, _ = loader.expand_source(Path(path))
        module = cupy.RawModule(code=text, options=("-std=c++17",))
        self.functions = {entry: module.get_function(entry) for entry in entries}
        self.poisoning = False   # check_values turns it on; timed launches run alone
        attributes = cupy.cuda.Device().attributes
        self.poison_bytes = attributes["MaxSharedMemoryPerBlockOptin"]
        self.poison_blocks = 2 * attributes["MultiProcessorCount"]   # at least one on every SM
        self.poison = cupy.RawModule(code=POISON_SHARED).get_function("poison_shared")
        self.poison.max_dynamic_shared_size_bytes = self.poison_bytes

    def launch(self, entry, grid, block, args, shared_bytes=0):
        if self.poisoning:
            self.poison((self.poison_blocks,), (1024,), (np.int32(self.poison_bytes // 4),),
                        shared_mem=self.poison_bytes)
        self.functions[entry](tuple(grid), tuple(block), tuple(args), shared_mem=shared_bytes)

    def sync(self):
        self.xp.cuda.Device().synchronize()


class CpuBackend:
    """The CPU emulator, with its race check on where it has one (a read and a write, or two writes, of
    one shared address by two threads that no barrier orders fail the launch), and, with `stats`, the
    global reads of every launch kept for the design checks."""
    xp = np
    poisoning = False   # the emulator fills every block's shared memory with NaN itself

    def __init__(self, path, entries):
        import inspect

        from onlinesoftmax.runtime import emulator

        self.module = emulator.Module(path, entries)
        known = inspect.signature(self.module.launch).parameters
        self.options = {"check_races": True} if "check_races" in known else {}
        self.can_count = "stats" in known
        self.stats = None                 # a list: every launch's LaunchStats are appended to it

    def launch(self, entry, grid, block, args, shared_bytes=0):
        if self.stats is not None:
            found = self.module.launch(entry, grid, block, args, shared_bytes, stats=True, **self.options)
            self.stats.append((entry, grid, args, found))
        else:
            self.module.launch(entry, grid, block, args, shared_bytes, **self.options)

    def sync(self):
        pass


def _mismatch(check: kt.Check, index, case: str) -> dict:
    """What report() quotes about the first wrong output of a case."""
    yours = np.asarray(check.yours, np.float64)
    result = {"passed": False, "case": case, "output": check.output, "index": [int(i) for i in index],
              "value": float(yours[index]), "expected_value": float(check.expected[index])}
    if yours.ndim >= 2:
        result["yours"], result["expected"] = yours[index[0]].tolist(), check.expected[index[0]].tolist()
    if check.rows is not None:
        result["input"], result["input_label"] = np.asarray(check.rows)[index[0]].tolist(), check.row_label
    if check.poison is not None:
        result["unwritten"] = int((np.asarray(check.yours) == check.poison).sum())
        result["outputs"] = int(np.asarray(check.yours).size)
    return result


def judge(checks, arena, case: str) -> dict | None:
    """The first wrong output (or written guard band) of one launch as report()'s dict, else None."""
    for check in checks:
        index = first_mismatch(check.yours, check.expected, check.tolerance)
        if index is not None:
            return _mismatch(check, index, case)
    written = arena.overwritten()
    if written:
        return {"passed": False, "case": case, "fault": f"your kernel wrote past the end of {', '.join(written)} "
                                                        "(into the guard band the grader puts after each output)"}
    return None


def check_values(backend, task, exercise: str, seed: int = 0, small: bool = False) -> dict:
    """Every case (the chapter's and the hidden ones drawn from `seed`), each on fresh inputs and
    poisoned outputs; the first wrong output (or guard band) as a dict; {"passed": True} otherwise.
    Each launch finds shared memory full of NaN (GpuBackend.poisoning)."""
    backend.poisoning = True
    for case, inputs in task.cases(seed, small):
        arena = kt.Arena(backend.xp)
        try:
            checks = task.run(backend, exercise, inputs, arena)
        except Exception as error:   # the emulator stopped the launch, or cupy raised
            return {"passed": False, "case": case, "fault": f"{type(error).__name__}: {error}"}
        wrong = judge(checks, arena, case)
        if wrong:
            return wrong
    return {"passed": True}


# ---- design: what the kernel reads, counted by the emulator ----------------------------------

DESIGN_CASE = np.random.default_rng(5).standard_normal((2, 1000)).astype(np.float32)


def check_design(backend, task, exercise: str, design: str | None) -> dict | None:
    """The design the exercise asks for, from the emulator's counts of global reads (None when
    the exercise asks for none or this emulator cannot count):
    "two passes": no element of x read more than twice (a three-pass kernel reads it three times);
    "split": in each launch each block reads at most half the row (plus one column for an odd row)."""
    if design is None or not getattr(backend, "can_count", False):
        return None
    x_host = DESIGN_CASE
    backend.stats = []
    try:
        task.run(backend, exercise, {"x": x_host}, kt.Arena(backend.xp))
    except Exception as error:
        return {"passed": False, "case": "the design check", "fault": f"{type(error).__name__}: {error}"}
    finally:
        launches, backend.stats = backend.stats, None
    n_cols = x_host.shape[1]
    case = f"the design check ({x_host.shape[0]} rows of {n_cols})"
    for entry, grid, args, stats in launches:
        if design == "two passes":
            most = int(np.max(np.asarray(stats.reads[0])))
            if most > 2:
                return {"passed": False, "case": case, "fault": (
                    f"right values, but {entry} reads an element of x {most} times; the exercise asks for "
                    "two passes: at most 2 reads of each element")}
        else:
            half = -(-n_cols // 2)
            for block, indices in enumerate(stats.block_reads[0]):
                columns = len(set(np.asarray(indices).ravel().tolist()))
                if columns > half:
                    return {"passed": False, "case": case, "fault": (
                        f"right values, but block {block} of {entry} reads {columns} elements of x, more than half "
                        f"its row ({half} of {n_cols}): the exercise asks for the row split between two blocks")}
    return None


def measure(backend, task, exercise: str, seed: int = 0) -> dict:
    """Device time at the task's timed shape (the book's one timer) and the ideal bytes over it, on
    fresh inputs and a poisoned output; the output of the timed launches is then checked like any
    other ({"passed": False, ...} when it is wrong)."""
    from onlinesoftmax.measure import timer

    backend.poisoning = False
    arena = kt.Arena(backend.xp)
    launch, ideal_bytes, expected = task.timed(backend, exercise, arena, seed)
    ms = timer.time_gpu(launch, [()])["ms"]
    backend.sync()
    rows, cols = task.timed_shape
    wrong = judge(expected(), arena, f"the timed launch ({rows} x {cols})")
    if wrong:
        return wrong
    return {"ms": ms, "GBps": ideal_bytes / ms / 1e6, "ideal_bytes": int(ideal_bytes), "shape": list(task.timed_shape)}


def _emulator_here() -> bool:
    from onlinesoftmax.runtime import emulator

    return emulator.available()


def _backend(kind: str, path: str, entries):
    return (GpuBackend if kind == "gpu" else CpuBackend)(path, entries)


def main(spec: dict) -> dict:
    from onlinesoftmax.book.exercises.kernel_exercises import EXERCISES

    results = []
    seed = int(spec.get("seed", 0))
    for exercise, path in spec["items"]:
        task = EXERCISES[exercise].task
        backend = _backend(spec["backend"], path, task.entries(exercise))
        if spec["mode"] == "racecheck":          # one small launch, nothing else, under compute-sanitizer
            case, inputs = task.racecheck_case()
            task.run(backend, exercise, inputs, kt.Arena(backend.xp))
            return {"passed": True, "case": case}
        result = check_values(backend, task, exercise, seed, small=spec["backend"] == "cpu")
        emulated = backend if spec["backend"] == "cpu" else None
        if result["passed"] and spec["backend"] == "gpu" and spec.get("emulate", True) and _emulator_here():
            # the emulator's checks on the GPU too (races, exited warps at a barrier, misaligned and
            # out-of-bounds accesses, design), so both graders give the same verdict
            emulated = CpuBackend(path, task.entries(exercise))
            result = check_values(emulated, task, exercise, seed, small=True)
            if not result["passed"]:
                result["emulator"] = True
        if result["passed"] and emulated is not None:
            result = check_design(emulated, task, exercise, EXERCISES[exercise].design) or result
        if result["passed"] and spec.get("measure") and spec["backend"] == "gpu" and task.timed_shape:
            result.update(measure(backend, task, exercise, seed))
        result["exercise"] = exercise
        results.append(result)
    timed = [r for r in results if "ms" in r]
    if timed:                                    # one copy, measured after the kernels, for all of them
        from onlinesoftmax.measure import timer

        copy_GBps = timer.copy_bandwidth(COPY_BYTES)["GBps"]
        for r in timed:
            r["copy_GBps"] = copy_GBps
    if spec["mode"] == "compare":
        return {"passed": all(r["passed"] for r in results), "results": results}
    return results[0]


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
