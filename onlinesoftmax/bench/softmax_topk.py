"""Suite `softmax-topk`: the fused softmax + top-k kernels against torch, the read ceiling and each other.

Ours, by name through onlinesoftmax.softmax_topk (each row says whether it is the one variant="auto"
picks: `auto`); peers on the same tensors with the same timer (onlinesoftmax.measure.timer):
  torch_softmax_topk   torch.softmax(x, -1) then torch.topk(p, k)  (the unfused path)
  torch_topk           torch.topk(x, k) on the logits alone        (no normalizer at all)
Cases (`case` in each row):
  paper     the paper's comparison, fp32: batch 4000 at N 1K .. 256K and batch 10 at N 1K .. 1M,
            K in {1, 5, 10, 15, 30}, its four kernels softmax_topk_01_topk_only ..
            softmax_topk_04_online_fused (online fused over safe unfused, split into the fusion
            gain 02 / 03 and the online gain 03 / 04, as the paper does), plus torch; 4000 x 32768,
            k = 5 is the headline shape (its targets: >= 10x torch.softmax -> torch.topk,
            >= 0.7 of the read ceiling)
  sampling  batch {1, 8, 64, 256} x vocabulary {32000, 128256, 151936, 262144} x k {1, 20, 50},
            fp32 and bf16: auto (the split kernel for few rows) and the other of 04 / 06 that applies
  moe       tokens {1, 64, 512, 4096} x experts {64, 128, 256, 512} x k {2, 8}, fp32 and bf16:
            auto (softmax_topk_05_warp_rows) and softmax_topk_04_online_fused
  large_k   256 x 262144 fp32 at k 64 .. 1024 (the split kernel against torch.topk), and
            4000 x 32768 / 64 x 151936 fp32 at k 1 .. 32: the register lists (04, one bucket per k)
            beside the split kernel's radix select, where the lists stop paying
Every row of ours is checked before it is timed: the kernel runs once into poisoned outputs and its
first and last rows are compared with the float64 definition (checks.compare_topk: columns exactly,
or by probability for softmax_topk_02_safe_unfused; probabilities at the tests' tolerance; the LSE);
a wrong answer stops the run. Bytes counted: one read of the logits (`bytes_counted`);
`fraction_of_read` divides by the read ceiling measured at the start of the same run
(timer.read_bandwidth). End to end: one synchronous call of the public function (timer.time_end_to_end).

Run on a GPU machine:  python -m onlinesoftmax.bench softmax-topk           (about 4-6 minutes)
                       python -m onlinesoftmax.bench softmax-topk --quick   (under 40 s: one shape of each
                                                                          case, suite softmax-topk-quick)
                       python -m onlinesoftmax.bench softmax-topk --case moe   (one case's shapes: suite
                                                                          softmax-topk-moe; paper, sampling,
                                                                          moe or large_k)
                       python -m onlinesoftmax.bench softmax-topk --case host  (suite softmax-topk-host,
                                                                          under a minute; below)

The host case: what one call of onlinesoftmax.softmax_topk(x, k) costs the host, back to back
(timer.host_us_per_call, `method` host_per_call), at HOST_SHAPES (the split kernel's sampling shapes,
MoE gating, batch 1), against the runtime's budget (HOST_BUDGET_US: 15 us for a call of one kernel,
25 us for two; bench_api_overhead's TARGET_US), beside torch's two calls on the same tensor and a bare
cupy RawKernel launch of an empty kernel (this machine's floor for any launch from Python). Each call
is checked first (as above), then timed in HOST_ROUNDS rounds that go round every call in turn (a
drift of the host's speed reaches all of them alike), each round the best of 5 loops of HOST_CALLS;
a row keeps its best round and lists every round (`round_us`). `device_us` (timer.time_gpu) shows
whether the GPU kept up; a row whose device time is above 0.8 of its host time is `device_bound`
(its loop may have waited on a full launch queue: its host figure is then an upper bound).
"""
from __future__ import annotations

import sys
import time

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import checks, reference, topk
from onlinesoftmax.kernels.topk import softmax_topk as kt
from onlinesoftmax.kernels.topk import moe
from onlinesoftmax.kernels.topk import split as sp
from onlinesoftmax.measure import bench, results, timer

SUITE = "softmax-topk"
PAPER_KS = (1, 5, 10, 15, 30)
PAPER = [(4000, n, k) for n in (1024, 4096, 16384, 32768, 65536, 262144) for k in PAPER_KS] + \
        [(10, n, k) for n in (1024, 4096, 16384, 65536, 262144, 1 << 20) for k in PAPER_KS]
SAMPLING = [(b, n, k, dtype) for dtype in ("float32", "bfloat16") for b in (1, 8, 64, 256)
            for n in (32000, 128256, 151936, 262144) for k in (1, 20, 50)]
MOE = [(t, e, k, dtype) for dtype in ("float32", "bfloat16") for t in (1, 64, 512, 4096)
       for e in (64, 128, 256, 512) for k in (2, 8)]
LARGE_K = [(256, 262144, k, "float32") for k in (64, 128, 256, 512, 1024)] + \
          [(rows, n, k, "float32") for rows, n in ((4000, 32768), (64, 151936)) for k in (1, 2, 4, 8, 10, 12, 16, 24, 32)]
HOST_SHAPES = [(1, 32000, 20, "float32"), (1, 151936, 50, "bfloat16"), (8, 128256, 1, "float32"),
               (1, 128256, 1, "bfloat16"), (1, 256, 8, "bfloat16"), (64, 512, 8, "bfloat16"),
               (512, 256, 2, "float32"), (32, 4096, 5, "float32")]
HOST_BUDGET_US = {1: 15.0, 2: 25.0}     # launches per call -> the runtime's budget (bench_api_overhead.TARGET_US)
HOST_ROUNDS, HOST_CALLS = 5, 250
QUICK = {"paper": [(4000, 32768, 5), (10, 1 << 20, 30)],
         "sampling": [(1, 151936, 50, "bfloat16"), (64, 128256, 20, "float32")],
         "moe": [(512, 256, 8, "bfloat16")],
         "large_k": [(256, 262144, 1024, "float32")]}
CHECK_ROWS = 8          # the first and the last rows of each input are checked against float64


def edge_rows(a):
    """The first and last CHECK_ROWS rows of a 2-D array, on the host (slices: no fancy indexing)."""
    head, tail = checks.host(a[:CHECK_ROWS]), checks.host(a[max(CHECK_ROWS, a.shape[0] - CHECK_ROWS):])
    return np.concatenate([head, tail]) if tail.size else head


def check_ours(variant, x, k: int) -> str:
    """Run `variant` once into poisoned outputs and check its first and last rows; raise if wrong.
    (A numpy x runs the kernel's model instead: the CPU tests exercise this check.)"""
    n = x.shape[0]
    if isinstance(x, np.ndarray):
        probs, columns, lse = variant.simulate(x, k, False)
    else:
        import cupy

        probs = checks.poisoned_like(x, shape=(n, k))
        columns = cupy.full((n, k), checks.COLUMN_POISON, dtype=cupy.int64)
        lse = checks.poisoned_like(x, dtype="float32", shape=(n,))
        topk.run(variant, x, k, False, probs, columns, lse)
        cupy.cuda.Device().synchronize()
    selects_on = "probabilities" if variant is kt.SAFE_UNFUSED else "logits"
    ok, message = checks.compare_topk(edge_rows(probs), edge_rows(columns), edge_rows(x), k, False, selects_on,
                                      edge_rows(lse[:, None])[:, 0])
    if not ok:
        raise AssertionError(f"{variant.name} {tuple(x.shape)} k={k} {x.dtype}: {message}; not timed")
    return message


def check_logits(x, k: int) -> str:
    """softmax_topk_01_topk_only against the definition's columns and the logits at them."""
    values, columns = osm.topk_logits(x, k)
    x64 = np.asarray(checks.as_float64(edge_rows(x)))
    want = reference.topk_order(x64)[:, :k]
    got_values = np.asarray(checks.as_float64(edge_rows(values)))
    if not (edge_rows(columns) == want).all() or not np.array_equal(
            got_values, np.take_along_axis(x64, want, axis=1), equal_nan=True):
        raise AssertionError(f"softmax_topk_01_topk_only {tuple(x.shape)} k={k}: wrong columns or values; not timed")
    return "columns and logits equal to the definition's"


def ours_for(case: str, n_rows: int, n_cols: int, k: int, dtype: str) -> list:
    """The kernels of ours timed for a shape (the auto choice first)."""
    if case == "paper":
        return list(kt.PAPER_VARIANTS)
    auto = topk.choose(n_rows, n_cols, k, dtype).variant
    names = [auto]
    if case == "moe":
        names.append(kt.ONLINE_FUSED)
    elif case in ("sampling", "large_k"):
        if k <= kt.MAX_K:
            names.append(kt.ONLINE_FUSED if auto is sp.SPLIT else sp.SPLIT)
    return list(dict.fromkeys(names))


def measure_case(case: str, n_rows: int, n_cols: int, k: int, dtype: str, read_GBps: float) -> list[dict]:
    import cupy
    import torch

    x = checks.random_rows(cupy, n_rows, n_cols, dtype, seed=n_cols + k)
    nbytes = x.nbytes
    auto = topk.choose(n_rows, n_cols, k, dtype).variant
    fields = {"case": case, "n_rows": n_rows, "n_cols": n_cols, "k": k, "dtype": dtype, "bytes": nbytes,
              "bytes_counted": "one read of the logits"}
    tx = bench.torch_view(x)
    calls, checked = {}, {}
    for variant in ours_for(case, n_rows, n_cols, k, dtype):
        if variant is kt.TOPK_ONLY:
            checked[variant.name] = check_logits(x, k)
            calls[variant.name] = lambda: osm.topk_logits(x, k)
        else:
            checked[variant.name] = check_ours(variant, x, k)
            calls[variant.name] = lambda variant=variant: osm.softmax_topk(x, k, variant=variant.name)
    peers = {"torch_softmax_topk": lambda: torch.topk(torch.softmax(tx, dim=-1), k, dim=-1),
             "torch_topk": lambda: torch.topk(tx, k, dim=-1)}
    rows = []
    reps = 15 if nbytes < bench.BIG_CALL_BYTES else 8
    for name, fn in {**calls, **peers}.items():
        t = timer.time_gpu(fn, [()], reps=reps)
        e2e = timer.time_end_to_end(fn, [()], reps=10)
        row = {"kernel": name, **fields, **t, "method": "device", "GBps": nbytes / t["ms"] / 1e6,
               "fraction_of_read": nbytes / t["ms"] / 1e6 / read_GBps,
               "end_to_end_us": e2e["us"], "end_to_end_wall_us": e2e["wall_us"]}
        if name in calls:
            row.update(auto=name == auto.name, correct=True, check=checked[name])
        rows.append(row)
    by = {r["kernel"]: r for r in rows}
    for name in calls:
        for peer in peers:
            by[name][f"speedup_vs_{peer}"] = by[peer]["ms"] / by[name]["ms"]
            by[name][f"end_to_end_speedup_vs_{peer}"] = by[peer]["end_to_end_us"] / by[name]["end_to_end_us"]
    if case == "paper":
        unfused, safe, online = (by[v.name]["ms"] for v in (kt.SAFE_UNFUSED, kt.SAFE_FUSED, kt.ONLINE_FUSED))
        by[kt.ONLINE_FUSED.name].update(paper_total=unfused / online, paper_fusion=unfused / safe,
                                        paper_online=safe / online)
    del x, tx
    return rows


def launches(variant) -> int:
    """Kernels one softmax_topk call on `variant` launches (the split kernel: chunks, then merge)."""
    return 2 if variant is sp.SPLIT else 1


def host_calls(n_rows: int, n_cols: int, k: int, dtype: str) -> dict:
    """{row fields: the call} for one host shape: ours (checked first), torch's two calls, torch.topk."""
    import cupy
    import torch

    x = checks.random_rows(cupy, n_rows, n_cols, dtype, seed=n_cols + k)
    auto = topk.choose(n_rows, n_cols, k, dtype).variant
    shape = {"case": "host", "n_rows": n_rows, "n_cols": n_cols, "k": k, "dtype": dtype}
    check = check_ours(auto, x, k)
    tx = bench.torch_view(x)
    where = (n_rows, n_cols, k, dtype)
    return {(auto.name, "onlinesoftmax.softmax_topk(x, k)", where): (
                lambda: osm.softmax_topk(x, k),
                shape | {"auto": True, "correct": True, "check": check, "launches": launches(auto),
                         "budget_us": HOST_BUDGET_US[launches(auto)]}),
            ("torch_softmax_topk", "torch.topk(torch.softmax(t, -1), k)", where): (
                lambda: torch.topk(torch.softmax(tx, dim=-1), k, dim=-1), shape | {"launches": 2}),
            ("torch_topk", "torch.topk(t, k)", where): (lambda: torch.topk(tx, k, dim=-1), shape)}


def bare_launch() -> dict:
    """{key: (call, fields)}: the suite api-overhead's empty kernel with 2 pointer arguments, launched
    through cupy's RawKernel (api_overhead.bare_kernels)."""
    import cupy
    from onlinesoftmax.bench.api_overhead import bare_kernels

    fn, fields = bare_kernels(cupy)[0]
    return {("cupy.RawKernel", fields["call"], None): (fn, {"case": "host", "launches": 1,
                                                             "arguments": fields["arguments"]})}


def host_rows() -> list[dict]:
    """The host case's rows: every call checked, then timed round-robin (module docstring)."""
    calls = bare_launch()
    for shape in HOST_SHAPES:
        calls |= host_calls(*shape)
    rounds = {key: [] for key in calls}
    for _ in range(HOST_ROUNDS):
        for key, (fn, _) in calls.items():
            rounds[key].append(timer.host_us_per_call(fn, calls=HOST_CALLS, repeats=5))
    rows = []
    for (kernel, call, where), (fn, fields) in calls.items():
        best = min(rounds[(kernel, call, where)], key=lambda r: r["us"])
        device_us = timer.time_gpu(fn, [()], warmup=3, reps=20)["ms"] * 1e3
        rows.append({"kernel": kernel, "call": call, "method": "host_per_call", **fields, **best,
                     "round_us": [r["us"] for r in rounds[(kernel, call, where)]], "device_us": device_us,
                     "device_bound": device_us > 0.8 * best["us"]})
    return rows


def host_verdicts(rows: list[dict]) -> list[dict]:
    """Ours against the budget, one entry per row of ours: within, over, or over but device-bound."""
    verdicts = []
    for row in rows:
        if "budget_us" not in row:
            continue
        within = row["us"] <= row["budget_us"]
        verdicts.append({"kernel": row["kernel"], "shape": (row["n_rows"], row["n_cols"], row["k"], row["dtype"]),
                         "us": row["us"], "budget_us": row["budget_us"], "within": within,
                         "device_bound": row["device_bound"]})
    return verdicts


def main_host() -> None:
    started = time.time()
    rows = host_rows()
    for row in rows:
        budget = f"budget {row['budget_us']:.0f} us" if "budget_us" in row else ""
        print(f"{row['kernel']:24s} {row.get('n_rows', '')}x{row.get('n_cols', '')} k={row.get('k', '')} "
              f"{row.get('dtype', ''):9s} host {row['us']:6.1f} us (rounds "
              f"{' '.join(f'{u:.1f}' for u in row['round_us'])})  device {row['device_us']:6.1f} us  {budget}"
              f"{'  (device-bound)' if row['device_bound'] else ''}", flush=True)
    for verdict in host_verdicts(rows):
        print(f"{verdict['shape']}: {verdict['us']:.1f} us against {verdict['budget_us']:.0f}: "
              f"{'within' if verdict['within'] else 'OVER'}", flush=True)
    meta = results.gpu_meta(f"host_per_call: {timer.METHOD_HOST} | device_us: {timer.METHOD}")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    meta |= {"host_cpu": cpu, "wall_s": time.time() - started, "rounds": HOST_ROUNDS, "calls_per_loop": HOST_CALLS,
             "budget_us": {str(n): us for n, us in HOST_BUDGET_US.items()}}
    print("wrote", results.write_results(SUITE + "-host", rows, meta), file=sys.stderr)


def shapes(quick: bool, only: str | None = None):
    cases = QUICK if quick else {"paper": PAPER, "sampling": SAMPLING, "moe": MOE, "large_k": LARGE_K}
    for case, listed in cases.items():
        if only is not None and case != only:
            continue
        for shape in listed:
            yield (case, *shape) if len(shape) == 4 else (case, *shape, "float32")


def main(quick: bool, only: str | None = None) -> None:
    import cupy

    started = time.time()
    copy, read = timer.copy_bandwidth(), timer.read_bandwidth()
    print(f"copy {copy['GBps']:.0f} GB/s, read {read['GBps']:.0f} GB/s", flush=True)
    rows = [{"kernel": "copy", "op": "copy", "bytes_counted": "read + write", **copy},
            {"kernel": "read", "op": "read", "bytes_counted": "read", **read}]
    for case, n_rows, n_cols, k, dtype in shapes(quick, only):
        new = measure_case(case, n_rows, n_cols, k, dtype, read["GBps"])
        rows += new
        for row in (r for r in new if "correct" in r):
            print(f"{case} {n_rows}x{n_cols} k={k} {dtype} {row['kernel']}{' (auto)' if row['auto'] else ''}: "
                  f"{row['ms'] * 1e3:.1f} us, {row['fraction_of_read']:.2f} of read, "
                  f"x{row['speedup_vs_torch_softmax_topk']:.2f} torch softmax+topk, "
                  f"x{row['speedup_vs_torch_topk']:.2f} torch.topk", flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    meta = results.gpu_meta(f"device: {timer.METHOD} | end_to_end: {timer.METHOD_END_TO_END}")
    meta["wall_s"] = time.time() - started
    suite = SUITE + ("-quick" if quick else "") + (f"-{only.replace('_', '-')}" if only else "")
    print("wrote", results.write_results(suite, rows, meta), file=sys.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    only = args[args.index("--case") + 1] if "--case" in args else None
    if only is not None and only not in ("paper", "sampling", "moe", "large_k", "host"):
        raise SystemExit(f"--case takes paper, sampling, moe, large_k or host, got {only!r}")
    if only == "host":
        main_host()
    else:
        main("--quick" in args, only)
