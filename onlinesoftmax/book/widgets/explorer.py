"""Chapter 06's explorer: the fraction of the copy ceiling against the batch, for one kernel, N and dtype.

Each plot shows the chosen kernel next to a copy of the same bytes (the floor that launch and
latency set for a small tensor) and a reference line at `NEAR_COPY` of the copy ceiling.

- On a GPU every point is timed live with the book's timer (`bench.measure`, i.e. `timer.time_gpu`),
  against the copy ceiling `timer.copy_bandwidth` measured once per session, over `BATCHES_LIVE`.
- Without one the points come from the recorded `softmax-fast` suite, at the batches it recorded,
  and the plot is labelled with that file's provenance.

The error against the float64 reference comes from `widgets_fast.error_of` (the real kernel on a
GPU, its NumPy model otherwise).
"""
from __future__ import annotations

from onlinesoftmax import checks
from onlinesoftmax.registry import DTYPE_ITEMSIZE
from onlinesoftmax.book.widgets import widgets_fast
from onlinesoftmax.book.readings.figures import color
from onlinesoftmax.measure import results
from onlinesoftmax.runtime import device

NEAR_COPY = 0.9        # the fraction of the copy ceiling the chapter and its exercises measure against
BATCHES_LIVE = (1, 10, 64, 128, 256, 512, 1024, 2048, 4000)
MAX_ELEMENTS = 2**30   # as the recorded suite: a batch is capped at MAX_ELEMENTS // N rows
_session: dict = {}


def rows_of(batch: int, n_cols: int) -> int:
    """The rows a batch gets at N = n_cols (capped at MAX_ELEMENTS elements, as in the recorded suite)."""
    return max(1, min(batch, MAX_ELEMENTS // n_cols))


def recorded_points(data: dict, kernel: str, dtype: str, n_cols: int) -> dict:
    """{series: (rows, fractions of the copy)} for `kernel` and the same-size copy, from `data`."""
    points = {}
    for name in (kernel, "copy_same_size"):
        by_rows = {r["n_rows"]: r["fraction_of_copy"] for r in data["rows"]
                   if r.get("kernel") == name and r.get("dtype") == dtype and r.get("n_cols") == n_cols
                   and "ms" in r}
        if by_rows:
            points[name] = (sorted(by_rows), [by_rows[n] for n in sorted(by_rows)])
    return points


def copy_ceiling_GBps() -> float:
    """The device-to-device copy of this session's GPU (measured once, with the book's timer)."""
    from onlinesoftmax.measure import timer

    if "copy_GBps" not in _session:
        _session["copy_GBps"] = timer.copy_bandwidth()["GBps"]
    return _session["copy_GBps"]


def live_points(kernel: str, dtype: str, n_cols: int, batches=BATCHES_LIVE) -> dict:
    """{series: (rows, fractions of the copy)} timed now on the GPU: `kernel` and the same-size copy."""
    import cupy

    import onlinesoftmax as osm
    from onlinesoftmax.measure import bench

    copy_GBps = copy_ceiling_GBps()
    points = {kernel: ([], []), "copy_same_size": ([], [])}
    variant = "auto" if kernel == "fast" else kernel
    for batch in sorted({rows_of(b, n_cols) for b in batches}):
        inputs = [checks.random_rows(cupy, batch, n_cols, dtype, seed=s) for s in (1, 2)]
        out = cupy.empty_like(inputs[0])
        ideal = 2 * batch * n_cols * DTYPE_ITEMSIZE[dtype]   # one read and one write per element
        reps = bench.reps_for(ideal)
        timed = {
            kernel: bench.measure(kernel, lambda x: osm.softmax(x, variant=variant, out=out), inputs,
                                  bytes_per_call=ideal, copy_GBps=copy_GBps, reps=reps),
            "copy_same_size": bench.measure("copy_same_size",
                                            lambda x: out.data.copy_from_device_async(x.data, ideal // 2),
                                            inputs, bytes_per_call=ideal, copy_GBps=copy_GBps, reps=reps),
        }
        for name, row in timed.items():
            points[name][0].append(batch)
            points[name][1].append(row["fraction_of_copy"])
        inputs = out = None
        cupy.get_default_memory_pool().free_all_blocks()
    return points


def plot(points: dict, kernel: str, dtype: str, n_cols: int, where: str):
    """One axes: fraction of the copy against the batch; legend from what is plotted."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name, (batches, fractions) in points.items():
        style = "--" if name == "copy_same_size" else "-"
        ax.plot(batches, fractions, style, color=color(name), marker="o", ms=4,
                label="copy of the same bytes" if name == "copy_same_size" else name)
    ax.axhline(NEAR_COPY, color="grey", lw=0.7, ls=":", label=f"{NEAR_COPY} of the copy ceiling")
    ax.set_xscale("log")
    ax.set_xlabel("batch (rows of N)")
    ax.set_ylabel("fraction of the copy ceiling")
    ax.set_title(f"{kernel}, {dtype}, N = {n_cols}")
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, where, fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def explorer(data: dict):
    """ipywidgets: N, dtype, kernel -> the kernel's error, and its fraction of the copy against the batch
    (timed live on a GPU, from `data`, the recorded suite, otherwise)."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    live = device.has_gpu()
    n_list = sorted({r["n_cols"] for r in data["rows"] if "n_cols" in r})
    n_widget = widgets.SelectionSlider(options=n_list, value=4096 if 4096 in n_list else n_list[0],
                                       description="N")
    dtype_widget = widgets.Dropdown(options=list(checks.DTYPES), value="float32", description="dtype")
    kernel_widget = widgets.Dropdown(options=list(widgets_fast.KERNELS), value="softmax_08_registers",
                                     description="kernel")
    out = widgets.Output()

    def draw(*_):
        out.clear_output(wait=True)
        n_cols, dtype, kernel = n_widget.value, dtype_widget.value, kernel_widget.value
        with out:
            err = widgets_fast.error_of(kernel, dtype, 64 if live else widgets_fast.MODEL_MAX_ROWS, n_cols)
            if err.get("error", 0) is None:
                print(err["note"])
                return
            print(f"{err['kernel']}: {'passes' if err['passed'] else 'FAILS'} the tolerance "
                  f"({err['message']}; {err['source']})")
            if live:
                points = live_points(kernel, dtype, n_cols)
                where = results.provenance(results.gpu_meta(), live=True)
            else:
                points = recorded_points(data, kernel, dtype, n_cols)
                where = results.provenance(data["meta"])
            if kernel not in points:
                print(f"no recorded measurement of {kernel} at N = {n_cols} in {dtype}; "
                      f"recorded batches hold other kernels or shapes")
                return
            batches, fractions = points[kernel]
            reached = [b for b, f in zip(batches, fractions) if f >= NEAR_COPY]
            print(f"batches {', '.join(map(str, batches))}: smallest at or above {NEAR_COPY} of the copy: "
                  + (str(reached[0]) if reached else "none"))
            plot(points, kernel, dtype, n_cols, where)
            plt.show()

    for w in (n_widget, dtype_widget, kernel_widget):
        w.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([n_widget, dtype_widget, kernel_widget]), out])


def explorer_figure(data: dict):
    """The explorer's counterpart on the static page: N, dtype and kernel choose among the recorded
    curves (fraction of the copy ceiling against the batch, next to a copy of the same bytes)."""
    from onlinesoftmax.book.widgets.interactive import Figure, select

    n_list = sorted({r["n_cols"] for r in data["rows"] if "n_cols" in r})
    kernels = list(widgets_fast.KERNELS)
    fig = Figure("copy-explorer", "The fraction of the copy ceiling against the batch",
                 [select("N", "N", n_list, 4096 if 4096 in n_list else n_list[0]),
                  select("dtype", "dtype", list(checks.DTYPES), "float32"),
                  select("kernel", "kernel", kernels, "softmax_08_registers")], digits=4,
                 caption=results.provenance(data["meta"]))
    panel = fig.panel("fraction", x="batch (rows of N)", y="fraction of the copy ceiling", x_scale="log",
                      width=540, height=260)
    fig.series(panel, f"{NEAR_COPY} of the copy ceiling", ys=[NEAR_COPY], mark="rule_y", color="#808080",
               source="setting", dash=True)
    for n_cols in n_list:
        for dtype in checks.DTYPES:
            copy = recorded_points(data, "copy_same_size", dtype, n_cols).get("copy_same_size")
            if copy:
                fig.series(panel, "copy of the same bytes (recorded)", *copy, source="recorded", dash=True,
                           when={"N": n_cols, "dtype": dtype})
            for kernel in kernels:
                when = {"N": n_cols, "dtype": dtype, "kernel": kernel}
                points = recorded_points(data, kernel, dtype, n_cols).get(kernel)
                if not points:
                    fig.note(f"no recorded measurement of {kernel} at N = {n_cols} in {dtype}", when=when)
                    continue
                fig.series(panel, f"{kernel} (recorded)", *points, source="recorded", when=when)
                reached = [b for b, f in zip(*points) if f >= NEAR_COPY]
                fig.note(f"batches {', '.join(map(str, points[0]))}: smallest at or above {NEAR_COPY} of the copy: "
                         + (str(reached[0]) if reached else "none"), when=when)
    return fig
