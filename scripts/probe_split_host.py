"""Where the host time of one softmax_topk call on the split kernel goes (GPU machine only).

    python3 scripts/probe_split_host.py <commit>

Each piece of a call (the public call through its fast path, the two output allocations of a call
without the LSE, the runner, the chunks launch alone, the merge launch alone as prepared and as an
ordinary launch, both launches; first a one-kernel call as the same run's baseline) is made back to back
(timer.host_us_per_call: 300 calls a loop, the best of 5 loops) and printed in microseconds per
call with the wait after that loop, beside the device time of the whole call (timer.time_gpu). A
piece whose loop waits on the GPU shows as close to the device time; the host budget is 25 us for
a call of two kernels.
"""
from __future__ import annotations

import sys

import cupy as cp

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax import topk as tk
from onlinesoftmax.kernels.topk import split as sp
from onlinesoftmax.measure import timer

SHAPES = ((1, 32000, 20, "float32"), (8, 128256, 1, "float32"), (1, 151936, 50, "bfloat16"))


def main(commit: str) -> None:
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"# host us per piece of a softmax_topk_06_split call on {gpu}, commit {commit}: back to back, "
          "best of 5 loops of 300 (wait after that loop beside)")
    small = checks.random_rows(cp, 64, 512, "bfloat16", seed=1)      # a one-kernel call, the same run's baseline
    host = timer.host_us_per_call(lambda: osm.softmax_topk(small, 8), calls=300, repeats=5)
    print(f"## baseline: 64 x 512, k = 8, bfloat16 ({tk.choose(64, 512, 8, 'bfloat16').name}), the public call "
          f"{host['us']:6.1f} us per call (wait after the loop {host['drain_us']:8.1f} us)", flush=True)
    for n_rows, n_cols, k, dtype in SHAPES:
        x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=1)
        probs, columns, lse = tk._outputs(n_rows, k, x.dtype)
        run = sp.plan_split(sp.SPLIT, x, probs, k, False, columns, lse)
        chunks, merge = run.launches     # the runner's two prepared launches (the records' address fixed in both)
        device_us = timer.time_gpu(lambda: osm.softmax_topk(x, k), [()], warmup=5, reps=30)["ms"] * 1e3
        print(f"## {n_rows} x {n_cols}, k = {k}, {dtype}: {run.shape}; device {device_us:.1f} us per call")
        # the same merge launch prepared as an ordinary launch (not programmatic), for the comparison
        plain_merge = sp.driver.prepare_launch(
            sp.get_kernel(sp.SPLIT.path, f"softmax_topk_06_split_merge_{sp.DTYPE_TAGS[dtype]}", sp.build_defines(dtype)),
            (n_rows,), (run.shape.merge_threads,), run.shape.merge_shared_bytes, 1,
            (sp.POINTER, sp.POINTER, sp.POINTER, sp.POINTER, sp.INT, sp.INT, sp.INT),
            fixed={0: run.workspace[0].data.ptr, 4: run.shape.n_chunks, 5: k, 6: 0})
        pieces = {
            "the public call (fast path)": lambda: osm.softmax_topk(x, k),
            "the outputs (2 allocations)": lambda: tk._outputs(n_rows, k, x.dtype, False),
            "the runner (2 launches)": lambda: run(x, probs, columns=columns, lse=lse),
            "the chunks launch": lambda: chunks(x.data.ptr),
            "the merge launch (programmatic)": lambda: merge(probs.data.ptr, columns.data.ptr, lse.data.ptr),
            "the merge launch (ordinary)": lambda: plain_merge(probs.data.ptr, columns.data.ptr, lse.data.ptr),
            "the chunks and merge launches": lambda: (chunks(x.data.ptr),
                                                      merge(probs.data.ptr, columns.data.ptr, lse.data.ptr)),
        }
        for name, fn in pieces.items():
            host = timer.host_us_per_call(fn, calls=300, repeats=5)
            print(f"{name:34s} {host['us']:6.1f} us per call (wait after the loop {host['drain_us']:8.1f} us)",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "unknown")
