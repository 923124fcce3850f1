"""Suite `first-kernel`: the first page's two kernels timed, for the page to quote what a GPU made of them.

- `vector_add` (exercises/primer/vector_add.cu) on 2^26 floats: it reads two arrays and writes one,
  so its GB/s over the device-to-device copy measured in the same run says how close a kernel of
  three lines comes to the memory's speed.
- `shared_reads` (exercises/primer/shared_reads.cu): a warp reading a row of a 32 x 32 shared tile
  (stride 1), a column (stride 32: one bank) and a column of the tile padded to 33 words a row
  (stride 33), each lane `REPS` times, on a grid filling every SM; time per stride and its ratio to
  the row's.

Every output is checked (the sum, and reps x the word's index) before anything is timed.

Run on a GPU machine:  python -m onlinesoftmax.bench first-kernel
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book import first_kernel
from onlinesoftmax.measure import bench, results, timer

N = 2**26                   # floats per vector: 256 MiB each, far past the L2
STRIDES = (1, 32, 33)       # a row, a column, a padded column
REPS = 4096                 # reads per lane
BLOCK = 256
MODULES = ["exercises/primer/vector_add.cu", "exercises/primer/shared_reads.cu", "onlinesoftmax/bench/first_kernel.py"]


def expected_sums(stride: int, reps: int = REPS, threads: int = BLOCK) -> np.ndarray:
    """What shared_reads writes for one block: each lane reps x the index of the word it reads."""
    words = (np.arange(threads) % 32 * stride) % (32 * 33)
    return (words * reps).astype(np.float32)


def measure() -> dict:
    import cupy

    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    add = cupy.RawKernel(first_kernel.source("vector_add"), "vector_add")
    a, b = (cupy.random.default_rng(seed).standard_normal(N, dtype=cupy.float32) for seed in (1, 2))
    c = cupy.full(N, cupy.nan, cupy.float32)
    grid = (-(-N // BLOCK),)
    add(grid, (BLOCK,), (a, b, c, np.int32(N)))
    assert bool(cupy.array_equal(c, a + b)), "vector_add: wrong sums"
    timing = timer.time_gpu(lambda: add(grid, (BLOCK,), (a, b, c, np.int32(N))), [()])
    gbps = 3 * 4 * N / timing["ms"] / 1e6
    rows.append({"kernel": "vector_add", "n": N, "bytes": 3 * 4 * N, **timing, "GBps": gbps,
                 "fraction_of_copy": gbps / copy["GBps"], "modules": MODULES})
    del a, b, c
    reads = cupy.RawKernel(first_kernel.source("shared_reads"), "shared_reads")
    blocks = 8 * cupy.cuda.Device().attributes["MultiProcessorCount"]
    out = cupy.empty(blocks * BLOCK, cupy.float32)
    for stride in STRIDES:
        out.fill(cupy.nan)
        reads((blocks,), (BLOCK,), (out, np.int32(stride), np.int32(REPS)))
        want = np.tile(expected_sums(stride), blocks)
        assert np.array_equal(out.get(), want), f"shared_reads stride {stride}: wrong sums"
        timing = timer.time_gpu(lambda: reads((blocks,), (BLOCK,), (out, np.int32(stride), np.int32(REPS))), [()])
        rows.append({"kernel": "shared_reads", "stride": stride, "blocks": blocks, "threads": BLOCK, **timing,
                     "reads_per_lane": REPS, "modules": MODULES})   # (timing's "reps": the timer's launches)
    row_ms = next(r["ms"] for r in rows if r.get("stride") == 1)
    for r in rows:
        if "stride" in r:
            r["vs_row"] = r["ms"] / row_ms
    print("vector_add", f"{gbps:.0f} GB/s = {gbps / copy['GBps']:.2f} of the copy;",
          "shared_reads", ", ".join(f"stride {r['stride']} {r['ms']:.3f} ms ({r['vs_row']:.1f}x)"
                                    for r in rows if "stride" in r), flush=True)
    return {"meta": results.gpu_meta(), "rows": rows}


def recorded_or_live() -> tuple[dict, bool]:
    """(the suite, measured now?): on a GPU measured now (a few seconds), else the newest recording of a
    GPU that ran it (the H200's first, then the H100's)."""
    from onlinesoftmax.runtime.device import has_gpu

    if has_gpu():
        return measure(), True
    for gpu in ("h200", "h100-80gb-hbm3"):
        if results.recorded_files("first-kernel", gpu):
            return results.load_recorded("first-kernel", gpu), False
    raise FileNotFoundError("no recording of the first-kernel suite, and no GPU here to measure it")


if __name__ == "__main__":
    bench.record("first-kernel", measure())
