"""Benchmark helpers shared by every suite under benchmarks/ (GPU only).

All timing goes through `timer.time_gpu`; every row carries bytes moved, GB/s and
the fraction of the copy bandwidth measured in the same run.
"""
from __future__ import annotations

from onlinesoftmax.measure import timer


def make_rows(n_rows: int, n_cols: int, dtype="float32", seed: int = 0, copies: int = 1):
    """`copies` random (n_rows, n_cols) cupy inputs (normal, scale 4, random offset)."""
    import cupy

    rng = cupy.random.default_rng(seed)
    out = []
    for _ in range(copies):
        x = rng.standard_normal((n_rows, n_cols), dtype=cupy.float32) * 4 + float(rng.uniform(-20, 20))
        out.append(x.astype(dtype))
    return out


def measure(name: str, fn, inputs, *, bytes_per_call: int, copy_GBps: float, **fields) -> dict:
    """Time fn(x), alternating over `inputs`; return a result row."""
    timing = timer.time_gpu(fn, [(x,) for x in inputs])
    GBps = bytes_per_call / timing["ms"] / 1e6
    return {"kernel": name, **fields, **timing, "bytes": bytes_per_call, "GBps": GBps,
            "fraction_of_copy": GBps / copy_GBps}


def inputs(n_rows: int, n_cols: int, dtype="float32", seed: int = 0):
    """Two random input tensors to alternate between (the timer evicts L2 before each call)."""
    return make_rows(n_rows, n_cols, dtype, seed, copies=2)


def check_output(fn, x, out, poison) -> tuple[bool, str]:
    """Correctness before timing: poison `out`, run fn(x) once (it writes `out`), synchronize (surfaces CUDA
    errors), compare with the float64 reference at the dtype's tolerance (checks_fast.compare)."""
    import cupy

    from onlinesoftmax import checks_fast

    out[...] = poison
    fn(x)
    cupy.cuda.Device().synchronize()
    if checks_fast.unwritten(out):
        return False, "outputs left unwritten"
    return checks_fast.compare(out, x)
