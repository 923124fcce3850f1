"""CPU tier: the teaching kernels' accuracy fix on their NumPy models (kernels/common/thread_fold.cuh).

softmax_01_safe, softmax_02_online and softmax_03_online_masked fold each thread's columns in chunks
of 16, each into a fresh state, merged pairwise. On long peaked rows (checks.peaked_rows) the models
of the new schedule pass the book's rule (twice a same-dtype baseline's error plus two ulps; here the
float32 NumPy softmax on the host, whose sum is pairwise), row by row, and the models of the schedule
before the fix (one running value per thread, the -DTHREAD_FOLD_SEQUENTIAL=1 builds) fail it. The GPU
tier checks the kernels themselves against torch's error (tests/gpu/test_softmax_teaching_gpu.py,
test_masked_gpu.py, test_guards_gpu.py).
"""
import math

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import api, checks, reference, simulate
from onlinesoftmax.kernels.softmax.teaching import sequential_of
from onlinesoftmax.registry import EXTRA_BUILDS, compile_configurations

TEACHING = ("softmax_01_safe", "softmax_02_online", "softmax_03_online_masked")


def verdicts(variant, x):
    y = api.run(variant, x)
    return checks.compare_each_row(y, reference.softmax(x), reference.softmax_same_dtype(x), np.float32)


@pytest.fixture(scope="module", params=checks.LONG_PEAKED_COLS)
def peaked(request):
    return checks.peaked_rows(np, request.param)


@pytest.mark.parametrize("name", TEACHING)
def test_models_pass_on_long_peaked_rows_and_the_sequential_schedule_fails(name, peaked):
    after = verdicts(osm.REGISTRY[name], peaked)
    assert all(passed for passed, _ in after), "; ".join(m for _, m in after)
    before = verdicts(sequential_of(name), peaked)
    assert not any(passed for passed, _ in before), "; ".join(m for _, m in before)


@pytest.mark.parametrize("n_cols", (1, 255, 4096, 4097, 70_001, 129 * 4096 + 5, 2**20))
def test_thread_fold_covers_every_column_once_with_short_chains(n_cols):
    """State (columns, longest chain): push adds a column and a step, a merge adds the counts and one
    step to the longer chain. Every thread counts its own columns; the chain is at most 16 pushes
    plus one merge per counter level (and one per 128-chunk group past the top level), where the
    sequential schedule's chain is the thread's whole slice."""
    threads = 256
    x = np.zeros((1, n_cols), np.float32)

    def push(state, _values):
        return tuple((field + 1).astype(np.float32) for field in state)

    def merge(a, b):
        return (a[0] + b[0]).astype(np.float32), (np.maximum(a[1], b[1]) + 1).astype(np.float32)

    owned = np.array([len(range(t, n_cols, threads)) for t in range(threads)], np.float32)
    count, chain = simulate.thread_fold(x, threads, (0.0, 0.0), push, merge)
    assert np.array_equal(count[0], owned)
    n_chunks = -(-n_cols // (simulate.THREAD_FOLD_CHUNK * threads))
    levels = min(math.ceil(math.log2(n_chunks)) if n_chunks > 1 else 0, simulate.THREAD_FOLD_LEVELS)
    groups = n_chunks >> (simulate.THREAD_FOLD_LEVELS - 1)
    assert chain.max() <= simulate.THREAD_FOLD_CHUNK + levels + groups + 1
    seq_count, seq_chain = simulate.thread_fold(x, threads, (0.0, 0.0), push, merge, sequential=True)
    assert np.array_equal(seq_count[0], owned) and np.array_equal(seq_chain[0], owned)
    if n_cols > simulate.THREAD_FOLD_CHUNK * threads * 4:
        assert chain.max() < seq_chain.max() / 4


@pytest.mark.parametrize("name", TEACHING)
def test_short_rows_are_unchanged_bit_for_bit(name):
    """Up to one chunk per thread (N <= 4096 at 256 threads) the two schedules are the same operations."""
    for n_cols in (1, 100, 257, 4096):
        x = checks.random_rows(np, 3, n_cols, seed=n_cols)
        assert np.array_equal(api.run(osm.REGISTRY[name], x), api.run(sequential_of(name), x), equal_nan=True)


def test_the_sequential_builds_are_compiled_but_not_registered():
    names = {f"{name}_sequential" for name in TEACHING}
    assert names <= set(EXTRA_BUILDS) and not names & set(osm.REGISTRY)
    built = {name: flags for _, flags, name in compile_configurations()}
    assert all(built[name] == tuple(f"-D{d}" for d in EXTRA_BUILDS[name].defines) for name in names)
    assert all("-DTHREAD_FOLD_SEQUENTIAL=1" in built[name] for name in names)
    with pytest.raises(ValueError, match="no sequential build of 'softmax_07_warp_per_row'"):
        sequential_of("softmax_07_warp_per_row")


def test_recorded_summary_and_times_read_the_suite_rows():
    """The chapter's reading of a teaching-accuracy file: worst error, worst ratio to torch, passes per
    group, in story order; device times per shape and schedule. Synthetic rows, one failing."""
    from onlinesoftmax.book.readings import teaching_accuracy

    rows = [{"kernel": "copy", "ms": 1.0, "GBps": 4000.0}]
    for schedule, error in (("chunked", 1e-7), ("sequential", 9e-7)):
        for r in range(2):
            rows.append({"kernel": "softmax_02_online", "schedule": schedule, "n_cols": 262145, "row": r,
                         "max_abs_error": error * (r + 1), "torch_error": 2e-7, "passed": error < 5e-7})
        rows.append({"kernel": "softmax_02_online", "schedule": schedule, "n_rows": 4, "n_cols": 1 << 20,
                     "ms": {"chunked": 0.5, "sequential": 0.6}[schedule]})
    rows.append({"kernel": "torch.softmax", "n_rows": 4, "n_cols": 1 << 20, "ms": 0.4})
    summary = teaching_accuracy.recorded_summary(rows)
    assert [(s["schedule"], s["passed"], s["rows"]) for s in summary] == [("sequential", 0, 2), ("chunked", 2, 2)]
    assert summary[0]["worst_ratio"] == pytest.approx(9.0) and summary[1]["worst_error"] == pytest.approx(2e-7)
    assert summary[1]["worst_error_ulps"] == pytest.approx(2e-7 / 2**-23)
    assert teaching_accuracy.recorded_times(rows) == [
        {"n_rows": 4, "n_cols": 1 << 20, "chunked": 0.5, "sequential": 0.6, "torch.softmax": 0.4}]
    with pytest.raises(ValueError, match="schedule must be one of"):
        teaching_accuracy.build("softmax_02_online", "pairwise")


def test_the_recording_script_runs_on_the_models():
    """onlinesoftmax/bench/teaching_accuracy.py's error rows, on the models with NumPy's float32 softmax
    standing in for torch's: one row per (kernel, schedule, row), the sequential builds failing."""
    from onlinesoftmax.bench import teaching_accuracy as module
    rows = module.errors(cols=(checks.LONG_PEAKED_COLS[0],), seeds=(0,), xp=np,
                         baseline=reference.softmax_same_dtype)
    assert len(rows) == len(TEACHING) * 2 * len(checks.PEAKS)
    assert all(r["passed"] for r in rows if r["schedule"] == "chunked")
    assert not any(r["passed"] for r in rows if r["schedule"] == "sequential")
    assert module.QUICK["cols"] == checks.LONG_PEAKED_COLS
