"""The CUDA exercises on CPU: every starter and solution builds (nvcc and NVRTC), a compile error
names the reader's line, the reader's copy is never the book's kernel; on the CPU emulator
(kernels/emulator/ with its fixed schedule: the same .cu, every thread a fiber, run in thread
order) every solution passes its grader, and every starter of a fix-the-bug exercise, every
unwritten starter and every deliberately wrong kernel in tests/wrong_kernels/ is rejected with the
message that names its bug; a kernel that crashes or hangs is a report, and the caller goes on. The GPU tier
(tests/gpu/test_kernel_exercises_gpu.py) runs the same kernels on the device."""
import importlib.util
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from onlinesoftmax.book.exercises import kernel_runner
from onlinesoftmax.book.exercises import kernel_exercises as kx
from onlinesoftmax.runtime import emulator, loader

try:
    import cuda.bindings.nvrtc  # noqa: F401
    HAVE_COMPILER = True
except ImportError:
    HAVE_COMPILER = loader.nvcc_available()

WRONG = Path(__file__).parent / "wrong_kernels"
needs_emulator = pytest.mark.skipif(not emulator.available() and not os.environ.get("CI"),
                                    reason="the CPU emulator needs g++ (under CI=true a missing g++ fails)")

# What the grader must say about each kernel that is not right (on the CPU emulator).
REJECTED = {
    "starters/online_softmax.cu": "FAILED on the row [1, 2, 3] on the CPU emulator: y[0, 0] is 1.23449997e+30, expected 0.0900305732 (3 of 3 outputs never written",
    "starters/three_pass_softmax.cu": "(3 of 3 outputs never written",
    "starters/split_merge.cu": "(3 of 3 outputs never written",
    "starters/lse_rows.cu": "lse[0] is 1.23449997e+30, expected 3.40760596 (1 of 1 outputs never written",
    "starters/fix_missing_guard.cu": "FAILED on the row [1, 2, 3] on the CPU emulator: y[0, 0] is nan",
    "starters/fix_max_init_zero.cu": "FAILED on logits near +1000 and near -1000 on the CPU emulator: y[2, 0] is nan",
    "starters/fix_tail.cu": "FAILED on the row [1, 2, 3] on the CPU emulator: y[0, 0] is inf",
    "starters/fix_shared_oob.cu": "y[0, 0] is nan",      # warp 0 read slots nobody wrote: 0xff bytes, NaN
    "starters/fix_early_return.cu": "calls __shfl_xor_sync with mask 0xffffffff, but lane 3 returned before it",
    "starters/fix_shuffle_mask.cu": "threads 0-7 wait in __shfl_xor_sync (mask 0xffffffff, line 29); threads 8-255 wait at __syncthreads()",
    "starters/fix_topk_ties.cu": "FAILED on rows of rounded logits: many equal values on the CPU emulator: columns[0, 1] is 179, expected 15",
    "starters/fix_topk_insert.cu": "columns[0, 2] is 64, expected 32",
    "starters/fix_attention_barrier.cu": "FAILED on 31 queries, 33 keys on the CPU emulator: EmulatorRace: shared-memory race",
    "starters/fix_attention_tail.cu": "FAILED on one query, one key on the CPU emulator: EmulatorOutOfBounds: out-of-bounds read of argument 1",
    "wrong/online_softmax__combine_returns_empty.cu":
        "FAILED on rows with -inf, all -inf, +inf and NaN on the CPU emulator: y[3, 0] is 2.88900969e-06, expected nan",
    "wrong/split_merge__own_half.cu": "FAILED on the row [1, 2, 3] on the CPU emulator: y[0, 0] is 0.268941432",
    "wrong/split_merge__sums_not_rebased.cu": "y[0, 0] is 0.0571546368, expected 0.0900305732",
    "wrong/lse_rows__naive.cu": "lse[4] is inf, expected 160.560572",
    "wrong/lse_rows__no_log.cu": "lse[0] is 4.50321484, expected 3.40760596",
    "wrong/lse_rows__one_row_only.cu": "(2 of 3 outputs never written",
    "wrong/three_pass_softmax__no_shift.cu": "is nan, expected 0.99976136",
    "wrong/row_in_registers__no_tail_check.cu": "FAILED on the row [1, 2, 3] on the CPU emulator: EmulatorOutOfBounds: out-of-bounds read of argument 0",
    "wrong/fix_attention_tail__no_rescale.cu": "FAILED on 2 heads, 2 queries, 31 keys on the CPU emulator: o[0, 0]",
    "wrong/fix_topk_ties__uniform_probs.cu": "probs[0, 0] is 0.333333343, expected 0.665240956",
    "wrong/fix_topk_insert__no_last_check.cu": "FAILED on the four largest in one lane's slice",   # shifts, never asks
    "wrong/fix_topk_ties__no_last_check.cu": "FAILED on the four largest in one lane's slice",     # if p beats the last
    "wrong/fix_attention_tail__m_init_zero.cu": "FAILED on every score near -1000",   # m = 0, not -inf: e^(s - 0) = 0
}
REJECTED |= {
    "wrong/online_softmax__all_zeros.cu": "FAILED on the row [1, 2, 3] on the CPU emulator: y[0, 0] is 0, expected 0.0900305732",
    "starters/scale_vector.cu": "(3 of 3 outputs never written",
    "wrong/scale_vector__no_bounds_check.cu": "EmulatorOutOfBounds: out-of-bounds read of argument 0",
    "wrong/scale_vector__thread_index_only.cu": "y[256] is 1.23449997e+30",
    "starters/row_sum.cu": "(1 of 1 outputs never written",
    "wrong/row_sum__one_warp_only.cu": "FAILED on 5 rows of 33 on the CPU emulator: out[0] is -108.113876",
    "wrong/fix_attention_tail__no_max_subtraction.cu": "FAILED on hidden case: 5 queries, ",
    "wrong/fix_max_init_zero__init_minus_1e4.cu": "near -1e7 and near -1e5 on the CPU emulator: y[0, 0] is nan",
    "wrong/fix_max_init_zero__init_minus_1e6.cu": "near -1e7 and near -1e5 on the CPU emulator: y[0, 0] is nan",
    "wrong/online_softmax__visible_sizes_only.cu": "FAILED on hidden case: 4 rows of ",
    "wrong/row_sum__visible_sizes_only.cu": "FAILED on hidden case: 4 rows of ",
    "wrong/fix_early_return__whole_warps_exit.cu": "__syncthreads() reached by only some of the block's threads",
}
# Right values, rejected by the emulator's race, bounds and read-count checks.
NEEDS_CHECKS = {
    "wrong/three_pass_softmax__no_barrier_after_read.cu": "EmulatorRace: shared-memory race (write-after-read)",
    "wrong/fix_attention_barrier__syncwarp.cu": "EmulatorRace: shared-memory race",
    "wrong/fix_attention_tail__load_past_n_then_mask.cu": "EmulatorOutOfBounds: out-of-bounds read of argument 1",
    "wrong/online_softmax__three_pass.cu": "reads an element of x 3 times; the exercise asks for two passes",
    "wrong/split_merge__every_block_reads_the_whole_row.cu": "more than half its row",
    "wrong/row_in_registers__unaligned_float4.cu": "EmulatorMisaligned",
    "wrong/row_sum__no_barrier.cu": "EmulatorRace: shared-memory race (write-after-read)",
    "wrong/row_sum__no_tail_check.cu": "EmulatorOutOfBounds: out-of-bounds read of argument 0",
}
GPU_ONLY = {"wrong/row_in_registers__skips_the_timed_launch.cu"}   # only the timed launch (4000 rows) is wrong
CRASHES = {"wrong/online_softmax__oob_write.cu": "killed by SIGSEGV (an access outside the arrays)",
           "wrong/online_softmax__hang.cu": "did not finish in 5 s: a hang"}


def kernel_path(key: str) -> tuple[str, Path]:
    folder, file = key.split("/")
    path = (WRONG if folder == "wrong" else kx.EXERCISES_DIR / folder) / file
    return path.stem.split("__")[0], path


def on_the_emulator(name: str, path: Path) -> dict:
    """The grading run, in this process (the subprocess is tested below): what report() reads."""
    spec = {"mode": "grade", "backend": "cpu", "items": [[name, str(path)]], "measure": False}
    return kernel_runner.main(spec) | {"backend": "cpu"}


def test_every_exercise_has_a_starter_and_a_solution_with_its_entries():
    for name, exercise in kx.EXERCISES.items():
        for folder in (kx.STARTERS, kx.SOLUTIONS):
            assert not kx.missing_entries(folder / f"{name}.cu", name), (folder, name)
        if name.startswith("fix_"):   # a fix-the-bug starter differs from its solution
            assert (kx.STARTERS / f"{name}.cu").read_text() != (kx.SOLUTIONS / f"{name}.cu").read_text()
    assert set(REJECTED) >= {f"starters/{n}.cu" for n in kx.EXERCISES if n != "row_in_registers"}
    assert {f"wrong/{p.name}" for p in WRONG.glob("*.cu")} == \
        {k for k in {**REJECTED, **CRASHES, **NEEDS_CHECKS} if k.startswith("wrong/")} | GPU_ONLY
    for exercise in kx.EXERCISES.values():
        assert exercise.difficulty in kx.DIFFICULTIES, exercise.name


def _emulator_checks() -> bool:
    import inspect

    return {"check_races", "stats"} <= set(inspect.signature(emulator.Module.launch).parameters)


@pytest.mark.skipif(not HAVE_COMPILER, reason="needs nvcc or NVRTC")
@pytest.mark.parametrize("folder", ["starters", "solutions"])
@pytest.mark.parametrize("name", list(kx.EXERCISES))
def test_every_starter_and_solution_builds(name, folder):
    ok, log = kx.build(kx.EXERCISES_DIR / folder / f"{name}.cu", name)
    assert ok, log
    if importlib.util.find_spec("cuda") is not None:
        assert "NVRTC" in log, "built with NVRTC too: the compiler cupy runs the exercise with"


@pytest.mark.skipif(not HAVE_COMPILER, reason="needs nvcc or NVRTC")
def test_a_compile_error_names_the_readers_line(tmp_path):
    path = tmp_path / "mine.cu"
    text = (kx.SOLUTIONS / "online_softmax.cu").read_text().splitlines()
    line = next(i for i, t in enumerate(text) if "const float inv_l" in t) + 1
    text[line - 1] = text[line - 1].replace("row.l", "row.q")
    path.write_text("\n".join(text) + "\n")
    ok, log = kx.build(path)
    assert not ok and "mine.cu" in log and str(line) in log, log


def test_a_missing_entry_is_named_before_compiling(tmp_path):
    path = tmp_path / "split_merge.cu"
    path.write_text((kx.SOLUTIONS / "split_merge.cu").read_text().replace("split_merge_output(", "split_merge_out("))
    ok, log = kx.build(path, "split_merge")
    assert not ok and 'extern "C" __global__ void split_merge_output(...)' in log, log


def test_start_copies_the_starter_once(tmp_path, monkeypatch):
    monkeypatch.setattr(kx, "EXERCISES_DIR", tmp_path)
    path = kx.start("fix_tail")
    assert path == tmp_path / "fix_tail.cu" and path.read_text() == (kx.STARTERS / "fix_tail.cu").read_text()
    path.write_text("// mine")
    assert kx.start("fix_tail").read_text() == "// mine", "the reader's edits are kept"
    assert not str(path).startswith(str(loader.KERNELS_DIR))
    with pytest.raises(ValueError, match="known"):
        kx.start("fix_everything")


@needs_emulator
@pytest.mark.parametrize("name", list(kx.EXERCISES))
def test_every_solution_passes_on_the_emulator(name):
    result = on_the_emulator(name, kx.SOLUTIONS / f"{name}.cu")
    assert result["passed"], kx.report(name, result)
    text = kx.report(name, result)
    assert "passed on the CPU emulator" in text or "right on every case on the CPU emulator" in text, text


@needs_emulator
@pytest.mark.parametrize("key", list(REJECTED))
def test_every_wrong_kernel_is_rejected_with_its_reason(key):
    name, path = kernel_path(key)
    text = kx.report(name, on_the_emulator(name, path))
    assert text.startswith(f"{name}: FAILED") and REJECTED[key] in text, text


@needs_emulator
@pytest.mark.skipif(not _emulator_checks(), reason="this emulator has no race, bounds, alignment or read-count checks")
@pytest.mark.parametrize("key", list(NEEDS_CHECKS))
def test_the_emulators_checks_reject_what_the_values_miss(key):
    name, path = kernel_path(key)
    text = kx.report(name, on_the_emulator(name, path))
    assert text.startswith(f"{name}: FAILED") and NEEDS_CHECKS[key] in text, text


@needs_emulator
def test_the_hidden_cases_change_with_the_seed_and_avoid_the_visible_sizes():
    from onlinesoftmax.book.exercises import kernel_tasks as kt

    labels = {seed: [label for label, _ in kt.SoftmaxRows().cases(seed, small=True) if label.startswith("hidden")]
              for seed in (1, 2, 3)}
    assert len({tuple(v) for v in labels.values()}) > 1
    for seed in (1, 2, 3):
        for _, x in kt.hidden_rows(seed, small=True)[1:]:
            assert x.shape[1] not in kt.VISIBLE_SIZES and x.shape[1] % 32


def test_feedback_shows_the_digits_where_the_values_differ():
    a = float(np.float32(0.1))
    b = float(np.nextafter(np.float32(0.1), np.float32(1)))
    text = kx.report("fix_tail", {"passed": False, "case": "c", "output": "y", "index": [0], "value": b,
                                  "expected_value": a})
    shown = text.split(": y[0] is ")[1]
    value, expected = shown.split(", expected ")
    assert value != expected.split()[0], text


def test_a_speed_above_the_copy_is_a_failure():
    result = {"passed": True, "ms": 0.01, "GBps": 5.35 * 4200.0, "copy_GBps": 4200.0, "ideal_bytes": 8 * 4000 * 4096,
              "shape": [4000, 4096], "backend": "gpu"}
    text = kx.report("row_in_registers", result)
    assert text.startswith("row_in_registers: FAILED: right values, but 5.35 of the copy"), text


@needs_emulator
def test_the_timed_launchs_output_is_checked(monkeypatch):
    """The GPU branch's timing with the emulator standing in, on a timed shape of 4000 short rows:
    a kernel that does nothing on 4000 rows fails there."""
    from onlinesoftmax.book.exercises import kernel_tasks as kt
    from onlinesoftmax.measure import timer

    monkeypatch.setattr(kernel_runner, "GpuBackend", kernel_runner.CpuBackend)
    monkeypatch.setattr(timer, "time_gpu", lambda fn, args: fn() or {"ms": 0.01})
    monkeypatch.setattr(timer, "copy_bandwidth", lambda nbytes: {"GBps": 4200.0})
    monkeypatch.setattr(kernel_runner, "check_values", lambda *a, **k: {"passed": True})
    wrong = WRONG / "row_in_registers__skips_the_timed_launch.cu"
    for path, passed, rows in ((kx.SOLUTIONS / "row_in_registers.cu", True, 40), (wrong, False, 4000)):
        monkeypatch.setattr(kt.SoftmaxRows, "timed_shape", (rows, 4))
        result = kernel_runner.main({"mode": "grade", "backend": "gpu", "items": [["row_in_registers", str(path)]],
                                     "measure": True, "emulate": False})
        assert result["passed"] is passed, result
    assert "FAILED on the timed launch (4000 x 4)" in kx.report("row_in_registers", result | {"backend": "gpu"})


@needs_emulator
def test_the_slow_starter_is_right_but_not_graded_without_a_gpu():
    result = on_the_emulator("row_in_registers", kx.STARTERS / "row_in_registers.cu")
    assert result["passed"] and "not graded yet" in kx.report("row_in_registers", result)


@needs_emulator
@pytest.mark.parametrize("key", list(CRASHES))
def test_a_crash_or_a_hang_is_a_report_and_the_caller_goes_on(key):
    name, path = kernel_path(key)
    result = kx.run(path, name, timeout_s=5, backend="cpu")
    text = kx.report(name, result)
    assert not result["passed"] and CRASHES[key] in text, text
    assert "notebook's own GPU context is unaffected" in text
    again = kx.run(kx.SOLUTIONS / f"{name}.cu", name, backend="cpu")   # the next run works
    assert again["passed"], kx.report(name, again)


def test_faults_of_the_subprocess_are_reports(monkeypatch):
    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs["timeout"])
    monkeypatch.setattr(subprocess, "run", hang)
    result = kx.run(kx.SOLUTIONS / "fix_tail.cu", "fix_tail", timeout_s=3)
    assert not result["passed"] and "did not finish in 3 s" in result["fault"]

    def crash(*args, **kwargs):
        return subprocess.CompletedProcess(args[0], 1, "", "cupy...CUDARuntimeError: cudaErrorIllegalAddress")
    monkeypatch.setattr(subprocess, "run", crash)
    result = kx.run(kx.SOLUTIONS / "fix_tail.cu", "fix_tail")
    assert not result["passed"] and "cudaErrorIllegalAddress" in result["fault"] and "exit 1" in result["fault"]


def test_a_wrong_row_is_reported_with_its_input():
    text = kx.report("fix_tail", {"passed": False, "case": "3 rows of 257", "output": "y", "index": [1, 256],
                                  "value": 0.5, "expected_value": 0.75, "yours": [0.5, 0.5], "expected": [0.25, 0.75],
                                  "input": [1.0, 2.0], "input_label": "input row", "unwritten": 0})
    assert "FAILED on 3 rows of 257: y[1, 256] is 0.5, expected 0.75" in text and "input row" in text and "yours:" in text


def test_too_slow_is_a_failure_with_the_goal():
    result = {"passed": True, "ms": 0.065, "GBps": 2000.0, "copy_GBps": 4200.0, "ideal_bytes": 8 * 4000 * 4096,
              "shape": [4000, 4096], "backend": "gpu"}
    text = kx.report("row_in_registers", result)
    assert text.startswith("row_in_registers: FAILED: right on every case, but 0.48 of the copy") and "asks for 0.75" in text
    assert kx.report("online_softmax", result).startswith("online_softmax: passed; 4000 x 4096 fp32 in 65.0 us")


@needs_emulator
def test_without_a_gpu_grade_runs_the_emulator_and_says_what_needs_a_gpu(capsys, monkeypatch):
    from onlinesoftmax.runtime import device

    monkeypatch.setattr(device, "has_gpu", lambda: False)
    if not HAVE_COMPILER:
        pytest.skip("needs nvcc or NVRTC")
    assert kx.grade("fix_tail", path=kx.SOLUTIONS / "fix_tail.cu")
    assert "passed on the CPU emulator (every case); timing it needs an NVIDIA GPU" in capsys.readouterr().out
    assert not kx.grade("fix_tail", path=kx.STARTERS / "fix_tail.cu")
    assert "fix_tail: FAILED on the row [1, 2, 3] on the CPU emulator" in capsys.readouterr().out
    assert not kx.grade("row_in_registers", path=kx.SOLUTIONS / "row_in_registers.cu")
    out = capsys.readouterr().out
    assert "not graded yet" in out and "softmax_08_registers (the row held in registers)" in out and "recorded" in out


def test_without_a_gpu_compare_prints_the_recorded_kernels_of_the_same_designs(capsys, monkeypatch):
    from onlinesoftmax.runtime import device

    monkeypatch.setattr(device, "has_gpu", lambda: False)
    assert kx.compare("three_pass_softmax", "online_softmax") is None
    out = capsys.readouterr().out
    assert "timing your kernels needs one" in out and "the book's kernels, not yours" in out
    assert "softmax_01_safe (the design of three_pass_softmax)" in out and "recorded on NVIDIA H200" in out


@needs_emulator
def test_the_gpu_path_with_the_emulator_standing_in(monkeypatch):
    """The GPU branch of the grading subprocess (timing, one copy for all, compare), with the
    emulator as the device and a timer that does not run the 4000 x 4096 launch."""
    from onlinesoftmax.measure import timer

    from onlinesoftmax.book.exercises import kernel_tasks as kt

    monkeypatch.setattr(kernel_runner, "GpuBackend", kernel_runner.CpuBackend)
    monkeypatch.setattr(kt.SoftmaxRows, "timed_shape", (40, 4096))
    times = {"three_pass_softmax": 0.072, "online_softmax": 0.065}
    current = []
    monkeypatch.setattr(timer, "time_gpu", lambda fn, args: fn() or {"ms": times[current[-1]]})
    monkeypatch.setattr(timer, "copy_bandwidth", lambda nbytes: {"GBps": 42.0})
    original = kernel_runner.measure
    monkeypatch.setattr(kernel_runner, "measure", lambda b, t, name, seed: current.append(name) or original(b, t, name, seed))
    items = [[n, str(kx.SOLUTIONS / f"{n}.cu")] for n in times]
    result = kernel_runner.main({"mode": "compare", "backend": "gpu", "items": items, "measure": True, "emulate": False})
    assert result["passed"] and [r["ms"] for r in result["results"]] == [0.072, 0.065]
    assert all(r["copy_GBps"] == 42.0 for r in result["results"])
    text = kx.report("online_softmax", result["results"][1] | {"backend": "gpu"})
    assert "40 x 4096 fp32 in 65.0 us: 20 GB/s counting the ideal 8 bytes per element, 0.48 of a copy" in text, text


def test_the_exercises_benchmark_writes_one_row_per_kernel_and_stops_on_a_wrong_one(monkeypatch):
    from onlinesoftmax.bench import kernel_exercises as bench
    timed = {"passed": True, "shape": [4000, 4096], "ms": 0.05, "ideal_bytes": 8 * 4000 * 4096, "GBps": 2621.44,
             "copy_GBps": 4200.0}
    monkeypatch.setattr(kx, "run_compare", lambda items, timeout_s: {"passed": True, "results": [timed] * len(items)})
    rows = bench.measure()
    kernels = [(r["kernel"], r.get("which")) for r in rows]
    assert kernels[:len(bench.TIMED)] == [(n, "solution") for n in bench.TIMED]
    assert kernels[-2:] == [("row_in_registers", "starter"), ("copy", None)]
    assert abs(rows[0]["fraction_of_copy"] - 2621.44 / 4200.0) < 1e-12
    wrong = {"passed": False, "case": "the row [1, 2, 3]", "output": "y", "index": [0, 0], "value": 1.0,
             "expected_value": 0.09}
    monkeypatch.setattr(kx, "run_compare", lambda items, timeout_s: {"passed": False, "results": [wrong] * len(items)})
    with pytest.raises(SystemExit, match="FAILED on the row"):
        bench.measure()


def test_the_row_sums_tolerance_is_each_rows_own():
    """A row of -1e5s beside a row of -1e7s: 500 off on the small row is 20 times its rounding bound
    (8 float32 ulps of its sum of |x|), though far inside the large row's; it must fail."""
    from onlinesoftmax.book.exercises import grading, kernel_tasks
    x = np.stack([np.full(221, -1e7), np.full(221, -1e5)]).astype(np.float32)
    sums = x.astype(np.float64).sum(axis=1)
    (check,) = kernel_tasks.RowSum().expect_lse(x, (sums + [0.0, 500.0]).astype(np.float32))
    assert grading.first_mismatch(check.yours, check.expected, check.tolerance) == (1,)
    (check,) = kernel_tasks.RowSum().expect_lse(x, sums.astype(np.float32))
    assert grading.first_mismatch(check.yours, check.expected, check.tolerance) is None
