"""Small helpers the chapters share: where a page ran, and HTML tables without pandas.

Importing this package inside IPython (every chapter does) installs the figure rule of
figures.py: after each cell, every new figure is checked (legend entries name plotted series,
kernels in the book's colours) before it is shown.
"""
from __future__ import annotations

import html

from onlinesoftmax.book.readings import figures
from onlinesoftmax.runtime import device

figures.install_in_ipython()


def execution_mode() -> str:
    """One sentence for a page: real kernels on a GPU, or NumPy models + recorded data."""
    if device.has_gpu():
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"executed on {name}: kernel outputs and timings come from the real CUDA kernels"
    diagnosis = device.gpu_diagnosis()   # a GPU is there but CuPy cannot use it: say so loudly
    if diagnosis:
        print(diagnosis)
    return ("executed without a GPU: kernel outputs come from the kernels' NumPy models (and, where a cell "
            "says so, from the kernel's CUDA source run on a CPU emulator), throughput figures from "
            "recorded GPU data")


def html_table(header: list[str], rows: list[list], caption: str | None = None):
    """An IPython HTML table; cells are escaped, numbers should be formatted by the caller."""
    from IPython.display import HTML

    def cells(tag, values):
        return "".join(f"<{tag}>{html.escape(str(v))}</{tag}>" for v in values)

    head = f"<thead><tr>{cells('th', header)}</tr></thead>"
    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return HTML(f'<table class="table">{cap}{head}<tbody>{body}</tbody></table>')
