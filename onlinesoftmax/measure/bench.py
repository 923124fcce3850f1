"""Benchmark helpers shared by every suite under benchmarks/ (GPU only, except where a docstring says numpy works).

All timing goes through `timer` (the one timer); every device-time row carries bytes moved, GB/s
and the fraction of the copy bandwidth measured in the same run. Correctness comes before timing:
`check_output` (the fast kernels' rule, checks.compare) and `check_call` / `compare_rows`
(the same rule for softmax, log_softmax, logsumexp and masked softmax, a block of rows at a time).
"""
from __future__ import annotations


import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.measure import timer
from onlinesoftmax.reference import array_module

EPS32 = 2.0**-23
BIG_CALL_BYTES = 2**30          # from here a call takes >= 0.25 ms on an H200: fewer repetitions suffice


def record(suite: str, data: dict):
    """Write a suite's {"meta", "rows"} to data/<gpu>/<date>-<suite>.json and say where (stderr)."""
    import sys

    from onlinesoftmax.measure import results

    path = results.write_results(suite, data["rows"], data["meta"])
    print("wrote", path, file=sys.stderr)
    return path


def make_rows(n_rows: int, n_cols: int, dtype="float32", seed: int = 0, copies: int = 1):
    """`copies` random (n_rows, n_cols) cupy inputs (normal, scale 4, random offset)."""
    import cupy

    rng = cupy.random.default_rng(seed)
    out = []
    for _ in range(copies):
        x = rng.standard_normal((n_rows, n_cols), dtype=cupy.float32) * 4 + float(rng.uniform(-20, 20))
        out.append(x.astype(dtype))
    return out


def reps_for(bytes_per_call: int, reps: int = 30) -> int:
    """Timed repetitions: `reps`, or 10 for a call that moves a gigabyte or more (>= 0.25 ms each)."""
    return reps if bytes_per_call < BIG_CALL_BYTES else min(reps, 10)


def measure(name: str, fn, inputs, *, bytes_per_call: int, copy_GBps: float, reps: int = 30, **fields) -> dict:
    """Time fn(x), alternating over `inputs`; return a result row."""
    timing = timer.time_gpu(fn, [(x,) for x in inputs], reps=reps)
    GBps = bytes_per_call / timing["ms"] / 1e6
    return {"kernel": name, **fields, **timing, "bytes": bytes_per_call, "GBps": GBps,
            "fraction_of_copy": GBps / copy_GBps}


def inputs(n_rows: int, n_cols: int, dtype="float32", seed: int = 0):
    """Two random input tensors to alternate between (the timer evicts L2 before each call)."""
    return make_rows(n_rows, n_cols, dtype, seed, copies=2)


def torch_view(x):
    """The same memory as a torch tensor (bf16 travels through its 16-bit words)."""
    import torch

    if x.dtype.name == "bfloat16":
        import cupy

        return torch.from_dlpack(x.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(x)


def torch_softmax(x):
    """torch.softmax over the last axis of a cupy array, in x's dtype, as a cupy array (torch's
    same-dtype error is the baseline of the long-row accuracy rule; needs torch with CUDA)."""
    import cupy
    import torch

    with torch.no_grad():
        y = torch.softmax(torch_view(x), dim=-1)
    torch.cuda.synchronize()
    return cupy.from_dlpack(y.contiguous())


def dispatcher_choice(n_rows: int, n_cols: int, dtype: str, masked: bool = False) -> str:
    """The kernel variant="auto" runs for a softmax of this shape (unmasked, or with a mask)."""
    from onlinesoftmax.kernels import dispatch

    choose = dispatch.choose_masked if masked else dispatch.choose
    return choose(n_rows, n_cols, dtype).variant.name


def clusters() -> tuple[bool, str]:
    """(cluster launches work here, why): runtime/driver.py's probe."""
    from onlinesoftmax.runtime import driver

    return driver.cluster_launch_works(), driver.cluster_status()


def check_output(fn, x, out, poison) -> tuple[bool, str]:
    """Correctness before timing: poison `out`, run fn(x) once (it writes `out`), synchronize (surfaces CUDA
    errors), compare with the float64 reference at the dtype's tolerance (checks.compare)."""
    import cupy

    out[...] = poison
    fn(x)
    cupy.cuda.Device().synchronize()
    if checks.unwritten(out):
        return False, "outputs left unwritten"
    return checks.compare_softmax(out, x)


# ---- correctness of a public call: softmax, log_softmax, logsumexp, masked softmax ------------------

def poison(out) -> None:
    """Fill `out` (numpy or cupy, any of the three dtypes) with the checks module's poison, on its device."""
    name = out.dtype.name
    bits = {4: np.uint32, 2: np.uint16}[out.itemsize]
    value = np.asarray(checks.POISON[name], dtype=np.float32).astype(checks.np_dtype(name))
    out.view(bits).fill(int(value.view(bits)))


def _effective_logits(x64, mask, row0: int):
    """x + mask in float64 for a block of rows starting at row `row0`: mask None, "causal" (row i keeps
    columns j <= i) or an additive array already cut to the block ((rows, N) or (N,))."""
    xp = array_module(x64)
    if mask is None:
        return x64
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be None, 'causal' or an array, got {mask!r}")
        rows = xp.arange(row0, row0 + x64.shape[0])[:, None]
        return xp.where(xp.arange(x64.shape[1])[None, :] > rows, -np.inf, x64)
    return x64 + xp.asarray(mask, dtype=xp.float64)


def compare_rows(y, x, op: str = "softmax", mask=None, max_elements: int = 2**25) -> tuple[bool, str]:
    """(passed, message): y = op(x (+ mask)) against the float64 reference, `max_elements` at a time.

    op: "softmax" (y in x's dtype), "log_softmax" (x's dtype) or "logsumexp" (float32, one per row).
    The rule is the tests' (checks.compare, tests/test_logsumexp.py): the error may be twice that
    of the same computation in the storage dtype (float32 math, rounded to the dtype) plus two ulps of
    the largest output (of max(largest, 1) for log_softmax and logsumexp; logsumexp adds 4 fp32 eps).
    numpy or cupy; blocks of rows keep the float64 temporaries small on big tensors.
    """
    xp = array_module(x)
    dtype = x.dtype.name
    n_rows, n_cols = x.shape
    shape, out_dtype = ((n_rows,), "float32") if op == "logsumexp" else ((n_rows, n_cols), dtype)
    if op not in ("softmax", "log_softmax", "logsumexp"):
        raise ValueError(f"unknown op {op!r}")
    if tuple(y.shape) != shape or y.dtype.name != out_dtype:
        return False, f"{op}: expected shape {shape} {out_dtype}, got {tuple(y.shape)} {y.dtype.name}"
    err = base_err = scale = 0.0
    block = max(1, max_elements // n_cols)
    for row0 in range(0, n_rows, block):
        row1 = min(n_rows, row0 + block)
        cut = mask if mask is None or isinstance(mask, str) or mask.ndim == 1 else mask[row0:row1]
        x64 = _effective_logits(checks.as_float64(x[row0:row1]), cut, row0)
        x32 = x64.astype(xp.float32)
        if op == "softmax":
            ref, base = reference.softmax(x64), checks.rounded_to(reference.softmax_same_dtype(x32), dtype)
        elif op == "log_softmax":
            ref, base = reference.log_softmax(x64), checks.rounded_to(reference.log_softmax_same_dtype(x32), dtype)
        else:
            ref, base = reference.logsumexp(x64), reference.logsumexp_same_dtype(x32).astype(xp.float64)
        err = max(err, checks.max_abs_error(checks.as_float64(y[row0:row1]), ref))
        block_base = checks.max_abs_error(base, ref)
        base_err = max(base_err, block_base if np.isfinite(block_base) else 0.0)
        finite = xp.abs(ref[xp.isfinite(ref)])
        if finite.size:
            scale = max(scale, float(finite.max()))
    if op == "softmax":
        tol = 2.0 * base_err + 2.0 * checks.EPS[dtype] * scale
    elif op == "log_softmax":
        tol = 2.0 * base_err + 2.0 * checks.EPS[dtype] * max(scale, 1.0)
    else:
        tol = 2.0 * base_err + 2.0 * EPS32 * max(scale, 1.0) + 4 * EPS32
    return bool(err <= tol), f"{op} {dtype}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def check_call(fn, x, out, op: str = "softmax", mask=None) -> tuple[bool, str]:
    """Correctness of a call before it is timed: poison `out`, run fn(x, out) once, synchronize (surfaces
    CUDA errors), then every output must be written and match the reference (`compare_rows`).
    numpy inputs work too (the API runs the kernels' NumPy models)."""
    poison(out)
    fn(x, out)
    if array_module(out) is not np:
        import cupy

        cupy.cuda.Device().synchronize()
    left = checks.unwritten(out)
    if left:
        return False, f"{left} outputs left unwritten"
    return compare_rows(out, x, op, mask)
