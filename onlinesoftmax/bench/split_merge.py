"""Suite `split-merge`: softmax_06_split_merge against softmax_02_online when rows are few and long.

softmax_02_online gives each row one block, so n_rows blocks is all the parallelism it has;
softmax_06_split_merge splits each row over several blocks and merges their partial (m, l).
torch.softmax (when importable) runs on the same inputs with the same timer, and the copy
ceiling is measured in the same run. GB/s counts the ideal traffic (1 read + 1 write per
element) for every kernel; `model_bytes` is what each kernel's access model says it moves.
Both kernels are checked against the float64 reference on their timing input first.

Run on a GPU machine:  python -m onlinesoftmax.bench split-merge   (under a minute)
"""
from __future__ import annotations


import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.measure import bench
from onlinesoftmax.measure import results
from onlinesoftmax.measure import timer
from onlinesoftmax.kernels.softmax import split_merge as km

SUITE = "split-merge"
KERNELS = ("softmax_02_online", "softmax_06_split_merge")
SHAPES = [(n_rows, 1 << 20) for n_rows in (1, 4, 16, 64, 256)] + [(10, 1 << 16), (10, 1 << 22), (4000, 1 << 14)]
CHECK_ROWS = 16


def measure(shapes=SHAPES) -> dict:
    import cupy

    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", **copy}]
    torch_softmax = None
    try:
        import torch

        if torch.cuda.is_available():
            torch_softmax = lambda t: torch.softmax(t, dim=1)  # noqa: E731
    except ImportError:
        pass
    for n_rows, n_cols in shapes:
        inputs = bench.inputs(n_rows, n_cols)
        ideal_bytes = 2 * n_rows * n_cols * 4
        blocks_per_row, chunk_cols = km.split_geometry(n_rows, n_cols)
        fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": "float32"}
        out = cupy.empty_like(inputs[0])
        for name in KERNELS:
            y = osm.softmax(inputs[0], variant=name, out=out)
            x_check = inputs[0][:CHECK_ROWS]
            passed, message = checks.compare(y[:CHECK_ROWS], reference.softmax(x_check),
                                             reference.softmax_same_dtype(x_check), np.float32)
            # softmax_02_online is the comparison point, not the subject: a kernel whose threads
            # fold long chains of terms in sequence can exceed twice the pairwise float32
            # baseline's error. That is recorded in the row (chapter 04 reads it), not hidden;
            # a NaN-pattern mismatch or a grossly wrong answer (error > 1e-4) still stops the run.
            error = checks.max_abs_error(y[:CHECK_ROWS], reference.softmax(x_check))
            if not passed and (name != "softmax_02_online" or not error <= 1e-4):
                raise AssertionError(f"{name} {n_rows}x{n_cols}: wrong answer, not timed: {message}")
            row = bench.measure(name, lambda x: osm.softmax(x, variant=name, out=out), inputs,
                                bytes_per_call=ideal_bytes, copy_GBps=copy["GBps"], **fields)
            row.update(check_passed=passed, check=message)
            row["model_bytes"] = osm.REGISTRY[name].bytes_moved(n_rows, n_cols, 4)
            if name == "softmax_06_split_merge":
                row.update(blocks_per_row=blocks_per_row, chunk_cols=chunk_cols)
            rows.append(row)
        if torch_softmax is not None:
            rows.append(bench.measure("torch.softmax", torch_softmax, [torch.as_tensor(x, device="cuda") for x in inputs],
                                      bytes_per_call=ideal_bytes, copy_GBps=copy["GBps"], **fields))
        print(f"{n_rows}x{n_cols} ({blocks_per_row} blocks per row): "
              + " ".join(f"{r['kernel']}={r['GBps']:.0f}" for r in rows[-3:] if (r.get("n_rows"), r.get("n_cols")) == (n_rows, n_cols)),
              "GB/s", flush=True)
        del inputs, out
        cupy.get_default_memory_pool().free_all_blocks()
    return {"meta": results.gpu_meta(), "rows": rows}


if __name__ == "__main__":
    bench.record(SUITE, measure())
