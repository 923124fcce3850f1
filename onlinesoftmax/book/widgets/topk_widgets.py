"""The chapter's measuring widget: for rows, N, k and dtype, the kernel variant="auto" picks, its error
against the float64 definition rank by rank, and its time beside torch's: measured live on a GPU
(the one timer), read from the recorded suite without one (the same shape, when it was recorded)."""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.readings import topk_figures as tf
from onlinesoftmax.book.readings.figures import color

MODEL_ROWS = 4            # rows the CPU model runs (the error of every row is alike)


def _recorded_times(data, n_rows, n_cols, k, dtype) -> dict:
    """{kernel: µs} of the recorded rows of exactly this shape (any case), empty when none."""
    if data is None:
        return {}
    return {r["kernel"]: r["ms"] * 1e3 for r in data["rows"] if r.get("n_rows") == n_rows and
            r.get("n_cols") == n_cols and r.get("k") == k and r.get("dtype") == dtype}


def _live_times(x, k, kernel) -> dict:
    """{kernel: µs} measured now: ours by name and the two torch paths (when torch is there)."""
    import onlinesoftmax
    from onlinesoftmax.measure import bench, timer

    times = {kernel: timer.time_gpu(lambda: onlinesoftmax.softmax_topk(x, k, variant=kernel), [()], reps=10)["ms"]}
    try:
        import torch

        tx = bench.torch_view(x)
        times["torch_softmax_topk"] = timer.time_gpu(lambda: torch.topk(torch.softmax(tx, -1), k, -1), [()], reps=10)["ms"]
        times["torch_topk"] = timer.time_gpu(lambda: torch.topk(tx, k, -1), [()], reps=10)["ms"]
    except ImportError:
        pass
    return {name: ms * 1e3 for name, ms in times.items()}


def show_measured(n_rows: int = 8, n_cols: int = 32000, k: int = 20, dtype: str = "bfloat16", data=None):
    """Left: |p - p64| over the tolerance at each rank (<= 1 passes). Right: device time in µs."""
    import matplotlib.pyplot as plt

    import onlinesoftmax
    from onlinesoftmax import checks, reference
    from onlinesoftmax.runtime import device
    from onlinesoftmax.topk import choose

    k = min(k, n_cols)
    kernel = choose(n_rows, n_cols, k, dtype).variant.name
    live = device.has_gpu()
    if live:
        import cupy

        x = checks.random_rows(cupy, n_rows, n_cols, dtype, seed=1)
        probs, columns = onlinesoftmax.softmax_topk(x, k, variant=kernel)
        host_x, host_p = checks.host(x[:MODEL_ROWS]), checks.host(probs[:MODEL_ROWS])
        times, source = _live_times(x, k, kernel), "measured now"
    else:
        host_x = checks.random_rows(np, min(n_rows, MODEL_ROWS), n_cols, dtype, seed=1)
        host_p, _ = onlinesoftmax.softmax_topk(host_x, k, variant=kernel)
        times = _recorded_times(data, n_rows, n_cols, k, dtype)
        source = "recorded" if times else "not recorded for this shape"
    want, _ = reference.softmax_topk(np.asarray(checks.as_float64(host_x)), k)
    got = np.asarray(checks.as_float64(host_p))
    tol = checks.tolerance(0.0, want, checks.np_dtype(dtype)) if np.isfinite(want).any() else 1.0
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.0))
    left.plot(np.arange(1, k + 1), (np.abs(got - want) / tol).max(axis=0), marker="o", markersize=3,
              color=color(kernel), label=f"{kernel} ({'kernel' if live else 'NumPy model'})")
    left.axhline(1.0, color=color("copy"), linestyle="--", linewidth=1, label="two ulps of the largest probability")
    left.set_xlabel("rank")
    left.set_ylabel("|p - p64| / (two ulps)")
    left.set_title(f"{n_rows} × {n_cols} {dtype}, k = {k}: error by rank", fontsize=8)
    left.legend(fontsize=6, loc="best")
    names = list(times)
    if names:
        right.bar(np.arange(len(names)), [times[n] for n in names], color=[
            color("torch") if n.startswith("torch") else color(n) for n in names],
            label=f"device time ({source})")
        right.set_xticks(np.arange(len(names)), [tf.PEERS[n][0] if n in tf.PEERS else n for n in names],
                         fontsize=6, rotation=12)
        right.set_ylabel("µs")
        right.legend(fontsize=6, loc="best")
    else:
        right.text(0.5, 0.5, f"time: {source}", ha="center", va="center", fontsize=8, transform=right.transAxes)
        right.set_axis_off()
    right.set_title(f"the kernel variant='auto' picks: {kernel}", fontsize=8)
    fig.tight_layout()
    plt.show()


def measured_figure(data=None, rows_options=(1, 8, 256, 4000), n_options=(4096, 32000, 151936),
                    k_options=(1, 5, 20, 50), dtypes=("float32", "bfloat16")):
    """The static page's counterpart of `show_measured`: for each setting, the kernel variant="auto"
    picks, its NumPy model's error by rank over the tolerance, and the recorded device times of that
    shape (or that it was not recorded). The model runs once per (kernel, N, k, dtype)."""
    import onlinesoftmax
    from onlinesoftmax import checks, reference
    from onlinesoftmax.book.readings.counterparts import MODEL_NOTE, REFERENCE
    from onlinesoftmax.book.widgets.interactive import Figure, select
    from onlinesoftmax.topk import choose

    fig = Figure("topk-measured", "The kernel auto picks and its error by rank",
                 [select("rows", "rows", list(rows_options), 8), select("N", "N", list(n_options), 32000),
                  select("k", "k", list(k_options), 20), select("dtype", "dtype", list(dtypes), "bfloat16")],
                 digits=3, caption=f"{MODEL_NOTE} of the chosen kernel on {MODEL_ROWS} rows; times from the recorded "
                                   "suite when it holds the shape")
    panel = fig.panel("error", x="rank", y="|p − p64| / tolerance", width=560, height=220, y_zero=True)
    errors: dict = {}
    for n_cols in n_options:
        for k in k_options:
            for dtype in dtypes:
                for n_rows in rows_options:
                    kernel = choose(n_rows, n_cols, k, dtype).variant.name
                    key = (kernel, n_cols, k, dtype)
                    if key not in errors:
                        x = checks.random_rows(np, MODEL_ROWS, n_cols, dtype, seed=1)
                        got, _ = onlinesoftmax.softmax_topk(x, k, variant=kernel)
                        want, _ = reference.softmax_topk(np.asarray(checks.as_float64(x)), k)
                        tol = checks.tolerance(0.0, want, checks.np_dtype(dtype))
                        errors[key] = (np.abs(np.asarray(checks.as_float64(got)) - want) / tol).max(axis=0)
                    when = {"rows": n_rows, "N": n_cols, "k": k, "dtype": dtype}
                    fig.series(panel, f"{kernel} ({MODEL_NOTE})", range(1, k + 1), errors[key], mark="point",
                               when=when)
                    fig.series(panel, "the tolerance (at most 1 passes)", [1, k], [1.0, 1.0], color=REFERENCE,
                               source="reference", dash=True, when=when)
                    times = _recorded_times(data, n_rows, n_cols, k, dtype)
                    fig.note(f"{n_rows} × {n_cols} {dtype}, k = {k}: variant='auto' picks {kernel}", when=when)
                    fig.note("recorded device time: " + (", ".join(f"{name} {us:.1f} µs" for name, us in times.items())
                                                         if times else "not recorded for this shape"),
                             when=when, slot=1)
    return fig
