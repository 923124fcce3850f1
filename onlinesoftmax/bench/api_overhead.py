"""Suite `api-overhead`: what one call of the public API costs, beside torch and a bare cupy launch.

Three methods of the one timer (onlinesoftmax/measure/timer.py), named in each row's `method`:
  host_per_call  timer.host_us_per_call: the same call back to back, never waiting for the GPU: the
                 host's microseconds per call (tiny shapes, so the GPU keeps up; `drain_us` and
                 `device_us` show that it did)
  end_to_end     timer.time_end_to_end: one synchronous call as a user makes it, CUDA events around the
                 Python call, no spin kernel: host overhead plus device time
  device         timer.time_gpu: the same call's device time (host hidden behind a spin kernel)

Part 1, host cost per call, at 1 x 4096 in fp32, fp16 and bf16: onlinesoftmax.softmax, logsumexp and
log_softmax (variant "auto"); softmax(x, variant=name) for softmax_07 .. 12 at a shape each takes
(VARIANT_SHAPES, fp32); beside them, in the same run, torch.softmax / logsumexp / log_softmax, a bare
cupy RawKernel launch (an empty kernel with 2 and with 8 arguments) and cupy.empty_like. Targets
(TARGET_US): <= 15 us for a call that launches one kernel, <= 25 us for a cluster launch or two kernels.

Part 2, end to end and device time of one call, ours against torch on the same memory (DLPack views),
fp32 / fp16 / bf16: onlinesoftmax.softmax(x) vs torch.softmax(t, -1) at the softmax-fast sweep's base
shapes (softmax_fast.base_shapes) plus EXTRA_SHAPES; on SUBSET_SHAPES also logsumexp vs torch.logsumexp,
log_softmax vs torch.log_softmax, and masked softmax (causal=True with causal_align="top_left", and an additive float32 (rows, N)
mask) vs torch.softmax(t + mask_t, -1) with mask_t the same mask in t's dtype. The copy ceiling
(timer.copy_bandwidth) is measured once. Before it is timed, each of our calls runs once on a poisoned
output and is checked against the float64 reference (bench.check_call: every output written, the error
within the tests' rule); a wrong call is recorded as an error row (`correct: false`), never as a time.

Rows: `kernel` is "fast" for the public API with variant "auto" (`api` names the function, `mask` the
mask, `chosen` the kernel auto runs for that softmax, masked or not), a registry key for softmax(x,
variant=key), "torch.softmax" / "torch.logsumexp" / "torch.log_softmax", "cupy.RawKernel" (`arguments`),
"cupy.empty_like", or "copy"; `call` is the Python expression. Times are in microseconds (`us`, the
median; device rows keep time_gpu's `ms` too); GB/s counts the ideal traffic (one read of x, one write
of y; plus the float32 mask read for an additive mask; logsumexp writes 4 bytes per row).

Run on a GPU machine:  python -m onlinesoftmax.bench api-overhead [--quick]
  (about 2 minutes on an H200, well under 4; --quick: a handful of shapes, about 30 s)
Read a recorded file, no GPU:  python -m onlinesoftmax.bench api-overhead --report [path/to/<date>-api-overhead.json]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax import checks  # noqa: E402
from onlinesoftmax.bench.api_overhead_report import (CLUSTER_OR_TWO, ONE_KERNEL, SUITE, TARGET_US,  # noqa: F401
                                                     fmt, ratio)
from onlinesoftmax.measure import bench, results, timer  # noqa: E402

APIS = ("softmax", "logsumexp", "log_softmax")
TORCH_NAMES = {"softmax": "torch.softmax", "logsumexp": "torch.logsumexp", "log_softmax": "torch.log_softmax"}
HOST_SHAPE = (1, 4096)
VARIANT_SHAPES = {"softmax_07_warp_per_row": (4, 1024), "softmax_08_registers": (4, 4096),
                  "softmax_09_shared": (4, 65536), "softmax_10_cluster": (4, 65536),
                  "softmax_11_split": (4, 65536), "softmax_12_pipelined": (4, 65536)}
CLUSTER_OR_TWO_KERNELS = ("softmax_10_cluster", "softmax_11_split", "softmax_12_pipelined")
EXTRA_SHAPES = ((4000, 1000), (4096, 3000), (8192, 32000), (32, 128256), (64, 151936), (16384, 256), (1, 4096),
                (2048, 50257), (777, 9999))
SUBSET_SHAPES = ((4096, 4096), (1024, 32000), (16384, 256))
QUICK_SHAPES = ((1, 4096), (4000, 1000), (4096, 4096), (64, 151936), (777, 9999))
QUICK_SUBSET = ((4096, 4096), (16384, 256))
MASKED_OPS = (("logsumexp", None), ("log_softmax", None), ("softmax", "causal"), ("softmax", "additive"))
HOST_LOOP_S = 0.02           # one timed loop of back-to-back calls lasts about this long (100 .. 2000 calls)
BARE_SOURCE = r"""
extern "C" __global__ void bare_2(const float* x, float* y) { }
extern "C" __global__ void bare_8(const float* x, float* y, int n_rows, int n_cols, long long x_stride,
                                  long long y_stride, float a, float b) { }
"""


# ---- what is called -----------------------------------------------------------------------------------

def launch_class(kernel: str | None, api: str = "softmax") -> str:
    """ONE_KERNEL or CLUSTER_OR_TWO for the kernel a call runs (logsumexp / log_softmax: one kernel)."""
    return CLUSTER_OR_TWO if api == "softmax" and kernel in CLUSTER_OR_TWO_KERNELS else ONE_KERNEL


def e2e_shapes(quick: bool = False) -> list[tuple[int, int]]:
    """(n_rows, n_cols) of part 2: the softmax-fast base sweep (as softmax_fast.py runs it) and EXTRA_SHAPES."""
    if quick:   # the quick shapes, and the quick subset's (its masked and other functions run on them)
        return list(dict.fromkeys(list(QUICK_SHAPES) + list(QUICK_SUBSET)))
    from onlinesoftmax.bench.softmax_fast import base_shapes

    shapes = [(n_rows, n_cols) for _, n_rows, n_cols in base_shapes()] + list(EXTRA_SHAPES) + list(SUBSET_SHAPES)
    return list(dict.fromkeys(shapes))


def subset_shapes(quick: bool = False):
    return QUICK_SUBSET if quick else SUBSET_SHAPES


def our_call(api: str, mask=None, variant: str | None = None):
    """The public call as a user writes it: fn(x, out=None)."""
    if api == "softmax":
        masks = {"mask": mask} if mask is not None and not isinstance(mask, str) else \
            {"causal": True, "causal_align": "top_left"} if mask == "causal" else {}   # the torch mask's alignment
        kwargs = masks | ({} if variant is None else {"variant": variant})
        return lambda x, out=None: osm.softmax(x, out=out, **kwargs)
    if api == "logsumexp":
        return lambda x, out=None: osm.logsumexp(x, out=out)
    if api == "log_softmax":
        return lambda x, out=None: osm.log_softmax(x, out=out)
    raise ValueError(f"unknown api {api!r}")


def call_text(api: str, mask_kind: str | None = None, variant: str | None = None, out: bool = False) -> str:
    extra = {None: "", "causal": ', causal=True, causal_align="top_left"', "additive": ", mask=mask"}[mask_kind]
    extra += f', variant="{variant}"' if variant else ""
    return f"onlinesoftmax.{api}(x{extra}{', out=out' if out else ''})"


def torch_call(torch, api: str, mask_t=None):
    """torch's call for the same operation on tensor t (a masked softmax adds the mask first)."""
    if api == "softmax":
        return (lambda t: torch.softmax(t, -1)) if mask_t is None else (lambda t: torch.softmax(t + mask_t, -1))
    if api == "logsumexp":
        return lambda t: torch.logsumexp(t, -1)
    if api == "log_softmax":
        return lambda t: torch.log_softmax(t, -1)
    raise ValueError(f"unknown api {api!r}")


def torch_call_text(api: str, mask_kind: str | None = None) -> str:
    return f"{TORCH_NAMES[api]}(t{' + mask_t' if mask_kind else ''}, -1)"


def ideal_bytes(api: str, mask_kind: str | None, n_rows: int, n_cols: int, itemsize: int) -> int:
    """One read of x and one write of y (logsumexp: 4 bytes per row); an additive mask is read once too."""
    elements = n_rows * n_cols
    if api == "logsumexp":
        return elements * itemsize + 4 * n_rows
    return 2 * elements * itemsize + (4 * elements if mask_kind == "additive" else 0)


def additive_mask(xp, n_rows: int, n_cols: int, seed: int = 3):
    """float32 (rows, N): -inf for ~10 % of the columns, a bias in (-4, 0] elsewhere; column 0 always kept."""
    u = xp.random.default_rng(seed).random((n_rows, n_cols), dtype=xp.float32)
    mask = xp.where(u < 0.1, xp.float32(-np.inf), (u - 1) * 4).astype(xp.float32)
    mask[:, 0] = 0
    return mask


def causal_mask(xp, n_rows: int, n_cols: int):
    """The additive form of causal=True, causal_align="top_left" (row i keeps columns j <= i), float32, for torch."""
    rows, cols = xp.arange(n_rows)[:, None], xp.arange(n_cols)[None, :]
    return xp.where(cols > rows, xp.float32(-np.inf), xp.float32(0)).astype(xp.float32)


# ---- the GPU (functions, so a CPU test can put numpy and fakes in their place) ------------------------

def _xp():
    import cupy

    return cupy


def _sync() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def _free() -> None:
    """Give back the memory of a shape's tensors (cupy's pool and torch's cache) before the next shape."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    torch = _torch()
    if torch is not None:
        torch.cuda.empty_cache()


def _torch():
    """torch with CUDA, or None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_mask(mask32, like):
    """A float32 cupy mask as a torch tensor of `like`'s dtype (converted once, outside the timing)."""
    return bench.torch_view(mask32).to(like.dtype)


def bare_kernels(xp):
    """(fn, fields) for an empty cupy RawKernel launched with 2 and with 8 arguments (numpy scalars)."""
    module = xp.RawModule(code=BARE_SOURCE)
    x = xp.zeros(HOST_SHAPE, dtype=xp.float32)
    y = xp.empty_like(x)
    two, eight = module.get_function("bare_2"), module.get_function("bare_8")
    args8 = (x, y, np.int32(HOST_SHAPE[0]), np.int32(HOST_SHAPE[1]), np.int64(HOST_SHAPE[1]), np.int64(HOST_SHAPE[1]),
             np.float32(1), np.float32(0))
    return [(lambda: two((1,), (32,), (x, y)), {"arguments": 2, "call": "kernel((1,), (32,), (x, y))"}),
            (lambda: eight((1,), (32,), args8),
             {"arguments": 8, "call": "kernel((1,), (32,), (x, y, 6 numpy scalars))"})]


# ---- part 1: host cost per call ----------------------------------------------------------------------

def calls_for(fn, args=()) -> int:
    """Calls per timed loop: enough for ~HOST_LOOP_S, from 100 to 2000."""
    _sync()
    began = time.perf_counter()
    for _ in range(20):
        fn(*args)
    _sync()
    per_call = (time.perf_counter() - began) / 20
    return int(min(2000, max(100, HOST_LOOP_S / max(per_call, 1e-7))))


def host_row(kernel: str, fn, args, fields: dict, *, check=None, launch: str | None = None,
             device: bool = True) -> dict:
    """One host_per_call row: checked first (check() -> (ok, message)), then timed; errors are recorded."""
    row = {"kernel": kernel, "method": "host_per_call", **fields}
    if launch:
        row |= {"launch": launch, "target_us": TARGET_US[launch]}
    try:
        if check is not None:
            ok, message = check()
            row["correct"] = ok
            if not ok:
                row["error"] = message[:300]
                print(f"WRONG {fields.get('call', kernel)} {fields.get('dtype', '')}: {message}", flush=True)
                return row
        row |= timer.host_us_per_call(fn, args, calls=calls_for(fn, args), repeats=5)
        if device:
            row["device_us"] = timer.time_gpu(fn, [args], warmup=3, reps=20)["ms"] * 1e3
    except Exception as error:   # a call this GPU or library refuses: say so in the data
        row["error"] = f"{type(error).__name__}: {error}"[:300]
        print(f"ERROR {fields.get('call', kernel)}: {row['error']}", flush=True)
    return row


def host_part(xp, torch) -> list[dict]:
    rows = []
    n_rows, n_cols = HOST_SHAPE
    for dtype in checks.DTYPES:
        x = checks.random_rows(xp, n_rows, n_cols, dtype, seed=5)
        shape = {"dtype": dtype, "n_rows": n_rows, "n_cols": n_cols}
        chosen = bench.dispatcher_choice(n_rows, n_cols, dtype)
        for api in APIS:
            ours = our_call(api)
            out = xp.empty((n_rows,), xp.float32) if api == "logsumexp" else xp.empty_like(x)
            extra = {"api": api, "call": call_text(api)} | ({"chosen": chosen} if api == "softmax" and chosen else {})
            rows.append(host_row("fast", lambda x, f=ours: f(x), (x,), shape | extra,
                                 check=lambda f=ours, a=api, x=x, o=out: bench.check_call(
                                     lambda x, o: f(x, out=o), x, o, a),
                                 launch=launch_class(chosen, api)))
            if api == "softmax" and dtype == "float32":   # the same call writing into a given array
                rows.append(host_row("fast", lambda x, f=ours, o=out: f(x, out=o), (x,),
                                     shape | extra | {"call": call_text(api, out=True)},
                                     launch=launch_class(chosen, api)))
        if torch is not None:
            t = bench.torch_view(x)
            for api in APIS:
                rows.append(host_row(TORCH_NAMES[api], torch_call(torch, api), (t,),
                                     shape | {"api": api, "call": torch_call_text(api)}))
    for name, (n_rows, n_cols) in VARIANT_SHAPES.items():
        x = checks.random_rows(xp, n_rows, n_cols, "float32", seed=6)
        out = xp.empty_like(x)
        ours = our_call("softmax", variant=name)
        rows.append(host_row(name, lambda x, f=ours: f(x), (x,),
                             {"dtype": "float32", "n_rows": n_rows, "n_cols": n_cols, "api": "softmax",
                              "call": call_text("softmax", variant=name)},
                             check=lambda f=ours, x=x, o=out: bench.check_call(lambda x, o: f(x, out=o), x, o),
                             launch=launch_class(name)))
    for fn, fields in bare_kernels(xp):
        rows.append(host_row("cupy.RawKernel", fn, (), {"dtype": "float32", "n_rows": HOST_SHAPE[0],
                                                        "n_cols": HOST_SHAPE[1]} | fields))
    x = xp.empty(HOST_SHAPE, dtype=xp.float32)
    rows.append(host_row("cupy.empty_like", xp.empty_like, (x,),
                         {"dtype": "float32", "n_rows": HOST_SHAPE[0], "n_cols": HOST_SHAPE[1],
                          "call": "cupy.empty_like(x)"}, device=False))
    for row in rows:
        us = f"{row['us']:7.1f} us" if "us" in row else "  error   "
        print(f"host {row['kernel']:24s} {row.get('dtype', ''):9s} {us}  {row.get('call', '')}", flush=True)
    return rows


# ---- part 2: end to end and device time --------------------------------------------------------------

def compare_op(xp, torch, api: str, mask_kind: str | None, inputs, tensors, copy_GBps: float) -> list[dict]:
    """Check ours, then time ours and torch's call end to end and on the device."""
    n_rows, n_cols = inputs[0].shape
    dtype = inputs[0].dtype.name
    fields = {"api": api, "mask": mask_kind or "none", "dtype": dtype, "n_rows": n_rows, "n_cols": n_cols}
    label = f"{api}{'+' + mask_kind if mask_kind else ''} {dtype} {n_rows}x{n_cols}"
    mask = additive_mask(xp, n_rows, n_cols) if mask_kind == "additive" else mask_kind   # None, "causal", array
    ours = our_call(api, mask)
    nbytes = ideal_bytes(api, mask_kind, n_rows, n_cols, inputs[0].itemsize)
    out = xp.empty((n_rows,), xp.float32) if api == "logsumexp" else xp.empty_like(inputs[0])
    try:
        ok, message = bench.check_call(lambda x, o: ours(x, out=o), inputs[0], out, api, mask)
    except Exception as error:
        ok, message = False, f"{type(error).__name__}: {error}"
    out = None
    chosen = bench.dispatcher_choice(n_rows, n_cols, dtype, masked=mask is not None) if api == "softmax" else None
    ours_fields = {"call": call_text(api, mask_kind)} | ({"chosen": chosen} if chosen else {})
    if not ok:
        print(f"WRONG {label}: {message}", flush=True)
        return [{"kernel": "fast", "method": "check", **fields, **ours_fields, "correct": False,
                 "error": message[:300]}]
    timed = [("fast", lambda x: ours(x), [(x,) for x in inputs], ours_fields | {"correct": True})]
    if torch is not None and tensors is not None:
        mask_t = None
        if mask_kind is not None:
            mask_t = torch_mask(causal_mask(xp, n_rows, n_cols) if mask_kind == "causal" else mask, tensors[0])
        timed.append((TORCH_NAMES[api], torch_call(torch, api, mask_t), [(t,) for t in tensors],
                      {"call": torch_call_text(api, mask_kind)}))
    e2e_reps, device_reps = bench.reps_for(nbytes, 50), bench.reps_for(nbytes, 30)
    rows = []
    for name, fn, arg_sets, extra in timed:
        try:
            e2e = timer.time_end_to_end(fn, arg_sets, warmup=3, reps=e2e_reps)
            rows.append({"kernel": name, "method": "end_to_end", **fields, **extra, **e2e, "bytes": nbytes,
                         "GBps": nbytes / e2e["us"] / 1e3})
            device = timer.time_gpu(fn, arg_sets, warmup=3, reps=device_reps)
            GBps = nbytes / device["ms"] / 1e6
            rows.append({"kernel": name, "method": "device", **fields, **extra, **device, "us": device["ms"] * 1e3,
                         "bytes": nbytes, "GBps": GBps, "fraction_of_copy": GBps / copy_GBps})
        except Exception as error:
            rows.append({"kernel": name, "method": "end_to_end", **fields, **extra,
                         "error": f"{type(error).__name__}: {error}"[:300]})
            print(f"ERROR {name} {label}: {rows[-1]['error']}", flush=True)
    timings = {(r["kernel"], r["method"]): r["us"] for r in rows if "us" in r}
    ours_e2e, torch_e2e = timings.get(("fast", "end_to_end")), timings.get((TORCH_NAMES[api], "end_to_end"))
    ours_dev, torch_dev = timings.get(("fast", "device")), timings.get((TORCH_NAMES[api], "device"))
    print(f"{label:40s} ours {fmt(ours_e2e, '8.1f')} us end to end ({fmt(ours_dev, '8.1f')} device) | "
          f"torch {fmt(torch_e2e, '8.1f')} ({fmt(torch_dev, '8.1f')}) | x{fmt(ratio(torch_e2e, ours_e2e))} "
          f"end to end, x{fmt(ratio(torch_dev, ours_dev))} device", flush=True)
    return rows


def e2e_part(xp, torch, quick: bool, copy_GBps: float) -> list[dict]:
    rows = []
    subset = set(subset_shapes(quick))
    for n_rows, n_cols in e2e_shapes(quick):
        for dtype in checks.DTYPES:
            inputs = [checks.random_rows(xp, n_rows, n_cols, dtype, seed=s) for s in (1, 2)]
            tensors = [bench.torch_view(x) for x in inputs] if torch is not None else None
            ops = [("softmax", None)] + (list(MASKED_OPS) if (n_rows, n_cols) in subset else [])
            for api, mask_kind in ops:
                rows += compare_op(xp, torch, api, mask_kind, inputs, tensors, copy_GBps)
            inputs = tensors = None
            _free()
    return rows


def measure(quick: bool = False) -> dict:
    xp, torch = _xp(), _torch()
    started = time.time()
    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", "method": "device", **copy, "us": copy["ms"] * 1e3}]
    print(f"copy {copy['GBps']:.0f} GB/s; torch: {getattr(torch, '__version__', 'absent')}; "
          "the dispatcher is variant='auto'", flush=True)
    rows += host_part(xp, torch)
    print(f"host part in {time.time() - started:.0f} s", flush=True)
    rows += e2e_part(xp, torch, quick, copy["GBps"])
    print(f"measured in {time.time() - started:.0f} s", flush=True)
    meta = results.gpu_meta(" | ".join(f"{name}: {text}" for name, text in timer.METHODS.items()))
    meta |= {"methods": dict(timer.METHODS), "clusters": bench.clusters()[1],
             "targets_us": dict(TARGET_US), "quick": quick}
    return {"meta": meta, "rows": rows}


# ---- reading a recorded file: the targets, and ours against torch ------------------------------------

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a handful of shapes (a smoke run)")
    parser.add_argument("--report", nargs="?", const="", default=None, metavar="PATH",
                        help="print the targets from a recorded file (the newest if no PATH); no GPU needed")
    args = parser.parse_args()
    from onlinesoftmax.bench.api_overhead_report import load, report   # noqa: E402

    if args.report is not None:
        print(report(load(args.report or None)))
        raise SystemExit(0)
    data = measure(args.quick)
    path = results.write_results(SUITE + ("-quick" if args.quick else ""), data["rows"], data["meta"])
    print("wrote", path, file=sys.stderr)
    print(report(data))
