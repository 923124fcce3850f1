"""Chapter 03's kernel explorer (the recurrence step by step is in widgets_steps.py).

Explorer: N, batch, mask kind, dtype and variant -> throughput (GB/s and % of the copy
ceiling) and error against the float64 reference. On a GPU every change runs the real
kernels (and a sweep over N shows a progress bar); without one the error comes from the
kernel's NumPy model and the throughput from recorded data, and the plot says so.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.book.readings.figures import color
from onlinesoftmax.runtime import device
from onlinesoftmax.kernels.softmax import masked as softmax_masked
from onlinesoftmax.measure import results
from onlinesoftmax.registry import REGISTRY

KERNELS_BY_DTYPE = {
    "float32": ("softmax_02_online", "softmax_03_online_masked", "softmax_01_safe", "softmax_00_naive"),
    "float16": ("softmax_04_online_fp16_vec4", "softmax_05_online_fp16_vec8"),
}
LIBRARIES = ("cupy_softmax", "torch_softmax")
MASKED = "softmax_03_online_masked"
SWEEP_COLS = tuple(4**k for k in range(4, 11))  # 256 .. 1M
MODEL_MAX_ROWS, MODEL_MAX_COLS = 8, 2**16        # what the NumPy model runs on at most
LIVE_MAX_ROWS = 64                               # rows checked against the float64 reference on a GPU
LIVE_MAX_ELEMENTS = 2**30                        # largest batch x N the widget times live


def load_throughput(suites=("online-variants", "paper-figures")) -> list[dict]:
    """Recorded suites that hold throughput rows: [{"rows", "meta", "path", "copy_GBps"}]."""
    found = []
    for suite in suites:
        try:
            data = results.load_recorded(suite)
        except FileNotFoundError:
            continue
        copies = [r["GBps"] for r in data["rows"] if r.get("kernel") == "copy"]
        found.append({**data, "copy_GBps": float(np.median(copies)) if copies else None})
    return found


def recorded_curve(recorded: list[dict], kernel: str, mask: str, dtype: str, n_rows: int):
    """(n_cols, GB/s, fraction of copy) sorted by n_cols, and the file it came from (or None)."""
    for data in recorded:
        points = sorted((r["n_cols"], r["GBps"], r["fraction_of_copy"]) for r in data["rows"]
                        if r.get("kernel") == kernel and r.get("dtype", "float32") == dtype
                        and r.get("mask", "none") == mask and r.get("n_rows") == n_rows)
        if points:
            return np.array(points, dtype=float), data
    return np.zeros((0, 3)), None


def recorded_batches(recorded: list[dict]) -> list[int]:
    return sorted({r["n_rows"] for data in recorded for r in data["rows"] if "n_rows" in r})


# --- one configuration ------------------------------------------------------------------------

def error_of(kernel: str, dtype: str, mask: str, n_rows: int, n_cols: int, live: bool) -> dict:
    """Max abs error of `kernel` against the float64 reference, next to the same-dtype baseline."""
    rows = min(n_rows, LIVE_MAX_ROWS if live else MODEL_MAX_ROWS)
    cols = n_cols if live else min(n_cols, MODEL_MAX_COLS)
    x = checks.random_rows(np, rows, cols, dtype, seed=rows * 31 + cols,
                           max_offset=8.0 if dtype == "float16" else 30.0)
    kwargs, _ = softmax_masked.example_mask(mask, rows, cols, np)
    options = softmax_masked.prepare(x, kwargs.get("mask"), kwargs.get("valid_lengths"))
    from onlinesoftmax import api, masks

    kwargs = masks.public_kwargs(kwargs)   # the example's causal mask is the kernels' own, top-left

    if live:
        import cupy

        y = api.softmax(cupy.asarray(x), variant=kernel, **kwargs).get()
    else:
        y = api.softmax(x, variant=kernel, **kwargs)
    ref = softmax_masked.reference_masked(x, **options)
    baseline = reference.softmax_same_dtype(softmax_masked.effective_logits(x, dtype=x.dtype, **options))
    passed, _ = checks.compare(y, ref, baseline, np.dtype(dtype).type)
    error, base_error = checks.max_abs_error(y, ref), checks.max_abs_error(baseline, ref)
    return {"error": error, "baseline": base_error,
            "tolerance": checks.tolerance(base_error if np.isfinite(base_error) else 0.0, ref, np.dtype(dtype).type),
            "passed": passed, "rows": rows, "cols": cols, "nan": int(np.isnan(y).sum()),
            "source": "real kernel" if live else "NumPy model"}


_copy_cache: dict = {}


def live_throughput(kernel: str, dtype: str, mask: str, n_rows: int, n_cols: int) -> dict:
    """Time one configuration now (GPU only) with the one timer; GB/s on the ideal-traffic scale."""
    import cupy

    from onlinesoftmax import api
    from onlinesoftmax.measure import bench
    from onlinesoftmax.measure import timer

    if "GBps" not in _copy_cache:
        _copy_cache.update(timer.copy_bandwidth())
    inputs = bench.inputs(n_rows, n_cols, dtype)
    kwargs, mask_bytes = softmax_masked.example_mask(mask, n_rows, n_cols, cupy)
    variant = REGISTRY[kernel]
    out = cupy.empty_like(inputs[0])
    if kwargs:
        options = softmax_masked.prepare(inputs[0], kwargs.get("mask"), kwargs.get("valid_lengths"))
        fn = lambda x: api.run(variant, x, out=out, **options)  # noqa: E731
    else:
        fn = lambda x: api.run(variant, x, out=out)  # noqa: E731
    timing = timer.time_gpu(fn, [(x,) for x in inputs], warmup=3, reps=10)
    ideal_bytes = 2 * n_rows * n_cols * np.dtype(dtype).itemsize + mask_bytes
    GBps = ideal_bytes / timing["ms"] / 1e6
    del inputs, out
    cupy.get_default_memory_pool().free_all_blocks()
    return {"n_cols": n_cols, "GBps": GBps, "fraction_of_copy": GBps / _copy_cache["GBps"], **timing}


# --- the explorer -----------------------------------------------------------------------------

def explorer(live: bool | None = None, recorded: list[dict] | None = None):
    """The widget: controls, a status line, and a two-panel plot (throughput, error)."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    live = device.has_gpu() if live is None else live
    recorded = load_throughput() if recorded is None else recorded
    batches = [1, 7, 10, 100, 1000, 4000] if live else (recorded_batches(recorded) or [10, 4000])
    style = {"description_width": "70px"}
    n_cols = widgets.FloatLogSlider(value=4096, base=2, min=0, max=20, step=1, description="N",
                                    readout_format=".0f", continuous_update=False, style=style)
    n_rows = widgets.Dropdown(options=batches, value=4000 if 4000 in batches else batches[-1],
                              description="batch", style=style)
    dtype = widgets.Dropdown(options=list(KERNELS_BY_DTYPE), value="float32", description="dtype", style=style)
    kernel = widgets.Dropdown(options=KERNELS_BY_DTYPE["float32"], value="softmax_02_online",
                              description="variant", style=style, layout=widgets.Layout(width="380px"))
    mask = widgets.Dropdown(options=softmax_masked.MASK_KINDS, value="none", description="mask", style=style,
                            layout=widgets.Layout(width="300px"))
    sweep = widgets.Button(description="sweep N on the GPU" if live else "sweep N (needs a GPU)",
                           disabled=not live, layout=widgets.Layout(width="200px"))
    progress = widgets.IntProgress(value=0, min=0, max=len(SWEEP_COLS), description="sweep",
                                   layout=widgets.Layout(width="300px"), style=style)
    status = widgets.HTML()
    out = widgets.Output()
    live_points: dict[tuple, dict[int, dict]] = {}
    busy = {"flag": False}

    def settle_choices():
        """Keep the controls consistent: variants follow dtype, masks need the masked kernel."""
        busy["flag"] = True
        try:
            if tuple(kernel.options) != KERNELS_BY_DTYPE[dtype.value]:
                kernel.options = KERNELS_BY_DTYPE[dtype.value]
                kernel.value = KERNELS_BY_DTYPE[dtype.value][0]
            note = ""
            if mask.value != "none" and kernel.value != MASKED:
                if MASKED in KERNELS_BY_DTYPE[dtype.value]:
                    kernel.value = MASKED
                    note = "masks are fused in softmax_03_online_masked: switched to it. "
                else:
                    mask.value = "none"
                    note = "this explorer offers the masked kernel (softmax_03_online_masked) in fp32 only. "
            return note
        finally:
            busy["flag"] = False

    def draw(note=""):
        key = (kernel.value, dtype.value, mask.value, n_rows.value)
        N = int(round(n_cols.value))
        err = error_of(kernel.value, dtype.value, mask.value, n_rows.value, N, live)
        too_big = n_rows.value * N > LIVE_MAX_ELEMENTS
        if live and not too_big:
            point = live_throughput(kernel.value, dtype.value, mask.value, n_rows.value, N)
            live_points.setdefault(key, {})[N] = point
        curve, source = recorded_curve(recorded, kernel.value, mask.value, dtype.value, n_rows.value)
        with out:
            out.clear_output(wait=True)
            fig, (ax, ax_err) = plt.subplots(1, 2, figsize=(10.5, 3.6), gridspec_kw={"width_ratios": [1.6, 1]})
            copy_GBps = _copy_cache.get("GBps") if live else (source or {}).get("copy_GBps")
            if copy_GBps:
                ax.axhline(copy_GBps, color=color("copy"), linestyle="--", linewidth=1,
                           label=f"copy ({copy_GBps:.0f} GB/s)")
            if len(curve):
                ax.plot(curve[:, 0], curve[:, 1], "o-", color=color(kernel.value), markersize=4,
                        label=f"{kernel.value} (recorded)")
                nearest = curve[np.argmin(np.abs(np.log2(curve[:, 0]) - np.log2(N)))]
                ax.plot([nearest[0]], [nearest[1]], "o", color=color(kernel.value), markersize=10, fillstyle="none",
                        label="nearest recorded N")
            for library in LIBRARIES:
                lib_curve, _ = recorded_curve(recorded, library, "none", dtype.value, n_rows.value)
                if len(lib_curve):
                    ax.plot(lib_curve[:, 0], lib_curve[:, 1], ":", color=color(library), label=f"{library} (recorded)")
            if live and live_points.get(key):
                pts = sorted((n, p["GBps"]) for n, p in live_points[key].items())
                ax.plot(*zip(*pts), "s--", color=color(kernel.value), markersize=6, label=f"{kernel.value} (live)")
            ax.set_xscale("log", base=2)
            ax.set_xlim(2**0, 2**20)
            ax.axvline(N, color="C3", linewidth=0.8, alpha=0.5)
            ax.set_xlabel("row length N")
            ax.set_ylabel("effective GB/s")
            if copy_GBps:
                ax.set_ylim(0, copy_GBps * 1.12)
                right = ax.secondary_yaxis("right", functions=(lambda g: 100 * g / copy_GBps,
                                                               lambda p: p * copy_GBps / 100))
                right.set_ylabel("% of copy")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=9, loc="upper left")
            values = [err["error"], err["baseline"], err["tolerance"]]
            shown = [v if np.isfinite(v) and v > 0 else np.nan for v in values]
            ax_err.bar(["kernel", f"{dtype.value} numpy", "tolerance"], shown,
                       color=[color(kernel.value), color("numpy"), "#bbbbbb"])
            ax_err.set_yscale("log")
            ax_err.set_title(f"max |error| vs float64 ({err['source']},\n{err['rows']} rows x {err['cols']})",
                             fontsize=9)
            if not np.isfinite(err["error"]):
                ax_err.text(0.5, 0.5, f"{err['nan']} NaN outputs", transform=ax_err.transAxes, ha="center",
                            color="C3")
            fig.tight_layout()
            plt.show()
        if live and too_big:
            where = f"not timed: {n_rows.value} x {N} is more than {LIVE_MAX_ELEMENTS} elements"
        elif live:
            p = live_points[key][N]
            where = f"measured now: {p['GBps']:.0f} GB/s ({100 * p['fraction_of_copy']:.0f}% of copy)"
        elif source is not None:
            where = ("throughput " + results.provenance(source["meta"]) + f" ({source['path']})")
        else:
            where = "no recorded throughput for this choice (run onlinesoftmax/bench/online_variants.py on a GPU)"
        verdict = "passes" if err["passed"] else "fails"
        status.value = (f"<small>{note}error: {err['source']}, {verdict} the book's tolerance. {where}.</small>")

    def changed(_change):
        if busy["flag"]:
            return
        draw(settle_choices())

    def run_sweep(_button):
        progress.value = 0
        for N in SWEEP_COLS:
            n_cols.unobserve(changed, "value")
            n_cols.value = N
            n_cols.observe(changed, "value")
            draw()
            progress.value += 1

    for control in (n_cols, n_rows, dtype, kernel, mask):
        control.observe(changed, "value")
    sweep.on_click(run_sweep)
    draw(settle_choices())
    controls = widgets.VBox([widgets.HBox([n_cols, n_rows, dtype]), widgets.HBox([kernel, mask]),
                             widgets.HBox([sweep, progress])])
    box = widgets.VBox([controls, status, out])
    display(box)
    return box


# --- the explorer's counterpart on the static page ----------------------------------------------

def explorer_figure(recorded: list[dict] | None = None, n_options=tuple(2**k for k in range(21))):
    """The explorer's controls over a table computed when the page is built: recorded throughput
    (the same curves the widget draws without a GPU) and the NumPy model's error at every N."""
    from itertools import product

    from onlinesoftmax.book.widgets.interactive import Figure, select

    recorded = load_throughput() if recorded is None else recorded
    dtype_of = {k: dtype for dtype, kernels in KERNELS_BY_DTYPE.items() for k in kernels}
    kernels, batches = list(dtype_of), recorded_batches(recorded) or [10, 4000]
    fig = Figure("online-explorer", "The chapter's kernels: throughput and error",
                 [select("kernel", "variant", kernels, "softmax_02_online", labels=[f"{k} ({dtype_of[k]})" for k in kernels]),
                  select("batch", "batch", batches, 4000 if 4000 in batches else batches[-1]),
                  select("mask", "mask", softmax_masked.MASK_KINDS, "none"),
                  select("N", "N", list(n_options), 4096)], digits=4,
                 caption="error: the kernels' NumPy models on at most "
                         f"{MODEL_MAX_ROWS} rows x {MODEL_MAX_COLS} columns, against float64")
    speed = fig.panel("speed", x="row length N", y="effective GB/s", x_scale="log2", title="throughput",
                      width=330, height=230, x_domain=[n_options[0], n_options[-1]])
    error = fig.panel("error", x="", y="max |error| vs float64", x_scale="ordinal", y_scale="log",
                      title="error against float64", width=150, height=230, y_format=".0e")
    for n_cols in n_options:
        fig.series(speed, "chosen N", xs=[n_cols], mark="rule_x", color="#d62728", source="setting",
                   when={"N": n_cols})
    for kernel, batch, mask in product(kernels, batches, softmax_masked.MASK_KINDS):
        dtype, when = dtype_of[kernel], {"kernel": kernel, "batch": batch, "mask": mask}
        curve, source = recorded_curve(recorded, kernel, mask, dtype, batch)
        if len(curve):
            fig.series(speed, f"{kernel} (recorded)", curve[:, 0], curve[:, 1], source="recorded", when=when)
        for library in LIBRARIES if mask == "none" else ():
            lib_curve, lib_source = recorded_curve(recorded, library, "none", dtype, batch)
            source = source or lib_source
            fig.series(speed, f"{library} (recorded)", lib_curve[:, 0], lib_curve[:, 1], source="recorded",
                       when=when, dash=True)
        if source is not None and source.get("copy_GBps"):
            fig.series(speed, f"copy ({source['copy_GBps']:.0f} GB/s, recorded)", ys=[source["copy_GBps"]],
                       mark="rule_y", source="recorded", dash=True, when=when)
        fig.note(("throughput " + results.provenance(source["meta"]) + f"\n({source['path']})") if source else
                 "no recorded throughput for this choice", when=when, slot=1)
    cache: dict = {}
    for kernel, mask, n_cols in product(kernels, softmax_masked.MASK_KINDS, n_options):
        dtype, when = dtype_of[kernel], {"kernel": kernel, "mask": mask, "N": n_cols}
        if mask != "none" and kernel != MASKED:
            fig.note("masks are fused in softmax_03_online_masked only (fp32): choose it to see a mask's error "
                     "and cost", when=when)
            continue
        key = (kernel, mask, min(n_cols, MODEL_MAX_COLS))
        err = cache.get(key) or cache.setdefault(key, error_of(kernel, dtype, mask, MODEL_MAX_ROWS, n_cols, False))
        for label, bar, value, colour in ((f"{kernel} (NumPy model)", "kernel", err["error"], color(kernel)),
                                          (f"{dtype} numpy", f"{dtype} numpy", err["baseline"], color("numpy")),
                                          ("tolerance", "tolerance", err["tolerance"], "#bbbbbb")):
            fig.series(error, label, [bar], [value if value > 0 else None], mark="bar", color=colour, when=when)
        verdict = "passes" if err["passed"] else "fails"
        nan = f"; {err['nan']} NaN outputs" if err["nan"] else ""
        fig.note(f"error: NumPy model on {err['rows']} rows x {err['cols']}, {verdict} the book's tolerance{nan}",
                 when=when)
    return fig
