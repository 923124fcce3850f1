"""Suites `attention-decode` and `attention-prefill`: the attention kernels against torch, same run.

attention-decode: attention_02_decode_split (through onlinesoftmax.attention) at d = 128, bf16,
  batch {1, 8, 32} x heads 32 x kv_heads {32, 8} x KV {4K, 32K, 128K, 256K}, one query per head
  (shapes whose K and V exceed KV_LIMIT_BYTES are skipped and listed). Peers: torch's
  scaled_dot_product_attention with each backend it offers for the shape (FLASH, EFFICIENT,
  CUDNN; enable_gqa for kv_heads < heads), on the same tensors. Bytes counted: K and V read once
  plus q and out (`bytes_counted`); GB/s divided by the read ceiling measured in the same run
  (`fraction_of_read`: a kernel that streams through memory reading only) and by the copy.
attention-prefill: attention_01_blocked and attention_13_fp32_pipelined in fp32 at batch 1, heads 16,
  n = n_q = n_k from 1K to 16K, d {64, 128}, causal or not, against the naive three-kernel path in
  torch fp32 (scores = q k^T * scale with the mask, softmax, scores v; TF32 off, torch's default),
  and the bytes of the score matrix that path allocates and our kernels never do.

Device time: onlinesoftmax.measure.timer.time_gpu (its METHOD in meta). End to end: one
synchronous call of the public function between CUDA events (time_end_to_end), and host us per
call back to back at the smallest decode shape. Every output of ours is checked against a
float64 reference on the timing inputs (the first batch element) before it is timed.

Run on a GPU machine:  python -m onlinesoftmax.bench attention-decode           (about a minute)
                       python -m onlinesoftmax.bench attention-prefill          (about 2 minutes)
                       python -m onlinesoftmax.bench attention-decode --quick   (a few shapes, not written)
(run as a module without a suite, both suites in one process)
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax import attention_api
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import decode_mma as dm
from onlinesoftmax.measure import results, timer

KV_LIMIT_BYTES = 24 << 30
REFERENCE_BYTES = 4 << 30   # the float64 scores one check may hold
DECODE = [(b, 32, kv, n) for b in (1, 8, 32) for kv in (32, 8) for n in (4096, 32768, 131072, 262144)]
PREFILL = [(n, d, causal) for n in (1024, 2048, 4096, 8192, 16384) for d in (64, 128) for causal in (False, True)]
QUICK_DECODE = [(1, 32, 8, 32768), (8, 32, 8, 131072), (8, 32, 32, 32768)]
QUICK_PREFILL = [(4096, 128, False), (4096, 128, True)]

def to_torch(a):
    import cupy
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_dlpack(a.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def random(shape, dtype, seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    return rng.standard_normal(shape, dtype=cupy.float32).astype(dtype)


def check_first_batch(out, q, k, v, causal=False, tol_scale=1.0):
    """Batch element 0 against the float64 reference (on the GPU); a wrong answer stops the run. Long
    sequences are checked on as many of its first heads (whole groups) as a float64 score matrix of
    REFERENCE_BYTES holds: all 16 heads at n = 16384 would need 34 GB an array."""
    import cupy

    heads, group = q.shape[1], q.shape[1] // k.shape[1]
    fit = REFERENCE_BYTES // (8 * q.shape[2] * k.shape[2]) // group * group
    h = min(heads, max(group, fit))
    ref, _ = ab.reference(q[:1, :h], k[:1, :h // group], v[:1, :h // group], causal=causal)
    err = float(cupy.abs(out[:1, :h].astype(cupy.float64) - ref).max())
    limit = tol_scale * 8 * checks.EPS[q.dtype.name] * max(1.0, float(cupy.abs(ref).max()))
    if not err <= limit:
        raise AssertionError(f"attention {q.dtype} {q.shape} {k.shape}: wrong answer, not timed: error {err:.3e} > {limit:.3e}")
    return err


def torch_backends():
    import torch
    from torch.nn.attention import SDPBackend

    return {"torch_sdpa_flash": SDPBackend.FLASH_ATTENTION, "torch_sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
            "torch_sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}, torch


def measure_decode(shapes, read_GBps, copy_GBps) -> tuple[list, list]:
    import cupy
    from torch.nn.attention import sdpa_kernel

    backends, torch = torch_backends()
    rows, skipped = [], []
    for batch, heads, kv_heads, n_k in shapes:
        d, dtype = 128, "bfloat16"
        kv_bytes = 2 * batch * kv_heads * n_k * d * 2
        if kv_bytes > KV_LIMIT_BYTES:
            skipped.append({"batch": batch, "heads": heads, "kv_heads": kv_heads, "n_k": n_k,
                            "why": f"K and V take {kv_bytes / 2**30:.0f} GiB > {KV_LIMIT_BYTES / 2**30:.0f} GiB"})
            continue
        q = random((batch, heads, 1, d), dtype, 1)
        k, v = random((batch, kv_heads, n_k, d), dtype, 2), random((batch, kv_heads, n_k, d), dtype, 3)
        nbytes = kv_bytes + 2 * q.nbytes
        fields = {"op": "decode", "batch": batch, "heads": heads, "kv_heads": kv_heads, "n_q": 1, "n_k": n_k,
                  "d": d, "dtype": dtype, "bytes": nbytes, "bytes_counted": "K and V once + q and out"}
        from onlinesoftmax.runtime.plan import get_runner
        auto = attention_api.choose(dtype, 1, d, group=heads // kv_heads, caches=batch * kv_heads, n_k=n_k).variant
        line = []
        for variant in (ab.DECODE, dm.DECODE_MMA):   # both decode kernels; `auto` marks the one auto runs
            out = osm.attention(q, k, v, variant=variant.short)
            check_first_batch(out, q, k, v, tol_scale=2.0 if variant is dm.DECODE_MMA else 1.0)
            runner = get_runner(variant, q, out, {"k": k, "v": v, "lse": None, "causal": False,
                                                  "scale": 1 / math.sqrt(d)})
            ours = lambda variant=variant: osm.attention(q, k, v, variant=variant.short)  # noqa: E731
            timing = timer.time_gpu(ours, [()], reps=20)
            e2e = timer.time_end_to_end(ours, [()], reps=20)
            rows.append({"kernel": variant.name, **fields, **timing, "GBps": nbytes / timing["ms"] / 1e6,
                         "fraction_of_read": nbytes / timing["ms"] / 1e6 / read_GBps,
                         "fraction_of_copy": nbytes / timing["ms"] / 1e6 / copy_GBps,
                         "end_to_end_us": e2e["us"], "end_to_end_wall_us": e2e["wall_us"],
                         "splits": runner.splits, "rows_per_block": runner.rows_per_block,
                         "blocks_per_sm": runner.blocks_per_sm, "auto": variant is auto})
            line.append(f"{variant.short} {rows[-1]['GBps']:.0f} GB/s ({rows[-1]['fraction_of_read']:.2f} of read, "
                        f"{runner.splits} splits)")
        tq, tk, tv = to_torch(q), to_torch(k), to_torch(v)
        for name, backend in backends.items():
            try:
                def call(backend=backend):
                    with sdpa_kernel(backend):
                        return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=kv_heads < heads)
                call()
                t = timer.time_gpu(call, [()], reps=20)
                e2e = timer.time_end_to_end(call, [()], reps=20)
                rows.append({"kernel": name, **fields, **t, "GBps": nbytes / t["ms"] / 1e6,
                             "fraction_of_read": nbytes / t["ms"] / 1e6 / read_GBps,
                             "end_to_end_us": e2e["us"], "end_to_end_wall_us": e2e["wall_us"]})
                line.append(f"{name} {rows[-1]['GBps']:.0f}")
            except Exception as error:  # noqa: BLE001  (a backend that refuses the shape is listed)
                skipped.append({**{k_: fields[k_] for k_ in ("batch", "heads", "kv_heads", "n_k")}, "kernel": name,
                                "why": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"})
        print(f"decode b{batch} h{heads}/{kv_heads} KV {n_k}: " + ", ".join(line), flush=True)
        del q, k, v, out, tq, tk, tv
        cupy.get_default_memory_pool().free_all_blocks()
    return rows, skipped


def prefill_variants(d: int) -> list:
    """The float32 kernels timed at head dimension d: attention_01_blocked, and attention_13_fp32_pipelined
    where this GPU can run it at d (an entry for d, cp.async, room for its tiles)."""
    from onlinesoftmax.kernels.attention import fp32_pipelined

    return [ab.BLOCKED] + ([fp32_pipelined.PIPELINED] if fp32_pipelined.runs_here(d) else [])


def measure_prefill(shapes) -> list:
    import cupy

    _, torch = torch_backends()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for n, d, causal in shapes:
        heads = 16
        q, k, v = (random((1, heads, n, d), "float32", s) for s in (4, 5, 6))
        flops = 4 * heads * n * n * d * (0.5 if causal else 1.0)
        fields = {"op": "prefill", "batch": 1, "heads": heads, "n_q": n, "n_k": n, "d": d, "dtype": "float32",
                  "causal": causal, "flops": flops, "score_matrix_bytes_not_allocated": 4 * heads * n * n}
        ours = {}
        for variant in prefill_variants(d):
            out = osm.attention(q, k, v, causal=causal, variant=variant.short)
            check_first_batch(out, q, k, v, causal, tol_scale=4.0)
            call = lambda variant=variant: osm.attention(q, k, v, causal=causal, variant=variant.short)  # noqa: E731
            t = timer.time_gpu(call, [()], reps=10)
            rows.append({"kernel": variant.name, **fields, **t, "TFLOPs": flops / t["ms"] / 1e9})
            ours[variant.name] = t["ms"]
        tq, tk, tv = to_torch(q), to_torch(k), to_torch(v)
        mask = torch.ones(n, n, dtype=torch.bool, device="cuda").tril() if causal else None

        def naive():
            s = torch.matmul(tq, tk.transpose(-1, -2)) * (1 / math.sqrt(d))
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), tv)

        try:
            t = timer.time_gpu(naive, [()], reps=10)
            rows.append({"kernel": "torch_naive_three_kernels", **fields, **t, "TFLOPs": flops / t["ms"] / 1e9})
            torch_ms = t["ms"]
        except Exception as error:  # noqa: BLE001
            torch_ms = float("nan")
            print(f"naive path failed at n {n}: {error}", flush=True)
        print(f"prefill n {n} d {d} causal {causal}: " + ", ".join(
            f"{name} {ms:.3f} ms (naive/it {torch_ms / ms:.2f})" for name, ms in ours.items()), flush=True)
        del q, k, v, out, tq, tk, tv
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def host_overhead() -> dict:
    q = random((1, 32, 1, 128), "bfloat16", 7)
    k, v = random((1, 8, 4096, 128), "bfloat16", 8), random((1, 8, 4096, 128), "bfloat16", 9)
    return {"kernel": ab.DECODE.name, "op": "host_us_per_call", "batch": 1, "heads": 32, "kv_heads": 8, "n_k": 4096,
            **timer.host_us_per_call(lambda: osm.attention(q, k, v), calls=500)}


def main(quick: bool, suites) -> None:
    meta = results.gpu_meta()
    if "decode" in suites:
        copy = timer.copy_bandwidth()
        read = timer.read_bandwidth()
        print(f"copy {copy['GBps']:.0f} GB/s, read {read['GBps']:.0f} GB/s", flush=True)
        decode, skipped = measure_decode(QUICK_DECODE if quick else DECODE, read["GBps"], copy["GBps"])
        host = host_overhead()
        print(f"host us per call (decode, 1x32/8 x 4096): {host['us']:.1f}", flush=True)
        ceilings = [{"kernel": "copy", "op": "copy", "bytes_counted": "read + write", **copy},
                    {"kernel": "read", "op": "read", "bytes_counted": "read", **read}]
        if not quick:
            print("wrote", results.write_results("attention-decode", ceilings + decode + [host],
                                                 {**meta, "skipped": skipped}), file=sys.stderr)
    if "prefill" in suites:
        prefill = measure_prefill(QUICK_PREFILL if quick else PREFILL)
        if not quick:
            print("wrote", results.write_results("attention-prefill", prefill, meta), file=sys.stderr)


if __name__ == "__main__":
    # BENCH_ATTENTION="decode" (or "prefill") records one suite only (python -m onlinesoftmax.bench sets it)
    main("--quick" in sys.argv[1:], os.environ.get("BENCH_ATTENTION", "decode prefill").split())
