"""The attention rows of suite `training`: the backward of attention, against torch's SDPA backends.

bf16, d = 128, batch 2 x 16 heads (as many kv heads: torch's FLASH backend takes equal heads), N in
ATTENTION_N, causal and not. Each call is the backward alone,
on the forward's saved output (device time, timer.time_gpu):
  attention_backward_02_mma                onlinesoftmax.attention_backward, variant="mma" (tensor cores; atomic dq), every N
  attention_backward_03_pipelined          the same with variant="pipelined" (128 keys a block, Q/dO double-buffered)
  attention_backward_04_wgmma              the same with variant="wgmma" (03's block on Hopper's wgmma; sm_90 only)
  attention_backward_01_blocked            the same with variant="blocked" (fp32 on CUDA cores; atomic dq)
  attention_backward_01_blocked (deterministic)   the same with the second pass for dq
  torch_sdpa_flash, torch_sdpa_cudnn       torch.autograd.grad through scaled_dot_product_attention under
                                           that backend (the forward is outside the timed call)
TFLOP/s counts 10 N^2 d per head (2.5 times the forward's 4; half with causal), as FlashAttention
reports. The teaching kernel runs where it takes under a few seconds a call (OURS_MAX_N). Our
gradients are compared with the FLASH backend's on the same tensors before timing, and a row whose
gradients differ by more than bf16's rounding (2^-6 of the largest) is recorded as incorrect.
"""
from __future__ import annotations

import onlinesoftmax as osm
from onlinesoftmax.measure import timer
from onlinesoftmax.runtime import torch_bridge

ATTENTION_N = (1024, 4096, 8192, 16384)
OURS_MAX_N = 4096
BATCH, HEADS, D = 2, 16, 128


def flops(n: int, causal: bool) -> float:
    return 10.0 * n * n * D * BATCH * HEADS / (2 if causal else 1)


def attention_rows() -> list[dict]:
    import cupy
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    hopper = torch.cuda.get_device_capability() == (9, 0)
    for n in ATTENTION_N:
        for causal in (False, True):
            here = {"op": "attention_backward", "dtype": "bfloat16", "d": D, "batch": BATCH, "heads": HEADS, "n": n,
                    "causal": causal, "flops": flops(n, causal)}
            g = torch.Generator(device="cuda").manual_seed(n)
            q, k, v, dout = (torch.randn(BATCH, HEADS, n, D, device="cuda", dtype=torch.bfloat16, generator=g)
                             for _ in range(4))
            found = {}
            for name, backend in (("torch_sdpa_flash", SDPBackend.FLASH_ATTENTION),
                                  ("torch_sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                        out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                    found[name] = (lambda out=out, qg=qg, kg=kg, vg=vg:
                                   torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True))
                except Exception as error:   # a backend that does not run here is recorded, not fatal
                    rows.append({"kernel": name, "correct": None, "error": f"{type(error).__name__}: {error}", **here})
            qc, kc, vc, gc = (torch_bridge.to_array(t) for t in (q, k, v, dout))   # bf16 views of the tensors
            out, lse = osm.attention(qc, kc, vc, causal=causal, return_lse=True)
            found["attention_backward_02_mma"] = (lambda out=out, lse=lse: osm.attention_backward(
                gc, qc, kc, vc, out, lse, causal=causal, variant="mma"))
            found["attention_backward_03_pipelined"] = (lambda out=out, lse=lse: osm.attention_backward(
                gc, qc, kc, vc, out, lse, causal=causal, variant="pipelined"))
            if hopper:
                found["attention_backward_04_wgmma"] = (lambda out=out, lse=lse: osm.attention_backward(
                    gc, qc, kc, vc, out, lse, causal=causal, variant="wgmma"))
            if n <= OURS_MAX_N:
                for deterministic in (False, True):
                    name = "attention_backward_01_blocked" + (" (deterministic)" if deterministic else "")
                    found[name] = (lambda deterministic=deterministic, out=out, lse=lse:
                                   osm.attention_backward(gc, qc, kc, vc, out, lse, causal=causal,
                                                          deterministic=deterministic, variant="blocked"))
            if "torch_sdpa_flash" in found:
                theirs = found["torch_sdpa_flash"]()
                for ours_name in [name for name in found if name.startswith("attention_backward_0") and
                                  "deterministic" not in name]:
                    ours = [torch_bridge.to_tensor(a) for a in found[ours_name]()]
                    error = max(float((a.float() - b.float()).abs().max() / b.float().abs().max())
                                for a, b in zip(ours, theirs))
                    here[f"max_relative_difference_vs_flash_{ours_name[19:]}"] = error
                    if not error < 2 ** -6:
                        rows.append({"kernel": ours_name, "correct": False,
                                     "error": f"gradients differ from FLASH's by {error:.3g} of the largest", **here})
                        found = {k: f for k, f in found.items() if not k.startswith(ours_name)}
            timed = {}
            for name, fn in found.items():
                timing = timer.time_gpu(fn, [()], warmup=2, reps=5 if "01_blocked" in name else 20)
                timed[name] = timing["ms"]
                ours = name.startswith("attention_backward_0")
                rows.append({"kernel": name, "method": "device", "correct": True if ours else None,
                             **timing, **here, "TFLOPs": here["flops"] / timing["ms"] / 1e9})
            for row in rows:
                if row.get("n") == n and row.get("causal") == causal and "ms" in row and "torch_sdpa_flash" in timed:
                    row["vs_flash"] = timed["torch_sdpa_flash"] / row["ms"]
            print(f"attention backward N={n} causal={causal}: " + "  ".join(
                f"{k} {v:.2f} ms" for k, v in timed.items()), flush=True)
            torch.cuda.empty_cache()
            cupy.get_default_memory_pool().free_all_blocks()
    return rows
