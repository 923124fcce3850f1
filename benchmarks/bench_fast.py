"""Suite `softmax-fast`: the fast kernels and softmax(x, "fast") against torch, cupy and the copy.

Shapes: N in {256, 1K, 4K, 16K, 64K, 256K, 1M} x batch in {1, 10, 64, 4000} x {fp32, fp16, bf16}.
Tensors are capped at 2^30 elements (4 GB in fp32): at N = 1M the batch of 4000 becomes 1024
rows (`n_rows` is what ran, `batch` what was asked). For each shape the dispatcher ("fast")
runs, and next to it every fast kernel that applies there (the ladder: softmax_07 .. 12 and,
in fp32 at batch 4000 and 10, the teaching softmax_02_online), torch.softmax and
cupyx.scipy.special.softmax on the same tensors, all through `timer.time_gpu`. GB/s counts
the ideal traffic, one read and one write per element; `fraction_of_copy` divides by the
device-to-device copy of 2 GB measured at the start of the same run; `copy_same_size` rows
copy the shape's own bytes (the floor that launch and latency set for small tensors). Before it is
timed, each of the book's kernels (and "fast") runs once on a poisoned output and is compared with
the float64 reference (`bench.check_output`); rows carry `correct`, and a wrong kernel is recorded
with its error instead of a time.

Run on a GPU machine:  python benchmarks/bench_fast.py [--quick]   (about a minute)
"""
from __future__ import annotations

import argparse
import sys
import time

import onlinesoftmax as osm
from onlinesoftmax import api
from onlinesoftmax.measure import bench
from onlinesoftmax.measure import results
from onlinesoftmax.measure import timer
from onlinesoftmax import checks_fast as cf
from onlinesoftmax.kernels import softmax_fast as kf

N_LIST = (256, 1024, 4096, 16384, 65536, 262144, 1048576)
BATCHES = (1, 10, 64, 4000)
MAX_ELEMENTS = 2**30
SUITE = "softmax-fast"


def shapes(quick: bool = False):
    n_list = (1024, 16384, 262144, 1048576) if quick else N_LIST
    for dtype in cf.DTYPES:
        for batch in BATCHES:
            for n_cols in n_list:
                yield batch, min(batch, MAX_ELEMENTS // n_cols), n_cols, dtype


def candidates(n_rows: int, n_cols: int, dtype: str) -> list[str]:
    """The fast kernels worth timing at this shape (the others are out of range or clearly worse)."""
    names = []
    if n_cols <= kf.MAX_COLS_07:
        names.append("softmax_07_warp_per_row")
    if 1024 <= n_cols <= kf.MAX_COLS_08:
        names.append("softmax_08_registers")
    if n_cols >= 4096:
        names.append("softmax_09_shared")
        if kf.cluster_launch_works():
            names.append("softmax_10_cluster")
    if n_cols >= 16384:
        names.append("softmax_11_split")
        if kf.cluster_launch_works():
            names.append("softmax_12_pipelined")
    if dtype == "float32" and n_rows in (4000, 10) and n_cols <= 262144:
        names.append("softmax_02_online")
    return names


def torch_view(x):
    """The same memory as a torch tensor (bf16 travels through its 16-bit words)."""
    import torch

    if x.dtype.name == "bfloat16":
        import cupy

        return torch.from_dlpack(x.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(x)


def library_baselines(dtype: str):
    found = {}
    try:
        import torch

        if torch.cuda.is_available():
            found["torch_softmax"] = ("torch", lambda t: torch.softmax(t, dim=1))
    except ImportError:
        pass
    import cupyx.scipy.special

    if dtype != "bfloat16":
        found["cupy_softmax"] = ("cupy", lambda x: cupyx.scipy.special.softmax(x, axis=1))
    return found


def measure(quick: bool = False) -> dict:
    import cupy

    started = time.time()
    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    print(f"copy {copy['GBps']:.0f} GB/s; clusters: {kf.cluster_status()}", flush=True)
    for batch, n_rows, n_cols, dtype in shapes(quick):
        itemsize = kf.ITEMSIZE[dtype]
        inputs = [cf.random_rows(cupy, n_rows, n_cols, dtype, seed=s) for s in (1, 2)]
        out = cupy.empty_like(inputs[0])
        poison = cf.poisoned_like(out)
        ideal = 2 * n_rows * n_cols * itemsize
        fields = {"n_rows": n_rows, "n_cols": n_cols, "batch": batch, "dtype": dtype}
        choice = kf.choose(n_rows, n_cols, dtype)

        def checked_measure(name, fn, **extra):
            """Ours are checked against the float64 reference first; a wrong kernel is recorded, not timed."""
            ok, message = bench.check_output(fn, inputs[0], out, poison)
            if not ok:
                print(f"WRONG {name} {dtype} {n_rows}x{n_cols}: {message}", flush=True)
                return {"kernel": name, **fields, **extra, "correct": False, "error": message[:300]}
            return {**bench.measure(name, fn, inputs, bytes_per_call=ideal, copy_GBps=copy["GBps"], **extra,
                                    **fields), "correct": True}

        shape_rows = [checked_measure("fast", lambda x: osm.softmax(x, "fast", out=out), variant=choice.variant.name)]
        # the copy of the same bytes: the floor a small tensor sets (launch and latency bound)
        shape_rows.append(bench.measure("copy_same_size",
                                        lambda x: out.data.copy_from_device_async(x.data, ideal // 2), inputs,
                                        bytes_per_call=ideal, copy_GBps=copy["GBps"], **fields))
        for name in candidates(n_rows, n_cols, dtype):
            variant = osm.REGISTRY[name]
            shape_rows.append(checked_measure(name, lambda x, v=variant: api.run(v, x, out=out)))
            shape_rows[-1]["model_bytes"] = variant.bytes_moved(n_rows, n_cols, itemsize)
        for name, (kind, fn) in library_baselines(dtype).items():
            args = [torch_view(x) for x in inputs] if kind == "torch" else inputs
            try:
                shape_rows.append(bench.measure(name, fn, args, bytes_per_call=ideal, copy_GBps=copy["GBps"],
                                                **fields))
            except Exception as error:  # a library that cannot take this dtype: say so in the data
                shape_rows.append({"kernel": name, **fields, "error": f"{type(error).__name__}: {error}"[:200]})
        rows += shape_rows
        by_name = {r["kernel"]: r for r in shape_rows if "ms" in r}
        torch_ms = by_name.get("torch_softmax", {}).get("ms")
        fast = by_name.get("fast")
        summary = (f"fast={fast['GBps']:6.0f} GB/s ({fast['fraction_of_copy']:.2f} copy, {choice.variant.name[8:]})"
                   + (f" x{torch_ms / fast['ms']:.2f} torch" if torch_ms else "")) if fast else "fast=WRONG"
        print(f"{dtype:8s} {n_rows:5d}x{n_cols:<8d} {summary} | "
              + " ".join(f"{k[8:] if k.startswith('softmax_') else k}={r['GBps']:.0f}"
                         for k, r in by_name.items() if k != "fast"), flush=True)
        inputs = out = poison = None
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"measured in {time.time() - started:.0f} s", flush=True)
    meta = results.gpu_meta()
    meta["clusters"] = kf.cluster_status()
    meta["max_elements"] = MAX_ELEMENTS
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four N per batch instead of seven")
    args = parser.parse_args()
    data = measure(args.quick)
    path = results.write_results(SUITE if not args.quick else SUITE + "-quick", data["rows"], data["meta"])
    print("wrote", path, file=sys.stderr)
    from compare_fast import report  # noqa: E402  (same folder)

    print(report(data))
