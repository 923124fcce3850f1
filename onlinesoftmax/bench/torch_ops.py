"""Suite `torch-ops`: the kernels called from PyTorch, and the backward kernels, against torch in one run.

Part 1, forward through PyTorch, fp32 and bf16 at FORWARD_SHAPES: the same softmax four ways on the same
memory, each row naming its `call`:
  direct       onlinesoftmax.softmax(cupy view)              the kernel called as a CuPy user calls it
  public       onlinesoftmax.softmax(tensor)                 a torch tensor through the public function
  operator     torch.ops.onlinesoftmax.softmax(tensor, -1)   the registered operator
  torch        torch.softmax(tensor, -1)
with `method` "device" (timer.time_gpu) and "end_to_end" (timer.time_end_to_end: one synchronous call).
Part 2, host microseconds per call at 1 x 4096 fp32 (timer.host_us_per_call) of the same four calls.
Targets: the operator's device and end-to-end time within 10 % of direct (`vs_direct`); its host time at
most torch.softmax's + 3 us.

Part 3, the backward kernels, device time at BACKWARD_SHAPES (batch 4000, N 4K .. 64K), fp32 and bf16:
onlinesoftmax.softmax_backward(y, dy) against torch._softmax_backward_data(dy, y, -1, dtype), and
log_softmax_backward against torch._log_softmax_backward_data, on the same memory; GB/s counts the
ideal traffic (read y and dy, write dx: 3 N itemsize bytes per row) and `fraction_of_copy` divides by the
copy bandwidth measured in the same run. Targets: >= 0.85 of the copy, >= 1.5x torch. Each call of ours
is checked against the float64 gradient (gradient_checks.compare_backward) before it is timed.

    python -m onlinesoftmax.bench torch-ops [--quick]   (GPU and torch with CUDA; --quick: printed only)
"""
from __future__ import annotations

import sys

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.gradient_checks import compare_backward
from onlinesoftmax.measure import bench, results, timer

SUITE = "torch-ops"
FORWARD_SHAPES = ((4000, 4096), (1024, 32000), (32, 128256), (1, 4096))
BACKWARD_SHAPES = ((4000, 4096), (4000, 8192), (4000, 16384), (4000, 32768), (4000, 65536))
QUICK_FORWARD, QUICK_BACKWARD = ((4000, 4096),), ((4000, 8192),)
TORCH_DTYPES = {"float32": "float32", "bfloat16": "bfloat16"}


def forward_calls(x, t):
    import torch

    import onlinesoftmax.torch_ops  # noqa: F401  (registers torch.ops.onlinesoftmax)
    return {"direct": lambda: osm.softmax(x), "public": lambda: osm.softmax(t),
            "operator": lambda: torch.ops.onlinesoftmax.softmax(t, -1), "torch": lambda: torch.softmax(t, -1)}


def forward_rows(shapes, copy_GBps: float) -> list[dict]:
    rows = []
    for n_rows, n_cols in shapes:
        for dtype in ("float32", "bfloat16"):
            x = bench.make_rows(n_rows, n_cols, dtype)[0]
            t = bench.torch_view(x)
            out = x.copy()   # poisoned, then written through the torch path (an out= tensor over it)
            ok, message = bench.check_call(lambda a, o: osm.softmax(bench.torch_view(a), out=bench.torch_view(o)), x, out)
            del out
            calls = forward_calls(x, t)
            nbytes = 2 * x.nbytes
            fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": dtype, "bytes": nbytes, "correct": ok}
            if not ok:
                rows.append({"kernel": "fast", "call": "public", "error": message, **fields})
                continue
            timed = {}
            for name, fn in calls.items():
                device = timer.time_gpu(fn, [()])
                end = timer.time_end_to_end(fn, [()])
                timed[name] = (device["ms"] * 1e3, end["us"])
                kernel = "torch.softmax" if name == "torch" else "fast"
                rows.append({"kernel": kernel, "call": name, "method": "device", "us": device["ms"] * 1e3, **device, **fields,
                             "GBps": nbytes / device["ms"] / 1e6, "fraction_of_copy": nbytes / device["ms"] / 1e6 / copy_GBps})
                rows.append({"kernel": kernel, "call": name, "method": "end_to_end", **end, **fields})
            for row in rows[-2 * len(calls):]:
                index = 0 if row["method"] == "device" else 1
                row["vs_direct"] = row["us"] / timed["direct"][index]
            print(f"{n_rows}x{n_cols} {dtype}: " + "  ".join(
                f"{name} {dev:.1f}/{end:.1f} us" for name, (dev, end) in timed.items()), "(device/end-to-end)", flush=True)
    return rows


def host_rows() -> list[dict]:
    x = bench.make_rows(1, 4096, "float32")[0]
    rows = []
    for name, fn in forward_calls(x, bench.torch_view(x)).items():
        rows.append({"kernel": "torch.softmax" if name == "torch" else "fast", "call": name, "method": "host_per_call", "n_rows": 1, "n_cols": 4096, "dtype": "float32",
                     **timer.host_us_per_call(fn)})
    torch_us = next(r["us"] for r in rows if r["call"] == "torch")
    for row in rows:
        row["over_torch_us"] = row["us"] - torch_us
    print("host us per call: " + "  ".join(f"{r['call']} {r['us']:.2f}" for r in rows), flush=True)
    return rows


def backward_rows(shapes, copy_GBps: float) -> list[dict]:
    import cupy
    import torch

    rows = []
    for n_rows, n_cols in shapes:
        for dtype in ("float32", "bfloat16"):
            logits = bench.make_rows(n_rows, n_cols, dtype)[0]
            for function in ("softmax_backward", "log_softmax_backward"):
                forward = osm.softmax if function == "softmax_backward" else osm.log_softmax
                y = forward(logits)
                dy = checks.from_float32(bench.make_rows(n_rows, n_cols, "float32", seed=5)[0] * 0.01, dtype)
                ours = getattr(osm, function)
                ty, tdy = bench.torch_view(y), bench.torch_view(dy)
                theirs = torch._softmax_backward_data if function == "softmax_backward" else torch._log_softmax_backward_data
                block = slice(0, min(n_rows, 64))
                ok, message = compare_backward(ours(y[block], dy[block]), y[block], dy[block], function)
                nbytes = 3 * y.nbytes
                fields = {"op": function, "n_rows": n_rows, "n_cols": n_cols, "dtype": dtype, "bytes": nbytes}
                if not ok:
                    rows.append({"kernel": f"{function}_01_rows", "correct": False, "error": message, **fields})
                    continue
                timed = {}
                for name, fn in ((f"{function}_01_rows", lambda: ours(y, dy)),
                                 (f"torch._{function.replace('_backward', '')}_backward_data",
                                  lambda: theirs(tdy, ty, -1, ty.dtype))):
                    timing = timer.time_gpu(fn, [()])
                    GBps = nbytes / timing["ms"] / 1e6
                    timed[name] = timing["ms"]
                    rows.append({"kernel": name, "correct": True, **timing, **fields, "GBps": GBps,
                                 "fraction_of_copy": GBps / copy_GBps})
                mine, torch_ms = timed.values()
                rows[-2]["vs_torch"] = torch_ms / mine
                print(f"{function} {n_rows}x{n_cols} {dtype}: ours {rows[-2]['fraction_of_copy']:.2f} of copy, "
                      f"{torch_ms / mine:.2f}x torch", flush=True)
            del logits
            cupy.get_default_memory_pool().free_all_blocks()
    return rows


def measure(forward=FORWARD_SHAPES, backward=BACKWARD_SHAPES) -> dict:
    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", "call": "copy", "bytes_counted": "read + write", **copy}]
    rows += forward_rows(forward, copy["GBps"])
    rows += host_rows()
    rows += backward_rows(backward, copy["GBps"])
    return {"meta": results.gpu_meta(), "rows": rows}


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        measure(QUICK_FORWARD, QUICK_BACKWARD)
    else:
        bench.record(SUITE, measure())
