"""Suite `attention-prefill-mma`: the tensor-core attention ladder against torch, same run.

Shapes: bf16, d = 128, (batch, heads) in {(32, 16), (4, 32)}, n = n_q = n_k in {1K, 2K, 4K, 8K,
16K}, causal and not. Kernels: attention_03_mma, attention_04_ldmatrix, attention_05_pipelined,
attention_07_fragment_reuse, and attention_10_wgmma and attention_11_wgmma_tma on a GPU of compute capability 9.0
(each through its launch plan, what onlinesoftmax.attention calls), and torch's
scaled_dot_product_attention with the FLASH, CUDNN and EFFICIENT backends on the same tensors
(is_causal=True: top-left and bottom-right agree for n_q == n_k). The ceiling is a bf16 matrix
product in the same run: torch.matmul of two 8192 x 8192 bf16 matrices (cuBLAS, fp32
accumulation), in TFLOP/s. FLOPs counted: 4 batch heads n^2 d, half of it when causal (the
convention of the FlashAttention papers); every row carries TFLOP/s and its fraction of the
matmul ceiling. Device time: the one timer (onlinesoftmax.measure.timer.time_gpu; its METHOD in
meta); the pipelined kernel also end to end through onlinesoftmax.attention (time_end_to_end).

Correctness before timing: every kernel's output on the timing inputs, (batch 0, head 0), is
compared with the float64 reference; ours must be within checks.tolerance of torch FLASH's error on
the same slice (twice it, plus two bf16 ulps of the largest output), torch's backends are checked
the same way. A wrong answer stops the run before anything is written, except from the Hopper
kernels (attention_10 .. 12), whose failures and wrong answers are recorded as skipped rows with the
reason while the others are timed.

Run on a GPU machine:  python -m onlinesoftmax.bench attention-prefill-mma            (about 3 minutes)
                       python -m onlinesoftmax.bench attention-prefill-mma --quick    (about 30 s: (4, 32) and
                           n = 4096, causal and not; recorded too, with meta.quick = true)
"""
from __future__ import annotations

import math
import sys

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax import attention_api, checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.measure import results, timer
from onlinesoftmax.runtime.plan import get_runner

SUITE = "attention-prefill-mma"
D, DTYPE = 128, "bfloat16"
SHAPES = [(b, h, n, causal) for b, h in ((32, 16), (4, 32)) for n in (1024, 2048, 4096, 8192, 16384)
          for causal in (False, True)]
QUICK = [(4, 32, 4096, False), (4, 32, 4096, True)]
MATMUL_N = 8192
POISON_BITS = int(np.asarray(checks.POISON[DTYPE], np.float32).astype(checks.np_dtype(DTYPE)).view(np.uint16))
BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
BACKEND_NAMES = {"FLASH_ATTENTION": "torch_sdpa_flash", "CUDNN_ATTENTION": "torch_sdpa_cudnn",
                 "EFFICIENT_ATTENTION": "torch_sdpa_efficient"}
CEILING_METHOD = "torch.matmul of two 8192 x 8192 bf16 matrices (cuBLAS), device time as above"


def hopper_kernels():
    from onlinesoftmax.kernels.attention import wgmma as aw

    return aw.HOPPER


def ladder():
    """The tensor-core kernels of the ladder this GPU runs (attention_10 and 11: compute capability 9.0 only)."""
    import cupy

    from onlinesoftmax.kernels.attention import wgmma as aw

    return (*am.VARIANTS, *(aw.HOPPER if cupy.cuda.Device().compute_capability == "90" else ()))


def to_torch(a):
    import cupy
    import torch

    return torch.from_dlpack(a.view(cupy.int16)).view(torch.bfloat16) if a.dtype.name == "bfloat16" else torch.from_dlpack(a)


def matmul_ceiling() -> dict:
    import torch

    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    t = timer.time_gpu(lambda: torch.matmul(a, b), [()], reps=20)
    return {"kernel": "torch_matmul_bf16", "method": "device", "op": "matmul", "m": MATMUL_N, "n": MATMUL_N, "k": MATMUL_N,
            "flops": 2 * MATMUL_N**3, **t, "TFLOPs": 2 * MATMUL_N**3 / t["ms"] / 1e9}


def slice_error(out, ref) -> float:
    """max |out[0, 0] - ref| (ref: float64 of batch 0, head 0), out a cupy array or a torch tensor."""
    import cupy

    first = out[0:1, 0:1]
    first = cupy.asarray(first.float()) if hasattr(first, "float") and not isinstance(first, cupy.ndarray) \
        else checks.as_float64(first)
    return float(cupy.abs(first.astype(cupy.float64) - ref).max())


def measure(shapes, ceiling_TFLOPs: float) -> list[dict]:
    import cupy
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for batch, heads, n, causal in shapes:
        rng = cupy.random.default_rng(n + batch)
        q, k, v = (rng.standard_normal((batch, heads, n, D), dtype=cupy.float32).astype(DTYPE) for _ in range(3))
        flops = 4 * batch * heads * n * n * D * (0.5 if causal else 1.0)
        fields = {"op": "prefill", "batch": batch, "heads": heads, "kv_heads": heads, "n_q": n, "n_k": n, "d": D,
                  "dtype": DTYPE, "causal": causal, "flops": flops, "flops_counted": "4 b h n^2 d, halved when causal"}
        ref, _ = ab.reference(q[0:1, 0:1], k[0:1, 0:1], v[0:1, 0:1], causal=causal)
        tq, tk, tv = to_torch(q), to_torch(k), to_torch(v)
        calls = {}
        for backend in BACKENDS:
            def call(backend=getattr(SDPBackend, backend)):
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            calls[BACKEND_NAMES[backend]] = call
        errors, skipped = {}, []
        for name, call in calls.items():
            try:
                errors[name] = slice_error(call(), ref)
            except RuntimeError as error:   # a backend that refuses the shape is listed, not fatal
                skipped.append((name, str(error).splitlines()[0][:160]))
        tol = checks.tolerance(errors.get("torch_sdpa_flash", min(errors.values(), default=0.0)), ref, DTYPE)
        out = cupy.empty_like(q)
        options = {"k": k, "v": v, "lse": None, "causal": causal, "scale": 1 / math.sqrt(D)}
        for variant in ladder():
            out.view(cupy.uint16).fill(POISON_BITS)   # an element left unwritten fails the check below
            try:
                runner = get_runner(variant, q, out, options)
                runner(q, out, **options)
                cupy.cuda.Device().synchronize()
            except Exception as error:   # a Hopper kernel's first runs: listed with the reason, the others still timed
                if variant not in hopper_kernels():
                    raise
                skipped.append((variant.name, f"failed: {str(error).splitlines()[0][:160]}"))
                continue
            err = slice_error(out, ref)
            if variant in hopper_kernels() and not err <= tol:
                skipped.append((variant.name, f"wrong answer, not timed: error {err:.3e} > tolerance {tol:.3e}"))
                continue
            errors[variant.name] = err
            calls[variant.name] = lambda runner=runner: runner(q, out, **options)
        bad = {name: err for name, err in errors.items() if not err <= tol}
        if bad:
            raise AssertionError(f"b{batch} h{heads} n {n} causal {causal}: wrong answers, not timed: "
                                 f"{bad} (tolerance {tol:.3e}, from torch_sdpa_flash's error)")
        line = []
        for name, call in calls.items():
            if name not in errors:
                continue
            t = timer.time_gpu(call, [()], warmup=2, reps=5 if flops > 20e12 else 10)
            TFLOPs = flops / t["ms"] / 1e9
            row = {"kernel": name, "method": "device", **fields, **t, "TFLOPs": TFLOPs, "fraction_of_matmul": TFLOPs / ceiling_TFLOPs,
                   "max_abs_error_slice": errors[name], "tolerance_slice": tol}
            if name == attention_api.choose("bfloat16", n, 128).variant.name:   # what the public call runs
                e2e = timer.time_end_to_end(lambda: osm.attention(q, k, v, causal=causal), [()], warmup=2, reps=5)
                row.update({"end_to_end_us": e2e["us"], "end_to_end_wall_us": e2e["wall_us"]})
            rows.append(row)
            line.append(f"{name} {TFLOPs:.0f}")
        for name, why in skipped:
            rows.append({"kernel": name, **fields, "skipped": why})
        print(f"b{batch} h{heads} n {n} {'causal' if causal else 'full'}: " + ", ".join(line)
              + " TFLOP/s", flush=True)
        del q, k, v, out, tq, tk, tv, calls
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def main(quick: bool) -> None:
    methods = {"device": timer.METHOD, "end_to_end": timer.METHOD_END_TO_END, "ceiling": CEILING_METHOD}
    meta = results.gpu_meta(" | ".join(f"{name}: {text}" for name, text in methods.items()))
    meta |= {"methods": methods, "quick": quick}
    ceiling = matmul_ceiling()
    print(f"bf16 matmul ceiling: {ceiling['TFLOPs']:.0f} TFLOP/s", flush=True)
    rows = [ceiling] + measure(QUICK if quick else SHAPES, ceiling["TFLOPs"])
    print("wrote", results.write_results(SUITE, rows, meta), file=sys.stderr)


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
