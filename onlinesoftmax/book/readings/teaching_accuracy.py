"""Chapter 04's before/after of the teaching kernels' accuracy fix (kernels/common/thread_fold.cuh).

`model_errors` runs the NumPy models of both schedules (chunks merged pairwise, and one running value
per thread) on checks.peaked_rows, row by row, against the float64 reference, with the float32 NumPy
softmax as the same-dtype baseline. `recorded_summary` and `recorded_times` read the suite
`teaching-accuracy` (onlinesoftmax/bench/teaching_accuracy.py), whose baseline is torch's float32 error.
"""
from __future__ import annotations

import subprocess

import numpy as np

from onlinesoftmax import api, checks, reference
from onlinesoftmax.kernels.softmax.teaching import sequential_of
from onlinesoftmax.registry import REGISTRY
from onlinesoftmax.runtime.loader import REPO_ROOT

KERNELS = ("softmax_01_safe", "softmax_02_online", "softmax_03_online_masked")
SCHEDULES = ("sequential", "chunked")     # before, after


def build(name: str, schedule: str):
    """The kernel `name` as registered ("chunked") or its -DTHREAD_FOLD_SEQUENTIAL=1 build ("sequential")."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    return REGISTRY[name] if schedule == "chunked" else sequential_of(name)


def model_errors(cols=checks.LONG_PEAKED_COLS, kernels=KERNELS, seed: int = 0) -> list[dict]:
    """One dict per (kernel, schedule, N, row): the model's largest error against float64, the float32
    NumPy softmax's error (the baseline), the tolerance 2 x baseline + 2 ulps and the verdict."""
    rows = []
    for n_cols in cols:
        x = checks.peaked_rows(np, n_cols, seed=seed)
        ref = reference.softmax(x)
        baseline = reference.softmax_same_dtype(x)
        for name in kernels:
            for schedule in SCHEDULES:
                y = api.run(build(name, schedule), x)
                for r, peak in enumerate(checks.PEAKS):
                    error = checks.max_abs_error(y[r:r + 1], ref[r:r + 1])
                    base = checks.max_abs_error(baseline[r:r + 1], ref[r:r + 1])
                    tolerance = checks.tolerance(base, ref[r:r + 1], np.float32)
                    rows.append({"kernel": name, "schedule": schedule, "n_cols": n_cols, "row": r, "peak": peak,
                                 "error": error, "baseline_error": base, "tolerance": tolerance,
                                 "passed": bool(error <= tolerance)})
    return rows


def summary(rows, error_key: str, baseline_key: str) -> list[dict]:
    """Per (kernel, schedule, N), in KERNELS and SCHEDULES order: the worst error and the baseline's worst
    error, both also in float32 ulps of 1 (the peak's probability is close to 1), the worst ratio of
    the two on one row, and how many rows pass."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "schedule" in r and error_key in r:
            groups.setdefault((r["kernel"], r["schedule"], r["n_cols"]), []).append(r)
    order = {name: i for i, name in enumerate(KERNELS)}
    out = []
    for (kernel, schedule, n_cols), members in sorted(
            groups.items(), key=lambda kv: (kv[0][2], order.get(kv[0][0], 99), SCHEDULES.index(kv[0][1]))):
        out.append({"kernel": kernel, "schedule": schedule, "n_cols": n_cols,
                    "worst_error": max(m[error_key] for m in members),
                    "worst_baseline": max(m[baseline_key] for m in members),
                    "worst_error_ulps": max(m[error_key] for m in members) / checks.EPS["float32"],
                    "worst_baseline_ulps": max(m[baseline_key] for m in members) / checks.EPS["float32"],
                    "worst_ratio": max(m[error_key] / max(m[baseline_key], 1e-30) for m in members),
                    "passed": sum(bool(m["passed"]) for m in members), "rows": len(members)})
    return out


def model_summary(rows) -> list[dict]:
    return summary(rows, "error", "baseline_error")


def recorded_summary(rows) -> list[dict]:
    """The recorded suite's error rows, summarized as `summary` (baseline: torch's float32 error)."""
    return summary(rows, "max_abs_error", "torch_error")


def recorded_times(rows) -> list[dict]:
    """(shape, device time of each schedule of softmax_02_online, torch's) from the recorded suite."""
    shapes: dict[tuple, dict] = {}
    for r in rows:
        if "ms" in r and r["kernel"] != "copy":
            key = r["schedule"] if r["kernel"] == "softmax_02_online" else r["kernel"]
            shapes.setdefault((r["n_rows"], r["n_cols"]), {})[key] = r["ms"]
    return [{"n_rows": n, "n_cols": c, **times} for (n, c), times in sorted(shapes.items())]


def _git_show(commit: str, path: str):
    """(known, text): whether git knows the commit a recording names, and `path` at it (None: no
    such file). known is None when git cannot tell: no git, a shallow clone, a commit not here."""
    commit = str(commit).split("+")[0]   # "abc123+dirty": the commit the tree was based on
    try:
        def git(*args):
            return subprocess.run(["git", *args], capture_output=True, timeout=20, cwd=REPO_ROOT)

        known = git("cat-file", "-e", f"{commit}^{{commit}}")
        shown = git("show", f"{commit}:{path}")
    except (OSError, subprocess.SubprocessError):
        return None, None
    if known.returncode != 0:
        return None, None
    return True, (shown.stdout.decode(errors="replace") if shown.returncode == 0 else None)


def commit_has_file(commit: str, path: str) -> bool | None:
    """Whether the git commit a recording names holds `path` (None when git cannot tell)."""
    known, text = _git_show(commit, path)
    return None if known is None else text is not None


def fold_loads_together(commit: str) -> bool | None:
    """Whether the fold at that commit issues a whole chunk's loads before its first push (the
    build the chapter shows), rather than one load before each push (None: git cannot tell)."""
    known, text = _git_show(commit, "kernels/common/thread_fold.cuh")
    return None if known is None else text is not None and "float v[THREAD_FOLD_CHUNK]" in text


FOLD_FILE = "kernels/common/thread_fold.cuh"


def fold_time_cost(runs, n_rows: int = 4000, n_cols: int = 1024,
                   kernels=("softmax_01_safe", "softmax_02_online"), has_fold=None) -> dict | None:
    """Device time (µs) of `kernels` at one shape in the newest recorded run without the chunked fold
    and the newest one with it, with each run's commit; None when the runs do not hold such a pair.

    runs: recorded runs of the suite softmax-teaching ({"meta", "rows"}, any order). has_fold(commit)
    says whether the commit has the fold (default: whether git shows FOLD_FILE there; a run whose
    commit git cannot place is left out, since it could be on either side).
    """
    has_fold = has_fold or (lambda commit: commit_has_file(commit, FOLD_FILE))
    sides: dict[bool, dict] = {}
    for run in sorted(runs, key=lambda r: str(r["meta"].get("date", ""))):
        side = has_fold(run["meta"].get("git_commit", ""))
        if side is None:
            continue
        times = {}
        for r in run["rows"]:
            if r.get("kernel") in kernels and r.get("n_rows") == n_rows and r.get("n_cols") == n_cols:
                times[r["kernel"]] = 1e3 * float(r["ms"])
        if set(times) == set(kernels) and all(np.isfinite(t) and t > 0 for t in times.values()):
            sides[bool(side)] = {"commit": str(run["meta"]["git_commit"])[:7],
                                 "date": run["meta"].get("date"), "us": times}
    if set(sides) != {False, True}:
        return None
    return {"before": sides[False], "after": sides[True], "n_rows": n_rows, "n_cols": n_cols}
