"""The chapter "Fused softmax + top-k" reads its recorded suite in sentences: `reading_markdown(data)`
turns the numbers of topk_figures.reading into Markdown bullets (every number from the file), or
says plainly that nothing is recorded yet. Markdown shown from a cell's output is not typeset as
math: symbols are written in italics (*k*), never between dollar signs."""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.readings import topk_figures as tf


def _frac(value: float) -> str:
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _times(value: float) -> str:
    """'2.31 times faster than' or 'slower than (0.80 times the speed of)'."""
    return f"{value:.2f} times faster than" if value >= 1 else f"slower than ({value:.2f} times the speed of)"


NOT_RECORDED = ("The suite has not been recorded yet, so there is nothing to read here: no figure is drawn and no "
                "number is quoted. Once `onlinesoftmax/bench/softmax_topk.py` has run on a GPU, this section reads "
                "its file.")


def _range(pair) -> str:
    low, high = pair
    return f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f} to {high:.1f}"


def host_bullet(host: dict) -> str:
    """What one call costs the host, from the suite's host run (topk_figures.host_reading)."""
    h = tf.host_reading(host)
    if "split" not in h and "one" not in h:
        return ""
    parts = []
    if "split" in h:
        text = (f"a call on the split kernel (two launches) costs {_range(h['split'])} µs of host time at the "
                "sampling shapes")
        if "torch_unfused" in h:
            text += f", where `torch.softmax` followed by `torch.topk` costs {_range(h['torch_unfused'])} µs"
        parts.append(text)
    if "one" in h:
        parts.append(f"a call of one kernel (gating, the row pass) costs {_range(h['one'])} µs")
    text = "**What one call costs the host.** Made back to back, " + "; ".join(parts) + "."
    if "floor" in h:
        text += (f" On the same machine an empty kernel launched through cupy costs {h['floor']:.1f} µs, the "
                 "least any launch from Python costs there.")
    return text


def reading_markdown(data: dict | None, host: dict | None = None) -> str:
    """The chapter's reading of the plots, as Markdown computed from the recorded rows (and, when
    given, the suite's host run)."""
    if data is None:
        return NOT_RECORDED
    r = tf.reading(data)
    bullets = []
    if data.get("quick"):
        alone = sorted(data.get("case_files", {}))
        names = [f"the {c.replace('moe', 'gating').replace('_', ' ')} case (`{data['case_files'][c]}`)" for c in alone]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] if names else ""
        bullets.append("The suite's full run is not recorded; its quick run has one or two shapes per case" +
                       (f". Every shape of {listed} comes from a run of that case alone; a case not named rests "
                        "on the quick run's few shapes" if alone else ", so each reading below rests on those "
                        "few shapes") + ".")
    if "head_vs_unfused" in r:
        bullets.append(
            f"**The headline shape.** At 4000 rows of 32768 fp32 logits and *k* = 5, "
            f"`softmax_topk_04_online_fused` takes {r['head_us']:.0f} µs: {_times(r['head_vs_unfused'])} "
            f"`torch.softmax` followed by `torch.topk`, "
            f"{_times(r['head_vs_topk'])} `torch.topk` alone, and it reads the logits at "
            f"{_frac(r['head_fraction'])} of the read ceiling.")
    ks = [k for k in tf.PAPER_V100_BY_K if f"paper_k{k}_total" in r]
    if ks:
        ours = ", ".join(f"{r[f'paper_k{k}_total']:.2f}" for k in ks)
        theirs = ", ".join(f"{tf.PAPER_V100_BY_K[k]:g}" for k in ks)
        text = (f"**The paper's comparison.** At batch 4000 and *N* = {r['paper_big_n']} the online fused kernel "
                f"over the safe unfused path is {ours} for *k* = {', '.join(map(str, ks))}; the paper's V100 "
                f"figures are {theirs} (the paper's, against its own baselines).")
        if "paper_k5_fusion" in r:
            text += (f" At *k* = 5 the fusion alone (02 over 03) gives {r['paper_k5_fusion']:.2f} and the online "
                     f"normalizer (03 over 04) {r['paper_k5_online']:.2f}; the paper's split is "
                     f"{tf.PAPER_V100['k5_fusion']:g} and {tf.PAPER_V100['k5_online']:g} (the paper's figures).")
        bullets.append(text)
    for case, label in (("sampling", "the sampling shapes"), ("moe", "the gating shapes")):
        n = r[f"{case}_shapes"]
        if not n:
            continue
        text = (f"**{label[0].upper() + label[1:]}** ({n} shapes, the kernel `auto` picks): the geometric mean "
                f"speed-up is {r[f'{case}_torch_softmax_topk_geomean']:.2f} over `torch.softmax` + `torch.topk` "
                f"(from {r[f'{case}_torch_softmax_topk_min']:.2f} to {r[f'{case}_torch_softmax_topk_max']:.2f}) "
                f"and {r[f'{case}_torch_topk_geomean']:.2f} over `torch.topk` alone (from "
                f"{r[f'{case}_torch_topk_min']:.2f} to {r[f'{case}_torch_topk_max']:.2f}).")
        for peer, name in (("torch_softmax_topk", "the unfused path"), ("torch_topk", "`torch.topk` alone")):
            slower = r[f"{case}_{peer}_slower"]
            if slower:
                text += f" On {slower} of the {n} shapes ours is slower than {name}."
        bullets.append(text)
    if np.isfinite(r["moe_small_us_max"]):
        text = (f"**Gating time.** Up to 512 tokens of 512 experts the slowest gating shape takes "
                f"{r['moe_small_us_max']:.1f} µs on the GPU")
        if np.isfinite(r["moe_4096_us_max"]):
            text += f", and at 4096 tokens at most {r['moe_4096_us_max']:.1f} µs"
        text += (f"; one synchronous call through `onlinesoftmax.softmax_topk` takes {r['moe_end_to_end_us_median']:.1f} "
                 "µs at the median shape, launch and host costs included.")
        bullets.append(text)
    if "k1024_vs_topk" in r:
        bullets.append(f"**Large k.** At 256 rows of 262144 and *k* = 1024 the split kernel is "
                       f"{_times(r['k1024_vs_topk'])} `torch.topk`.")
    crossover = lists_stop(data)
    if crossover is not None:
        k, n_rows, n_cols = crossover
        bullets.append(f"**Where the register lists stop.** At {n_rows} rows of {n_cols}, the split kernel's radix "
                       f"select is faster than the register lists from *k* = {k} on." if k else
                       f"**Where the register lists stop.** At {n_rows} rows of {n_cols} the register lists stay "
                       "faster than the split kernel up to *k* = 32, their last bucket.")
    host_text = host_bullet(host) if host is not None else ""
    if host_text:
        bullets.append(host_text)
    return "\n".join(f"- {b}" for b in bullets)


def lists_stop(data: dict):
    """(the smallest k at which the split kernel beats the lists, rows, N) at the large_k shape of 4000
    rows (k None when it never does), or None when that shape is not recorded."""
    rows = [r for r in tf.case_rows(data, "large_k") if r["n_rows"] == 4000]
    lists = {r["k"]: r["ms"] for r in rows if r["kernel"] == tf.LISTS}
    split = {r["k"]: r["ms"] for r in rows if r["kernel"] == tf.SPLIT}
    common = sorted(set(lists) & set(split))
    if not common:
        return None
    return next((k for k in common if split[k] < lists[k]), None), rows[0]["n_rows"], rows[0]["n_cols"]
