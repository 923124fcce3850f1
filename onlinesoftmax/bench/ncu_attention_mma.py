"""Suite `ncu-attention-mma`: what Nsight Compute sees in the tensor-core attention ladder, next to
the counts chapter 09 predicts them from.

One launch of each of attention_03_mma, attention_04_ldmatrix, attention_05_pipelined and
attention_07_fragment_reuse at bf16, batch 4, heads 32, n = n_q = n_k = 4096, causal and not, d = 128
and 64 (plus, for the first three, the matching count of the model: shared-memory wavefronts of the
launch's loads and stores, from the wavefronts per warp and key tile of
onlinesoftmax.kernels.attention.mma_fragments and the tiles of attention_mma.tile_counts; attention_07's rows
carry the metrics only).
Metrics: shared-memory wavefronts (all, loads, stores) and bank conflicts, the tensor pipe's
active cycles as a share of its peak, achieved occupancy, the issue slots used (share of peak) and
the warp instructions executed, and the duration. A metric this ncu does
not know (ncu --query-metrics) is left out and named in meta.metrics_unavailable.

The script re-runs itself under ncu (`--child`), which profiles each launch once with clocks left
alone (--clock-control none).

Run on a GPU machine with ncu on PATH (under a minute):  python -m onlinesoftmax.bench ncu-attention-mma
"""
from __future__ import annotations

import math

from onlinesoftmax.bench import ncu

SUITE = "ncu-attention-mma"
METRICS = ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__inst_issued.avg.pct_of_peak_sustained_active",
           "smsp__inst_executed.sum", "gpu__time_duration.sum")
BATCH, HEADS, N = 4, 32, 4096


def plan():
    from onlinesoftmax.kernels.attention import mma as am

    return [(v.name, d, causal) for d in (128, 64) for causal in (False, True) for v in am.VARIANTS]


def child() -> None:
    """Launch each planned kernel exactly once (ncu profiles these launches)."""
    import cupy

    from onlinesoftmax.registry import REGISTRY
    from onlinesoftmax.runtime.plan import get_runner

    for name, d, causal in plan():
        rng = cupy.random.default_rng(d)
        q, k, v = (rng.standard_normal((BATCH, HEADS, N, d), dtype=cupy.float32).astype("bfloat16") for _ in range(3))
        out = cupy.empty_like(q)
        options = {"k": k, "v": v, "lse": None, "causal": causal, "scale": 1 / math.sqrt(d)}
        runner = get_runner(REGISTRY[name], q, out, options)   # compiled before the profiled launch
        cupy.cuda.Device().synchronize()
        runner(q, out, **options)
        cupy.cuda.Device().synchronize()
        del q, k, v, out
        cupy.get_default_memory_pool().free_all_blocks()


def measure() -> dict:
    from onlinesoftmax.kernels.attention import mma_fragments as mf
    from onlinesoftmax.kernels.attention import mma as am
    from onlinesoftmax.measure import results

    metrics, missing = ncu.usable_metrics(METRICS)
    launches, cmd = ncu.profile("onlinesoftmax.bench.ncu_attention_mma", metrics, "regex:^attention_0[3457]_")
    planned = plan()
    ncu.check_order(launches, [name for name, _, _ in planned])
    rows = []
    for (name, d, causal), launch in zip(planned, launches):
        row = {"kernel": name, "dtype": "bfloat16", "batch": BATCH, "heads": HEADS, "n_q": N, "n_k": N, "d": d,
               "causal": causal}
        if name != am.REUSE:   # the wavefront model covers the 16-row steps; attention_07 is profiled only
            counts = mf.tile_wavefronts({am.MMA.name: 3}.get(name, 4), d)
            tiles = am.tile_counts(BATCH, HEADS, N, N, causal)
            row |= {**tiles,
                    "model_load_wavefronts": tiles["warp_tiles"] * (counts["K"]["wavefronts"] + counts["V"]["wavefronts"]),
                    "model_store_wavefronts": tiles["block_tiles"] * am.THREADS // 32 * counts["stores"]["wavefronts"]}
        row |= ncu.metric_values(launch, metrics)
        rows.append(row)
        print(f"{name:<24} d {d:>3} {'causal' if causal else 'full  '}: "
              + ncu.summary(row, metrics), flush=True)
    method = ("Nsight Compute " + " ".join(cmd[1:9]) + ": one launch per kernel and shape, clocks left alone; "
              "model counts from onlinesoftmax.kernels.attention.mma_fragments.tile_wavefronts")
    return {"meta": {**results.gpu_meta(), "method": method, "metrics_unavailable": missing}, "rows": rows}


if __name__ == "__main__":
    ncu.main(SUITE, measure, child)
