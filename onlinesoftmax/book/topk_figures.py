"""Figures and readings of the chapter "Fused softmax + top-k".

`load()` returns the newest recorded suite `softmax-topk` (benchmarks/bench_softmax_topk.py) or None
when none is recorded; `plot_speedups(data)` and `plot_fraction_of_read(data)` draw it, one panel per
case (paper, sampling, moe); `reading(data)` computes the numbers the prose quotes from it. `show_choice`
is the widget: the k probabilities that softmax_topk returns, drawn over the whole distribution.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.figures import color
from onlinesoftmax.measure import results

SUITE = "softmax-topk"
CASES = (("paper", "the paper's sweep (fp32)"), ("sampling", "sampling: batch × vocabulary"),
         ("moe", "MoE gating: tokens × experts"))
PEERS = {"torch_softmax_topk": ("torch.softmax + torch.topk", "^"), "torch_topk": ("torch.topk alone", "v")}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
OTHER_KERNEL_COLOR = "#6b6ecf"   # a kernel the palette does not list yet


def kernel_color(name: str) -> str:
    """The book's colour of a kernel; a neighbouring shade for a kernel the palette does not know."""
    try:
        return color(name)
    except KeyError:
        return OTHER_KERNEL_COLOR


def load() -> dict | None:
    """The newest recorded suite, or None when it has not been recorded."""
    if not results.recorded_files(SUITE):
        return None
    return results.load_recorded(SUITE)


def is_ours(row: dict) -> bool:
    return row["kernel"].startswith("softmax_topk_")


def logits_bytes(row: dict) -> int:
    return row.get("bytes") or row["n_rows"] * row["n_cols"] * ITEMSIZE[row["dtype"]]


def case_rows(data: dict, case: str) -> list[dict]:
    return [r for r in data["rows"] if r.get("case") == case]


def ours_auto(rows: list[dict]) -> list[dict]:
    """Our rows of the variant that variant="auto" picks for each shape."""
    return [r for r in rows if is_ours(r) and r.get("auto", True)]


def ceiling_GBps(data: dict) -> float:
    return next(r["GBps"] for r in data["rows"] if r["kernel"] == "read")


def _axes(n: int, title: str):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    fig.suptitle(title, fontsize=8)
    return fig, axes[0]


def plot_speedups(data: dict, provenance_label: str):
    """Speed-up of ours (each kernel by name) over the two torch paths, against the bytes of logits."""
    import matplotlib.pyplot as plt

    fig, axes = _axes(len(CASES), provenance_label)
    for ax, (case, title) in zip(axes, CASES):
        rows = [r for r in case_rows(data, case) if is_ours(r)]
        for kernel in sorted({r["kernel"] for r in rows}):
            mine = [r for r in rows if r["kernel"] == kernel]
            for peer, (peer_label, marker) in PEERS.items():
                points = [(logits_bytes(r), r[f"speedup_vs_{peer}"]) for r in mine if f"speedup_vs_{peer}" in r]
                if points:
                    x, y = np.array(points).T
                    ax.plot(x, y, marker=marker, linestyle="none", color=kernel_color(kernel), markersize=4,
                            alpha=0.8, label=f"{kernel} over {peer_label}")
        ax.axhline(1.0, color=color("copy"), linestyle="--", linewidth=1, label="equal time")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("bytes of logits read")
        ax.legend(fontsize=6, loc="best")
    axes[0].set_ylabel("speed-up (torch time / our time)")
    fig.tight_layout()
    plt.show()


def plot_fraction_of_read(data: dict, provenance_label: str):
    """Bytes of logits per second over the read ceiling, ours (as auto picks) and the torch paths."""
    import matplotlib.pyplot as plt

    fig, axes = _axes(len(CASES), provenance_label)
    for ax, (case, title) in zip(axes, CASES):
        rows = case_rows(data, case)
        series = [(f"{kernel} (variant='auto')", kernel_color(kernel), "o",
                   [r for r in ours_auto(rows) if r["kernel"] == kernel])
                  for kernel in sorted({r["kernel"] for r in ours_auto(rows)})]
        series += [(label, color("torch"), marker, [r for r in rows if r["kernel"] == peer])
                   for peer, (label, marker) in PEERS.items()]
        for label, series_color, marker, mine in series:
            if mine:
                x = np.array([logits_bytes(r) for r in mine])
                y = np.array([r["fraction_of_read"] for r in mine])
                ax.plot(x, y, marker=marker, linestyle="none", color=series_color, markersize=4, alpha=0.8,
                        label=label)
        ax.axhline(1.0, color=color("copy"), linestyle="--", linewidth=1,
                   label=f"read ceiling ({ceiling_GBps(data):,.0f} GB/s)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("bytes of logits read")
        ax.legend(fontsize=6, loc="best")
    axes[0].set_ylabel("fraction of the read ceiling")
    fig.tight_layout()
    plt.show()


def _median(values) -> float:
    return float(np.median(values)) if len(values) else float("nan")


def reading(data: dict) -> dict:
    """The numbers the chapter's reading of the plots quotes, computed from the recorded rows."""
    out = {"ceiling_GBps": ceiling_GBps(data)}
    for case, _ in CASES:
        mine = ours_auto(case_rows(data, case))
        for peer in PEERS:
            speedups = [r[f"speedup_vs_{peer}"] for r in mine if f"speedup_vs_{peer}" in r]
            out[f"{case}_{peer}_median"] = _median(speedups)
            out[f"{case}_{peer}_min"] = min(speedups, default=float("nan"))
            out[f"{case}_{peer}_max"] = max(speedups, default=float("nan"))
            out[f"{case}_{peer}_slower"] = sum(s < 1 for s in speedups)
        out[f"{case}_shapes"] = len(mine)
        out[f"{case}_fraction_median"] = _median([r["fraction_of_read"] for r in mine])
        out[f"{case}_fraction_max"] = max((r["fraction_of_read"] for r in mine), default=float("nan"))
        out[f"{case}_end_to_end_us_median"] = _median([r["end_to_end_us"] for r in mine if "end_to_end_us" in r])
    paper = ours_auto(case_rows(data, "paper"))
    big = [r for r in paper if r["n_rows"] == 4000]
    if big:
        n_big = max(r["n_cols"] for r in big)
        out["paper_big_n"] = n_big
        for r in big:
            if r["n_cols"] == n_big:
                out[f"paper_k{r['k']}_vs_unfused"] = r["speedup_vs_torch_softmax_topk"]
                out[f"paper_k{r['k']}_vs_topk"] = r["speedup_vs_torch_topk"]
                out[f"paper_k{r['k']}_fraction"] = r["fraction_of_read"]
    sampling = ours_auto(case_rows(data, "sampling"))
    for batch in (1, 256):
        out[f"sampling_batch{batch}_fraction"] = _median([r["fraction_of_read"] for r in sampling
                                                          if r["n_rows"] == batch])
    return out


def show_choice(n_cols: int = 1000, k: int = 5, dtype: str = "float32", renormalize: bool = False,
                seed: int = 0, shown: int = 60):
    """Logits of one row (normal, scale 2), the k probabilities softmax_topk returns (the kernel on a
    GPU, its NumPy model otherwise) over the row's whole softmax in float64, sorted."""
    import matplotlib.pyplot as plt

    import onlinesoftmax
    from onlinesoftmax import checks, reference
    from onlinesoftmax.runtime import device
    from onlinesoftmax.topk import choose

    k = min(k, n_cols)
    x = checks.from_float32((np.random.default_rng(seed).standard_normal((1, n_cols)) * 2).astype(np.float32),
                            dtype)
    if device.has_gpu():
        import cupy

        probs, columns = onlinesoftmax.softmax_topk(checks.on_device(cupy, x), k, renormalize=renormalize)
        probs, columns = cupy.asnumpy(checks.as_float64(probs)), columns.get()
    else:
        probs, columns = onlinesoftmax.softmax_topk(x, k, renormalize=renormalize)
    probs = np.asarray(checks.as_float64(probs))[0]
    full = reference.softmax(np.asarray(checks.as_float64(x)))[0]
    ranked = np.sort(full)[::-1][:max(shown, k)]
    kernel = choose(n_cols, k).name
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ax.bar(np.arange(len(ranked)), ranked, width=0.8, color=color("numpy"),
           label="softmax(x) in float64, sorted (the rest of the row)")
    ax.bar(np.arange(k), probs, width=0.5, color=kernel_color(kernel), label=f"{kernel}: the k returned")
    ax.set_yscale("log")
    ax.set_xlabel("rank (largest probability first)")
    ax.set_ylabel("probability")
    ax.set_title(f"N = {n_cols}, k = {k}, {dtype}, renormalize={renormalize}: the k returned sum to "
                 f"{probs.sum():.4f}, the row's largest {len(ranked)} to {ranked.sum():.4f}", fontsize=8)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    plt.show()


def _frac(value: float) -> str:
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _times(value: float) -> str:
    """'2.31 times faster than' or '0.80 times the speed of (slower than)'."""
    return f"{value:.2f} times faster than" if value >= 1 else f"slower than ({value:.2f} times the speed of)"


def reading_markdown(data: dict | None, paper: dict, k32_blocks: int | None = None) -> str:
    """The chapter's reading of the plots, as Markdown computed from the recorded rows (or the
    sentence that nothing is recorded yet)."""
    if data is None:
        return ("The suite has not been recorded yet, so there is nothing to read here: no figure is drawn "
                "and no number is quoted. Once `benchmarks/bench_softmax_topk.py` has run on a GPU, this "
                "section reads its file.")
    r = reading(data)
    bullets = []
    if "paper_k5_vs_unfused" in r:
        n_big = r["paper_big_n"]
        text = (f"**The paper's shape.** At batch 4000, $N = {n_big}$ and $k = 5$, the fused kernel is "
                f"{_times(r['paper_k5_vs_unfused'])} `torch.softmax` followed by `torch.topk`, and reads "
                f"the logits at {_frac(r['paper_k5_fraction'])} of the read ceiling. The paper's figure for "
                f"$K = 5$ on a V100 is {paper['k5_total']:.0f} times, against its own baselines (the paper's "
                "figure, not ours).")
        ks = [k for k in (10, 15, 30) if f"paper_k{k}_vs_unfused" in r]
        if ks:
            ours = ", ".join(f"{r[f'paper_k{k}_vs_unfused']:.2f}" for k in ks)
            theirs = ", ".join(f"{paper[f'k{k}']:g}" for k in ks)
            text += (f" For $k$ = {', '.join(map(str, ks))} the ratios are {ours} (the paper's table: {theirs}).")
        text += (f" Against `torch.topk` alone, which computes no normalizer, the fused kernel at $k = 5$ is "
                 f"{_times(r['paper_k5_vs_topk'])} it.")
        bullets.append(text)
    names = {"paper": "the paper's sweep", "sampling": "the sampling shapes", "moe": "the gating shapes"}
    for case, label in names.items():
        n = r[f"{case}_shapes"]
        if not n:
            continue
        slower_unfused = r[f"{case}_torch_softmax_topk_slower"]
        slower_topk = r[f"{case}_torch_topk_slower"]
        text = (f"**{label[0].upper() + label[1:]}** ({n} shapes, the variant `auto` picks): over "
                f"`torch.softmax` + `torch.topk` the median speed-up is "
                f"{r[f'{case}_torch_softmax_topk_median']:.2f} (from {r[f'{case}_torch_softmax_topk_min']:.2f} "
                f"to {r[f'{case}_torch_softmax_topk_max']:.2f}); over `torch.topk` alone it is "
                f"{r[f'{case}_torch_topk_median']:.2f} (from {r[f'{case}_torch_topk_min']:.2f} to "
                f"{r[f'{case}_torch_topk_max']:.2f}). The median fraction of the read ceiling is "
                f"{_frac(r[f'{case}_fraction_median'])}, at most {_frac(r[f'{case}_fraction_max'])}.")
        if slower_unfused:
            text += f" On {slower_unfused} of the {n} shapes ours is slower than the unfused path."
        if slower_topk:
            text += (f" On {slower_topk} of the {n} shapes ours is slower than `torch.topk` alone; the data "
                     "records times, not their causes, so why is not explained yet.")
        bullets.append(text)
    b1, b256 = r["sampling_batch1_fraction"], r["sampling_batch256_fraction"]
    if np.isfinite(b1) and np.isfinite(b256):
        sm = data["meta"].get("sm_count")
        text = (f"**Few rows.** In the sampling shapes the median fraction of the read ceiling is {_frac(b1)} "
                f"at batch 1 and {_frac(b256)} at batch 256.")
        if b1 < b256:
            text += (f" A batch of one row is one block of 256 threads on one SM of the {sm}: the other SMs "
                     "have nothing to read. Splitting the row over blocks and merging their states "
                     "(exercise 3) is the way to use them.")
        bullets.append(text)
    moe = ours_auto(case_rows(data, "moe"))
    if moe:
        kernel_us = _median([x["ms"] * 1e3 for x in moe])
        call_us = r["moe_end_to_end_us_median"]
        read_us = _median([logits_bytes(x) / r["ceiling_GBps"] / 1e3 for x in moe])
        text = (f"**Gating shapes are small.** The median gating shape takes {kernel_us:.1f} µs on the GPU")
        if np.isfinite(call_us):
            text += (f" and {call_us:.1f} µs as one synchronous call through `onlinesoftmax.softmax_topk` "
                     "(launch and host costs included)")
        text += f"; reading its logits at the read ceiling would take {read_us:.2f} µs"
        text += (", so the time goes to costs that do not grow with the bytes (starting the kernel, the reductions and selection rounds of each row), "
                 "not to the read." if kernel_us > 2 * read_us else ".")
        bullets.append(text)
    if k32_blocks is not None and "paper_k30_vs_unfused" in r and "paper_k5_vs_unfused" in r:
        text = (f"**Large k.** At batch 4000 and $N = {r['paper_big_n']}$ the fraction of the read ceiling is "
                f"{_frac(r['paper_k5_fraction'])} at $k = 5$ and {_frac(r['paper_k30_fraction'])} at $k = 30$.")
        if r["paper_k30_fraction"] < r["paper_k5_fraction"]:
            text += (f" $k = 30$ runs the bucket $K = 32$, whose registers leave room for {k32_blocks} block{'s' * (k32_blocks != 1)} "
                     "of 256 threads per SM (the table of the kernel section), and every push walks a list of 32; which of "
                     "the two costs more is not measured here.")
        bullets.append(text)
    return "\n".join(f"- {b}" for b in bullets)
