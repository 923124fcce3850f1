"""Suite `ncu-dram`: DRAM bytes each kernel really moves, by Nsight Compute, vs the access model.

The access model counts every load and store as DRAM traffic (safe: 3 reads + 1 write per
element, online: 2 + 1). Once the rows the GPU works on at a time fit in L2, re-reads hit
L2 and DRAM sees little more than one read + one write. This script measures it.

It re-runs itself under ncu (`--child`), which profiles each launch of the book's kernels
once with caches flushed before it (--cache-control all) and clocks left alone
(--clock-control none), collecting dram__bytes_read.sum and dram__bytes_write.sum.

Run on a GPU machine with ncu on PATH (about a minute):  python -m onlinesoftmax.bench ncu-dram
"""
from __future__ import annotations

from onlinesoftmax.bench import ncu

SUITE = "ncu-dram"
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
N_ROWS = 4000
COLS = (1024, 8192, 16384, 32768, 65536)
# (kernel, mask, dtype) in launch order; one launch per (config, N).
CONFIGS = (("softmax_00_naive", "none", "float32"), ("softmax_01_safe", "none", "float32"),
           ("softmax_02_online", "none", "float32"), ("softmax_03_online_masked", "causal", "float32"),
           ("softmax_04_online_fp16_vec4", "none", "float16"),
           ("softmax_05_online_fp16_vec8", "none", "float16"))
UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
         "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}


def plan():
    return [(name, mask, dtype, N_ROWS, n_cols) for n_cols in COLS for name, mask, dtype in CONFIGS]


def child() -> None:
    """Launch each planned kernel exactly once (ncu profiles these launches)."""
    import cupy

    import onlinesoftmax as osm
    from onlinesoftmax.measure import bench

    for name, mask, dtype, n_rows, n_cols in plan():
        x = bench.make_rows(n_rows, n_cols, dtype)[0]
        out = cupy.empty_like(x)
        kwargs = {"causal": True, "causal_align": "top_left"} if mask == "causal" else {}   # row i reads j <= i
        osm.REGISTRY[name].kernel()  # compile before the profiled launch
        osm.softmax(x, variant=name, out=out, **kwargs)
        cupy.cuda.Device().synchronize()
        del x, out
        cupy.get_default_memory_pool().free_all_blocks()


def in_bytes(launch: dict) -> dict:
    """A launch of ncu.parse_ncu_csv with its metrics in bytes (a value without a unit counted as bytes)."""
    return {name: value if name == "kernel_name" else value[0] * UNITS.get(value[1].lower() or "byte", float("nan"))
            for name, value in launch.items()}


def measure() -> dict:
    import onlinesoftmax as osm
    from onlinesoftmax.measure import results

    launches, cmd = ncu.profile("onlinesoftmax.bench.ncu_dram", METRICS, "regex:^softmax_", ("--cache-control", "all"))
    launches = [in_bytes(launch) for launch in launches]
    planned = plan()
    ncu.check_order(launches, [name for name, _, _, _, _ in planned])
    rows = []
    for (name, mask, dtype, n_rows, n_cols), launch in zip(planned, launches):
        itemsize = 2 if dtype == "float16" else 4
        rows.append({"kernel": name, "mask": mask, "dtype": dtype, "n_rows": n_rows, "n_cols": n_cols,
                     "dram_read_bytes": launch[METRICS[0]], "dram_write_bytes": launch[METRICS[1]],
                     "model_bytes": osm.REGISTRY[name].bytes_moved(n_rows, n_cols, itemsize),
                     "ideal_bytes": 2 * n_rows * n_cols * itemsize})
        print(f"{name:<30} {mask:<7} N={n_cols:>6}: read {rows[-1]['dram_read_bytes'] / 1e6:9.1f} MB, "
              f"write {rows[-1]['dram_write_bytes'] / 1e6:9.1f} MB, model {rows[-1]['model_bytes'] / 1e6:9.1f} MB",
              flush=True)
    method = ("Nsight Compute " + " ".join(cmd[1:12]) + ": DRAM bytes of one launch per kernel and size, "
              "caches flushed before each profiled launch")
    return {"meta": {**results.gpu_meta(), "method": method}, "rows": rows}


if __name__ == "__main__":
    ncu.main(SUITE, measure, child)
