"""Suite `paper-figures`: Milakov & Gimelshein's (2018) softmax figures, re-run on today's GPU.

The paper timed naive, safe and online softmax on a V100 (fp32) against the vector size N,
at batch 4000 and at batch 10, and reported online/safe speed ratios (its claim: about 1.3x
at large batch, about 1.15x at small batch). Here the three teaching kernels run on
N = 63 * 2^k, with cupy's softmax (and torch.softmax when importable) in the same process
on the same tensors with the same timer; the device-to-device copy gives the ceiling.

Sizes: batch 4000 up to N = 258048 (4000 * N * 4 B ~ 4.1 GB per tensor); batch 10 up to
N = 8257536 (~10M). Calls moving over 1 GB get 10 timed repetitions instead of 30.
GB/s counts the ideal traffic (1 read + 1 write per element) for every kernel, so all
share one scale; `model_bytes` is what each kernel's access model says it moves.

Run on a GPU machine (about 1-2 minutes on an H200):  python -m onlinesoftmax.bench paper-figures
"""
from __future__ import annotations


import onlinesoftmax as osm
from onlinesoftmax.measure import bench
from onlinesoftmax.measure import results
from onlinesoftmax.measure import timer

from onlinesoftmax.bench.softmax_teaching import baselines   # cupy / torch softmax, one definition

SUITE = "paper-figures"
KERNELS = ("softmax_00_naive", "softmax_01_safe", "softmax_02_online")
SHAPES = [(4000, 63 * 2**k) for k in range(13)] + [(10, 63 * 2**k) for k in range(18)]
BIG_CALL_BYTES = 1e9
PAPER_CLAIMS = {4000: 1.3, 10: 1.15}  # online/safe speed ratio on a V100 (the paper's claim, not measured here)


def measure_row(name, fn, inputs, *, bytes_per_call, copy_GBps, **fields) -> dict:
    """bench.measure with fewer repetitions for calls that move over 1 GB."""
    reps = 10 if bytes_per_call > BIG_CALL_BYTES else 30
    timing = timer.time_gpu(fn, [(x,) for x in inputs], warmup=3 if reps == 10 else 5, reps=reps)
    GBps = bytes_per_call / timing["ms"] / 1e6
    n_elements = fields["n_rows"] * fields["n_cols"]
    return {"kernel": name, **fields, **timing, "bytes": bytes_per_call, "GBps": GBps,
            "fraction_of_copy": GBps / copy_GBps, "elements_per_s": n_elements / (timing["ms"] / 1e3)}


def measure(shapes=SHAPES) -> dict:
    import cupy

    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    libraries = baselines()
    for n_rows, n_cols in shapes:
        inputs = bench.inputs(n_rows, n_cols)
        ideal_bytes = 2 * n_rows * n_cols * 4
        fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": "float32"}
        out = cupy.empty_like(inputs[0])
        measured = []
        for name in KERNELS:
            row = measure_row(name, lambda x, name=name: osm.softmax(x, variant=name, out=out), inputs,
                              bytes_per_call=ideal_bytes, copy_GBps=copy["GBps"], **fields)
            row["model_bytes"] = osm.REGISTRY[name].bytes_moved(n_rows, n_cols, 4)
            measured.append(row)
        for name, fn in libraries.items():
            measured.append(measure_row(name, fn, inputs, bytes_per_call=ideal_bytes,
                                        copy_GBps=copy["GBps"], **fields))
        rows += measured
        print(f"{n_rows:>5} x {n_cols:>8}: " + " ".join(f"{r['kernel']}={r['GBps']:.0f}" for r in measured)
              + " GB/s", flush=True)
        del inputs, out
        cupy.get_default_memory_pool().free_all_blocks()
    return {"meta": results.gpu_meta(), "rows": rows}


if __name__ == "__main__":
    bench.record(SUITE, measure())
