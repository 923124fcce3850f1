"""Suite `online-variants`: chapter 03's kernels by N, batch, mask kind and dtype.

softmax_02_online, softmax_03_online_masked with each kind of mask, and the fp16 kernels
softmax_04_online_fp16_vec4 / softmax_05_online_fp16_vec8, beside cupy's softmax and
torch.softmax (when importable) in fp32 and fp16, all with the one timer, in one process.
Chapter 03's widget reads this file when the book is built without a GPU.

GB/s counts the ideal traffic: x read once, y written once, plus an additive mask read
once (rows x N x 4 B, or N x 4 B when broadcast). Masks: causal; padding with valid
lengths uniform in [N/2, N]; additive 0 / -inf with 70% of the entries kept.

Run on a GPU machine (about 1-2 minutes on an H200):  python -m onlinesoftmax.bench online-variants
"""
from __future__ import annotations


import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import api
from onlinesoftmax.measure import bench
from onlinesoftmax.kernels.softmax import masked as softmax_masked
from onlinesoftmax.measure import results
from onlinesoftmax.measure import timer

from onlinesoftmax.bench.softmax_teaching import baselines   # cupy / torch softmax, one definition

SUITE = "online-variants"
COLS = (256, 1024, 4096, 16384, 65536, 262144, 1048576)
BATCHES = (10, 4000)
MAX_ELEMENTS = 2**28                      # 1 GiB per fp32 tensor
MASKS = softmax_masked.MASK_KINDS
FP16_KERNELS = ("softmax_04_online_fp16_vec4", "softmax_05_online_fp16_vec8")


def shapes():
    return [(n_rows, n_cols) for n_rows in BATCHES for n_cols in COLS if n_rows * n_cols <= MAX_ELEMENTS]


def measure() -> dict:
    import cupy

    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    libraries = baselines()
    for n_rows, n_cols in shapes():
        for dtype in ("float32", "float16"):
            itemsize = np.dtype(dtype).itemsize
            inputs = bench.inputs(n_rows, n_cols, dtype)
            out = cupy.empty_like(inputs[0])
            fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": dtype}
            ideal_bytes = 2 * n_rows * n_cols * itemsize
            measured = []
            if dtype == "float32":
                measured.append(bench.measure(
                    "softmax_02_online", lambda x: osm.softmax(x, variant="softmax_02_online", out=out), inputs,
                    bytes_per_call=ideal_bytes, copy_GBps=copy["GBps"], mask="none", **fields))
                for kind in MASKS:
                    kwargs, mask_bytes = softmax_masked.example_mask(kind, n_rows, n_cols, cupy)
                    # validated once, outside the timed call (validation reads valid_lengths back)
                    options = softmax_masked.prepare(inputs[0], kwargs.get("mask"), kwargs.get("valid_lengths"))
                    measured.append(bench.measure(
                        "softmax_03_online_masked",
                        lambda x, options=options: api.run(softmax_masked.MASKED, x, out=out, **options),
                        inputs, bytes_per_call=ideal_bytes + mask_bytes, copy_GBps=copy["GBps"],
                        mask=kind, **fields))
                    del kwargs, options
            else:
                for name in FP16_KERNELS:
                    measured.append(bench.measure(
                        name, lambda x, name=name: osm.softmax(x, variant=name, out=out), inputs,
                        bytes_per_call=ideal_bytes, copy_GBps=copy["GBps"], mask="none", **fields))
            for name, fn in libraries.items():
                measured.append(bench.measure(name, fn, inputs, bytes_per_call=ideal_bytes,
                                              copy_GBps=copy["GBps"], mask="none", **fields))
            rows += measured
            print(f"{n_rows:>5} x {n_cols:>8} {dtype}: "
                  + " ".join(f"{r['kernel']}[{r['mask']}]={r['GBps']:.0f}" for r in measured) + " GB/s",
                  flush=True)
            del inputs, out
            cupy.get_default_memory_pool().free_all_blocks()
    return {"meta": results.gpu_meta(), "rows": rows}


if __name__ == "__main__":
    bench.record(SUITE, measure())
