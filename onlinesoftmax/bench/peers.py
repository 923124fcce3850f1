"""Suite `peers`: softmax, log_softmax and logsumexp over the last axis as a PyTorch user calls them,
against what that user would call instead, on the same torch tensors in one run.

  fast            onlinesoftmax.softmax / log_softmax / logsumexp(x) on the torch tensor (variant "auto",
                  torch's stream; `variant` names the kernel it chose)
  torch_eager     torch.softmax / log_softmax / logsumexp(x, -1) (eager)
  torch.compile   the same function through torch.compile (default mode), compiled before timing
  liger           Liger-Kernel's Triton softmax (LigerSoftmaxFunction; softmax only), where it imports
  quack           Quack's CuTe-DSL softmax (quack.softmax; softmax only), where it loads
  copy_same_size  a device copy of x's bytes into another tensor (the roof at this size)
A peer that does not import or run here is recorded with `error` (its reason) instead of a time; the
versions of torch, triton, liger_kernel and quack are in the meta.

Shapes: the ones people run and the ones that do not fill the GPU one row a block: vocabularies
32000 .. 262144 at batch 1, 64 and 2048; few long rows (8 x 1M, 16 x 256000, 128 x 152064,
700 x 300000, 120 x 1M); tall short rows (32768 x 128, 4000 x 4096); odd sizes (2 x 6144, 777 x 9999,
4097 x 3001); fp32 and bf16. Device time (timer.time_gpu, L2 evicted before each call). GB/s counts
the ideal traffic (softmax, log_softmax: one read and one write per element; logsumexp: one read);
`fraction_of_copy` divides it by the 2 GB copy measured at the start of the run, `vs_torch` is torch
eager's time over the row's. Before it is timed every call's output on the first CHECK_ROWS rows is
compared with the float64 reference (bench.compare_rows; logsumexp: within 4 units of rounding of its
output dtype of max(1, |lse|) plus twice the same-dtype error), and a wrong output is recorded with
`correct` False and not timed.

Run on a GPU machine:  python -m onlinesoftmax.bench peers [--quick]   (--quick: 3 shapes, printed)
"""
from __future__ import annotations

import sys

SUITE = "peers"
OPS = ("softmax", "log_softmax", "logsumexp")
DTYPES = ("float32", "bfloat16")
SHAPES = [(batch, n) for n in (32000, 50257, 128256, 151936, 262144) for batch in (1, 64, 2048)] + \
         [(8, 1048576), (16, 256000), (128, 152064), (700, 300000), (120, 1048576)] + \
         [(32768, 128), (4000, 4096), (2, 6144), (777, 9999), (4097, 3001)]
QUICK_SHAPES = [(64, 128256), (16, 256000), (4000, 4096)]
CHECK_ROWS = 64


def auto_choice(op: str, n_rows: int, n_cols: int, dtype: str) -> str:
    """The kernel variant="auto" runs for `op` at this shape (the rows name it, so a reading can say which)."""
    from onlinesoftmax.kernels.logsumexp import split
    from onlinesoftmax.measure import bench

    if op == "softmax":
        return bench.dispatcher_choice(n_rows, n_cols, dtype)
    choose = split.choose if op == "logsumexp" else split.choose_log_softmax
    return choose(n_rows, n_cols, dtype).variant.name


def torch_function(op: str):
    import torch

    return {"softmax": lambda x: torch.softmax(x, -1), "log_softmax": lambda x: torch.log_softmax(x, -1),
            "logsumexp": lambda x: torch.logsumexp(x, -1)}[op]


def ours(op: str):
    import onlinesoftmax as osm

    return {"softmax": lambda x: osm.softmax(x), "log_softmax": lambda x: osm.log_softmax(x),
            "logsumexp": lambda x: osm.logsumexp(x, -1)}[op]


def third_party(op: str) -> dict:
    """name -> (function of x, None) or (None, why it is not here) for Liger and Quack (softmax only)."""
    found = {}
    if op != "softmax":
        return found
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
        found["liger"] = (LigerSoftmaxFunction.apply, None)
    except Exception as error:   # not installed, or its kernels do not load here
        found["liger"] = (None, f"{type(error).__name__}: {error}")
    try:
        from quack.softmax import softmax as quack_softmax
        found["quack"] = (quack_softmax, None)
    except Exception as error:   # not installed, or the CuTe DSL does not load here
        found["quack"] = (None, f"{type(error).__name__}: {error}")
    return found


def versions() -> dict:
    import importlib.metadata

    found = {}
    for name in ("torch", "triton", "liger_kernel", "quack-kernels", "cupy-cuda13x"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def check(op: str, y, x) -> tuple[bool, str]:
    """y = op(x) on the first CHECK_ROWS rows against float64 (see the module doc)."""
    import numpy as np

    from onlinesoftmax import checks, reference
    from onlinesoftmax.measure import bench
    from onlinesoftmax.runtime import torch_bridge

    xa, ya = (torch_bridge.to_array(a[:CHECK_ROWS].contiguous()) for a in (x, y))
    if op != "logsumexp":
        return bench.compare_rows(ya, xa, op)
    x64 = checks.as_float64(xa)
    exact = reference.logsumexp(x64)
    same = reference.logsumexp_same_dtype(x64.astype(np.float32)).astype(np.float64)
    err = float(abs(checks.as_float64(ya) - exact).max())
    base = float(abs(same - exact).max())
    tol = 2 * base + 4 * checks.EPS[ya.dtype.name] * max(1.0, float(abs(exact).max()))
    return err <= tol, f"logsumexp {ya.dtype.name}: error {err:.3e}, tolerance {tol:.3e}"


def shape_rows(n_rows: int, n_cols: int, dtype: str, copy_GBps: float, compiled: dict) -> list[dict]:
    import torch

    from onlinesoftmax.measure import bench, timer

    g = torch.Generator(device="cuda").manual_seed(n_rows * 7 + n_cols)
    x = (4 * torch.randn(n_rows, n_cols, device="cuda", generator=g)).to(getattr(torch, dtype))
    itemsize = x.element_size()
    rows = []
    copy_to = torch.empty_like(x)
    same = timer.time_gpu(lambda: copy_to.copy_(x), [()], reps=bench.reps_for(2 * x.nbytes))
    same_GBps = 2 * x.nbytes / same["ms"] / 1e6
    fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": dtype}
    rows.append({"kernel": "copy_same_size", "op": "copy", **fields, **same, "bytes": 2 * x.nbytes,
                 "GBps": same_GBps, "fraction_of_copy": same_GBps / copy_GBps})
    del copy_to
    for op in OPS:
        traffic = x.nbytes + (4 * n_rows if op == "logsumexp" else x.nbytes)
        here = {"op": op, **fields, "bytes": traffic}
        calls = {"fast": (ours(op), None), "torch_eager": (torch_function(op), None),
                 "torch.compile": (compiled[op], None), **third_party(op)}
        timed = {}
        for name, (fn, why) in calls.items():
            extra = {"variant": auto_choice(op, n_rows, n_cols, dtype)} if name == "fast" else {}
            if fn is None:
                rows.append({"kernel": name, **here, "correct": None, "error": why})
                continue
            try:
                with torch.no_grad():
                    ok, message = check(op, fn(x), x)
            except Exception as error:   # a peer that refuses this shape or dtype is recorded, not fatal
                rows.append({"kernel": name, **here, "correct": None, "error": f"{type(error).__name__}: {error}"})
                continue
            if not ok:
                rows.append({"kernel": name, **here, **extra, "correct": False, "error": message})
                continue
            with torch.no_grad():
                timing = timer.time_gpu(lambda fn=fn: fn(x), [()], reps=bench.reps_for(traffic))
            GBps = traffic / timing["ms"] / 1e6
            timed[name] = timing["ms"]
            rows.append({"kernel": name, **here, **extra, "correct": True, **timing, "GBps": GBps,
                         "fraction_of_copy": GBps / copy_GBps, "fraction_of_copy_same_size": GBps / same_GBps})
        for row in rows:
            if row.get("op") == op and "ms" in row and "torch_eager" in timed:
                row["vs_torch"] = timed["torch_eager"] / row["ms"]
        print(f"{op} {n_rows}x{n_cols} {dtype}: " + "  ".join(f"{k} {v * 1e3:.1f} us" for k, v in timed.items()),
              flush=True)
    del x
    torch.cuda.empty_cache()
    return rows


def main(argv) -> int:
    import torch

    from onlinesoftmax.measure import results, timer

    quick = "--quick" in argv
    if not torch.cuda.is_available():
        print("peers: needs torch with CUDA", file=sys.stderr)
        return 1
    copy = timer.copy_bandwidth()
    compiled = {op: torch.compile(torch_function(op)) for op in OPS}
    rows = [{"kernel": "copy", **copy}]
    for dtype in DTYPES:
        for n_rows, n_cols in (QUICK_SHAPES if quick else SHAPES):
            rows += shape_rows(n_rows, n_cols, dtype, copy["GBps"], compiled)
    if quick:
        return 0
    meta = {**results.gpu_meta(), "versions": versions()}
    print("wrote", results.write_results(SUITE, rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
