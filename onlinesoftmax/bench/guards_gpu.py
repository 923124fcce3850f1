"""Suite `guards-gpu`: what the real kernels return on the rows that need the -inf guards.

Not a timing: the outcome (fraction of NaN outputs, error against the float64 reference)
of softmax_02_online and its unguarded build on the two rows chapter 03 breaks on purpose
(N = 100 < 256 threads; the first 300 of 1000 elements -inf), a fully masked row, and a
causal 300 x 300 matrix through softmax_03_online_masked with and without the guards,
next to the NumPy model's outcome for the same input. Chapter 03 shows this file on a
machine without a GPU.

Run on a GPU machine (seconds):  python -m onlinesoftmax.bench guards-gpu
"""
from __future__ import annotations

import dataclasses
import sys

import numpy as np

from onlinesoftmax import api, checks, reference
from onlinesoftmax.kernels.softmax import masked as softmax_masked
from onlinesoftmax.measure import results
from onlinesoftmax.kernels.softmax.teaching import simulate_online
from onlinesoftmax.registry import REGISTRY

SUITE = "guards-gpu"


def guard_rows() -> dict[str, np.ndarray]:
    """The inputs of tests/test_guards.py and chapter 03 (checks.GUARD_ROWS), and a fully masked row."""
    return {"N=100": checks.short_row(), "first 300 of 1000 are -inf": checks.leading_neg_inf_row(),
            "all -inf (fully masked)": np.full((1, 300), -np.inf, np.float32)}


def outcome(y: np.ndarray, ref: np.ndarray) -> dict:
    finite = ~np.isnan(ref)
    both = finite & ~np.isnan(y)
    error = float(np.abs(y[both].astype(np.float64) - ref[both]).max()) if both.any() else None
    return {"nan_fraction": float(np.isnan(y).mean()), "all_nan": bool(np.isnan(y).all()),
            "max_abs_error": error}


def measure() -> dict:
    import cupy

    rows = []
    for case, host in guard_rows().items():
        ref = reference.softmax(host)
        for name, guards in (("softmax_02_online", True), ("softmax_02_online_unguarded", False)):
            out = checks.poisoned_like(cupy.asarray(host))
            gpu = api.run(REGISTRY[name], cupy.asarray(host), out=out).get()
            rows.append({"case": case, "kernel": name, "n_cols": host.shape[1], "source": "gpu",
                         **outcome(gpu, ref)})
            rows.append({"case": case, "kernel": name, "n_cols": host.shape[1], "source": "model",
                         **outcome(simulate_online(host, guards=guards), ref)})
    host = checks.random_rows(np, 300, 300, seed=6)
    unguarded = dataclasses.replace(softmax_masked.MASKED, name="softmax_03_online_masked_unguarded",
                                    defines=("ONLINE_SOFTMAX_GUARDS=0",))
    x = cupy.asarray(host)
    options = softmax_masked.prepare(x, "causal")
    ref = softmax_masked.reference_masked(host, **softmax_masked.prepare(host, "causal"))
    for variant, guards in ((softmax_masked.MASKED, True), (unguarded, False)):
        gpu = api.run(variant, x, out=checks.poisoned_like(x), **options).get()
        model = softmax_masked.simulate_masked(host, causal=True, guards=guards)
        for source, y in (("gpu", gpu), ("model", model)):
            rows.append({"case": "causal 300 x 300", "kernel": variant.name, "n_cols": 300, "source": source,
                         "nan_rows": int(np.isnan(y).all(axis=1).sum()), **outcome(y, ref)})
    cupy.cuda.Device().synchronize()
    return {"meta": {**results.gpu_meta(), "method": "outcome of one call per input (no timing)"},
            "rows": rows}


if __name__ == "__main__":
    data = measure()
    for row in data["rows"]:
        print(row)
    path = results.write_results(SUITE, data["rows"], data["meta"])
    print("wrote", path, file=sys.stderr)
