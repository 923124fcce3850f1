"""Figures and readings of the chapter "Fused softmax + top-k", drawn from the recorded suite.

`load()` returns the newest recorded suite `softmax-topk` (onlinesoftmax/bench/softmax_topk.py), else its
quick run (`softmax-topk-quick`, labelled so), else None; a case recorded alone (`--case moe`: suite
`softmax-topk-moe`) replaces that case's rows of a quick run (data["case_files"] names the file). `plot_paper(data)` draws the paper's
comparison (online fused over safe unfused, split into the fusion and online gains) beside the
paper's own V100 figures; `plot_speedups`, `plot_fraction_of_read` and `plot_large_k` draw the rest;
`reading(data)` computes the numbers the prose quotes. `load_host()` returns the newest host run
(`softmax-topk-host`, `--case host`: host microseconds per call back to back) and `host_reading` its
numbers. `show_choice` is the widget (topk_widgets.py).
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.readings.figures import color
from onlinesoftmax.measure import results
from onlinesoftmax.registry import DTYPE_ITEMSIZE

SUITE = "softmax-topk"
QUICK_SUITE = SUITE + "-quick"
HOST_SUITE = SUITE + "-host"
CASES = (("paper", "the paper's sweep (fp32)"), ("sampling", "sampling: batch × vocabulary"),
         ("moe", "MoE gating: tokens × experts"))
PEERS = {"torch_softmax_topk": ("torch.softmax + torch.topk", "^"), "torch_topk": ("torch.topk alone", "v")}
# The paper's own figures (Milakov & Gimelshein 2018, section 4, Fig. 3 and its table: a V100 against
# its own baselines), typed once here and always shown labelled as the paper's.
PAPER_V100 = {"k5_total": 5.0, "k5_fusion": 2.5, "k5_online": 2.0, "k10": 3.5, "k15": 2.0, "k30": 1.4}
PAPER_V100_BY_K = {5: 5.0, 10: 3.5, 15: 2.0, 30: 1.4}
UNFUSED, SAFE, ONLINE = "softmax_topk_02_safe_unfused", "softmax_topk_03_safe_fused", "softmax_topk_04_online_fused"
SPLIT, LISTS = "softmax_topk_06_split", ONLINE


def load() -> dict | None:
    """The newest recorded suite (its quick run when only that is recorded: data["quick"] says so, and a
    case recorded alone, newer than the quick run, replaces that case's rows)."""
    for suite, quick in ((SUITE, False), (QUICK_SUITE, True)):
        if results.recorded_files(suite):
            data = results.load_recorded(suite)
            data["quick"] = quick
            if quick:
                _merge_case_runs(data)
            return data
    return None


def _merge_case_runs(data: dict) -> None:
    for case, _ in CASES + (("large_k", ""),):
        files = results.recorded_files(f"{SUITE}-{case.replace('_', '-')}")
        if not files or files[-1].name[:10] < data["meta"]["date"]:
            continue
        alone = results.load_recorded(f"{SUITE}-{case.replace('_', '-')}")
        data["rows"] = [r for r in data["rows"] if r.get("case") != case] + case_rows(alone, case)
        data.setdefault("case_files", {})[case] = alone["path"]


def is_ours(row: dict) -> bool:
    return row["kernel"].startswith("softmax_topk_")


def logits_bytes(row: dict) -> int:
    return row.get("bytes") or row["n_rows"] * row["n_cols"] * DTYPE_ITEMSIZE[row["dtype"]]


def case_rows(data: dict, case: str) -> list[dict]:
    return [r for r in data["rows"] if r.get("case") == case]


def ours_auto(rows: list[dict], sms: int = 132) -> list[dict]:
    """Our rows of the variant that variant="auto" picks for each shape today (topk.choose on a GPU of
    `sms` SMs; the run's own `auto` flag for a shape whose chosen kernel the run did not time)."""
    from onlinesoftmax.topk import choose

    timed = {(r["n_rows"], r["n_cols"], r["k"], r["dtype"], r["kernel"]) for r in rows if is_ours(r) and "k" in r}
    picked = []
    for r in rows:
        if not is_ours(r) or "k" not in r:
            continue
        shape = (r["n_rows"], r["n_cols"], r["k"], r["dtype"])
        name = choose(*shape, sms=sms).variant.name
        if r["kernel"] == name if (*shape, name) in timed else r.get("auto"):
            picked.append(r)
    return picked


def ceiling_GBps(data: dict) -> float:
    return next(r["GBps"] for r in data["rows"] if r["kernel"] == "read")


def _axes(n: int, title: str, width: float = 4.2):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(width * n, 3.6), squeeze=False)
    fig.suptitle(title, fontsize=8)
    return fig, axes[0]


def paper_rows(data: dict) -> list[dict]:
    """The online fused rows of the paper's sweep: each carries paper_total / _fusion / _online."""
    return [r for r in case_rows(data, "paper") if r["kernel"] == ONLINE and "paper_total" in r]


def plot_paper(data: dict, provenance_label: str):
    """Left: online fused over safe unfused against N, a line per K, both batches. Right: at batch 4000
    and the largest N, the total split into the fusion and the online gains, beside the paper's."""
    import matplotlib.pyplot as plt

    fig, (left, right) = _axes(2, provenance_label, width=4.8)
    rows = paper_rows(data)
    ks = sorted({r["k"] for r in rows})
    shades = plt.get_cmap("viridis")(np.linspace(0.1, 0.85, max(len(ks), 1)))
    for shade, k in zip(shades, ks):
        for batch, style in ((4000, "-"), (10, ":")):
            mine = sorted((r["n_cols"], r["paper_total"]) for r in rows if r["k"] == k and r["n_rows"] == batch)
            if mine:
                x, y = np.array(mine).T
                left.plot(x, y, style, marker="o", markersize=3, color=shade, label=f"k = {k}, batch {batch}")
    left.axhline(1.0, color=color("copy"), linestyle="--", linewidth=1, label="equal time")
    left.set_xscale("log", base=2)
    left.set_xlabel("N (row length)")
    left.set_ylabel("safe unfused time / online fused time")
    left.set_title("online fused over safe unfused (ours)", fontsize=9)
    left.legend(fontsize=5, ncol=2, loc="best")
    big = [r for r in rows if r["n_rows"] == 4000]
    if big:
        n_big = max(r["n_cols"] for r in big)
        at = {r["k"]: r for r in big if r["n_cols"] == n_big}
        ks_big = sorted(at)
        x = np.arange(len(ks_big))
        right.bar(x - 0.3, [at[k]["paper_fusion"] for k in ks_big], 0.2, color=color(SAFE),
                  label="fusion gain: 02 / 03 (ours)")
        right.bar(x - 0.1, [at[k]["paper_online"] for k in ks_big], 0.2, color=color(ONLINE),
                  label="online gain: 03 / 04 (ours)")
        right.bar(x + 0.1, [at[k]["paper_total"] for k in ks_big], 0.2, color=color(UNFUSED),
                  label="total: 02 / 04 (ours)")
        paper_x = [i for i, k in enumerate(ks_big) if k in PAPER_V100_BY_K]
        right.bar(np.array(paper_x) + 0.3, [PAPER_V100_BY_K[ks_big[i]] for i in paper_x], 0.2,
                  color=color("numpy"), hatch="//", label="total, the paper's V100 figure")
        right.set_xticks(x, [f"k = {k}" for k in ks_big])
        right.axhline(1.0, color=color("copy"), linestyle="--", linewidth=1, label="equal time")
        right.set_title(f"batch 4000, N = {n_big}: where the gain comes from", fontsize=9)
        right.set_ylabel("ratio of times")
        right.legend(fontsize=6, loc="best")
    fig.tight_layout()
    plt.show()


def plot_speedups(data: dict, provenance_label: str):
    """Speed-up of the kernel auto picks over the two torch paths, against the bytes of logits."""
    import matplotlib.pyplot as plt

    fig, axes = _axes(len(CASES), provenance_label)
    for ax, (case, title) in zip(axes, CASES):
        mine = ours_auto(case_rows(data, case)) if case != "paper" else \
            [r for r in case_rows(data, case) if r["kernel"] == ONLINE]
        for kernel in sorted({r["kernel"] for r in mine}):
            for peer, (peer_label, marker) in PEERS.items():
                points = [(logits_bytes(r), r[f"speedup_vs_{peer}"]) for r in mine if r["kernel"] == kernel]
                if points:
                    x, y = np.array(points).T
                    ax.plot(x, y, marker=marker, linestyle="none", color=color(kernel), markersize=4, alpha=0.8,
                            label=f"{kernel} over {peer_label}")
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
    """Bytes of logits per second over the read ceiling: ours (as auto picks) and the torch paths."""
    import matplotlib.pyplot as plt

    fig, axes = _axes(len(CASES), provenance_label)
    for ax, (case, title) in zip(axes, CASES):
        rows = case_rows(data, case)
        mine = ours_auto(rows) if case != "paper" else [r for r in rows if r["kernel"] == ONLINE]
        series = [(f"{kernel}" + (" (variant='auto')" if case != "paper" else ""), color(kernel), "o",
                   [r for r in mine if r["kernel"] == kernel]) for kernel in sorted({r["kernel"] for r in mine})]
        series += [(label, color("torch"), marker, [r for r in rows if r["kernel"] == peer])
                   for peer, (label, marker) in PEERS.items()]
        for label, series_color, marker, points in series:
            if points:
                ax.plot([logits_bytes(r) for r in points], [r["fraction_of_read"] for r in points], marker=marker,
                        linestyle="none", color=series_color, markersize=4, alpha=0.8, label=label)
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


def plot_large_k(data: dict, provenance_label: str):
    """Device time against k: the register lists (softmax_topk_04) and the split kernel's radix select
    at k <= 32, and the split kernel against torch.topk up to k = 1024."""
    import matplotlib.pyplot as plt

    rows = case_rows(data, "large_k")
    shapes = sorted({(r["n_rows"], r["n_cols"]) for r in rows})
    fig, axes = _axes(max(len(shapes), 1), provenance_label)
    for ax, (n_rows, n_cols) in zip(axes, shapes):
        for kernel in (LISTS, SPLIT, "torch_topk", "torch_softmax_topk"):
            points = sorted((r["k"], r["ms"] * 1e3) for r in rows
                            if r["kernel"] == kernel and (r["n_rows"], r["n_cols"]) == (n_rows, n_cols))
            if points:
                x, y = np.array(points).T
                label = PEERS[kernel][0] if kernel in PEERS else kernel
                ax.plot(x, y, marker="o", markersize=3, color=color("torch" if kernel in PEERS else kernel),
                        linestyle="-" if kernel != "torch_softmax_topk" else ":", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{n_rows} × {n_cols} fp32", fontsize=9)
        ax.set_xlabel("k")
        ax.legend(fontsize=6, loc="best")
    axes[0].set_ylabel("device time (µs)")
    fig.tight_layout()
    plt.show()


def _median(values) -> float:
    return float(np.median(values)) if len(values) else float("nan")


def _geomean(values) -> float:
    return float(np.exp(np.mean(np.log(values)))) if len(values) else float("nan")


def reading(data: dict) -> dict:
    """The numbers the chapter's reading of the plots quotes, computed from the recorded rows."""
    out = {"ceiling_GBps": ceiling_GBps(data)}
    for case, _ in CASES:
        mine = ours_auto(case_rows(data, case)) if case != "paper" else \
            [r for r in case_rows(data, case) if r["kernel"] == ONLINE]
        for peer in PEERS:
            speedups = [r[f"speedup_vs_{peer}"] for r in mine]
            out[f"{case}_{peer}_geomean"] = _geomean(speedups)
            out[f"{case}_{peer}_min"] = min(speedups, default=float("nan"))
            out[f"{case}_{peer}_max"] = max(speedups, default=float("nan"))
            out[f"{case}_{peer}_slower"] = sum(s < 1 for s in speedups)
        out[f"{case}_shapes"] = len(mine)
        out[f"{case}_fraction_median"] = _median([r["fraction_of_read"] for r in mine])
        out[f"{case}_us_median"] = _median([r["ms"] * 1e3 for r in mine])
        out[f"{case}_us_max"] = max((r["ms"] * 1e3 for r in mine), default=float("nan"))
        out[f"{case}_end_to_end_us_median"] = _median([r["end_to_end_us"] for r in mine if "end_to_end_us" in r])
    head = [r for r in case_rows(data, "paper") if r["kernel"] == ONLINE and (r["n_rows"], r["n_cols"], r["k"])
            == (4000, 32768, 5)]
    if head:
        out.update(head_vs_unfused=head[0]["speedup_vs_torch_softmax_topk"],
                   head_vs_topk=head[0]["speedup_vs_torch_topk"], head_fraction=head[0]["fraction_of_read"],
                   head_us=head[0]["ms"] * 1e3)
    big = [r for r in paper_rows(data) if r["n_rows"] == 4000]
    if big:
        out["paper_big_n"] = max(r["n_cols"] for r in big)
        for r in big:
            if r["n_cols"] == out["paper_big_n"]:
                for part in ("total", "fusion", "online"):
                    out[f"paper_k{r['k']}_{part}"] = r[f"paper_{part}"]
    moe = ours_auto(case_rows(data, "moe"))
    small = [r["ms"] * 1e3 for r in moe if r["n_rows"] <= 512 and r["n_cols"] <= 512]
    out["moe_small_us_max"] = max(small, default=float("nan"))
    out["moe_4096_us_max"] = max((r["ms"] * 1e3 for r in moe if r["n_rows"] == 4096), default=float("nan"))
    large = [r for r in case_rows(data, "large_k") if r["kernel"] == SPLIT and r["k"] == 1024]
    if large:
        out["k1024_vs_topk"] = large[0]["speedup_vs_torch_topk"]
    return out


def load_host() -> dict | None:
    """The newest recorded host run (suite softmax-topk-host), or None."""
    return results.load_recorded(HOST_SUITE) if results.recorded_files(HOST_SUITE) else None


def host_reading(data: dict) -> dict:
    """Host microseconds per call back to back: ours on the split kernel (two launches) and on one
    kernel, torch's softmax -> topk at the split kernel's shapes, an empty cupy launch; (low, high)
    ranges, {} for a part not recorded."""
    rows = [r for r in data["rows"] if r.get("method") == "host_per_call" and "us" in r]
    shape = lambda r: (r.get("n_rows"), r.get("n_cols"), r.get("k"), r.get("dtype"))   # noqa: E731
    split = [r for r in rows if r["kernel"] == SPLIT]
    one = [r for r in rows if is_ours(r) and r["kernel"] != SPLIT]
    split_shapes = {shape(r) for r in split}
    unfused = [r for r in rows if r["kernel"] == "torch_softmax_topk" and shape(r) in split_shapes]
    out = {}
    for name, group in (("split", split), ("one", one), ("torch_unfused", unfused)):
        if group:
            out[name] = (min(r["us"] for r in group), max(r["us"] for r in group))
    floor = [r["us"] for r in rows if r["kernel"] == "cupy.RawKernel"]
    if floor:
        out["floor"] = min(floor)
    return out


def show_choice(n_cols: int = 1000, k: int = 5, dtype: str = "float32", renormalize: bool = False,
                seed: int = 0, shown: int = 60, n_rows: int = 1):
    """Logits of one row (normal, scale 2), the k probabilities softmax_topk returns (the kernel that
    variant="auto" picks for n_rows such rows, on a GPU; its NumPy model otherwise) over the row's whole
    softmax in float64, sorted."""
    import matplotlib.pyplot as plt

    import onlinesoftmax
    from onlinesoftmax import checks, reference
    from onlinesoftmax.runtime import device
    from onlinesoftmax.topk import choose

    k = min(k, n_cols)
    x = checks.from_float32((np.random.default_rng(seed).standard_normal((1, n_cols)) * 2).astype(np.float32),
                            dtype)
    kernel = choose(n_rows, n_cols, k, dtype).variant.name
    if device.has_gpu():
        import cupy

        probs, columns = onlinesoftmax.softmax_topk(checks.on_device(cupy, x), k, renormalize=renormalize,
                                                    variant=kernel)
        probs = cupy.asnumpy(checks.as_float64(probs))
    else:
        probs, columns = onlinesoftmax.softmax_topk(x, k, renormalize=renormalize, variant=kernel)
    probs = np.asarray(checks.as_float64(probs))[0]
    full = reference.softmax(np.asarray(checks.as_float64(x)))[0]
    ranked = np.sort(full)[::-1][:max(shown, k)]
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ax.bar(np.arange(len(ranked)), ranked, width=0.8, color=color("numpy"),
           label="softmax(x) in float64, sorted (the rest of the row)")
    ax.bar(np.arange(k), probs, width=0.5, color=color(kernel), label=f"{kernel}: the k returned")
    ax.set_yscale("log")
    ax.set_xlabel("rank (largest probability first)")
    ax.set_ylabel("probability")
    ax.set_title(f"N = {n_cols}, k = {k}, {dtype}, renormalize={renormalize}, {n_rows} row(s) → {kernel}: the k "
                 f"returned sum to {probs.sum():.4f}, the row's largest {len(ranked)} to {ranked.sum():.4f}",
                 fontsize=7)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    plt.show()
