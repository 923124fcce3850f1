"""One colour per kernel across the book, and the check every figure passes.

`color(name)` gives the colour of a kernel (a registry name, "fast" for softmax(x) with
variant="auto") or of a library it is compared with ("torch", "cupy", "copy", "numpy"):
the same in every chapter. Short names ("02_online", "online") are accepted.

`check_legends(fig)` is the rule a figure must keep: every legend entry names a series that is
plotted on the same axes (no legend copied from another panel), every plotted series whose colour
the palette fixes uses that colour, and no title says "recorded" twice. The book's test runs every
chapter and applies it to every figure left open (tests/test_figures.py).
"""
from __future__ import annotations

import re

from matplotlib import colors as mcolors

# tab20-like, distinguishable, in story order; the libraries in greys and muted tones
PALETTE = {
    "softmax_00_naive": "#8c564b",
    "softmax_01_safe": "#e377c2",
    "softmax_02_online": "#1f77b4",
    "softmax_02_online_unguarded": "#aec7e8",
    "softmax_03_online_masked": "#17becf",
    "softmax_04_online_fp16_vec4": "#bcbd22",
    "softmax_05_online_fp16_vec8": "#dbdb8d",
    "softmax_06_split_merge": "#9467bd",
    "softmax_07_warp_per_row": "#ff7f0e",
    "softmax_08_registers": "#2ca02c",
    "softmax_09_shared": "#d62728",
    "softmax_10_cluster": "#9edae5",
    "softmax_11_split": "#c5b0d5",
    "softmax_12_pipelined": "#98df8a",
    "softmax_13_cooperative": "#ff9896",
    "softmax_14_registers_masked": "#b5cf6b",
    "softmax_backward_01_rows": "#e6ab02",
    "log_softmax_backward_01_rows": "#a6761d",
    "logsumexp_01_online": "#1f77b4",
    "log_softmax_01_online": "#ff7f0e",
    "log_softmax_02_registers": "#756bb1",
    "log_softmax_03_split": "#5e3c99",
    "log_softmax_04_shared": "#c994c7",
    "log_softmax_05_cluster": "#dd3497",
    "logsumexp_02_state": "#31a354",
    "logsumexp_03_split": "#0b6e4f",
    "softmax_topk_01_topk_only": "#8c6d31",
    "softmax_topk_02_safe_unfused": "#d6616b",
    "softmax_topk_03_safe_fused": "#e7ba52",
    "softmax_topk_04_online_fused": "#393b79",
    "softmax_topk_05_warp_rows": "#6b6ecf",
    "softmax_topk_06_split": "#a55194",
    "attention_01_blocked": "#637939",
    "attention_02_decode_split": "#843c39",
    "attention_03_mma": "#bd9e39",
    "attention_04_ldmatrix": "#e7969c",
    "attention_05_pipelined": "#7b4173",
    "attention_06_decode_mma": "#e6550d",
    "attention_07_fragment_reuse": "#00a087",
    "cross_entropy_01_rows": "#3182bd",
    "cross_entropy_02_cluster": "#08519c",
    "cross_entropy_03_from_lse": "#4292c6",
    "sampling_01_rows": "#ad494a",
    "sampling_02_split": "#5254a3",
    "attention_08_paged_decode": "#9c9ede",
    "attention_backward_01_blocked": "#cedb9c",
    "attention_09_varlen": "#6baed6",
    "attention_backward_02_mma": "#e7cb94",
    "attention_backward_03_pipelined": "#b5651d",
    "attention_backward_04_wgmma": "#7570b3",
    "attention_10_wgmma": "#d95f02",
    "attention_11_wgmma_tma": "#1b9e77",
    "attention_12_wgmma_overlap": "#e7298a",
    "attention_13_fp32_pipelined": "#66a61e",
    "fast": "#000000",
    "torch": "#7f7f7f",
    "cupy": "#c49c94",
    "numpy": "#c7c7c7",
    "copy": "#000000",
}
ALIASES = {"torch.softmax": "torch", "torch_softmax": "torch", "torch.logsumexp": "torch",
           "torch.log_softmax": "torch", "cupyx": "cupy", "cupyx.scipy.special.softmax": "cupy",
           "cupy_softmax": "cupy", "copy_same_size": "copy", "auto": "fast"}


def canonical(name: str) -> str | None:
    """The palette key of a kernel or library name (registry name, short name such as "online",
    the name without its family such as "07_warp_per_row"), or None when the palette does not know it."""
    from onlinesoftmax.registry import REGISTRY

    name = ALIASES.get(name, name)
    if name in PALETTE:
        return name
    shorts = [v.name for v in REGISTRY.values() if v.short == name and v.name in PALETTE]
    if len(shorts) == 1:
        return shorts[0]
    for family in ("softmax_", "logsumexp_", "log_softmax_", "attention_", "softmax_topk_"):
        if family + name in PALETTE:
            return family + name
    return None


def color(name: str) -> str:
    """The book's colour for a kernel or library (KeyError naming the known ones otherwise)."""
    key = canonical(name)
    if key is None:
        raise KeyError(f"no colour for {name!r}; known: {', '.join(PALETTE)}")
    return PALETTE[key]


def _series(ax) -> list:
    """The artists that carry data on an axes: lines, collections, patches (bars), with labels."""
    artists = list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.containers)
    return [a for a in artists if hasattr(a, "get_label")]


def _label_names(label: str) -> list[str]:
    """Kernel names a label mentions: its words, and the words of the part before a parenthesis."""
    return re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", label)


def check_legends(fig) -> list[str]:
    """What is wrong with `fig` by the book's rule (an empty list: nothing)."""
    problems = []
    for ax in fig.axes:
        legend = ax.get_legend()
        plotted = {a.get_label() for a in _series(ax) if not a.get_label().startswith("_")}
        if legend is not None:
            for text in legend.get_texts():
                if text.get_text() not in plotted:
                    problems.append(f"axes {ax.get_title()!r}: legend entry {text.get_text()!r} names no series "
                                    f"plotted there (plotted: {sorted(plotted)})")
        for artist in ax.lines:
            label = artist.get_label()
            if label.startswith("_"):
                continue
            first = _label_names(label)[:1]
            key = canonical(first[0]) if first else None
            if key is not None and not mcolors.same_color(artist.get_color(), PALETTE[key]):
                problems.append(f"axes {ax.get_title()!r}: series {label!r} is drawn in {artist.get_color()}, "
                                f"the book's colour for {key} is {PALETTE[key]}")
        if ax.get_title().lower().count("recorded") > 1:
            problems.append(f"axes title {ax.get_title()!r} says 'recorded' twice")
    for legend in fig.legends:   # a figure-level legend must name series of some axes of the figure
        plotted = {a.get_label() for ax in fig.axes for a in _series(ax)}
        for text in legend.get_texts():
            if text.get_text() not in plotted:
                problems.append(f"figure legend entry {text.get_text()!r} names no plotted series")
    return problems


class FigureRuleError(AssertionError):
    """A figure of the book breaks check_legends' rule."""


_checked: set = set()


def check_open_figures() -> None:
    """check_legends on every open figure not checked yet; FigureRuleError listing the problems."""
    import matplotlib.pyplot as plt

    problems = []
    for number in plt.get_fignums():
        fig = plt.figure(number)
        if id(fig) in _checked:
            continue
        _checked.add(id(fig))
        problems += check_legends(fig)
    if problems:
        raise FigureRuleError("a figure breaks the book's figure rule:\n  " + "\n  ".join(problems))


class _CheckAfterCell:
    """An IPython AST transformer: each cell ends with check_open_figures(), inside the cell, so a
    bad figure is the cell's error (an error in an IPython event callback is only printed). The
    cell's last expression is kept as the last expression, so its value is still displayed."""

    def visit(self, module):
        import ast

        body = module.body
        check = ast.parse("__import__('onlinesoftmax.book.readings.figures', fromlist=['x']).check_open_figures()").body[0]
        if body and isinstance(body[-1], ast.Expr):
            last = body.pop()
            body += [ast.Assign(targets=[ast.Name("_osm_cell_value", ast.Store())], value=last.value), check,
                     ast.Expr(ast.Name("_osm_cell_value", ast.Load()))]
        else:
            body.append(check)
        return ast.fix_missing_locations(module)


def install_in_ipython() -> bool:
    """Check every figure a cell leaves open, at the end of the cell, before the inline backend
    shows and closes it: the strict book build then fails on the chapter that drew it. Called when
    onlinesoftmax.book is imported inside IPython; returns whether a shell was there."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    if not any(isinstance(t, _CheckAfterCell) for t in shell.ast_transformers):
        shell.ast_transformers.append(_CheckAfterCell())
    return True
