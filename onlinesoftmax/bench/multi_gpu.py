"""Suite multi-gpu: the monoid across two GPUs of one host (data/h200x2/<date>-multi-gpu.json).

    torchrun --standalone --nproc-per-node 2 onlinesoftmax/bench/multi_gpu.py           # the suite
    torchrun --standalone --nproc-per-node 2 onlinesoftmax/bench/multi_gpu.py --quick   # smaller shapes (multi-gpu-quick)

Rows (each checked against the float64 reference before it is timed):
- vocab-parallel cross-entropy, 8192 tokens x 262144 vocabulary, bf16 logits: one GPU running the
  whole rows (logsumexp_02_state with no collective), torch.nn.functional.cross_entropy on one GPU,
  and two GPUs with half the vocabulary each, schedules "megatron" and "allgather"; the bytes each
  rank exchanges per token, against an all-gather of the logits themselves (timed too);
- decode, batch 8, 32 heads, d 128, a KV cache of 524288 keys (8 and 32 kv heads): one GPU with
  the whole cache (attention_02_decode_split) and two GPUs with half each, both schedules.

Device time is the one timer's (timer.METHOD), with one more step: before every timed call a
4-byte all-reduce lines the two ranks' timelines up (time_gpu's `sync`), each rank times the step
with CUDA events, and the step's time is the slower rank's, call by call (median over calls).
Communication time comes from CUDA events around each collective in the same calls. End-to-end
time is rank 0's synchronous call through the public functions (timer.METHOD_END_TO_END).
The script refuses to run, and writes nothing, with fewer than two processes or two GPUs.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.distributed import decode, schedules, verify
from onlinesoftmax.distributed import vocab_parallel as vp
from onlinesoftmax.distributed.comm import bytes_per_row

SUITE = "multi-gpu"
METHOD_RANKS = (
    "across ranks: the one timer's device time (events, L2 evicted, spin) with a 4-byte NCCL all-reduce "
    "after the spin and before the start event of every call, lining the ranks up; each rank's events time "
    "the step; the step time is the slower rank's, call by call, median over calls. Communication time: CUDA "
    "events on the caller's stream around each collective in the same calls (it includes waiting for the "
    "other rank); its share is per call, the larger rank's median")
FULL = {"tokens": 8192, "vocab": 262144, "reps": 15, "decode": [(8, 32, 8, 128, 524288), (8, 32, 32, 128, 524288)]}
QUICK = {"tokens": 2048, "vocab": 131072, "reps": 8, "decode": [(8, 32, 8, 128, 65536)]}


def refuse(reason: str) -> None:
    print(f"bench_multi_gpu: {reason}; nothing written. Run on a machine with two GPUs:\n"
          "  torchrun --standalone --nproc-per-node 2 onlinesoftmax/bench/multi_gpu.py [--quick]", file=sys.stderr)
    sys.exit(2)


def logits(cupy, tokens: int, vocab: int, columns: slice, seed: int = 0):
    """Rows of random logits (scale 4, an offset per row), made by blocks of rows, kept as bf16 columns."""
    out = cupy.empty((tokens, columns.stop - columns.start), dtype=checks.np_dtype("bfloat16"))
    block = max(1, 2**28 // vocab)
    for first in range(0, tokens, block):
        rng = cupy.random.default_rng(seed + first)
        rows = min(block, tokens - first)
        x = rng.standard_normal((rows, vocab), dtype=cupy.float32) * 4
        x += rng.uniform(-20, 20, size=(rows, 1)).astype(cupy.float32)
        bits = checks.from_float32(cupy.ascontiguousarray(x[:, columns]), "bfloat16").view(cupy.uint16)
        out.view(cupy.uint16)[first:first + rows] = bits          # copied as 16-bit words
    return out


def random_into(cupy, out, seed: int) -> None:
    """Fill a (batch, heads, n, d) bf16 array (or view) with normal values, one batch entry at a time."""
    for b in range(out.shape[0]):
        x = cupy.random.default_rng(seed + b).standard_normal(out.shape[1:], dtype=cupy.float32)
        out.view(cupy.uint16)[b] = checks.from_float32(x, "bfloat16").view(cupy.uint16)


def gate_loss(loss, x, targets, block: int = 512) -> str:
    """The book's rule on the loss, by blocks of rows (the float64 reference of 8192 x 262144 is big)."""
    for first in range(0, x.shape[0], block):
        ok, message = verify.compare_loss(loss[first:first + block], x[first:first + block], targets[first:first + block])
        if not ok:
            raise AssertionError(f"cross-entropy rows {first}..: {message}")
    return message


def across_ranks(comm, cupy, timer, fn, reps: int):
    """time_gpu on every rank, lined up; (step ms per call = slower rank, comm ms and share per call) on rank 0."""
    tiny = cupy.zeros(1, dtype=cupy.float32)
    logs = []

    def step():
        comm.reset_log()
        fn()
        logs.append(list(comm.log))

    comm.timing = True
    timing = timer.time_gpu(step, [()], warmup=3, reps=reps, sync=lambda: comm._all_reduce(tiny, "sum"), samples=True)
    comm.timing = False
    steps = np.asarray(timing["ms_all"])
    comm_ms = np.asarray([sum(c.elapsed_ms() for c in log) for log in logs[-reps:]])
    mine = cupy.asarray(np.stack([steps, comm_ms]), dtype=cupy.float64)
    table = comm.all_gather(mine).get()                      # (ranks, 2, reps)
    per_call = table[:, 0].max(axis=0)
    share = (table[:, 1] / table[:, 0])
    return {"ms": float(np.median(per_call)), "ms_p10": float(np.percentile(per_call, 10)),
            "ms_p90": float(np.percentile(per_call, 90)), "reps": reps,
            "ms_per_rank": [float(np.median(t)) for t in table[:, 0]],
            "comm_ms": float(np.median(table[:, 1].max(axis=0))),
            "comm_share": float(np.median(share, axis=1).max())}


def cross_entropy_rows(comm, cupy, timer, config, say):
    import torch
    import torch.nn.functional as F

    from onlinesoftmax.measure import bench

    tokens, vocab, reps = config["tokens"], config["vocab"], config["reps"]
    width = vocab // comm.size
    mine = slice(comm.rank * width, (comm.rank + 1) * width)
    shard = logits(cupy, tokens, vocab, mine)
    targets = cupy.asarray(np.random.default_rng(1).integers(0, vocab, tokens))
    layout = vp.VocabLayout((width,) * comm.size, tokens, "bfloat16")
    fields = {"op": "cross_entropy", "n_rows": tokens, "vocab": vocab, "dtype": "bfloat16"}
    rows, one_ms = [], None
    read_bytes = tokens * vocab * 2
    if comm.rank == 0:
        full = logits(cupy, tokens, vocab, slice(0, vocab))
        one = lambda: vp.cross_entropy(None, full, targets, check_targets=False)
        say("cross-entropy, one GPU: " + gate_loss(one(), full, targets))
        t = timer.time_gpu(one, [()], reps=reps)
        one_ms = t["ms"]
        rows.append({"kernel": "logsumexp_02_state", **fields, "gpus": 1, "schedule": None, **t,
                     "GBps": read_bytes / t["ms"] / 1e6, **timer.time_end_to_end(one, [()], reps=reps)})
        xt, tt = bench.torch_view(full), torch.from_dlpack(targets)
        theirs = lambda: F.cross_entropy(xt, tt, reduction="none")
        t = timer.time_gpu(theirs, [()], reps=reps)
        rows.append({"kernel": "torch.nn.functional.cross_entropy", **fields, "gpus": 1, "schedule": None, **t,
                     "GBps": read_bytes / t["ms"] / 1e6})
        del full, xt
        cupy.get_default_memory_pool().free_all_blocks()
    comm._all_reduce(cupy.zeros(1, cupy.float32), "sum")      # rank 1 waited for rank 0's rows
    for schedule in schedules.SCHEDULES:
        two = lambda: vp.cross_entropy(comm, shard, targets, schedule=schedule, layout=layout, check_targets=False)
        loss = two()
        comm.reset_log()
        two()
        traffic = bytes_per_row(comm.log, tokens)
        if comm.rank == 0:                                      # the gate: rank 0 rebuilds the whole rows
            full = logits(cupy, tokens, vocab, slice(0, vocab))
            say(f"cross-entropy, two GPUs, {schedule}: " + gate_loss(loss, full, targets))
            del full
            cupy.get_default_memory_pool().free_all_blocks()
        t = across_ranks(comm, cupy, timer, two, reps)
        end_to_end = timer.time_end_to_end(two, [()], reps=reps)
        if comm.rank == 0:
            rows.append({"kernel": "logsumexp_02_state", **fields, "gpus": comm.size, "schedule": schedule, **t,
                         **traffic, "GBps_per_gpu": tokens * width * 2 / t["ms"] / 1e6,
                         "speedup_vs_one_gpu": one_ms / t["ms"], **end_to_end})
            say(f"  {schedule}: {t['ms']:.3f} ms (one GPU {one_ms:.3f} ms), comm {100 * t['comm_share']:.1f} %")
    gather = lambda: comm.all_gather(shard)                      # what a rank without the monoid would exchange
    t = across_ranks(comm, cupy, timer, gather, max(3, reps // 3))
    if comm.rank == 0:
        rows.append({"kernel": "torch.distributed.all_gather_into_tensor", **fields, "op": "gather_logits",
                     "gpus": comm.size, "schedule": None, **t, "payload_bytes_per_row": width * 2,
                     "wire_bytes_per_row": (comm.size - 1) * width * 2, "collectives": 1})
    return rows


def decode_rows(comm, cupy, timer, config, say):
    from onlinesoftmax.attention_api import attention

    rows = []
    bf16 = checks.np_dtype("bfloat16")
    for batch, heads, kv_heads, d, n_k in config["decode"]:
        reps = config["reps"]
        piece, group = n_k // comm.size, heads // kv_heads
        q = cupy.empty((batch, heads, 1, d), dtype=bf16)
        random_into(cupy, q, seed=7)
        k_mine, v_mine = (cupy.empty((batch, kv_heads, piece, d), dtype=bf16) for _ in range(2))
        random_into(cupy, k_mine, seed=1000 + 100 * comm.rank)        # piece r of the cache, on rank r
        random_into(cupy, v_mine, seed=5000 + 100 * comm.rank)
        fields = {"op": "decode", "batch": batch, "heads": heads, "kv_heads": kv_heads, "d": d, "n_k": n_k,
                  "dtype": "bfloat16"}
        kv_bytes = 2 * batch * kv_heads * n_k * d * 2
        one_ms = None
        if comm.rank == 0:
            k_all, v_all = (cupy.empty((batch, kv_heads, n_k, d), dtype=bf16) for _ in range(2))
            for r in range(comm.size):
                random_into(cupy, k_all[:, :, r * piece:(r + 1) * piece], seed=1000 + 100 * r)
                random_into(cupy, v_all[:, :, r * piece:(r + 1) * piece], seed=5000 + 100 * r)
            one = lambda: attention(q, k_all, v_all, return_lse=True, variant="decode")
            out, lse = one()
            ok, message = verify.compare_decode(out[:1, :group], lse[:1, :group], q[:1, :group], k_all[:1, :1], v_all[:1, :1])
            assert ok, f"decode, one GPU: {message}"
            t = timer.time_gpu(one, [()], reps=reps)
            one_ms = t["ms"]
            rows.append({"kernel": "attention_02_decode_split", **fields, "gpus": 1, "schedule": None, **t,
                         "GBps": kv_bytes / t["ms"] / 1e6, **timer.time_end_to_end(one, [()], reps=reps)})
        layout = decode.KVLayout((piece,) * comm.size)
        for schedule in schedules.SCHEDULES:
            two = lambda: decode.decode_attention(comm, q, k_mine, v_mine, schedule=schedule, layout=layout,
                                                  return_lse=True)
            out, lse = two()
            comm.reset_log()
            two()
            traffic = bytes_per_row(comm.log, batch * heads)
            if comm.rank == 0:
                ok, message = verify.compare_decode(out[:1, :group], lse[:1, :group], q[:1, :group], k_all[:1, :1],
                                                    v_all[:1, :1])
                assert ok, f"decode, two GPUs, {schedule}: {message}"
                say(f"decode kv_heads={kv_heads}, two GPUs, {schedule}: {message}")
            t = across_ranks(comm, cupy, timer, two, reps)
            if comm.rank == 0:
                rows.append({"kernel": "attention_02_decode_split", **fields, "gpus": comm.size, "schedule": schedule,
                             **t, **traffic, "GBps_per_gpu": kv_bytes / comm.size / t["ms"] / 1e6,
                             "speedup_vs_one_gpu": one_ms / t["ms"]})
                say(f"  {schedule}: {t['ms']:.3f} ms (one GPU {one_ms:.3f} ms), comm {100 * t['comm_share']:.1f} %")
        if comm.rank == 0:
            del k_all, v_all
        del k_mine, v_mine
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _version_text(version) -> str:
    """torch.cuda.nccl.version(): a tuple (2, 27, 5) in recent torch, an int 22705 in older ones."""
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes, suite multi-gpu-quick (about 40 s)")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        refuse("it must run as two processes under torchrun")
    import cupy

    if not cupy.is_available() or cupy.cuda.runtime.getDeviceCount() < 2:
        refuse(f"it needs two GPUs, {cupy.cuda.runtime.getDeviceCount() if cupy.is_available() else 0} visible")
    from onlinesoftmax.distributed.torch_comm import TorchComm
    from onlinesoftmax.measure import results, timer

    comm = TorchComm.from_env("nccl")
    say = (lambda text: print(text, flush=True)) if comm.rank == 0 else (lambda text: None)
    config = QUICK if args.quick else FULL
    rows = cross_entropy_rows(comm, cupy, timer, config, say) + decode_rows(comm, cupy, timer, config, say)
    if comm.rank == 0:
        import torch

        names = [cupy.cuda.runtime.getDeviceProperties(i)["name"] for i in range(comm.size)]
        meta = results.gpu_meta(timer.METHOD, gpu_count=comm.size)
        meta.update({"gpus": [n.decode() if isinstance(n, bytes) else n for n in names], "backend": "nccl",
                     "nccl": _version_text(torch.cuda.nccl.version()), "methods": {
                         "device": timer.METHOD, "across_ranks": METHOD_RANKS, "end_to_end": timer.METHOD_END_TO_END}})
        path = results.write_results(SUITE + ("-quick" if args.quick else ""), rows, meta)
        say(f"wrote {path}")
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
