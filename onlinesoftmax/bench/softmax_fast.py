"""Suite `softmax-fast`: the fast kernels and softmax(x, variant="auto") against torch, cupy and the copy.

Base shapes: N in {256, 1K, 4K, 16K, 64K, 256K, 1M} x batch in {1, 10, 64, 4000} x {fp32, fp16, bf16}.
Extended shapes (the ones people run): LLM vocabularies N in {32000, 50257, 128256, 151936, 262144} at
batch 1, 64 and 2048, and odd shapes (odd N, odd row counts: 777 x 9999, 1000 x 1001, 4097 x 3001, ...).
Tensors are capped at 2^30 elements (4 GB in fp32): at N = 1M the batch of 4000 becomes 1024
rows (`n_rows` is what ran, `batch` what was asked). For each shape the dispatcher (row "fast": the
public softmax with variant "auto", `api_variant` says the name it was called by, `variant` the kernel
it chose) runs, and next to it every fast kernel that applies there (the ladder: softmax_07 .. 12 and,
in fp32 at batch 4000 and 10, the teaching softmax_02_online), torch.softmax and
cupyx.scipy.special.softmax on the same tensors, all through `timer.time_gpu` (30 timed calls, 10 for a
call that moves a gigabyte or more). GB/s counts
the ideal traffic, one read and one write per element; `fraction_of_copy` divides by the
device-to-device copy of 2 GB measured at the start of the same run; `copy_same_size` rows
copy the shape's own bytes (the floor that launch and latency set for small tensors). Before it is
timed, each of the book's kernels (and "fast") runs once on a poisoned output and is compared with
the float64 reference (`bench.check_output`); rows carry `correct`, and a wrong kernel is recorded
with its error instead of a time.

Run on a GPU machine:  python -m onlinesoftmax.bench softmax-fast [--quick] [--shapes all|base|extended]
  all (default): base and extended shapes in <date>-softmax-fast.json (about 2 to 3 minutes on an H200:
  the base ~1 minute, the extended ~1 more); base: only the base shapes; extended: only the extended
  shapes, in <date>-softmax-fast-extended.json (compare_fast.py reads both files of a day together).
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
from onlinesoftmax import checks
from onlinesoftmax.kernels.softmax import fast_configs as configs
from onlinesoftmax.registry import DTYPE_ITEMSIZE

N_LIST = (256, 1024, 4096, 16384, 65536, 262144, 1048576)
BATCHES = (1, 10, 64, 4000)
VOCABULARIES = (32000, 50257, 128256, 151936, 262144)   # Llama 2, GPT-2, Llama 3, Qwen 2, Gemma 3
VOCABULARY_BATCHES = (1, 64, 2048)                       # one sequence sampling, a decode batch, a training batch
ODD_SHAPES = ((777, 9999), (1000, 1001), (4097, 3001), (4001, 4096), (37, 65536), (129, 262143), (3, 1000003))
QUICK_EXTENDED = ((64, 151936), (777, 9999))
MAX_ELEMENTS = 2**30
SUITE = "softmax-fast"
SHAPE_SETS = ("all", "base", "extended")


def base_shapes(quick: bool = False):
    """(batch, n_rows, n_cols) of the base sweep: powers of two."""
    n_list = (1024, 16384, 262144, 1048576) if quick else N_LIST
    return [(batch, min(batch, MAX_ELEMENTS // n_cols), n_cols) for batch in BATCHES for n_cols in n_list]


def extended_shapes(quick: bool = False):
    """(batch, n_rows, n_cols) the base sweep lacks: vocabularies, odd N and odd row counts (batch = rows)."""
    if quick:
        return [(r, r, n) for r, n in QUICK_EXTENDED]
    base = {(r, n) for _, r, n in base_shapes()}
    wanted = [(b, n) for n in VOCABULARIES for b in VOCABULARY_BATCHES] + list(ODD_SHAPES)
    return [(r, r, n) for r, n in wanted if (r, n) not in base]


def shapes(quick: bool = False, which: str = "base"):
    """(batch, n_rows, n_cols, dtype) to run; `which` is one of SHAPE_SETS."""
    if which not in SHAPE_SETS:
        raise ValueError(f"shapes: which must be one of {SHAPE_SETS}, got {which!r}")
    sizes = (base_shapes(quick) if which in ("all", "base") else []) + \
        (extended_shapes(quick) if which in ("all", "extended") else [])
    for dtype in checks.DTYPES:
        for batch, n_rows, n_cols in sizes:
            yield batch, n_rows, n_cols, dtype


def suite_name(quick: bool = False, which: str = "all") -> str:
    return SUITE + ("-extended" if which == "extended" else "") + ("-quick" if quick else "")


def candidates(n_rows: int, n_cols: int, dtype: str) -> list[str]:
    """The fast kernels worth timing at this shape (the others are out of range or clearly worse)."""
    names = []
    if n_cols <= configs.MAX_COLS_07:
        names.append("softmax_07_warp_per_row")
    if 1024 <= n_cols <= configs.MAX_COLS_08:
        names.append("softmax_08_registers")
    clusters = bench.clusters()[0] if n_cols >= 4096 else False
    if n_cols >= 4096:
        names.append("softmax_09_shared")
        if clusters:
            names.append("softmax_10_cluster")
    if n_cols >= 16384:
        names.append("softmax_11_split")
        if clusters:
            names.append("softmax_12_pipelined")
    if dtype == "float32" and n_rows in (4000, 10) and n_cols <= 262144:
        names.append("softmax_02_online")
    return names


torch_view = bench.torch_view   # the same memory as a torch tensor


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


def measure(quick: bool = False, which: str = "all") -> dict:
    import cupy

    started = time.time()
    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    print(f"copy {copy['GBps']:.0f} GB/s; clusters: {bench.clusters()[1]}; shapes: {which}", flush=True)
    for batch, n_rows, n_cols, dtype in shapes(quick, which):
        itemsize = DTYPE_ITEMSIZE[dtype]
        inputs = [checks.random_rows(cupy, n_rows, n_cols, dtype, seed=s) for s in (1, 2)]
        out = cupy.empty_like(inputs[0])
        poison = cupy.empty_like(out)
        bench.poison(poison)   # the checks module's poison, filled on the device (no host copy of a 4 GB tensor)
        ideal = 2 * n_rows * n_cols * itemsize
        fields = {"n_rows": n_rows, "n_cols": n_cols, "batch": batch, "dtype": dtype}
        chosen = bench.dispatcher_choice(n_rows, n_cols, dtype) or "unknown"
        reps = bench.reps_for(ideal)

        def checked_measure(name, fn, **extra):
            """Ours are checked against the float64 reference first; a wrong kernel is recorded, not timed."""
            ok, message = bench.check_output(fn, inputs[0], out, poison)
            if not ok:
                print(f"WRONG {name} {dtype} {n_rows}x{n_cols}: {message}", flush=True)
                return {"kernel": name, **fields, **extra, "correct": False, "error": message[:300]}
            return {**bench.measure(name, fn, inputs, bytes_per_call=ideal, copy_GBps=copy["GBps"], reps=reps,
                                    **extra, **fields), "correct": True}

        shape_rows = [checked_measure("fast", lambda x: osm.softmax(x, out=out), variant=chosen,
                                      api_variant="auto")]
        # the copy of the same bytes: the floor a small tensor sets (launch and latency bound)
        shape_rows.append(bench.measure("copy_same_size",
                                        lambda x: out.data.copy_from_device_async(x.data, ideal // 2), inputs,
                                        bytes_per_call=ideal, copy_GBps=copy["GBps"], reps=reps, **fields))
        for name in candidates(n_rows, n_cols, dtype):
            variant = osm.REGISTRY[name]
            shape_rows.append(checked_measure(name, lambda x, v=variant: api.run(v, x, out=out)))
            shape_rows[-1]["model_bytes"] = variant.bytes_moved(n_rows, n_cols, itemsize)
        for name, (kind, fn) in library_baselines(dtype).items():
            args = [torch_view(x) for x in inputs] if kind == "torch" else inputs
            try:
                shape_rows.append(bench.measure(name, fn, args, bytes_per_call=ideal, copy_GBps=copy["GBps"],
                                                reps=reps, **fields))
            except Exception as error:  # a library that cannot take this dtype: say so in the data
                shape_rows.append({"kernel": name, **fields, "error": f"{type(error).__name__}: {error}"[:200]})
        rows += shape_rows
        by_name = {r["kernel"]: r for r in shape_rows if "ms" in r}
        torch_ms = by_name.get("torch_softmax", {}).get("ms")
        fast = by_name.get("fast")
        summary = (f"fast={fast['GBps']:6.0f} GB/s ({fast['fraction_of_copy']:.2f} copy, {chosen.replace('softmax_', '')})"
                   + (f" x{torch_ms / fast['ms']:.2f} torch" if torch_ms else "")) if fast else "fast=WRONG"
        print(f"{dtype:8s} {n_rows:5d}x{n_cols:<8d} {summary} | "
              + " ".join(f"{k[8:] if k.startswith('softmax_') else k}={r['GBps']:.0f}"
                         for k, r in by_name.items() if k != "fast"), flush=True)
        inputs = out = poison = None
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"measured in {time.time() - started:.0f} s", flush=True)
    meta = results.gpu_meta()
    meta["clusters"] = bench.clusters()[1]
    meta["max_elements"] = MAX_ELEMENTS
    meta["shapes"] = which
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four N per batch instead of seven, two extended shapes")
    parser.add_argument("--shapes", choices=SHAPE_SETS, default="all",
                        help="base (powers of two), extended (vocabularies, odd shapes: its own file) or all")
    args = parser.parse_args()
    data = measure(args.quick, args.shapes)
    path = results.write_results(suite_name(args.quick, args.shapes), data["rows"], data["meta"])
    print("wrote", path, file=sys.stderr)
    from onlinesoftmax.bench.compare_fast import report

    print(report(data))
