"""Suite `softmax-teaching`: the three teaching kernels vs N at batch 4000 and 10.

cupy's own softmax (and torch.softmax when importable) run in the same process on the
same tensors with the same timer; the device-to-device copy gives the ceiling.
GB/s counts the ideal traffic (1 read + 1 write per element) for every kernel, so all
sit on one scale; `model_bytes` is what each kernel's access model says it moves.

Run on a GPU machine:  python -m onlinesoftmax.bench softmax-teaching
"""
from __future__ import annotations


import onlinesoftmax as osm
from onlinesoftmax.measure import bench
from onlinesoftmax.measure import results
from onlinesoftmax.measure import timer

KERNELS = ("softmax_00_naive", "softmax_01_safe", "softmax_02_online")
SHAPES = [(4000, n) for n in (256, 1024, 4096, 16384, 65536, 262144)] + \
         [(10, n) for n in (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)]


def baselines():
    """Library softmaxes a reader would otherwise use: name -> callable on a 2-D cupy array."""
    import cupyx.scipy.special

    found = {"cupy_softmax": lambda x: cupyx.scipy.special.softmax(x, axis=1)}
    try:
        import torch

        if torch.cuda.is_available():
            found["torch_softmax"] = lambda x: torch.softmax(torch.as_tensor(x, device="cuda"), dim=1)
    except ImportError:
        pass
    return found


def measure(shapes=SHAPES) -> dict:
    import cupy

    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    libraries = baselines()
    for n_rows, n_cols in shapes:
        inputs = bench.inputs(n_rows, n_cols)
        ideal_bytes = 2 * n_rows * n_cols * 4
        fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": "float32"}
        for name in KERNELS:
            variant = osm.REGISTRY[name]
            out = cupy.empty_like(inputs[0])
            row = bench.measure(name, lambda x: osm.softmax(x, variant=name, out=out), inputs,
                                bytes_per_call=ideal_bytes, copy_GBps=copy["GBps"], **fields)
            row["model_bytes"] = variant.bytes_moved(n_rows, n_cols, 4)
            rows.append(row)
        for name, fn in libraries.items():
            rows.append(bench.measure(name, fn, inputs, bytes_per_call=ideal_bytes,
                                      copy_GBps=copy["GBps"], **fields))
        print(" ".join(f"{r['kernel']}={r['GBps']:.0f}" for r in rows[-len(KERNELS) - len(libraries):]),
              f"GB/s at {n_rows}x{n_cols}", flush=True)
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    return {"meta": results.gpu_meta(), "rows": rows}


if __name__ == "__main__":
    bench.record("softmax-teaching", measure())
