"""attention_backward_02_mma: the gradients of attention on tensor cores (plan, NumPy model,
registration, the emulator's launches).

Two entries per dtype: `dot` (D = rowsum(dO * O), row_dot.cuh) and `keys` (one block per 64 keys of
a kv head: dk and dv, and dq by fp32 atomics into a zeroed buffer that the runner then casts). The
model follows the kernel's rounding points: S, dP and every product sum in float32 from 16-bit
operands; P and dS rounded to the input dtype before they are multiplied (the mma's A operand).
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register

NAME = "attention_backward_02_mma"
DTYPES = ("float16", "bfloat16")
SUPPORTED_D = (64, 128)
KEYS = QUERIES = 64
THREADS = 128
F32 = np.float32
POINTER, INT, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


def shared_bytes(d: int) -> int:
    """K, V, Q, dO tiles of 64 x d and dS^T of 64 x 64 (16-bit), the tile's LSE and D (floats)."""
    return 2 * (2 * KEYS * d + 2 * QUERIES * d + KEYS * QUERIES) + 4 * 2 * QUERIES


def simulate(dout, q, k, v, out, lse, causal: bool = False, scale: float | None = None, **_):
    """(dq, dk, dv) in q's dtype as the kernel computes them: float32 sums, P and dS rounded to the
    input dtype before their products (the order of the additions is the hardware's)."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    group, name = heads // kv_heads, q.dtype.name
    scale = F32(1.0 / math.sqrt(d) if scale is None else scale)
    q, k, v, dout, out = (np.asarray(a, F32) for a in (q, k, v, dout, out))
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    round16 = lambda a: checks.to_dtype(a, name).astype(F32)   # noqa: E731
    with np.errstate(all="ignore"):
        visible = np.ones((n_q, n_k), bool) if not causal else \
            np.arange(n_k)[None, :] < ab.visible_limit(n_q, n_k)[:, None]
        lse = np.asarray(lse, F32)[..., None]
        s = (q @ kk.swapaxes(-1, -2)).astype(F32)
        p = np.where(visible & (np.isfinite(lse) | np.isnan(lse)),
                     np.exp2(s * F32(scale * F32(np.log2(np.e))) - lse * F32(np.log2(np.e))), 0).astype(F32)
        dp = (dout @ vv.swapaxes(-1, -2)).astype(F32)
        delta = (dout * out).sum(axis=-1, keepdims=True, dtype=F32)
        ds = (p * (dp - delta)).astype(F32)
        p16, ds16 = round16(p), round16(ds)
        dq = (ds16 @ kk).astype(F32) * scale
        dk = (ds16.swapaxes(-1, -2) @ q).astype(F32) * scale
        dv = (p16.swapaxes(-1, -2) @ dout).astype(F32)
    fold = lambda g: g.reshape(batch, kv_heads, group, n_k, d).sum(axis=2, dtype=F32)   # noqa: E731
    return checks.to_dtype(dq, name), checks.to_dtype(fold(dk), name), checks.to_dtype(fold(dv), name)


# --- plan and registration -----------------------------------------------------------------------

def arguments(heads, kv_heads, n_q, n_k, scale, causal) -> tuple:
    return heads, kv_heads, n_q, n_k, scale, int(bool(causal))


def plan(variant: Variant, dout, dq, q=None, k=None, v=None, out=None, lse=None, dk=None, dv=None, causal=False,
         scale=1.0, **_):
    """runner(dout, dq, q=, k=, v=, out=, lse=, dk=, dv=): dot, then keys into an fp32 dq buffer the
    runner owns (zeroed first), cast into dq."""
    import cupy

    from onlinesoftmax.runtime import driver
    from onlinesoftmax.runtime.loader import get_kernel

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    rows = batch * heads * n_q
    delta = cupy.empty(rows, cupy.float32)
    acc = cupy.empty(q.shape, cupy.float32)
    dot = driver.prepare_launch(get_kernel(variant.path, f"{NAME}_dot_{tag}"), (rows,), (32,), 0, 1,
                                (POINTER,) * 3 + (INT,), fixed={2: delta.data.ptr, 3: d})
    keys = driver.prepare_launch(
        get_kernel(variant.path, f"{NAME}_keys_{tag}_d{d}"), (math.ceil(n_k / KEYS), kv_heads, batch), (THREADS,),
        shared_bytes(d), 1, (POINTER,) * 9 + (INT, INT, INT, INT, FLOAT, INT),
        fixed={5: delta.data.ptr, 6: acc.data.ptr,
               **dict(enumerate(arguments(heads, kv_heads, n_q, n_k, scale, causal), start=9))})

    def run(dout, dq, q=None, k=None, v=None, out=None, lse=None, dk=None, dv=None, **_):
        dot(out.data.ptr, dout.data.ptr)
        acc.fill(0)
        keys(q.data.ptr, k.data.ptr, v.data.ptr, dout.data.ptr, lse.data.ptr, dk.data.ptr, dv.data.ptr)
        dq[...] = acc.astype(dq.dtype)
    run.workspace = (delta, acc)
    return run


def geometry(n_q: int, n_k: int) -> Launch:
    """One kv head's keys launch (the grid grows by kv heads and batch)."""
    return Launch(grid=(math.ceil(n_k / KEYS),), block=(THREADS,), shared_bytes=shared_bytes(128))


BACKWARD_MMA = register(Variant(
    name=NAME, family="attention_backward", file=f"attention/{NAME}.cu", short="mma",
    story="the backward on tensor cores: S^T, dP^T, dV, dK per warp of 16 keys from the accumulators, "
          "dS^T through shared memory for dQ, added by fp32 atomics",
    geometry=geometry, simulate=simulate, plan=plan, reads_per_element=2, writes_per_element=1, dtypes=DTYPES,
    entry=f"{NAME}_keys_bf16_d128",
    entries=lambda variant: tuple(f"{NAME}_keys_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes for d in SUPPORTED_D)
    + tuple(f"{NAME}_dot_{DTYPE_TAGS[t]}" for t in variant.dtypes), min_cc=80))


def emulate(dout, q, k, v, out, lse, causal: bool = False, *, schedule: str = "random", seed: int = 1,
            source: str | None = None):
    """(dq, dk, dv) of the kernel's own CUDA source (or the text `source`) on the CPU emulator, with
    the plan's grids and arguments, in a child process; numpy float16 or bfloat16 arrays (lse
    float32). Outputs start poisoned."""
    from onlinesoftmax.runtime import emulator

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    entries = [f"{NAME}_dot_{tag}", f"{NAME}_keys_{tag}_d{d}"]
    module = emulator.Module(BACKWARD_MMA.path, entries, source=source, schedule=schedule, seed=seed)
    words = lambda a: np.ascontiguousarray(a).view(np.uint16)   # noqa: E731
    dk, dv = (np.full(shape, 0x7FC1, np.uint16) for shape in (k.shape, v.shape))
    delta = np.full(batch * heads * n_q, np.nan, np.float32)
    acc = np.zeros(q.shape, np.float32)
    scale = np.float32(1 / math.sqrt(d))
    dims = arguments(*map(np.int32, (heads, kv_heads, n_q, n_k)), scale, causal)
    module.launch(entries[0], (batch * heads * n_q,), (32,), (words(out), words(dout), delta, np.int32(d)), 0,
                  isolated=True)
    module.launch(entries[1], (math.ceil(n_k / KEYS), kv_heads, batch), (THREADS,),
                  (words(q), words(k), words(v), words(dout), np.ascontiguousarray(lse, np.float32), delta, acc, dk, dv,
                   *dims[:4], dims[4], np.int32(dims[5])), shared_bytes(d), isolated=True)
    return checks.to_dtype(acc, q.dtype.name), dk.view(q.dtype), dv.view(q.dtype)
