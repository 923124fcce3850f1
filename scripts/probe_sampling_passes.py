"""Where the one-block sampler's time goes at large batches (GPU machine only).

    python3 scripts/probe_sampling_passes.py <commit>

The build options it times (SAMPLING_PACKED_MAX, SAMPLING_MAX_UNROLL, SAMPLING_GATHER_DRAWS,
SAMPLING_BIN_UNROLL, SAMPLING_BIN_CUTOFF) are those of the experimental sampling_01_rows.cu and
sampling_select.cuh in logs/h100/2026-12-07-sampling-experiment.patch: apply it first (git apply).

At 256 x 128256 and 256 x 262144 bf16 logits (normal, scale 4), sampling_01_rows is timed
(timer.time_gpu: median device time, L2 flushed before each call) with parameters that run more of
its passes each time: greedy (temperature 0: the maximum's pass alone), min_p = 1 (the maximum, then a
draw pass that draws almost nothing), min_p = 0.05, plain, top_p = 0.9, top_k = 50 with top_p = 0.9;
each built as registered and with the patch's build options: M found by row_max (16-bit
pairs folded by a packed max, 2 or 4 vectors per thread in flight), then with the draws gathered per
warp, with the histogram's pass loading two vectors per lane, or with bins below -12 lumped into the
last (the tokens of every build checked equal to the registered build's, on these logits and on rows
of NaN, +inf, -inf). Beside
them, a kernel that reads the same logits once (4 x 16-byte loads in flight per thread, 8 blocks of
512 per SM) and its share of the call's time.
"""
from __future__ import annotations

import dataclasses
import sys

import cupy as cp

from onlinesoftmax.bench.ncu_sampling import READ_SOURCE
from onlinesoftmax.kernels.sampling import rows
from onlinesoftmax.measure import bench, timer

SHAPES = ((256, 128256), (256, 262144))
CASES = {"greedy": {"temperature": 0.0}, "min_p=1": {"min_p": 1.0}, "min_p=0.05": {"min_p": 0.05}, "plain": {},
         "top_p=0.9": {"top_p": 0.9}, "top_k=50,top_p=0.9": {"top_k": 50, "top_p": 0.9}}
PACKED = ("SAMPLING_PACKED_MAX=1", "SAMPLING_MAX_UNROLL=2")
BUILDS = {"registered": (), "packed max x2": PACKED, "packed max x4": ("SAMPLING_PACKED_MAX=1", "SAMPLING_MAX_UNROLL=4"),
          "packed x2 + gathered draws": PACKED + ("SAMPLING_GATHER_DRAWS=1",),
          "packed x2 + bins x2": PACKED + ("SAMPLING_BIN_UNROLL=2",),
          "packed x2 + bins above -12": PACKED + ("SAMPLING_BIN_CUTOFF=1104",)}
READ = cp.RawKernel(READ_SOURCE, "read_logits")


def main(commit: str) -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    print(f"# sampling_01_rows by passes on {props['name'].decode()}, commit {commit}; device us (median)")
    edge = bench.make_rows(5, 1001, "float32")[0]
    edge[0, 17], edge[1, 500], edge[2, :], edge[4, 3] = float("nan"), float("inf"), float("-inf"), 3e38
    for dtype in ("float32", "bfloat16"):
        x = edge.astype(dtype)[:, 1:]   # rows that do not start on a 16-byte boundary
        got = {}
        for build, defines in BUILDS.items():
            tokens = cp.empty(x.shape[0], cp.int64)
            rows.plan(dataclasses.replace(rows.SAMPLING, defines=defines), x, tokens)(x, tokens, temperature=0.5, seed=3)
            got[build] = tokens.get().tolist()
        print(f"edge rows {dtype} (NaN, +inf, all -inf, normal, one overflowing at t = 0.5):",
              "same in every build" if len(set(map(tuple, got.values()))) == 1 else "DIFFER", got["registered"])
    for n_rows, n_cols in SHAPES:
        x = bench.make_rows(n_rows, n_cols, "bfloat16")[0]
        words = x.view(cp.int32).reshape(-1)
        out = cp.zeros(1, cp.int32)
        read = timer.time_gpu(lambda: READ((8 * sms,), (512,), (words, cp.int64(words.size // 4), out)), [()])["ms"]
        print(f"{n_rows} x {n_cols} bf16 ({x.nbytes / 1e6:.1f} MB): one read {1e3 * read:.1f} us "
              f"({x.nbytes / read / 1e6:.0f} GB/s)", flush=True)
        for case, params in CASES.items():
            line, want = [], None
            for build, defines in BUILDS.items():
                variant = dataclasses.replace(rows.SAMPLING, defines=defines)
                tokens = cp.empty(n_rows, cp.int64)
                run = rows.plan(variant, x, tokens)
                call = lambda: run(x, tokens, seed=11, offset=0, **params)   # noqa: E731
                call()
                got = tokens.get()
                want = got if want is None else want
                same = "" if (got == want).all() else " TOKENS DIFFER"
                ms = timer.time_gpu(call, [()])["ms"]
                line.append(f"{build} {1e3 * ms:.1f} ({read / ms:.2f} of a read){same}")
            print(f"  {case:<20} " + "; ".join(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "unknown")
