"""What the Nsight Compute suites share (ncu-dram, ncu-attention-mma, ncu-cross-entropy): each re-runs
its own module under ncu with `--child`, where the child makes each planned launch once, and reads back
one record per profiled launch, in launch order.

    launches, command = profile("onlinesoftmax.bench.ncu_dram", METRICS, "regex:^softmax_", ("--cache-control", "all"))
    check_order(launches, [expected kernel name prefix per planned launch])
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile


def known_metrics(ncu: str) -> set[str]:
    """The metric names this ncu knows (`ncu --query-metrics`), without their suffixes."""
    done = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip() and "__" in line.split()[0]}


def parse_ncu_csv(text: str) -> list[dict]:
    """Per profiled launch (in order): kernel name, and each metric's value and unit as ncu gives them."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    launches: dict[str, dict] = {}
    for record in csv.DictReader(io.StringIO("\n".join(lines))):
        launch = launches.setdefault(record["ID"], {"kernel_name": record["Kernel Name"]})
        launch[record["Metric Name"]] = (float(record["Metric Value"].replace(",", "")),
                                         record.get("Metric Unit", "").strip())
    return [launches[key] for key in sorted(launches, key=int)]


def find_ncu() -> str:
    ncu = shutil.which("ncu")
    if ncu is None:
        raise SystemExit("ncu (Nsight Compute) not found on PATH")
    return ncu


def profile(module: str, metrics, kernel_name: str, options=(), ncu: str | None = None) -> tuple[list[dict], list[str]]:
    """(the launches as parse_ncu_csv reads them, the command): `python -m module --child` under ncu,
    each launch whose name matches `kernel_name` (ncu's --kernel-name) profiled once for `metrics`, clocks
    left alone, with ncu's further `options` before the metrics."""
    ncu = ncu or find_ncu()
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "ncu.csv")
        command = [ncu, "--clock-control", "none", *options, "--metrics", ",".join(metrics), "--kernel-name",
                   kernel_name, "--csv", "--print-units", "base", "--log-file", log, sys.executable, "-m", module,
                   "--child"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"ncu failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        with open(log) as f:
            return parse_ncu_csv(f.read() or done.stdout), command


def usable_metrics(wanted) -> tuple[list[str], list[str]]:
    """(the metrics of `wanted` this ncu knows, in order; those it does not, sorted): a suite records the
    first and names the second in meta.metrics_unavailable."""
    known = known_metrics(find_ncu())
    metrics = [m for m in wanted if m.split(".")[0] in known] if known else list(wanted)
    return metrics, sorted(set(wanted) - set(metrics))


def metric_values(launch: dict, metrics) -> dict:
    """Each metric's value (NaN where the launch lacks it) and, under metric + ".unit", its unit."""
    row = {}
    for metric in metrics:
        value, unit = launch.get(metric, (float("nan"), ""))
        row[metric] = value
        row[metric + ".unit"] = unit
    return row


def summary(row: dict, metrics) -> str:
    """The metrics of a recorded row in one printed line: each name's middle part and its value."""
    return ", ".join(f"{m.split('__')[1].split('.')[0]} {row[m]:.4g}" for m in metrics)


def check_order(launches: list[dict], expected: list[str]) -> None:
    """SystemExit unless the profiled launches are the planned ones: as many, each kernel's name starting
    with the planned one."""
    if len(launches) != len(expected):
        raise SystemExit(f"expected {len(expected)} profiled launches, got {len(launches)}: "
                         + ", ".join(launch["kernel_name"] for launch in launches))
    for name, launch in zip(expected, launches):
        if not launch["kernel_name"].startswith(name):
            raise SystemExit(f"launch order mismatch: planned {name}, profiled {launch['kernel_name']}")


def main(suite: str, measure, child) -> None:
    """A suite module's entry: the child's launches under `--child`, else measure() recorded as `suite`."""
    if "--child" in sys.argv:
        child()
        return
    from onlinesoftmax.measure import results

    data = measure()
    print("wrote", results.write_results(suite, data["rows"], data["meta"]), file=sys.stderr)
