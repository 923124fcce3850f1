"""GPU tier for the CUDA exercises: every solution passes its grader, every starter of a
fix-the-bug exercise, every unwritten starter and every deliberately wrong kernel
(tests/wrong_kernels/) is rejected, the missing barrier is caught by racecheck when the values
happen to pass (racecheck runs on every kernel with shared memory), the emulator's checks run on
the GPU too (the same verdict on exited warps, misaligned loads, races), the timed launch's output is
checked, a kernel that writes far out of bounds or never finishes is reported as a failure
while this process's own launches (and the grader's next run) keep working, and the timed
exercises are measured against a copy in the same run.

The gradings run in parallel subprocesses (kernel_exercises.run_many), once for the module; the
timed ones run afterwards, one at a time, so nothing else shares the GPU while they are timed.
The whole file takes about a minute on an H200, compilation included.
"""
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax.book.exercises import kernel_exercises as kx

# one worker runs the whole file under `--dist loadgroup` (make gpu-test, scripts/device_round.sh): the
# module fixture below grades every kernel once, where each worker holding one of its tests would
# grade them all again (three workers did, 4 minutes each, under 16 workers on one GPU)
pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("kernel_exercises")]

WRONG = Path(__file__).parents[1] / "wrong_kernels"
CRASHES = {"online_softmax__oob_write.cu": 30, "online_softmax__hang.cu": 8}   # the grader's timeout for each
TIMED_ONLY = {"row_in_registers__skips_the_timed_launch.cu"}   # wrong only at the timed shape: graded with timing
WRONG_FILES = sorted(p.name for p in WRONG.glob("*.cu") if p.name not in CRASHES and p.name not in TIMED_ONLY)
# racecheck runs on every kernel that declares shared memory (as grade() does)
RACECHECKED = {("solution", n): kx.SOLUTIONS / f"{n}.cu" for n in kx.EXERCISES
               if kx.uses_shared_memory(kx.SOLUTIONS / f"{n}.cu")}
RACECHECKED |= {("wrong", f): WRONG / f for f in WRONG_FILES if kx.uses_shared_memory(WRONG / f)}
RACECHECKED |= {("starter", "fix_attention_barrier"): kx.STARTERS / "fix_attention_barrier.cu"}
SLOW_STARTER = "row_in_registers"        # right, and too slow: rejected by its bandwidth (below)


def _job(path: Path, timeout_s: float = 180) -> dict:
    return {"path": path, "name": path.stem.split("__")[0], "timeout_s": timeout_s, "measure": False, "backend": "gpu"}


@pytest.fixture(scope="module")
def graded():
    """Every grading run of this file, 8 subprocesses at a time, and the two racechecks beside them."""
    jobs = {("solution", n): _job(kx.SOLUTIONS / f"{n}.cu") for n in kx.EXERCISES}
    # a starter may hang (a shuffle some lanes never reach is undefined on a GPU): a shorter timeout
    jobs |= {("starter", n): _job(kx.STARTERS / f"{n}.cu", 120) for n in kx.EXERCISES if n != SLOW_STARTER}
    jobs |= {("wrong", f): _job(WRONG / f, 120) for f in WRONG_FILES}
    jobs |= {("crash", f): _job(WRONG / f, timeout_s=t) for f, t in CRASHES.items()}
    with ThreadPoolExecutor(max_workers=4) as side:
        races = {key: side.submit(kx.racecheck, path, path.stem.split("__")[0]) for key, path in RACECHECKED.items()}
        results = dict(zip(jobs, kx.run_many(list(jobs.values()), workers=8)))
        results |= {("racecheck",) + key: future.result() for key, future in races.items()}
    return results


@pytest.mark.parametrize("name", list(kx.EXERCISES))
def test_the_solution_passes(graded, name):
    result = graded[("solution", name)]
    assert result["passed"], kx.report(name, result)


@pytest.mark.parametrize("name", [n for n in kx.EXERCISES if n != SLOW_STARTER])
def test_the_starter_is_rejected(graded, name):
    result = graded[("starter", name)]
    if name == "fix_attention_barrier" and result["passed"]:   # a race can give the right values by luck
        race = graded[("racecheck", "starter", name)]
        assert race["passed"] is False and race.get("hazards"), f"{name}: neither the values nor racecheck caught it: {race}"
        return
    assert not result["passed"] and kx.report(name, result).startswith(f"{name}: FAILED"), kx.report(name, result)


@pytest.mark.parametrize("file", WRONG_FILES)
def test_every_wrong_kernel_is_rejected(graded, file):
    name = file.split("__")[0]
    result = graded[("wrong", file)]
    race = graded.get(("racecheck", "wrong", file))
    if result["passed"] and race is not None:    # a race can give the right values: racecheck must catch it
        assert race["passed"] is False and race.get("hazards"), f"{file}: neither the values nor racecheck caught it: {race}"
        return
    assert not result["passed"], f"{file} passed the grader"
    assert kx.report(name, result).startswith(f"{name}: FAILED"), kx.report(name, result)


@pytest.mark.parametrize("file", ["fix_early_return__whole_warps_exit.cu", "row_in_registers__unaligned_float4.cu"])
def test_the_gpu_grader_gives_the_emulators_verdict(graded, file):
    """Whole warps that exit before a barrier run on a GPU and fault in the emulator; misaligned
    16-byte loads fault on a GPU: both graders fail both."""
    assert not graded[("wrong", file)]["passed"], kx.report(file.split("__")[0], graded[("wrong", file)])


def test_the_old_combine_fails_where_the_emulator_says(graded):
    text = kx.report("online_softmax", graded[("wrong", "online_softmax__combine_returns_empty.cu")])
    assert "FAILED on rows with -inf, all -inf, +inf and NaN: y[3, 0]" in text and "expected nan" in text, text


@pytest.mark.parametrize("key", sorted(k for k in RACECHECKED if k[0] == "solution"))
def test_racecheck_is_clean_on_every_solution_with_shared_memory(graded, key):
    race = graded[("racecheck",) + key]
    assert race["passed"] is True, race


@pytest.mark.parametrize("file", ["three_pass_softmax__no_barrier_after_read.cu", "fix_attention_barrier__syncwarp.cu"])
def test_racecheck_finds_the_missing_barriers(graded, file):
    race = graded[("racecheck", "wrong", file)]
    assert race["passed"] is False and race.get("hazards"), race


@pytest.mark.parametrize("file, words", [("online_softmax__oob_write.cu", ("illegal", "exit")),
                                         ("online_softmax__hang.cu", ("did not finish in 8 s",))])
def test_a_crashing_kernel_is_a_failure_and_this_process_goes_on(graded, file, words):
    result = graded[("crash", file)]
    text = kx.report("online_softmax", result)
    assert not result["passed"] and result.get("fault") and any(w in text for w in words), text
    x = cp.asarray(np.random.default_rng(0).standard_normal((3, 100), dtype=np.float32))
    y = osm.softmax(x)
    assert bool(cp.allclose(y.sum(axis=1), 1, rtol=1e-5)), "the next launch here must work"
    again = kx.run(kx.SOLUTIONS / "online_softmax.cu", "online_softmax", measure=False)
    assert again["passed"], "the grader's next run must work: " + kx.report("online_softmax", again)


# ---- timed, one at a time, after the parallel gradings ----------------------------------------

def test_grading_measures_against_a_copy(graded, capsys):
    assert kx.grade("online_softmax", path=kx.SOLUTIONS / "online_softmax.cu")
    out = capsys.readouterr().out
    assert "GB/s counting the ideal 8 bytes per element" in out and "of a copy measured in the same run" in out


def test_the_copy_ceiling_exercise_is_graded_by_bandwidth(graded, capsys):
    assert kx.grade(SLOW_STARTER, path=kx.SOLUTIONS / f"{SLOW_STARTER}.cu"), capsys.readouterr().out
    capsys.readouterr()
    slow = kx.run(kx.STARTERS / f"{SLOW_STARTER}.cu", SLOW_STARTER)
    text = kx.report(SLOW_STARTER, slow)
    assert slow["passed"] and text.startswith(f"{SLOW_STARTER}: FAILED: right on every case, but"), text


def test_the_timed_launchs_output_is_checked(graded):
    file = "row_in_registers__skips_the_timed_launch.cu"
    result = kx.run(WRONG / file, "row_in_registers")
    text = kx.report("row_in_registers", result)
    assert not result["passed"] and "FAILED on the timed launch (4000 x 4096)" in text, text


def test_the_warm_up_kernel_is_timed(graded, capsys):
    assert kx.grade("scale_vector", path=kx.SOLUTIONS / "scale_vector.cu"), capsys.readouterr().out


def test_compare_times_the_three_pass_and_the_online_kernel(graded, capsys):
    paths = {n: kx.SOLUTIONS / f"{n}.cu" for n in ("three_pass_softmax", "online_softmax")}
    result = kx.compare("three_pass_softmax", "online_softmax", paths=paths)
    out = capsys.readouterr().out
    assert result["passed"] and all(r["ms"] > 0 for r in result["results"]), out
    assert "three_pass_softmax takes" in out and out.count("of a copy measured in the same run") == 2, out
