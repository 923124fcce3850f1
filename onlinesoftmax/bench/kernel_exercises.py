"""Suite `kernel-exercises`: the solutions of the timed CUDA exercises (and the slow starter of
the copy-ceiling one), each at its grader's timed shape, as the grader times them.

The grading subprocess (onlinesoftmax/book/exercises/kernel_runner.py, "compare" mode) checks every kernel
on its exercise's whole edge matrix first, then times it with the book's one timer
(`onlinesoftmax.measure.timer.time_gpu`), and measures the device-to-device copy once, in the
same process, after the kernels. A kernel that fails its check stops the run.

Bytes per row of results (`ideal_bytes`): what the exercise's task counts as the ideal traffic
(softmax: 1 read + 1 write per element; LSE: 1 read per element + 4 B per row; top-k: 1 read per
element + k (fp32, int64) pairs per row). `fraction_of_copy` = GB/s over the copy's GB/s
(read + write counted).

Run on a GPU machine:  python -m onlinesoftmax.bench kernel-exercises          (about 20 s; writes data/<gpu>/<date>-kernel-exercises.json)
                       python -m onlinesoftmax.bench kernel-exercises --quick  (the same kernels, printed, not written)
"""
from __future__ import annotations

import sys

from onlinesoftmax.book.exercises import kernel_exercises as kx
from onlinesoftmax.measure import results, timer

SUITE = "kernel-exercises"
TIMED = ["three_pass_softmax", "online_softmax", "split_merge", "lse_rows", "row_in_registers", "fix_topk_ties"]


def measure() -> list[dict]:
    items = [(n, kx.SOLUTIONS / f"{n}.cu") for n in TIMED] + [("row_in_registers", kx.STARTERS / "row_in_registers.cu")]
    found = kx.run_compare(items, timeout_s=300)
    if found.get("fault"):
        raise SystemExit("the grading subprocess failed: " + found["fault"])
    rows = []
    for (name, path), result in zip(items, found["results"]):
        if not result["passed"]:
            raise SystemExit(f"{path}: " + kx.report(name, result))
        rows.append({"kernel": name, "which": path.parent.name[:-1], "dtype": "float32",
                     "n_rows": result["shape"][0], "n_cols": result["shape"][1], "ms": result["ms"],
                     "ideal_bytes": result["ideal_bytes"], "GBps": result["GBps"],
                     "fraction_of_copy": result["GBps"] / result["copy_GBps"], "method": "device"})
    rows.append({"kernel": "copy", "GBps": found["results"][0]["copy_GBps"], "bytes": 2 * 2**28, "method": "device"})
    return rows


def main(quick: bool) -> None:
    rows = measure()
    for row in rows:
        if row["kernel"] == "copy":
            print(f"copy: {row['GBps']:.0f} GB/s")
        else:
            print(f"{row['kernel']:20s} {row['which']:9s} {row['n_rows']} x {row['n_cols']}: {row['ms'] * 1e3:7.1f} us, "
                  f"{row['GBps']:6.0f} GB/s, {row['fraction_of_copy']:.2f} of the copy")
    if not quick:
        print("wrote", results.write_results(SUITE, rows, results.gpu_meta(timer.METHOD)))


if __name__ == "__main__":
    main("--quick" in sys.argv)
