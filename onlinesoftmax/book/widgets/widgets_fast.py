"""Chapter 06's views of the fast kernels: recorded throughput tables and the kernel explorer.

Explorer: N, batch, dtype and kernel -> error against the float64 reference and throughput.
On a GPU the real kernel runs (error on the live output, time from `timer.time_gpu`); without
one the error comes from the kernel's NumPy model (on at most 8 rows) and the throughput from
the recorded `softmax-fast` suite, labelled with its provenance.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.runtime import device
from onlinesoftmax.kernels import dispatch
from onlinesoftmax.kernels.softmax import fast as softmax_fast
from onlinesoftmax.measure import results

SUITE = "softmax-fast"
KERNELS = ("fast",) + tuple(v.name for v in softmax_fast.FAST_VARIANTS) + ("softmax_02_online",)
MODEL_MAX_ROWS = 8


def load() -> dict:
    """The newest recorded softmax-fast file."""
    return results.load_recorded(SUITE)


def copy_GBps(data: dict) -> float:
    return float(np.median([r["GBps"] for r in data["rows"] if r.get("kernel") == "copy"]))


def recorded_row(data: dict, kernel: str, dtype: str, batch: int, n_cols: int) -> dict | None:
    for row in data["rows"]:
        if (row.get("kernel") == kernel and row.get("dtype") == dtype and row.get("batch") == batch
                and row.get("n_cols") == n_cols and "ms" in row):
            return row
    return None


def curve(data: dict, kernel: str, dtype: str, batch: int, field: str = "fraction_of_copy"):
    """(N list, values) of one kernel at one batch, in N order."""
    pairs = sorted((r["n_cols"], r[field]) for r in data["rows"]
                   if r.get("kernel") == kernel and r.get("dtype") == dtype and r.get("batch") == batch
                   and "ms" in r)
    return [p[0] for p in pairs], [p[1] for p in pairs]


def error_of(kernel: str, dtype: str, n_rows: int, n_cols: int) -> dict:
    """Error of the kernel (model without a GPU) against the float64 reference, and the baseline's."""
    import onlinesoftmax as osm

    live = device.has_gpu()
    if live:
        import cupy as xp
    else:
        xp = np
    rows = n_rows if live else min(n_rows, MODEL_MAX_ROWS)
    x = checks.random_rows(xp, rows, n_cols, dtype, seed=n_cols)
    if kernel != "fast" and n_cols > osm.REGISTRY[kernel].max_cols:
        return {"error": None, "note": f"{kernel} holds at most {osm.REGISTRY[kernel].max_cols} columns"}
    if kernel == "softmax_02_online" and dtype != "float32":
        return {"error": None, "note": "softmax_02_online is fp32 only"}
    y = osm.softmax(x, variant=kernel)
    passed, message = checks.compare_softmax(y, x)
    chosen = dispatch.choose(n_rows, n_cols, dtype).variant.name if kernel == "fast" else kernel
    source = "real kernel" if live else f"NumPy model, {rows} rows"
    return {"passed": passed, "message": message, "kernel": chosen, "source": source}


def explorer(data: dict | None = None):
    """ipywidgets: N, batch, dtype, kernel -> error and throughput (live on a GPU, recorded otherwise)."""
    import ipywidgets as widgets
    from IPython.display import display

    n_list = sorted({r["n_cols"] for r in data["rows"] if "n_cols" in r}) if data else [256, 1024, 4096]
    n_widget = widgets.SelectionSlider(options=n_list, value=4096 if 4096 in n_list else n_list[0],
                                       description="N")
    batch_widget = widgets.Dropdown(options=[1, 10, 64, 4000], value=4000, description="batch")
    dtype_widget = widgets.Dropdown(options=list(checks.DTYPES), value="float32", description="dtype")
    kernel_widget = widgets.Dropdown(options=list(KERNELS), value="fast", description="kernel")
    out = widgets.Output()

    def draw(*_):
        out.clear_output()
        n_cols, batch = n_widget.value, batch_widget.value
        dtype, kernel = dtype_widget.value, kernel_widget.value
        with out:
            err = error_of(kernel, dtype, min(batch, 64) if device.has_gpu() else batch, n_cols)
            if err.get("error", 0) is None:
                print(err["note"])
                return
            print(f"{err['kernel']}: {'passes' if err['passed'] else 'FAILS'} the tolerance "
                  f"({err['message']}; {err['source']})")
            if data is not None:
                row = recorded_row(data, kernel, dtype, batch, n_cols)
                torch_row = recorded_row(data, "torch_softmax", dtype, batch, n_cols)
                if row is None:
                    print("no recorded measurement for this kernel and shape")
                else:
                    extra = f", {torch_row['ms'] / row['ms']:.2f}x torch.softmax" if torch_row else ""
                    print(f"{row['GBps']:.0f} GB/s = {row['fraction_of_copy']:.2f} of the copy ceiling "
                          f"({row['n_rows']} x {n_cols}{extra}); {results.provenance(data['meta'])}")

    for w in (n_widget, batch_widget, dtype_widget, kernel_widget):
        w.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([n_widget, batch_widget]), widgets.HBox([dtype_widget, kernel_widget]), out])
