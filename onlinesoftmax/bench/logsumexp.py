"""Suite `logsumexp`: logsumexp_01_online, logsumexp_03_split (each row over many blocks), log_softmax_01_online,
log_softmax_02_registers (rows up to 32K), log_softmax_03_split, log_softmax_04_shared and log_softmax_05_cluster
(rows cached in shared memory, a block's or a cluster's) in fp32, fp16 and bf16 against the libraries.

Peers, same process, same inputs, same timer (`onlinesoftmax.measure.timer.time_gpu`):
torch.logsumexp / torch.log_softmax (when torch is importable) and cupy's
cupyx.scipy.special.logsumexp / log_softmax. The device-to-device copy ceiling is measured
in the same run.

Bytes, per row of results (`bytes_counted` says which):
  logsumexp    the ideal traffic: 1 read per element + 4 B written per row;
  log_softmax  the ideal traffic: 1 read + 1 write per element.
GB/s = bytes / time. `fraction_of_copy` divides by the copy's GB/s, which counts read + write;
a kernel that only reads is compared with the same number (reading alone is not slower than
copying on this GPU, so the copy rate is a fair ceiling for both). `model_bytes` is what our
kernel's access model says it moves (log_softmax_01 reads each element twice).

Every kernel of ours is checked against the float64 reference on its timing input before it
is timed; a wrong answer stops the run.

Run on a GPU machine:  python -m onlinesoftmax.bench logsumexp          (about 1-2 minutes)
                       python -m onlinesoftmax.bench logsumexp --quick  (3 shapes, printed, not written)
"""
from __future__ import annotations

import sys

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.measure import bench
from onlinesoftmax.measure import results
from onlinesoftmax.measure import timer

SUITE = "logsumexp"
SHAPES = [(4000, n) for n in (256, 1024, 4096, 16384, 65536, 262144)] + \
         [(10, n) for n in (4096, 65536, 1048576)] + [(1, 4194304), (64, 262144), (2048, 50257)]
QUICK_SHAPES = [(4000, 1024), (4000, 16384), (4000, 65536)]
CHECK_ROWS = 64  # rows compared with the float64 reference before timing
LSE_BYTES = "ideal: 1 read per element + 4 B written per row"
LOG_SOFTMAX_BYTES = "ideal: 1 read + 1 write per element"


def peers(op: str, dtype: str) -> dict:
    """name -> (callable on one input, converter from a cupy input to the callable's input)."""
    import cupyx.scipy.special as special

    found = {}
    if op == "logsumexp":
        if dtype == "float32":
            found["cupyx.scipy.special.logsumexp"] = (lambda x: special.logsumexp(x, axis=1), lambda x: x)
    elif dtype != "bfloat16":
        found["cupyx.scipy.special.log_softmax"] = (lambda x: special.log_softmax(x, axis=1), lambda x: x)
    try:
        import torch

        if torch.cuda.is_available():
            to_torch = bench.torch_view  # zero copy
            if op == "logsumexp":
                found["torch.logsumexp"] = (lambda t: torch.logsumexp(t, dim=1), to_torch)
            elif op == "log_softmax":
                found["torch.log_softmax"] = (lambda t: torch.log_softmax(t, dim=1), to_torch)
    except ImportError:
        pass
    return found


def check_ours(op: str, y, x) -> None:
    """Stop the run if our kernel's output on the timing input is wrong (first CHECK_ROWS rows)."""
    y, x = y[:CHECK_ROWS], x[:CHECK_ROWS]
    if op == "logsumexp":
        ref = reference.logsumexp(x)
        err = checks.max_abs_error(y, ref)
        base = checks.max_abs_error(reference.logsumexp_same_dtype(x), ref)
        tol = checks.tolerance(base, ref, np.float32) + 4 * float(np.finfo(np.float32).eps)
        passed, message = err <= tol, f"error {err:.3e}, tolerance {tol:.3e}"
    else:
        passed, message = checks.compare(y, reference.log_softmax(x), reference.log_softmax_same_dtype(x), x.dtype)
    if not passed:
        raise AssertionError(f"{op} {x.dtype} N={x.shape[1]}: wrong answer, not timed: {message}")


def measure_shape(n_rows: int, n_cols: int, dtype: str, copy_GBps: float) -> list[dict]:
    import cupy

    itemsize = np.dtype(dtype).itemsize
    inputs = bench.inputs(n_rows, n_cols, dtype)
    fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": dtype}
    rows = []
    for op in ("logsumexp", "log_softmax"):
        if op == "logsumexp":
            out = cupy.empty(n_rows, dtype=cupy.float32)
            ideal_bytes, counted = n_rows * n_cols * itemsize + 4 * n_rows, LSE_BYTES
        else:
            out = cupy.empty((n_rows, n_cols), dtype=dtype)
            ideal_bytes, counted = 2 * n_rows * n_cols * itemsize, LOG_SOFTMAX_BYTES
        function = osm.logsumexp if op == "logsumexp" else osm.log_softmax
        ours_calls = [   # each kernel of the op that takes the rows, by name (auto's pick is one of them)
            (v, lambda x, name=v.name, function=function: function(x, out=out, variant=name))
            for v in osm.variants(op) if n_cols <= v.max_cols]
        for variant, ours in ours_calls:
            check_ours(op, ours(inputs[0]), inputs[0])
            row = bench.measure(variant.name, ours, inputs, bytes_per_call=ideal_bytes, copy_GBps=copy_GBps,
                                op=op, bytes_counted=counted, **fields)
            row["model_bytes"] = variant.bytes_moved(n_rows, n_cols, itemsize) + (4 * n_rows if op == "logsumexp" else 0)
            rows.append(row)
        for name, (fn, convert) in peers(op, dtype).items():
            try:  # a library that fails on this shape or dtype is reported, not fatal
                rows.append(bench.measure(name, fn, [convert(x) for x in inputs], bytes_per_call=ideal_bytes,
                                          copy_GBps=copy_GBps, op=op, bytes_counted=counted, **fields))
            except Exception as error:  # noqa: BLE001
                print(f"{name} {n_rows}x{n_cols} {dtype}: skipped ({type(error).__name__}: {error})", flush=True)
        del out
    del inputs
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def measure(shapes=SHAPES) -> dict:
    """Time logsumexp and log_softmax at every shape in fp32, fp16 and bf16; {"meta", "rows"}."""
    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", "op": "copy", "bytes_counted": "read + write", **copy}]
    for n_rows, n_cols in shapes:
        for dtype in ("float32", "float16", "bfloat16"):
            new = measure_shape(n_rows, n_cols, dtype, copy["GBps"])
            rows += new
            print(f"{n_rows}x{n_cols} {dtype}: " + " ".join(f"{r['op']}:{r['kernel']}={r['GBps']:.0f}" for r in new),
                  "GB/s", flush=True)
    return {"meta": results.gpu_meta(), "rows": rows}


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:  # a look, not a record: nothing is written
        measure(QUICK_SHAPES)
    else:
        data = measure(SHAPES)
        path = results.write_results(SUITE, data["rows"], data["meta"])
        print("wrote", path, file=sys.stderr)
