"""Read a recorded `softmax-fast` file and print ours/torch and ours/copy per shape, with the targets.

No GPU needed:  python -m onlinesoftmax.bench.compare_fast [path/to/<date>-softmax-fast.json ...]
Several files (the base and the extended shapes of softmax_fast.py --shapes) are read as one; with no
path, the newest softmax-fast file and the softmax-fast-extended file of the same day, if recorded.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

TARGETS = {
    "copy_fraction_1K_64K": 0.90,    # batch 4000, N 1K..64K, every dtype
    "copy_fraction_256K_1M": 0.85,   # batch 4000 (capped), N 256K..1M
    "geomean_vs_torch": 1.4,
    "never_slower_than_torch": 1.0,
    "fp32_10x1M_vs_torch": 8.0,
    "fp32_1x1M_vs_torch": 30.0,
}


def shape_table(data: dict) -> list[dict]:
    """One entry per (dtype, batch, n_cols): ours ("fast"), torch, cupy, copy fraction, chosen kernel."""
    by_shape: dict = {}
    for row in data["rows"]:
        if row.get("kernel") == "copy" or "n_cols" not in row:
            continue
        key = (row["dtype"], row.get("batch", row["n_rows"]), row["n_cols"])
        by_shape.setdefault(key, {"dtype": key[0], "batch": key[1], "n_cols": key[2],
                                  "n_rows": row["n_rows"], "kernels": {}})["kernels"][row["kernel"]] = row
    table = []
    for key in sorted(by_shape, key=lambda k: (["float32", "float16", "bfloat16"].index(k[0]), k[1], k[2])):
        entry = by_shape[key]
        fast = entry["kernels"].get("fast") or entry["kernels"].get("auto")   # the dispatcher, by either name
        if not fast or "ms" not in fast:
            continue
        torch_row = entry["kernels"].get("torch_softmax", {})
        cupy_row = entry["kernels"].get("cupy_softmax", {})
        best = min((r for r in entry["kernels"].values() if "ms" in r and r["kernel"].startswith("softmax_")),
                   key=lambda r: r["ms"], default=None)
        table.append({
            **{k: entry[k] for k in ("dtype", "batch", "n_rows", "n_cols")},
            "variant": fast.get("variant", ""),
            "fast_ms": fast["ms"], "fast_GBps": fast["GBps"], "fraction_of_copy": fast["fraction_of_copy"],
            "vs_torch": torch_row["ms"] / fast["ms"] if "ms" in torch_row else None,
            "vs_cupy": cupy_row["ms"] / fast["ms"] if "ms" in cupy_row else None,
            "copy_same_size_fraction": (entry["kernels"]["copy_same_size"]["fraction_of_copy"]
                                        if "ms" in entry["kernels"].get("copy_same_size", {}) else None),
            "best_kernel": best["kernel"] if best else None,
            "best_ms": best["ms"] if best else None,
        })
    return table


def summarize(data: dict) -> dict:
    """The copy and torch targets of the fast kernels, each with its measured value and the shapes that miss it."""
    table = shape_table(data)
    out: dict = {"table": table}

    def copy_target(low: int, high: int, bound: float):
        rows = [t for t in table if t["batch"] == 4000 and low <= t["n_cols"] <= high]
        return {"bound": bound, "worst": min((t["fraction_of_copy"] for t in rows), default=None),
                "misses": [(t["dtype"], t["n_rows"], t["n_cols"], round(t["fraction_of_copy"], 3))
                           for t in rows if t["fraction_of_copy"] < bound]}

    out["copy_fraction_1K_64K"] = copy_target(1024, 65536, TARGETS["copy_fraction_1K_64K"])
    out["copy_fraction_256K_1M"] = copy_target(262144, 1048576, TARGETS["copy_fraction_256K_1M"])
    speedups = [t["vs_torch"] for t in table if t["vs_torch"]]
    out["geomean_vs_torch"] = {"bound": TARGETS["geomean_vs_torch"],
                               "value": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None}
    out["never_slower_than_torch"] = {
        "bound": 1.0, "worst": min(speedups, default=None),
        "misses": [(t["dtype"], t["n_rows"], t["n_cols"], round(t["vs_torch"], 3))
                   for t in table if t["vs_torch"] and t["vs_torch"] < 1.0]}
    out["ahead_of_cupy"] = {
        "bound": 1.0, "worst": min((t["vs_cupy"] for t in table if t["vs_cupy"]), default=None),
        "misses": [(t["dtype"], t["n_rows"], t["n_cols"], round(t["vs_cupy"], 3))
                   for t in table if t["vs_cupy"] and t["vs_cupy"] < 1.0]}
    for name, batch in (("fp32_10x1M_vs_torch", 10), ("fp32_1x1M_vs_torch", 1)):
        hit = [t for t in table if t["dtype"] == "float32" and t["batch"] == batch and t["n_cols"] == 1048576]
        out[name] = {"bound": TARGETS[name], "value": hit[0]["vs_torch"] if hit else None}
    copy_rows = [r for r in data["rows"] if r.get("kernel") == "copy"]
    out["copy_GBps"] = copy_rows[0]["GBps"] if copy_rows else None
    out["worst_vs_torch"] = worst_vs_torch(table)
    return out


BASE_BATCHES = (1, 10, 64, 4000)   # softmax_fast.py's base sweep: these batches at N a power of two


def in_base_sweep(entry: dict) -> bool:
    n = entry["n_cols"]
    return entry["batch"] in BASE_BATCHES and n > 0 and n & (n - 1) == 0


def worst_vs_torch(table: list[dict]) -> dict:
    """The slowest shape of "fast" (variant "auto") against torch: over every recorded shape, over the
    base sweep (powers of two), and over the rest (vocabularies, odd N, odd row counts)."""
    def worst(entries):
        entries = [t for t in entries if t["vs_torch"]]
        if not entries:
            return {"value": None, "shape": None, "shapes": 0}
        t = min(entries, key=lambda t: t["vs_torch"])
        return {"value": t["vs_torch"], "shape": (t["dtype"], t["n_rows"], t["n_cols"]), "shapes": len(entries)}

    return {"all": worst(table), "powers_of_two": worst([t for t in table if in_base_sweep(t)]),
            "other": worst([t for t in table if not in_base_sweep(t)])}


def _fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def report(data: dict) -> str:
    s = summarize(data)
    lines = [f"copy ceiling {_fmt(s['copy_GBps'], '.0f')} GB/s",
             f"{'dtype':9s}{'rows':>6s}{'N':>9s} {'GB/s':>6s} {'/copy':>6s} {'/torch':>7s} {'/cupy':>6s} "
             f"{'copy@N':>6s}  kernel   (copy@N: a copy of the same bytes / the 2 GB copy)"]
    for t in s["table"]:
        lines.append(f"{t['dtype']:9s}{t['n_rows']:6d}{t['n_cols']:9d} {t['fast_GBps']:6.0f} "
                     f"{t['fraction_of_copy']:6.2f} {_fmt(t['vs_torch']):>7s} {_fmt(t['vs_cupy']):>6s} "
                     f"{_fmt(t['copy_same_size_fraction']):>6s}  "
                     f"{t['variant'][8:]}" + ("" if t["best_kernel"] in (None, t["variant"]) else
                                               f" (best {t['best_kernel'][8:]} {t['best_ms'] / t['fast_ms']:.2f}x time)"))
    lines.append("targets:")
    for name in ("copy_fraction_1K_64K", "copy_fraction_256K_1M", "geomean_vs_torch", "never_slower_than_torch",
                 "ahead_of_cupy", "fp32_10x1M_vs_torch", "fp32_1x1M_vs_torch"):
        item = s[name]
        value = item.get("value", item.get("worst"))
        met = value is not None and value >= item["bound"]
        lines.append(f"  {name:26s} {'met ' if met else 'MISS'} value {_fmt(value)} (bound {item['bound']})"
                     + (f" misses {item['misses']}" if item.get("misses") else ""))
    worst = s["worst_vs_torch"]
    parts = [f"{label} {_fmt(worst[key]['value'])} at {_shape(worst[key]['shape'])} ({worst[key]['shapes']} shapes)"
             for key, label in (("powers_of_two", "powers of two"), ("other", "other shapes"))]
    lines.append(f"worst fast (auto) / torch over all {worst['all']['shapes']} recorded shapes: "
                 f"{_fmt(worst['all']['value'])} at {_shape(worst['all']['shape'])}; " + "; ".join(parts))
    return "\n".join(lines)


def _shape(shape) -> str:
    return "-" if shape is None else f"{shape[0]} {shape[1]}x{shape[2]}"


def merge(files: list[dict]) -> dict:
    """Several recorded files as one: the first file's meta, every file's rows (its copy row first)."""
    return {"meta": files[0]["meta"], "rows": [row for data in files for row in data["rows"]],
            "paths": [data.get("path") for data in files]}


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        data = merge([{**json.loads(Path(path).read_text()), "path": path} for path in argv[1:]])
    else:
        from onlinesoftmax.measure import results

        files = [results.load_recorded("softmax-fast")]
        try:
            extended = results.load_recorded("softmax-fast-extended")
            if extended["meta"]["date"] == files[0]["meta"]["date"]:
                files.append(extended)
        except FileNotFoundError:
            pass
        data = merge(files)
    print("read", ", ".join(str(p) for p in data["paths"]))
    print(report(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
