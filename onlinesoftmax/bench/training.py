"""Suite `training`: cross-entropy from logits, forward and backward, against torch in one run (and the
backward of attention: bench/training_attention.py).

At SHAPES (tokens x vocabulary, bf16, and fp32 at 32000), each call computes the loss and the gradient
of the mean loss with respect to the logits, on the same memory; KERNEL is the kernel the public
functions run for a gradient on this GPU (loss.kernel_for: cross_entropy_02_cluster where clusters are,
else cross_entropy_01_rows):
  KERNEL                            onlinesoftmax.cross_entropy_with_grad(x, t): a fresh gradient buffer
  KERNEL (in place)                 the same with in_place=True: the gradient over the logits
  KERNEL (autograd)                 torch.autograd.grad(onlinesoftmax.cross_entropy(x, t), x): the operator
  cross_entropy_0N_... (launch)     each of our kernels launched alone into allocated outputs (no target
                                    check, no allocation): the kernels side by side
  torch.nn.functional.cross_entropy torch.autograd.grad(F.cross_entropy(x, t), x)
  liger                             Liger-Kernel's cross-entropy (its Triton kernel; where it imports)
`method` "device" (timer.time_gpu). Ours include what a caller pays: the steps around the kernel
(the targets checked and counted, the loss reduced: loss._run_kernels) and one host synchronization
per call, for the target flag (direct) or with the upstream gradient's "is it 1" test (autograd);
torch checks its targets on the device instead. GB/s counts the ideal traffic of forward and backward (read the
logits once, write the gradient once: 2 x the logits' bytes) and `fraction_of_copy` divides it by the
copy bandwidth measured in the same run. Targets: >= 0.85 of the copy and >= 2x torch's
forward + backward. Ours is checked against the float64 truth (gradient_checks.compare_cross_entropy)
on a block of rows before it is timed.

    python -m onlinesoftmax.bench training [--quick] [--only cross_entropy|linear|attention]
    (GPU and torch with CUDA; --quick: printed only; --only PART: that part alone, recorded as training-PART)
"""
from __future__ import annotations

import sys

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax.gradient_checks import compare_cross_entropy
from onlinesoftmax.measure import bench, results, timer

SUITE = "training"
SHAPES = (((4096, 32000), "float32"), ((4096, 32000), "bfloat16"), ((8192, 128256), "bfloat16"),
          ((8192, 262144), "bfloat16"))
QUICK = (((1024, 32000), "bfloat16"),)


def liger_function():
    """Liger-Kernel's cross-entropy as a function of (x, t) returning the loss, or None with why not."""
    try:
        from liger_kernel.transformers.functional import liger_cross_entropy
    except Exception as error:   # not installed, or its Triton kernels do not load here
        return None, f"{type(error).__name__}: {error}"
    return liger_cross_entropy, None


KERNELS = ("cross_entropy_01_rows", "cross_entropy_02_cluster")


def launcher(name, x, t):
    """The kernel `name` launched alone on (x, t) into outputs allocated once, the gradient of the mean."""
    import cupy

    from onlinesoftmax.runtime.plan import get_runner

    n_rows = x.shape[0]
    given = {"targets": t, "lse": cupy.empty(n_rows, cupy.float32), "dx": cupy.empty_like(x),
             "grad_scale": cupy.full(1, 1.0 / max(1, int((t != -100).sum())), cupy.float32)}
    rows = cupy.empty(n_rows, cupy.float32)
    options = {"ignore_index": -100, "label_smoothing": 0.0, "z_loss": 0.0, "softcap": 0.0}
    runner = get_runner(osm.REGISTRY[name], x, rows, {**options, **given})
    return lambda: runner(x, rows, **given), (rows, given["lse"], given["dx"])


def calls(x, t, xt, tt):
    import torch

    import onlinesoftmax.torch_ops  # noqa: F401  (registers the operator)
    from onlinesoftmax import loss
    from onlinesoftmax.kernels.cross_entropy import cluster

    def autograd(loss_fn):
        return lambda: torch.autograd.grad(loss_fn(xt, tt), xt)
    chosen = loss.kernel_for(x, True).name
    found = {chosen: lambda: osm.cross_entropy_with_grad(x, t),
             f"{chosen} (in place)": lambda: osm.cross_entropy_with_grad(x, t, in_place=True),
             f"{chosen} (autograd)": autograd(osm.cross_entropy)}
    found = {**{f"{name} (launch)": launcher(name, x, t)[0] for name in KERNELS
                if name != "cross_entropy_02_cluster" or cluster.fits(x.shape[1], x.dtype.name)},
             "torch.nn.functional.cross_entropy": autograd(torch.nn.functional.cross_entropy), **found}
    liger, why = liger_function()
    if liger is not None:
        found["liger"] = autograd(liger)
    return found, why


def checked(x, t, block) -> tuple[bool, str]:
    """The public call and each kernel launched alone, on a block of rows, against the float64 truth."""
    from onlinesoftmax.kernels.cross_entropy import cluster

    loss, lse, dx = osm.cross_entropy_with_grad(x[block], t[block], reduction="sum")
    rows_loss = osm.cross_entropy(x[block], t[block], reduction="none")
    ok, message = compare_cross_entropy(rows_loss, lse, dx, x[block], t[block], ignore_index=-100)
    for name in KERNELS:
        if not ok or (name == "cross_entropy_02_cluster" and not cluster.fits(x.shape[1], x.dtype.name)):
            break
        xb, tb = x[block], t[block]
        launch, (rows, lse, dx) = launcher(name, xb, tb)
        launch()
        ok, message = compare_cross_entropy(rows, lse, dx, xb, tb, ignore_index=-100,
                                            scale=1.0 / max(1, int((tb != -100).sum())))
        message = f"{name}: {message}"
    return ok, message


def rows_for(shapes, copy_GBps: float) -> list[dict]:
    import cupy
    import torch

    rows = []
    for (n_rows, n_cols), dtype in shapes:
        x = bench.make_rows(n_rows, n_cols, dtype)[0]
        t = cupy.asarray(np.random.default_rng(n_rows).integers(0, n_cols, n_rows))
        t[::17] = -100
        block = slice(0, 64)
        ok, message = checked(x, t, block)
        fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": dtype, "bytes": 2 * x.nbytes, "op": "cross_entropy"}
        if not ok:
            rows.append({"kernel": "cross_entropy (checked before timing)", "correct": False, "error": message,
                         **fields})
            continue
        keep = x.copy()   # the in-place calls overwrite x: time them last, on a copy
        xt = bench.torch_view(x.copy()).requires_grad_()
        tt = torch.as_tensor(t)
        found, why = calls(keep, t, xt, tt)
        timed = {}
        for name, fn in found.items():
            try:
                timing = timer.time_gpu(fn, [()])
            except Exception as error:   # a peer that fails here is recorded, not fatal
                rows.append({"kernel": name, "correct": None, "error": f"{type(error).__name__}: {error}", **fields})
                continue
            GBps = fields["bytes"] / timing["ms"] / 1e6
            timed[name] = timing["ms"]
            rows.append({"kernel": name, "method": "device", "correct": True if name.startswith("cross_entropy_0") else None,
                         **timing, **fields, "GBps": GBps, "fraction_of_copy": GBps / copy_GBps})
        if why is not None:
            rows.append({"kernel": "liger", "correct": None, "error": why, **fields})
        torch_ms = timed.get("torch.nn.functional.cross_entropy")
        for row in rows:
            if row.get("n_cols") == n_cols and row.get("dtype") == dtype and "ms" in row and torch_ms:
                row["vs_torch"] = torch_ms / row["ms"]
        print(f"cross_entropy {n_rows}x{n_cols} {dtype}: " + "  ".join(
            f"{name} {ms * 1e3:.0f} us" for name, ms in timed.items()), flush=True)
        del x, keep, xt, found
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


PARTS = ("cross_entropy", "linear", "attention")


def measure(shapes=SHAPES, parts=PARTS) -> dict:
    from onlinesoftmax.bench.training_attention import attention_rows
    from onlinesoftmax.bench.training_linear import linear_rows

    copy = timer.copy_bandwidth()
    rows = [{"kernel": "copy", "bytes_counted": "read + write", **copy}]
    if "cross_entropy" in parts:
        rows += rows_for(shapes, copy["GBps"])
    if "linear" in parts:
        rows += linear_rows()
    if "attention" in parts:   # the backward of attention (bench/training_attention.py)
        rows += attention_rows()
    return {"meta": {**results.gpu_meta(), "parts": list(parts)}, "rows": rows}


if __name__ == "__main__":
    args = sys.argv[1:]
    parts = PARTS
    if "--only" in args:   # one part, recorded as training-PART
        parts = (args[args.index("--only") + 1],)
        if parts[0] not in PARTS:
            raise SystemExit(f"--only takes one of {', '.join(PARTS)}, got {parts[0]!r}")
    if "--quick" in args:
        measure(QUICK, parts=("cross_entropy",))
    else:
        bench.record(SUITE if parts == PARTS else f"{SUITE}-{parts[0].replace('_', '-')}", measure(parts=parts))
