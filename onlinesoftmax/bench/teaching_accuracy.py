"""Suite `teaching-accuracy`: the teaching kernels' error on long peaked rows, before and after the fix.

softmax_01_safe, softmax_02_online and softmax_03_online_masked fold each thread's columns in chunks
of 16 merged pairwise (kernels/common/thread_fold.cuh, schedule "chunked"); their builds with
-DTHREAD_FOLD_SEQUENTIAL=1 keep one running value per thread (schedule "sequential", the kernels as
they were before). For every row of checks.peaked_rows this records each build's largest error
against the float64 reference, torch.softmax's float32 error on the same row (the rule's baseline),
the float32 NumPy softmax's error (a pairwise sum, on the host), the tolerance 2 x torch's error +
2 ulps and the verdict. It also times both builds of softmax_02_online on a few shapes (device time,
the one timer), so the page can say what the fix costs. Chapter 04 reads this file.

Run on a GPU machine with torch:   python -m onlinesoftmax.bench teaching-accuracy [--quick]
--quick: N = 262145 and 1048577, one seed, two timed shapes (about half a minute on an H200,
compilation included).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import api, checks, reference
from onlinesoftmax.kernels.softmax.teaching import sequential_of
from onlinesoftmax.measure import bench, results, timer

SUITE = "teaching-accuracy"
KERNELS = ("softmax_01_safe", "softmax_02_online", "softmax_03_online_masked")
COLS = (65_537, *checks.LONG_PEAKED_COLS, 4_194_305)
SEEDS = (0, 1, 2, 3)
TIMED = [(4000, 1024), (4000, 16384), (10, 262_144), (4, 1_048_576)]
QUICK = {"cols": checks.LONG_PEAKED_COLS, "seeds": (0,), "timed": [(4000, 4096), (4, 1_048_576)]}


def builds(name: str) -> dict:
    return {"chunked": osm.REGISTRY[name], "sequential": sequential_of(name)}


def errors(cols=COLS, seeds=SEEDS, xp=None, baseline=None) -> list[dict]:
    """The error rows. xp: cupy (default; numpy runs the models, for the CPU test of this script);
    baseline(x) -> the same-dtype baseline softmax (default torch.softmax on the GPU)."""
    if xp is None:
        import cupy as xp
    baseline = baseline or bench.torch_softmax
    host_of = np.asarray if xp is np else (lambda a: a.get())
    rows = []
    for n_cols in cols:
        for seed in seeds:
            host = checks.peaked_rows(np, n_cols, seed=seed)
            x = xp.asarray(host)
            ref = reference.softmax(host)
            torch_y = host_of(baseline(x))
            numpy_y = reference.softmax_same_dtype(host)
            for name in KERNELS:
                for schedule, variant in builds(name).items():
                    y = host_of(checks.run_checked(lambda x, out: api.run(variant, x, out=out), x))
                    for r, peak in enumerate(checks.PEAKS):
                        row_ref = ref[r:r + 1]
                        error = checks.max_abs_error(y[r:r + 1], row_ref)
                        torch_error = checks.max_abs_error(torch_y[r:r + 1], row_ref)
                        tolerance = checks.tolerance(torch_error, row_ref, np.float32)
                        rows.append({"kernel": name, "schedule": schedule, "n_rows": 1, "n_cols": n_cols,
                                     "dtype": "float32", "seed": seed, "row": r, "peak": peak,
                                     "max_abs_error": error, "torch_error": torch_error,
                                     "numpy_error": checks.max_abs_error(numpy_y[r:r + 1], row_ref),
                                     "tolerance": tolerance, "passed": bool(error <= tolerance)})
            worst = {(r["kernel"], r["schedule"]): r["max_abs_error"] / r["torch_error"]
                     for r in rows[-2 * len(KERNELS) * len(checks.PEAKS):]}
            print(f"N={n_cols} seed {seed}: error / torch's, last row: "
                  + ", ".join(f"{k}/{s} {v:.2f}" for (k, s), v in worst.items()), flush=True)
    return rows


def timings(shapes=TIMED) -> list[dict]:
    """Device time of both builds of softmax_02_online (and torch) on the same inputs."""
    import cupy
    import torch

    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    for n_rows, n_cols in shapes:
        inputs = bench.inputs(n_rows, n_cols)
        out = cupy.empty_like(inputs[0])
        fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": "float32"}
        ideal_bytes = 2 * n_rows * n_cols * 4
        for schedule, variant in builds("softmax_02_online").items():
            def run(x, variant=variant):
                api.run(variant, x, out=out)
            rows.append({**bench.measure("softmax_02_online", run, inputs, bytes_per_call=ideal_bytes,
                                         copy_GBps=copy["GBps"], **fields), "schedule": schedule})
        rows.append(bench.measure("torch.softmax", lambda x: torch.softmax(bench.torch_view(x), dim=-1), inputs,
                                  bytes_per_call=ideal_bytes, copy_GBps=copy["GBps"], **fields))
        print(f"{n_rows}x{n_cols}: " + ", ".join(f"{r['kernel']} {r.get('schedule', '')} {r['ms'] * 1e3:.1f} us"
                                                 for r in rows[-3:]), flush=True)
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def measure(quick: bool = False) -> dict:
    settings = QUICK if quick else {"cols": COLS, "seeds": SEEDS, "timed": TIMED}
    rows = errors(settings["cols"], settings["seeds"]) + timings(settings["timed"])
    method = ("errors: one call per input, max |y - float64 reference| per row; baseline torch.softmax in "
              "float32 on the same row, tolerance 2 x its error + 2 ulps of the row's largest output; "
              "times: " + timer.METHOD)
    return {"meta": {**results.gpu_meta(method), "quick": quick}, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 262145 and 1048577, one seed, two timed shapes")
    args = parser.parse_args()
    data = measure(args.quick)
    path = results.write_results(SUITE, data["rows"], data["meta"])
    failed = [r for r in data["rows"] if r.get("schedule") == "chunked" and r.get("passed") is False]
    print("wrote", path, f"({len(failed)} rows of the chunked builds above the rule)", file=sys.stderr)
