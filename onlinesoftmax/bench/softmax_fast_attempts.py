"""Suite `softmax-fast-attempts`: the kernels and cluster sizes tried at the shapes that miss the copy targets.

Batch 4000 (1024 rows at N = 1M) where `softmax-fast` stays below 0.90 / 0.85 of the copy:
the dispatcher ("fast"), the copy of the same bytes, softmax_10_cluster and softmax_12_pipelined
at every cluster size C whose chunk fits shared memory (C = 16 always) and is >= 32 KB, and softmax_09_shared.
Rows carry `n_chunks` (C; absent for "fast" and the copy). Same timer and GB/s as bench_fast.

Run on a GPU machine:  python -m onlinesoftmax.bench softmax-fast-attempts   (about a minute)
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

SUITE = "softmax-fast-attempts"
SHAPES = [(4000, n, d) for d in ("float32", "float16", "bfloat16") for n in (16384, 65536, 262144)] + \
         [(1024, 1 << 20, d) for d in ("float32", "float16", "bfloat16")]


def cluster_sizes(n_cols: int, dtype: str) -> list[int]:
    sizes = []
    for c in (1, 2, 4, 8, 16):
        chunk_bytes = n_cols * DTYPE_ITEMSIZE[dtype] // c
        if (chunk_bytes <= configs.SHARED_LIMIT_BYTES or c == 16) and chunk_bytes >= 32 * 1024:
            sizes.append(c)
    return sizes


def measure() -> dict:
    import cupy

    started = time.time()
    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    print(f"copy {copy['GBps']:.0f} GB/s; clusters: {driver.cluster_status()}", flush=True)
    for n_rows, n_cols, dtype in SHAPES:
        inputs = [checks.random_rows(cupy, n_rows, n_cols, dtype, seed=s) for s in (1, 2)]
        out = cupy.empty_like(inputs[0])
        ideal = 2 * n_rows * n_cols * DTYPE_ITEMSIZE[dtype]
        fields = {"n_rows": n_rows, "n_cols": n_cols, "batch": 4000, "dtype": dtype}
        timed = [("fast", None, lambda x: osm.softmax(x, variant="fast", out=out)),
                 ("copy_same_size", None, lambda x: out.data.copy_from_device_async(x.data, ideal // 2)),
                 ("softmax_09_shared", 1, lambda x: api.run(osm.REGISTRY["softmax_09_shared"], x, out=out))]
        for name in ("softmax_10_cluster", "softmax_12_pipelined"):
            for c in cluster_sizes(n_cols, dtype):
                timed.append((name, c, lambda x, v=osm.REGISTRY[name], c=c: api.run(v, x, out=out, n_chunks=c)))
        line = []
        for name, c, fn in timed:
            try:
                row = bench.measure(name, fn, inputs, bytes_per_call=ideal, copy_GBps=copy["GBps"], **fields)
            except Exception as error:  # a cluster shape the GPU refuses: say so in the data
                row = {"kernel": name, **fields, "error": f"{type(error).__name__}: {error}"[:200]}
            if c is not None:
                row["n_chunks"] = c
            if name == "softmax_12_pipelined" and "ms" in row:  # the persistent grid: clusters resident at once
                plan = configs.chunks_10(n_rows, n_cols, dtype, configs.vector_width(dtype), c)
                row["clusters_resident"] = driver.max_active_clusters(
                    osm.REGISTRY[name].file, configs.entry(name, dtype, configs.vector_width(dtype)), plan.threads,
                    plan.cache_elems * DTYPE_ITEMSIZE[dtype], c)
                row["threads"] = plan.threads
            if name == "fast":
                row["variant"] = dispatch.choose(n_rows, n_cols, dtype).variant.name
            rows.append(row)
            label = name[8:11] if name.startswith("softmax_") else name
            line.append(f"{label}{'' if c is None else f'/C{c}'}="
                        + (f"{row['fraction_of_copy']:.3f}" if "ms" in row else "ERR"))
        print(f"{dtype:8s} {n_rows:5d}x{n_cols:<8d} " + " ".join(line), flush=True)
        inputs = out = None
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"measured in {time.time() - started:.0f} s", flush=True)
    meta = results.gpu_meta()
    meta["clusters"] = driver.cluster_status()
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    data = measure()
    print("wrote", results.write_results(SUITE, data["rows"], data["meta"]), file=sys.stderr)
