"""The prefill rows of suite `serving` (op "varlen_prefill"): a batch of prompts of different lengths,
packed without padding, through causal attention.

bf16, d = 128, 32 heads over 8 kv heads (and 32 over 32, where torch's FLASH backend takes it), batches
of BATCHES prompts with lengths drawn between 128 and the row's longest (log-uniform, seeded). On the
same tokens (device time, timer.time_gpu):
  attention_09_varlen          onlinesoftmax.attention(q, k, v, cu_seqlens_q=, cu_seqlens_k=, causal=True),
                               including the host's check of the offsets (one synchronization)
  attention_09_varlen (kernel only)   the runner alone
  attention_07_fragment_reuse  the prompts padded to the longest into (batch, heads, n, d): what a caller
                               without packed sequences runs (its padded rows are wasted work)
  torch_sdpa_nested            torch's scaled_dot_product_attention on nested (jagged) tensors, causal
                               (the FLASH backend where it runs), with k and v repeated to the query
                               heads when grouped
  torch_sdpa_flash_padded      the FLASH backend on the padded batch (is_causal: with right padding and
                               equal query and key lengths the real rows see only real keys)
TFLOP/s counts 4 d per visible (query, key) pair and head, summed over the prompts (the padded rows
are not counted). Ours is checked against the float64 reference on its two shortest prompts first.
"""
from __future__ import annotations

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax.measure import timer
from onlinesoftmax.runtime import torch_bridge

BATCHES = ((16, 8192), (64, 2048), (4, 16384))    # (prompts, longest prompt)
HEADS, D = 32, 128


def visible_pairs(lengths) -> int:
    return int(sum(n * (n + 1) // 2 for n in lengths))


def prefill_case(batch: int, longest: int, kv_heads: int, seed: int) -> list[dict]:
    import cupy
    import torch

    from onlinesoftmax import checks
    from onlinesoftmax.kernels.attention import varlen
    from onlinesoftmax.runtime.plan import get_runner

    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(np.log(128), np.log(longest), batch)).astype(np.int64)
    lengths[0] = longest
    cu = cupy.asarray(varlen.offsets(lengths))
    total = int(lengths.sum())
    here = {"op": "varlen_prefill", "dtype": "bfloat16", "d": D, "heads": HEADS, "kv_heads": kv_heads,
            "batch": batch, "longest": longest, "tokens": total, "causal": True,
            "flops": 4.0 * D * HEADS * visible_pairs(lengths)}
    gen = cupy.random.default_rng(seed)
    q = checks.from_float32(gen.standard_normal((total, HEADS, D), dtype=cupy.float32), "bfloat16")
    k, v = (checks.from_float32(gen.standard_normal((total, kv_heads, D), dtype=cupy.float32), "bfloat16")
            for _ in range(2))
    shortest = np.argsort(lengths)[:2]
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    pick = np.concatenate([np.arange(starts[b], starts[b] + lengths[b]) for b in shortest])
    few = cupy.asarray(varlen.offsets(lengths[shortest]))
    out, lse = osm.attention(q[pick], k[pick], v[pick], cu_seqlens_q=few, cu_seqlens_k=few, causal=True,
                             return_lse=True)
    host = [checks.host(a[pick]) for a in (q, k, v)]
    ok, message = varlen.compare(checks.host(out), cupy.asnumpy(lse), *host, cupy.asnumpy(few), cupy.asnumpy(few), True)
    if not ok:
        return [{"kernel": varlen.NAME, "correct": False, "error": message, **here}]
    result = cupy.empty_like(q)
    options = {"k": k, "v": v, "cu_seqlens_q": cu, "cu_seqlens_k": cu, "lse": None, "max_seqlen_q": longest,
               "causal": True, "scale": 1 / np.sqrt(D)}
    runner = get_runner(osm.REGISTRY[varlen.NAME], q, result, options)
    found = {varlen.NAME: lambda: osm.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True),
             f"{varlen.NAME} (kernel only)": lambda: runner(q, result, **options)}
    padded = []
    for a in (q, k, v):
        p = cupy.zeros((batch, longest) + a.shape[1:], a.dtype)
        for b in range(batch):
            p[b, :lengths[b]] = a[int(starts[b]):int(starts[b] + lengths[b])]
        padded.append(cupy.ascontiguousarray(p.transpose(0, 2, 1, 3)))
    found["attention_07_fragment_reuse"] = lambda: osm.attention(*padded, causal=True, variant="fragment_reuse")
    rows = []
    tq, tk, tv = (torch_bridge.to_tensor(a) for a in (q, k, v))
    group = HEADS // kv_heads
    try:
        offsets = torch.as_tensor(cu.astype(cupy.int64), device="cuda")
        nested = [torch.nested.nested_tensor_from_jagged(t.repeat_interleave(group, dim=1) if i and group > 1 else t,
                                                         offsets).transpose(1, 2) for i, t in enumerate((tq, tk, tv))]
        sdpa = torch.nn.functional.scaled_dot_product_attention
        sdpa(*nested, is_causal=True)
        found["torch_sdpa_nested"] = lambda: sdpa(*nested, is_causal=True)
    except Exception as error:   # a peer that does not run here is recorded, not fatal
        rows.append({"kernel": "torch_sdpa_nested", "correct": None, "error": f"{type(error).__name__}: {error}", **here})
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        pt = [torch_bridge.to_tensor(a) for a in padded]
        if group > 1:
            pt = [pt[0]] + [t.repeat_interleave(group, dim=1) for t in pt[1:]]

        def flash_padded():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(*pt, is_causal=True)
        flash_padded()
        found["torch_sdpa_flash_padded"] = flash_padded
    except Exception as error:
        rows.append({"kernel": "torch_sdpa_flash_padded", "correct": None, "error": f"{type(error).__name__}: {error}",
                     **here})
    timed = {}
    for name, fn in found.items():
        timing = timer.time_gpu(fn, [()], warmup=3, reps=20)
        timed[name] = timing["ms"]
        rows.append({"kernel": name, "method": "device", "correct": True if name.startswith(varlen.NAME) else None,
                     **timing, **here, "TFLOPs": here["flops"] / timing["ms"] / 1e9})
    for row in rows:
        if "ms" in row and varlen.NAME in timed:
            row["vs_varlen"] = row["ms"] / timed[varlen.NAME]
    print(f"varlen prefill {batch} prompts up to {longest}, kv_heads {kv_heads}: " + "  ".join(
        f"{k} {v:.3f} ms" for k, v in timed.items()), flush=True)
    return rows


def prefill_rows() -> list[dict]:
    import cupy
    import torch

    rows = []
    for i, (batch, longest) in enumerate(BATCHES):
        for kv_heads in (8, 32):
            rows += prefill_case(batch, longest, kv_heads, seed=i)
            torch.cuda.empty_cache()
            cupy.get_default_memory_pool().free_all_blocks()
    return rows
