"""The api-overhead suite's reading: the comparison table, the targets and the printed report, from a
recorded file or a fresh run (no GPU needed to read one). api_overhead.py measures."""
from __future__ import annotations

import json
import math
from pathlib import Path

from onlinesoftmax import checks
from onlinesoftmax.measure import results

SUITE = "api-overhead"
ONE_KERNEL, CLUSTER_OR_TWO = "one kernel", "cluster or two kernels"
TARGET_US = {ONE_KERNEL: 15.0, CLUSTER_OR_TWO: 25.0}   # host us per call, by how the call launches


def ratio(theirs, ours):
    return theirs / ours if theirs and ours else None


def fmt(value, spec=".2f") -> str:
    """format(value, spec), or "-" as wide as the spec asks."""
    width = spec.split(".")[0]
    return format("-", f">{width}") if value is None else format(value, spec)


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def ours(row: dict) -> bool:
    """A row of this library's calls (not torch, cupy or the copy)."""
    return not row.get("kernel", "").startswith(("torch", "cupy", "copy"))


def comparison_table(rows: list[dict]) -> list[dict]:
    """One entry per (api, mask, dtype, n_rows, n_cols): ours and torch, end to end and on the device."""
    by_key: dict = {}
    for row in rows:
        if row.get("method") not in ("end_to_end", "device") or "us" not in row or "api" not in row:
            continue
        side = "ours" if row["kernel"] == "fast" else "torch" if row["kernel"].startswith("torch") else None
        if side:
            key = (row["api"], row.get("mask", "none"), row["dtype"], row["n_rows"], row["n_cols"])
            by_key.setdefault(key, {})[f"{side}_{row['method']}_us"] = row["us"]
    order = {d: i for i, d in enumerate(checks.DTYPES)}
    table = []
    for key in sorted(by_key, key=lambda k: (k[0], k[1], order.get(k[2], 9), k[3] * k[4], k[3])):
        entry = dict(zip(("api", "mask", "dtype", "n_rows", "n_cols"), key)) | by_key[key]
        entry["e2e_vs_torch"] = ratio(entry.get("torch_end_to_end_us"), entry.get("ours_end_to_end_us"))
        entry["device_vs_torch"] = ratio(entry.get("torch_device_us"), entry.get("ours_device_us"))
        table.append(entry)
    return table


def summarize(data: dict) -> dict:
    """The host targets (met or missed), the wrong or failed calls, and ours / torch per shape and group."""
    rows = data["rows"]
    host = [r for r in rows if r.get("method") == "host_per_call"]
    torch_host = {_host_key(r): r["us"] for r in host if r["kernel"].startswith("torch") and "us" in r}
    targets = {}
    for launch, bound in TARGET_US.items():
        group = [r for r in host if ours(r) and r.get("launch") == launch]
        timed = [r for r in group if "us" in r]
        targets[f"host_{launch.replace(' ', '_')}"] = {
            "bound": bound, "worst": max((r["us"] for r in timed), default=None), "count": len(timed),
            "misses": [(r.get("call", r["kernel"]), r.get("dtype"), round(r["us"], 1)) for r in timed if r["us"] > bound]
                      + [(r.get("call", r["kernel"]), r.get("dtype"), "error") for r in group if "us" not in r]}
    wrong = [r for r in rows if ours(r) and (r.get("correct") is False or "error" in r)]
    targets["all_correct"] = {"bound": 0, "worst": len(wrong), "count": sum(1 for r in rows if ours(r)),
                              "misses": [(r.get("call", r["kernel"]), r.get("dtype"), r.get("n_rows"), r.get("n_cols"),
                                          r.get("error", "")[:80]) for r in wrong]}
    queue_bound = [(r.get("call", r["kernel"]), r.get("dtype"), round(r["us"], 1), round(r["device_us"], 1))
                   for r in host if "us" in r and r.get("device_us") and r["device_us"] > 0.8 * r["us"]]
    table = comparison_table(rows)
    groups = {}
    for entry in table:
        groups.setdefault((entry["api"], entry["mask"]), []).append(entry)
    group_summary = {}
    for (api, mask), entries in groups.items():
        e2e = [e for e in entries if e["e2e_vs_torch"]]
        worst = min(e2e, key=lambda e: e["e2e_vs_torch"], default=None)
        group_summary[f"{api}/{mask}"] = {
            "shapes": len(entries), "e2e_geomean": _geomean([e["e2e_vs_torch"] for e in entries]),
            "device_geomean": _geomean([e["device_vs_torch"] for e in entries]),
            "e2e_worst": worst["e2e_vs_torch"] if worst else None,
            "e2e_worst_shape": (worst["dtype"], worst["n_rows"], worst["n_cols"]) if worst else None,
            "e2e_slower_than_torch": sum(1 for e in e2e if e["e2e_vs_torch"] < 1)}
    copy = [r for r in rows if r.get("kernel") == "copy"]
    return {"host": host, "torch_host": torch_host, "targets": targets, "queue_bound": queue_bound,
            "table": table, "groups": group_summary, "copy_GBps": copy[0]["GBps"] if copy else None}


def _host_key(row: dict):
    return row.get("api"), row.get("dtype"), row.get("n_rows"), row.get("n_cols")


def report(data: dict) -> str:
    s = summarize(data)
    lines = [f"copy ceiling {fmt(s['copy_GBps'], '.0f')} GB/s",
             "host us per call (back to back, no sync); device: the same call's device time; "
             "/torch: our us / torch's us for the same function, dtype and shape",
             f"  {'kernel':24s} {'dtype':9s} {'shape':>10s} {'us':>7s} {'device':>7s} {'/torch':>7s} {'target':>9s}  call"]
    for r in s["host"]:
        torch_us = s["torch_host"].get(_host_key(r)) if ours(r) else None
        target = ""
        if "target_us" in r:
            verdict = ("met" if r["us"] <= r["target_us"] else "MISS") if "us" in r else "ERR"
            target = f"{verdict} <={r['target_us']:.0f}"
        lines.append(f"  {r['kernel']:24s} {r.get('dtype', ''):9s} {r.get('n_rows', 0):>4d}x{r.get('n_cols', 0):<5d} "
                     f"{fmt(r.get('us'), '7.1f')} {fmt(r.get('device_us'), '7.1f')} "
                     f"{fmt(ratio(r.get('us'), torch_us), '7.2f')} {target:>9s}  {r.get('call', '')}"
                     + (f"  [{r['error'][:60]}]" if "error" in r else ""))
    lines.append("ours vs torch, one call (x = torch us / our us; > 1: ours is faster)")
    lines.append(f"  {'api/mask':22s} {'dtype':9s} {'rows':>6s} {'N':>8s} {'e2e us':>8s} {'torch':>8s} {'x':>6s} "
                 f"{'dev us':>8s} {'torch':>8s} {'x':>6s}")
    for e in s["table"]:
        lines.append(f"  {e['api'] + '/' + e['mask']:22s} {e['dtype']:9s} {e['n_rows']:6d} {e['n_cols']:8d} "
                     f"{fmt(e.get('ours_end_to_end_us'), '8.1f')} {fmt(e.get('torch_end_to_end_us'), '8.1f')} "
                     f"{fmt(e['e2e_vs_torch'], '6.2f')} {fmt(e.get('ours_device_us'), '8.1f')} "
                     f"{fmt(e.get('torch_device_us'), '8.1f')} {fmt(e['device_vs_torch'], '6.2f')}")
    lines.append("by operation (geometric mean of torch / ours; worst end-to-end shape)")
    for name, g in s["groups"].items():
        worst = g["e2e_worst_shape"]
        lines.append(f"  {name:22s} {g['shapes']:3d} shapes: end to end x{fmt(g['e2e_geomean'])}, device "
                     f"x{fmt(g['device_geomean'])}; worst end to end x{fmt(g['e2e_worst'])}"
                     + (f" at {worst[0]} {worst[1]}x{worst[2]}" if worst else "")
                     + f"; slower than torch end to end at {g['e2e_slower_than_torch']}")
    if s["queue_bound"]:
        lines.append(f"note: device time near the host time (the GPU may have set the pace): {s['queue_bound']}")
    lines.append("targets:")
    for name, t in s["targets"].items():
        met = t["worst"] is not None and t["worst"] <= t["bound"] and not t["misses"]
        if name == "all_correct":
            lines.append(f"  {name:30s} {'met ' if met else 'MISS'} {t['worst']} wrong or failed of {t['count']} rows"
                         + (f": {t['misses']}" if t["misses"] else ""))
        else:
            lines.append(f"  {name:30s} {'met ' if met else 'MISS'} worst {fmt(t['worst'], '.1f')} us of {t['count']} "
                         f"calls (bound {t['bound']:.0f} us)" + (f" misses {t['misses']}" if t["misses"] else ""))
    return "\n".join(lines)


def load(path: str | None = None) -> dict:
    if path:
        return json.loads(Path(path).read_text())
    return results.load_recorded(SUITE)
