"""Suite `softmax-fast-cooperative`: softmax_13_cooperative against the kernels it may replace.

Shapes where `softmax-fast` misses its copy target or leaves SMs idle: batch 4000 at N = 16K, 64K
and 256K, 1024 rows at N = 1M, and few rows (1, 10, 64) of 64K .. 1M, in fp32 / fp16 / bf16.
Per shape: the dispatcher ("fast", as it chooses at this commit), a copy of the same bytes,
softmax_10_cluster, softmax_11_split and softmax_12_pipelined at their default plans, and
softmax_13_cooperative at its default plan without the prefetch buffer (`prefetch` false), with
it, and with it at chunks of 8, 16, 32 and 64 KB (`chunk_bytes`). Before any timing, each
kernel's output on the shape is checked against the float64 reference (checks.compare):
a row records `correct` and a wrong kernel is not timed. Rows carry `n_chunks` and `threads`
for softmax_13 and `resident_blocks` (blocks of that shape resident at once). Same timer and
GB/s as bench_fast.

Run on a GPU machine:  python -m onlinesoftmax.bench softmax-fast-cooperative   (about two minutes)
"""
from __future__ import annotations

import sys
import time

import onlinesoftmax as osm
from onlinesoftmax import api
from onlinesoftmax.measure import bench
from onlinesoftmax.measure import results
from onlinesoftmax.measure import timer
from onlinesoftmax import checks
from onlinesoftmax.kernels.softmax import fast as kf
from onlinesoftmax.kernels import dispatch
from onlinesoftmax.kernels.softmax import fast_configs as configs
from onlinesoftmax.runtime import driver
from onlinesoftmax.registry import DTYPE_ITEMSIZE

SUITE = "softmax-fast-cooperative"
DTYPES = ("float32", "float16", "bfloat16")
SHAPES = ([(4000, n, d) for d in DTYPES for n in (16384, 65536, 262144)]
          + [(1024, 1 << 20, d) for d in DTYPES]
          + [(b, n, d) for d in DTYPES for b in (1, 10, 64) for n in (65536, 262144, 1 << 20)])
CHUNK_BYTES = (8 * 1024, 16 * 1024, 32 * 1024, 64 * 1024)


def chunk_counts(n_cols: int, dtype: str) -> list[int]:
    counts = []
    for chunk_bytes in CHUNK_BYTES:
        c = -(-n_cols * DTYPE_ITEMSIZE[dtype] // chunk_bytes)
        if 1 <= c <= configs.COOP_MAX_CHUNKS and c not in counts:
            counts.append(c)
    return counts


def measure() -> dict:
    import cupy

    started = time.time()
    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    print(f"copy {copy['GBps']:.0f} GB/s; clusters: {driver.cluster_status()}", flush=True)
    for n_rows, n_cols, dtype in SHAPES:
        inputs = [checks.random_rows(cupy, n_rows, n_cols, dtype, seed=s) for s in (1, 2)]
        out = cupy.empty_like(inputs[0])
        poison = checks.poisoned_like(out)
        ideal = 2 * n_rows * n_cols * DTYPE_ITEMSIZE[dtype]
        fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": dtype}
        coop = osm.REGISTRY["softmax_13_cooperative"]
        timed = [("fast", {}, lambda x: osm.softmax(x, variant="fast", out=out)),
                 ("copy_same_size", None, lambda x: out.data.copy_from_device_async(x.data, ideal // 2))]
        for name in ("softmax_10_cluster", "softmax_11_split", "softmax_12_pipelined"):
            timed.append((name, {}, lambda x, v=osm.REGISTRY[name]: api.run(v, x, out=out)))
        timed.append(("softmax_13_cooperative", {}, lambda x: api.run(coop, x, out=out)))
        timed.append(("softmax_13_cooperative", {"prefetch": False}, lambda x: api.run(coop, x, out=out, prefetch=False)))
        for c in chunk_counts(n_cols, dtype):
            timed.append(("softmax_13_cooperative", {"n_chunks": c},
                          lambda x, c=c: api.run(coop, x, out=out, n_chunks=c)))
        line = []
        for name, options, fn in timed:
            row = {"kernel": name, **fields}
            try:
                if options is not None:   # correctness first: poisoned output, one call, the reference
                    ok, message = bench.check_output(fn, inputs[0], out, poison)
                    row["correct"] = ok
                    if not ok:
                        raise AssertionError(message)
                row.update(bench.measure(name, fn, inputs, bytes_per_call=ideal, copy_GBps=copy["GBps"], **fields))
            except Exception as error:  # a refused shape or a wrong answer: say so in the data
                row["error"] = f"{type(error).__name__}: {error}"[:300]
            if name == "softmax_13_cooperative":
                vec = configs.vector_width(dtype)
                prefetch = options.get("prefetch", True)
                plan = configs.chunks_13(n_rows, n_cols, dtype, vec, options.get("n_chunks"), prefetch=prefetch)
                row.update(n_chunks=plan.n_chunks, threads=plan.threads, prefetch=prefetch,
                           chunk_bytes=plan.chunk_elems * DTYPE_ITEMSIZE[dtype])
                try:
                    row["resident_blocks"] = driver.resident_blocks(
                        coop.file, configs.entry(name, dtype, vec), plan.threads,
                        configs.coop_buffers(vec, prefetch) * row["chunk_bytes"],
                        () if prefetch else ("COOPERATIVE_PREFETCH=0",))
                except Exception as error:
                    row["resident_error"] = str(error)[:200]
            if name == "fast":
                row["variant"] = dispatch.choose(n_rows, n_cols, dtype).variant.name
            rows.append(row)
            label = name[8:10] if name.startswith("softmax_") else name
            if name == "softmax_13_cooperative":
                label += f"/P{row['n_chunks']}" + ("" if row["prefetch"] else "np")
            line.append(f"{label}=" + (f"{row['fraction_of_copy']:.3f}" if "ms" in row else "ERR"))
        print(f"{dtype:8s} {n_rows:5d}x{n_cols:<8d} " + " ".join(line), flush=True)
        inputs = out = poison = None
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"measured in {time.time() - started:.0f} s", flush=True)
    meta = results.gpu_meta()
    meta["clusters"] = driver.cluster_status()
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    data = measure()
    for row in data["rows"]:
        if "error" in row:
            print("ERROR", row["kernel"], row.get("n_rows"), row.get("n_cols"), row.get("dtype"), row["error"])
    print("wrote", results.write_results(SUITE, data["rows"], data["meta"]), file=sys.stderr)
