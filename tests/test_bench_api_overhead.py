"""CPU tier: the api-overhead suite without a GPU.

The timer's end-to-end and host methods against a fake cupy (events read the host clock); the
correctness gate on the kernels' NumPy models (and on wrong answers it must reject); the suite run
end to end on numpy with fake timers and a fake torch (every branch, every row name); its summary on a
synthetic file (targets met and missed); the softmax-fast sweep's extended shapes and compare_fast's
worst-ratio line.
"""
import json
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax import reference
from onlinesoftmax.measure import bench, results, timer
from onlinesoftmax.runtime.loader import REPO_ROOT

from onlinesoftmax.bench import api_overhead as bao
from onlinesoftmax.bench import api_overhead_report as bao_report
from onlinesoftmax.bench import compare_fast
from onlinesoftmax.bench import softmax_fast as bench_fast

sys.path.insert(0, str(REPO_ROOT / "tests"))
from test_data import recorded_kernel_name_ok  # noqa: E402


# ---- the timer's two new methods, on a fake cupy ------------------------------------------------------

class FakeEvent:
    def __init__(self):
        self.t = None

    def record(self):
        self.t = time.perf_counter()


def fake_cupy(sync_s: float = 0.0):
    def synchronize():
        time.sleep(sync_s)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda: types.SimpleNamespace(synchronize=synchronize), Event=FakeEvent,
        get_elapsed_time=lambda start, end: (end.t - start.t) * 1e3))


def test_end_to_end_times_each_call_between_events_and_rotates_inputs(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    evictions = []
    monkeypatch.setattr(timer, "_evict_l2", lambda: evictions.append(1))
    seen = []

    def call(name):
        seen.append(name)
        time.sleep(0.002 if name == "slow" else 0.0)

    timing = timer.time_end_to_end(call, [("slow",), ("slow",)], warmup=2, reps=5)
    assert seen == ["slow"] * 7 and len(evictions) == 5 and timing["reps"] == 5
    assert 1900 <= timing["us_min"] <= timing["us"] <= timing["us_p90"] < 50_000
    assert timing["wall_us"] >= timing["us_min"]
    seen.clear()
    timer.time_end_to_end(call, [("a",), ("b",)], warmup=1, reps=4)
    assert seen == ["a", "a", "b", "a", "b"]
    fast = timer.time_end_to_end(lambda: None, [()], warmup=0, reps=5)
    assert fast["us"] < 1000, "an empty call must not take the slow call's time"


def test_host_cost_is_timed_without_the_synchronize(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(sync_s=0.01))   # a GPU that takes 10 ms to drain
    count = []
    host = timer.host_us_per_call(lambda: count.append(1), (), calls=50, repeats=3, warmup=2)
    assert len(count) == 2 + 3 * 50
    assert host["calls"] == 50 and host["repeats"] == 3
    assert host["us"] < 100, "the synchronize after the loop must stay outside the timed region"
    assert host["drain_us"] >= 9000 and host["us"] <= host["us_median"]
    slow = timer.host_us_per_call(lambda: time.sleep(0.0005), (), calls=20, repeats=2, warmup=0)
    assert 450 <= slow["us"] < 5000


def test_methods_are_written_down():
    assert set(timer.METHODS) == {"device", "end_to_end", "host_per_call"}
    assert timer.METHODS["device"] == timer.METHOD
    assert "end to end" in timer.METHOD_END_TO_END and "back to back" in timer.METHOD_HOST


# ---- the correctness gate before timing ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_gate_accepts_the_models_and_rejects_wrong_answers(dtype):
    x = checks.random_rows(np, 37, 300, dtype, seed=3)
    additive = bao.additive_mask(np, 37, 300)
    out = np.empty_like(x)
    for mask in (None, "causal", additive):
        ok, message = bench.check_call(lambda x, o: bao.our_call("softmax", mask)(x, out=o), x, out, "softmax", mask)
        assert ok, message
    ok, message = bench.check_call(lambda x, o: osm.softmax(x, causal=True, causal_align="top_left", out=o), x, out,
                                   "softmax", None)
    assert not ok, "a causal answer to an unmasked question must fail"
    ok, message = bench.check_call(lambda x, o: osm.log_softmax(x, out=o), x, out, "log_softmax")
    assert ok, message
    lse = np.empty(37, np.float32)
    ok, message = bench.check_call(lambda x, o: osm.logsumexp(x, out=o), x, lse, "logsumexp")
    assert ok, message
    ok, message = bench.check_call(lambda x, o: o.__setitem__(slice(None), osm.logsumexp(x) + 1e-3), x, lse, "logsumexp")
    assert not ok, message

    def half_written(x, o):
        o[:-1] = osm.softmax(x)[:-1]
    ok, message = bench.check_call(half_written, x, out)
    assert not ok and "unwritten" in message
    # blocks of rows give the same verdict as the whole tensor (the causal mask follows the row index)
    y = osm.softmax(x, causal=True, causal_align="top_left")
    assert bench.compare_rows(y, x, "softmax", "causal", max_elements=1000) == bench.compare_rows(y, x, "softmax", "causal")


def test_the_gate_rejects_a_wrong_probability_in_fp32():
    x = checks.random_rows(np, 8, 1000, "float32", seed=1)
    y = reference.softmax(x).astype(np.float32)
    assert bench.compare_rows(y, x)[0]
    y[3, 10] *= 1.001
    assert not bench.compare_rows(y, x)[0]
    assert not bench.compare_rows(y[:, :-1], x)[0], "a wrong shape fails"


def test_causal_mask_for_torch_matches_the_api():
    x = checks.random_rows(np, 6, 9, "float32", seed=2)
    np.testing.assert_allclose(reference.softmax(x + bao.causal_mask(np, 6, 9)), osm.softmax(x, causal=True, causal_align="top_left"),
                               rtol=1e-5, atol=1e-7)


# ---- the whole suite on numpy, with fake timers and a fake torch ----------------------------------------

class FakeTorch:
    __version__ = "fake"

    @staticmethod
    def softmax(t, dim):
        return reference.softmax(checks.as_float64(t))

    @staticmethod
    def logsumexp(t, dim):
        return reference.logsumexp(checks.as_float64(t))

    @staticmethod
    def log_softmax(t, dim):
        return reference.log_softmax(checks.as_float64(t))


@pytest.fixture
def dry_run(monkeypatch):
    """bench_api_overhead.measure on the CPU: numpy arrays (the API runs its models), fake timers that call
    the function once, a fake torch, small shapes."""
    called = {"e2e": 0, "device": 0, "host": 0}

    def fake_gpu(fn, arg_sets, *, warmup=5, reps=30):
        fn(*list(arg_sets)[0])
        called["device"] += 1
        return {"ms": 0.01, "ms_p10": 0.009, "ms_p90": 0.011, "reps": reps, "spin_us": 50.0}

    def fake_e2e(fn, arg_sets, *, warmup=3, reps=30):
        fn(*list(arg_sets)[0])
        called["e2e"] += 1
        return {"us": 20.0, "us_p10": 19.0, "us_p90": 22.0, "us_min": 18.0, "wall_us": 25.0, "reps": reps}

    def fake_host(fn, args=(), *, calls=1000, repeats=5, warmup=10):
        fn(*args)
        called["host"] += 1
        return {"us": 12.0, "us_median": 12.5, "drain_us": 3.0, "calls": calls, "repeats": repeats}

    monkeypatch.setattr(timer, "time_gpu", fake_gpu)
    monkeypatch.setattr(timer, "time_end_to_end", fake_e2e)
    monkeypatch.setattr(timer, "host_us_per_call", fake_host)
    monkeypatch.setattr(timer, "copy_bandwidth", lambda: {"bytes": 2, "ms": 1.0, "GBps": 4000.0, "reps": 1})
    monkeypatch.setattr(results, "gpu_meta", lambda method: {"gpu": "fake", "method": method})
    monkeypatch.setattr(bench, "torch_view", lambda x: x)
    monkeypatch.setattr(bao, "_xp", lambda: np)
    monkeypatch.setattr(bao, "_sync", lambda: None)
    monkeypatch.setattr(bao, "_free", lambda: None)
    monkeypatch.setattr(bao, "_torch", lambda: FakeTorch)
    monkeypatch.setattr(bao, "torch_mask", lambda mask, like: mask.astype(like.dtype))
    monkeypatch.setattr(bao, "bare_kernels", lambda xp: [(lambda: None, {"arguments": 2, "call": "kernel()"}),
                                                         (lambda: None, {"arguments": 8, "call": "kernel()"})])
    monkeypatch.setattr(bao, "calls_for", lambda fn, args=(): 100)
    monkeypatch.setattr(bao, "HOST_SHAPE", (1, 256))
    monkeypatch.setattr(bao, "VARIANT_SHAPES", {"softmax_07_warp_per_row": (2, 256), "softmax_08_registers": (2, 1024),
                                                "softmax_09_shared": (2, 2048), "softmax_10_cluster": (2, 4096),
                                                "softmax_11_split": (2, 4096), "softmax_12_pipelined": (2, 4096)})
    monkeypatch.setattr(bao, "e2e_shapes", lambda quick: [(3, 100), (5, 64)])
    monkeypatch.setattr(bao, "subset_shapes", lambda quick: ((5, 64),))
    return called


def test_the_suite_runs_on_the_cpu_with_fakes(dry_run):
    data = bao.measure(quick=True)
    json.dumps(data)                                   # what write_results stores
    rows = data["rows"]
    for row in rows:
        assert recorded_kernel_name_ok(row["kernel"]), row["kernel"]
        assert row["method"] in ("host_per_call", "end_to_end", "device"), row
        assert "error" not in row, row
    assert data["meta"]["methods"] == timer.METHODS and "end_to_end:" in data["meta"]["method"]
    host = [r for r in rows if r["method"] == "host_per_call"]
    assert {r["kernel"] for r in host} == {"fast", "torch.softmax", "torch.logsumexp", "torch.log_softmax",
                                           "cupy.RawKernel", "cupy.empty_like", *bao.VARIANT_SHAPES}
    assert {r["launch"] for r in host if r["kernel"].startswith("softmax_1")} == {bao.CLUSTER_OR_TWO}
    assert {r["launch"] for r in host if r["kernel"].startswith("softmax_0")} == {bao.ONE_KERNEL}
    assert all(r["correct"] for r in host if "correct" in r)
    timed = {(r["kernel"], r["method"], r["api"], r["mask"], r["dtype"], r["n_rows"]) for r in rows if "api" in r
             and r["method"] != "host_per_call"}
    for dtype in checks.DTYPES:
        for side in ("fast", "torch.softmax"):
            for method in ("end_to_end", "device"):
                assert (side, method, "softmax", "none", dtype, 3) in timed
        for api, mask in (("logsumexp", "none"), ("log_softmax", "none"), ("softmax", "causal"), ("softmax", "additive")):
            assert ("fast", "end_to_end", api, mask, dtype, 5) in timed and ("fast", "device", api, mask, dtype, 5) in timed
            assert (bao.TORCH_NAMES[api], "end_to_end", api, mask, dtype, 5) in timed
        assert ("fast", "end_to_end", "logsumexp", "none", dtype, 3) not in timed, "masks and LSE only on the subset"
    summary = bao_report.summarize(data)
    assert summary["targets"]["all_correct"]["worst"] == 0
    assert all(e["e2e_vs_torch"] == 1.0 for e in summary["table"])
    assert "targets:" in bao_report.report(data)


def test_a_wrong_answer_is_an_error_row_and_never_timed(dry_run, monkeypatch):
    real = osm.softmax

    def wrong_when_masked(x, *args, mask=None, causal=False, out=None, **kwargs):
        y = real(x, *args, mask=mask, causal=causal, out=out, **kwargs)
        if mask is not None or causal:
            y[..., 0] = 0.5                            # a wrong probability in every row
        return y
    monkeypatch.setattr(osm, "softmax", wrong_when_masked)
    data = bao.measure(quick=True)
    wrong = [r for r in data["rows"] if r.get("correct") is False]
    assert {(r["api"], r["mask"]) for r in wrong} == {("softmax", "causal"), ("softmax", "additive")}
    assert all(r["method"] == "check" and "error" in r and "us" not in r for r in wrong)
    assert not [r for r in data["rows"] if r.get("mask") in ("causal", "additive") and r["kernel"] == "fast" and "us" in r]
    target = bao_report.summarize(data)["targets"]["all_correct"]
    assert target["worst"] == len(wrong) == 6
    assert "all_correct                    MISS" in bao_report.report(data)


# ---- the summary of a recorded file -----------------------------------------------------------------

def synthetic(cluster_us=30.0):
    host = {"method": "host_per_call", "n_rows": 1, "n_cols": 4096}
    shape = {"api": "softmax", "mask": "none", "dtype": "float32", "n_rows": 4096, "n_cols": 4096}
    rows = [
        {"kernel": "copy", "method": "device", "GBps": 4200.0, "ms": 1.0, "us": 1000.0},
        {"kernel": "fast", **host, "api": "softmax", "dtype": "float32", "us": 12.0, "device_us": 3.0,
         "launch": "one kernel", "target_us": 15.0, "call": "onlinesoftmax.softmax(x)", "correct": True},
        {"kernel": "softmax_10_cluster", **host, "n_rows": 4, "n_cols": 65536, "api": "softmax", "dtype": "float32",
         "us": cluster_us, "device_us": 4.0, "launch": "cluster or two kernels", "target_us": 25.0, "correct": True},
        {"kernel": "torch.softmax", **host, "api": "softmax", "dtype": "float32", "us": 7.0, "device_us": 3.0},
        {"kernel": "fast", "method": "end_to_end", **shape, "us": 20.0, "GBps": 6.7},
        {"kernel": "torch.softmax", "method": "end_to_end", **shape, "us": 40.0, "GBps": 3.4},
        {"kernel": "fast", "method": "device", **shape, "us": 10.0, "ms": 0.01, "GBps": 13.4},
        {"kernel": "torch.softmax", "method": "device", **shape, "us": 15.0, "ms": 0.015, "GBps": 9.0},
        {"kernel": "fast", "method": "check", **shape, "api": "logsumexp", "dtype": "bfloat16", "correct": False,
         "error": "logsumexp bfloat16: error 1e-1, tolerance 1e-5"},
    ]
    return {"meta": {"gpu": "synthetic", "date": "2026-01-01"}, "rows": rows}


def test_summary_reads_targets_and_ratios():
    s = bao_report.summarize(synthetic())
    assert s["targets"]["host_one_kernel"]["worst"] == 12.0 and not s["targets"]["host_one_kernel"]["misses"]
    assert s["targets"]["host_cluster_or_two_kernels"]["misses"] == [("softmax_10_cluster", "float32", 30.0)]
    assert s["targets"]["all_correct"]["worst"] == 1
    (entry,) = [e for e in s["table"] if e["api"] == "softmax"]
    assert entry["e2e_vs_torch"] == 2.0 and entry["device_vs_torch"] == 1.5
    assert s["groups"]["softmax/none"]["e2e_slower_than_torch"] == 0
    assert s["copy_GBps"] == 4200.0
    text = bao_report.report(synthetic())
    assert "host_one_kernel                met" in text and "host_cluster_or_two_kernels    MISS" in text
    fixed = bao_report.summarize(synthetic(cluster_us=20.0))["targets"]["host_cluster_or_two_kernels"]
    assert fixed["misses"] == [] and fixed["worst"] == 20.0


def test_report_command_reads_a_file(tmp_path):
    path = tmp_path / "2026-01-01-api-overhead.json"
    path.write_text(json.dumps(synthetic()))
    done = subprocess.run([sys.executable, "-m", "onlinesoftmax.bench", "api-overhead", "--report",
                           str(path)], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert "targets:" in done.stdout and "MISS" in done.stdout and "2.00" in done.stdout


# ---- the softmax-fast sweep: extended shapes and the worst ratio over all of them ---------------------

def test_extended_shapes_add_vocabularies_and_odd_shapes_once():
    base = bench_fast.base_shapes()
    extended = bench_fast.extended_shapes()
    assert len(base) == 28 and (4000, 4000, 1024) in base and (4000, 1024, 1048576) in base
    assert {(r, n) for _, r, n in base}.isdisjoint({(r, n) for _, r, n in extended})
    for n in bench_fast.VOCABULARIES:
        for b in bench_fast.VOCABULARY_BATCHES:
            assert (b, n) in {(r, c) for _, r, c in base + extended}
    assert {(777, 9999), (1000, 1001), (4097, 3001)} <= {(r, n) for _, r, n in extended}
    assert all(r * n <= bench_fast.MAX_ELEMENTS for _, r, n in extended)
    assert len(list(bench_fast.shapes(False, "all"))) == 3 * (len(base) + len(extended))
    assert bench_fast.suite_name(False, "all") == "softmax-fast"
    assert bench_fast.suite_name(False, "extended") == "softmax-fast-extended"
    assert bench_fast.suite_name(True, "base") == "softmax-fast-quick"
    with pytest.raises(ValueError):
        list(bench_fast.shapes(False, "everything"))
    assert set(bao.e2e_shapes()) >= {(r, n) for _, r, n in base} | set(bao.EXTRA_SHAPES)
    for quick in (False, True):   # the masked / logsumexp / log_softmax shapes run only where e2e runs
        assert set(bao.subset_shapes(quick)) <= set(bao.e2e_shapes(quick)), "a subset shape would never run"
    assert len(bao.e2e_shapes()) == len(set(bao.e2e_shapes()))


def fast_rows(dtype, batch, n_rows, n_cols, fast_ms, torch_ms):
    shape = {"dtype": dtype, "batch": batch, "n_rows": n_rows, "n_cols": n_cols}
    return [{"kernel": "fast", **shape, "ms": fast_ms, "GBps": 1.0, "fraction_of_copy": 0.9,
             "variant": "softmax_08_registers"},
            {"kernel": "torch_softmax", **shape, "ms": torch_ms, "GBps": 1.0, "fraction_of_copy": 0.5}]


def test_compare_fast_reports_the_worst_ratio_over_every_shape(tmp_path):
    base = {"meta": {"gpu": "synthetic"}, "rows": [{"kernel": "copy", "GBps": 4000.0, "ms": 1.0}]
            + fast_rows("float32", 4000, 4000, 4096, 1.0, 2.0) + fast_rows("bfloat16", 64, 64, 1024, 1.0, 1.5)}
    extended = {"meta": {"gpu": "synthetic"}, "rows": [{"kernel": "copy", "GBps": 4000.0, "ms": 1.0}]
                + fast_rows("float16", 777, 777, 9999, 1.0, 0.8) + fast_rows("float32", 2048, 2048, 32000, 1.0, 1.2)}
    worst = compare_fast.summarize(compare_fast.merge([base, extended]))["worst_vs_torch"]
    assert worst["all"]["value"] == 0.8 and worst["all"]["shape"] == ("float16", 777, 9999)
    assert worst["powers_of_two"]["value"] == 1.5 and worst["powers_of_two"]["shapes"] == 2
    assert worst["other"]["shapes"] == 2
    paths = []
    for name, data in (("2026-01-01-softmax-fast.json", base), ("2026-01-01-softmax-fast-extended.json", extended)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(data))
    done = subprocess.run([sys.executable, "-m", "onlinesoftmax.bench.compare_fast", *map(str, paths)],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert "worst fast (auto) / torch over all 4 recorded shapes: 0.80 at float16 777x9999" in done.stdout
    assert "never_slower_than_torch    MISS" in done.stdout


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_poison_filled_in_place_is_the_checks_poison(dtype):
    a = np.zeros((3, 5), dtype=checks.np_dtype(dtype))
    bench.poison(a)
    expected = checks.poisoned_like(a)
    bits = np.uint32 if dtype == "float32" else np.uint16
    assert np.array_equal(a.view(bits), expected.view(bits)) and checks.unwritten(a) == a.size


def test_fewer_repetitions_only_for_big_calls():
    assert bench.reps_for(2**30 - 1) == 30 and bench.reps_for(2**30) == 10 and bench.reps_for(2**33, 50) == 10
    assert bench.reps_for(1000, 50) == 50
