"""Suite `softmax-topk`: the fused softmax + top-k kernels (through onlinesoftmax.softmax_topk) against torch.

Ours: the variant that variant="auto" picks for the shape (`auto` true in its row), and on short
rows (where auto picks softmax_topk_02_warp_rows) also softmax_topk_01_online by name.

Peers on the same tensors, same timer (onlinesoftmax.measure.timer.time_gpu):
  torch_softmax_topk   torch.softmax(x, -1) then torch.topk(p, k)  (the unfused path)
  torch_topk           torch.topk(x, k) on the logits alone        (no normalizer at all)
Cases (`case` in each row):
  paper     batch 4000 and 10, N 1K .. 64K (1M at batch 10), k in {1, 5, 10, 15, 30}, fp32: the
            paper's sweep (its Fig. 3 is a V100; ours is the GPU in meta)
  sampling  batch {1, 8, 64, 256} x vocabulary {32000, 128256, 151936, 262144} x k {1, 20}, fp32
            and bf16 (k = 50 needs a list longer than the kernel's 32)
  moe       tokens {1, 64, 512, 4096} x experts {64, 128, 256, 512} x k {2, 8}, fp32 and bf16
Bytes counted: one read of the logits (`bytes_counted`); `fraction_of_read` divides by the read
ceiling measured in the same run (timer.read_bandwidth). Ours is checked against the float64
definition (softmax, then the k largest with ties to the lower column) on its timing input before
it is timed; a wrong answer stops the run. End to end: one synchronous call of the public
function between CUDA events (timer.time_end_to_end).

Run on a GPU machine:  python benchmarks/bench_softmax_topk.py          (about 1-2 minutes)
                       python benchmarks/bench_softmax_topk.py --quick  (a few shapes, not written)
"""
from __future__ import annotations

import sys

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax import topk
from onlinesoftmax.kernels import softmax_topk as kt
from onlinesoftmax.measure import bench, results, timer
PAPER = [(rows, n, k, "float32") for rows in (4000, 10) for n in (1024, 4096, 16384, 65536) for k in (1, 5, 10, 15, 30)] \
    + [(10, 1 << 20, k, "float32") for k in (1, 5, 30)]
SAMPLING = [(b, n, k, dtype) for dtype in ("float32", "bfloat16") for b in (1, 8, 64, 256)
            for n in (32000, 128256, 151936, 262144) for k in (1, 20)]
MOE = [(t, e, k, dtype) for dtype in ("float32", "bfloat16") for t in (1, 64, 512, 4096)
       for e in (64, 128, 256, 512) for k in (2, 8)]
QUICK = {"paper": [(4000, 32768, 5, "float32")], "sampling": [(8, 128256, 20, "bfloat16")],
         "moe": [(512, 256, 8, "bfloat16")]}
CHECK_ROWS = 16


def check(probs, columns, x, k, name) -> None:
    """Our answer on the first rows against the float64 definition; columns compared as sets where
    probabilities tie."""
    x64 = checks.as_float64(x[:CHECK_ROWS]).get()
    want_cols = kt.order(x64)[:, :k]
    want = np.take_along_axis(reference.softmax(x64), want_cols, axis=1)
    got = checks.as_float64(probs[:CHECK_ROWS]).get()
    eps = {"float32": 2**-23, "bfloat16": 2**-8, "float16": 2**-11}[x.dtype.name]
    err = float(np.abs(got - want).max())
    if not err <= 8 * eps * max(1.0, float(np.abs(want).max())):
        raise AssertionError(f"{name} {x.shape} k={k} {x.dtype}: wrong probabilities, not timed: error {err:.3e}")
    got_cols = columns[:CHECK_ROWS].get()
    for row in range(got_cols.shape[0]):
        if set(got_cols[row]) != set(want_cols[row]) and not np.allclose(
                np.sort(x64[row, got_cols[row]]), np.sort(x64[row, want_cols[row]])):
            raise AssertionError(f"{name} {x.shape} k={k}: row {row} picked other columns, not timed")


def measure_case(case, n_rows, n_cols, k, dtype, read_GBps) -> list[dict]:
    import cupy
    import torch

    x = checks.random_rows(cupy, n_rows, n_cols, dtype, seed=n_cols + k)
    nbytes = x.nbytes
    fields = {"case": case, "n_rows": n_rows, "n_cols": n_cols, "k": k, "dtype": dtype, "bytes": nbytes,
              "bytes_counted": "one read of the logits"}
    auto = topk.choose(n_cols, k)
    ours = {auto.name: True}
    if auto is kt.WARP_ROWS:
        ours[kt.ONLINE_FUSED.name] = False
    tx = bench.torch_view(x)
    peers = {"torch_softmax_topk": lambda: torch.topk(torch.softmax(tx, dim=-1), k, dim=-1),
             "torch_topk": lambda: torch.topk(tx, k, dim=-1)}
    calls = {}
    for name in ours:
        probs, columns = osm.softmax_topk(x, k, variant=name)
        check(probs, columns, x, k, name)
        calls[name] = lambda name=name: osm.softmax_topk(x, k, variant=name)
    rows = []
    for name, fn in {**calls, **peers}.items():
        t = timer.time_gpu(fn, [()], reps=15)
        e2e = timer.time_end_to_end(fn, [()], reps=10)
        rows.append({"kernel": name, **fields, **t, "GBps": nbytes / t["ms"] / 1e6,
                     "fraction_of_read": nbytes / t["ms"] / 1e6 / read_GBps,
                     "end_to_end_us": e2e["us"], "end_to_end_wall_us": e2e["wall_us"]})
        if name in ours:
            rows[-1]["auto"] = ours[name]
    by = {r["kernel"]: r for r in rows}
    for name in ours:
        for peer in peers:
            by[name][f"speedup_vs_{peer}"] = by[peer]["ms"] / by[name]["ms"]
            by[name][f"end_to_end_speedup_vs_{peer}"] = by[peer]["end_to_end_us"] / by[name]["end_to_end_us"]
    del x, tx
    return rows


def main(quick: bool) -> None:
    import cupy

    copy, read = timer.copy_bandwidth(), timer.read_bandwidth()
    print(f"copy {copy['GBps']:.0f} GB/s, read {read['GBps']:.0f} GB/s", flush=True)
    cases = QUICK if quick else {"paper": PAPER, "sampling": SAMPLING, "moe": MOE}
    rows = [{"kernel": "copy", "op": "copy", "bytes_counted": "read + write", **copy},
            {"kernel": "read", "op": "read", "bytes_counted": "read", **read}]
    for case, shapes in cases.items():
        for n_rows, n_cols, k, dtype in shapes:
            new = measure_case(case, n_rows, n_cols, k, dtype, read["GBps"])
            rows += new
            ours = new[0]
            print(f"{case} {n_rows}x{n_cols} k={k} {dtype}: {ours['ms'] * 1e3:.1f} us, "
                  f"{ours['fraction_of_read']:.2f} of read, x{ours['speedup_vs_torch_softmax_topk']:.2f} torch "
                  f"softmax+topk, x{ours['speedup_vs_torch_topk']:.2f} torch.topk", flush=True)
            cupy.get_default_memory_pool().free_all_blocks()
    if not quick:
        print("wrote", results.write_results("softmax-topk", rows, results.gpu_meta()), file=sys.stderr)


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
