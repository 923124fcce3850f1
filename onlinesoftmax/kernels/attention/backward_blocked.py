"""attention_backward_01_blocked: the gradients of attention from its output and saved LSE (plan,
float64 reference, NumPy model, registration, the emulator's launches).

The kernel file (kernels/attention/attention_backward_01_blocked.cu) has three entries per dtype and
head dimension: `dot` (D = rowsum(dO * O)), `keys` (one block per key tile and kv head: dk, dv, and dq
by fp32 atomics into a zeroed buffer) and `queries` (deterministic dq: one block per query tile).
`reference` is float64 over the whole score matrix; `simulate` is the same formulas in float32 with
P recomputed from the saved LSE, the kernel's arithmetic but not its order of summation.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.registry import DTYPE_TAGS, DTYPES, Launch, Variant, register

NAME = "attention_backward_01_blocked"
SUPPORTED_D = (64, 128)
BLOCK_Q = BLOCK_K = 32
LD = 33
POINTER, INT, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


def shared_bytes(d: int) -> int:
    """Dynamic shared memory of the keys and queries kernels: Q, dO, K, V transposed, P and dS, LSE and D."""
    return 4 * (4 * d * LD + 2 * BLOCK_K * LD + 2 * BLOCK_Q)


def terms(dout, q, k, v, out, lse, causal, scale, dtype):
    """(dq, dk, dv) in `dtype` arithmetic from P = e^(s - LSE); dk, dv summed over each kv head's group."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    group = heads // kv_heads
    q, k, v, dout, out = (np.asarray(a, dtype) for a in (q, k, v, dout, out))
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    with np.errstate(all="ignore"):
        s = (q @ kk.swapaxes(-1, -2) * dtype(scale)).astype(dtype)
        visible = np.ones((n_q, n_k), bool) if not causal else \
            np.arange(n_k)[None, :] < ab.visible_limit(n_q, n_k)[:, None]
        lse = np.asarray(lse, dtype)[..., None]
        p = np.where(visible & np.isfinite(lse) | np.isnan(lse), np.exp(s - lse), 0).astype(dtype)
        dp = (dout @ vv.swapaxes(-1, -2)).astype(dtype)
        delta = (dout * out).sum(axis=-1, keepdims=True, dtype=dtype)
        ds = (p * (dp - delta)).astype(dtype)
        dq = (ds @ kk * dtype(scale)).astype(dtype)
        dk = (ds.swapaxes(-1, -2) @ q * dtype(scale)).astype(dtype)
        dv = (p.swapaxes(-1, -2) @ dout).astype(dtype)
    fold = lambda g: g.reshape(batch, kv_heads, group, n_k, d).sum(axis=2, dtype=dtype)   # noqa: E731
    return dq, fold(dk), fold(dv)


def reference(dout, q, k, v, causal: bool = False, scale: float | None = None):
    """float64 (dq, dk, dv) of attention(q, k, v) for the upstream gradient dout (its own forward)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    args = [np.asarray(a, np.float64) for a in (q, k, v)]
    out, lse = ab.reference(*args, causal=causal, scale=scale)
    return terms(np.asarray(dout, np.float64), *args, out, lse, causal, scale, np.float64)


def simulate(dout, q, k, v, out, lse, causal: bool = False, scale: float | None = None, **_):
    """The kernels' results for NumPy arrays: float32 math, each gradient in its input's dtype."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    dq, dk, dv = terms(dout, q, k, v, out, lse, causal, scale, np.float32)
    name = q.dtype.name
    return checks.to_dtype(dq, name), checks.to_dtype(dk, name), checks.to_dtype(dv, name)


# --- plan and registration -----------------------------------------------------------------------

def plan(variant: Variant, dout, dq, q=None, k=None, v=None, out=None, lse=None, dk=None, dv=None, causal=False,
         scale=1.0, deterministic=False):
    """runner(dout, dq, q=, k=, v=, out=, lse=, dk=, dv=): dot, then keys (and queries when deterministic;
    else dq from an fp32 buffer the runner owns, zeroed and added to atomically, then cast into dq)."""
    import cupy

    from onlinesoftmax.runtime import driver
    from onlinesoftmax.runtime.loader import get_kernel

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    rows = batch * heads * n_q
    delta = cupy.empty(rows, cupy.float32)
    acc = None if deterministic else cupy.empty(q.shape, cupy.float32)
    dims = {"heads": heads, "kv_heads": kv_heads, "n_q": n_q, "n_k": n_k, "scale": scale, "causal": int(bool(causal))}
    tail = (INT, INT, INT, INT, FLOAT, INT)
    dot = driver.prepare_launch(get_kernel(variant.path, f"{NAME}_dot_{tag}"), (rows,), (32,), 0, 1,
                                (POINTER,) * 3 + (INT,), fixed={2: delta.data.ptr, 3: d})
    keys = driver.prepare_launch(
        get_kernel(variant.path, f"{NAME}_keys_{tag}_d{d}"), (math.ceil(n_k / BLOCK_K), kv_heads, batch), (256,),
        shared_bytes(d), 1, (POINTER,) * 9 + tail,
        fixed={5: delta.data.ptr, 6: 0 if acc is None else acc.data.ptr, **dict(zip(range(9, 15), dims.values()))})
    queries = None if acc is not None else driver.prepare_launch(
        get_kernel(variant.path, f"{NAME}_queries_{tag}_d{d}"), (math.ceil(n_q / BLOCK_Q), heads, batch), (256,),
        shared_bytes(d), 1, (POINTER,) * 7 + tail, fixed={5: delta.data.ptr, **dict(zip(range(7, 13), dims.values()))})

    def run(dout, dq, q=None, k=None, v=None, out=None, lse=None, dk=None, dv=None, **_):
        dot(out.data.ptr, dout.data.ptr)
        if acc is not None:
            acc.fill(0)
        keys(q.data.ptr, k.data.ptr, v.data.ptr, dout.data.ptr, lse.data.ptr, dk.data.ptr, dv.data.ptr)
        if queries is not None:
            queries(q.data.ptr, k.data.ptr, v.data.ptr, dout.data.ptr, lse.data.ptr, dq.data.ptr)
        else:
            dq[...] = acc.astype(dq.dtype) if dq.dtype != acc.dtype else acc
    run.workspace = (delta, acc)
    return run


def geometry(n_q: int, n_k: int) -> Launch:
    """One kv head's keys launch (the grid grows by kv heads and batch)."""
    return Launch(grid=(math.ceil(n_k / BLOCK_K),), block=(256,), shared_bytes=shared_bytes(128))


BACKWARD = register(Variant(
    name=NAME, family="attention_backward", file=f"attention/{NAME}.cu", short="blocked",
    story="FlashAttention-2's backward in fp32: P recomputed from the saved LSE tile by tile, dk and dv per key "
          "block, dq by atomics or (deterministic) by a second pass over the key tiles",
    geometry=geometry, simulate=simulate, plan=plan, reads_per_element=2, writes_per_element=1, dtypes=DTYPES,
    entry=f"{NAME}_keys_f32_d128",
    entries=lambda variant: tuple(f"{NAME}_{kind}_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes for d in SUPPORTED_D
                                  for kind in ("keys", "queries")) + tuple(f"{NAME}_dot_{DTYPE_TAGS[t]}"
                                                                           for t in variant.dtypes)))


def emulate(dout, q, k, v, out, lse, causal: bool = False, deterministic: bool = False, *, schedule: str = "fixed",
            seed: int = 1):
    """(dq, dk, dv) of the kernels' own CUDA source on the CPU emulator, with the plan's grids and
    arguments, in a child process; numpy arrays of one dtype (lse float32). Outputs start poisoned."""
    from onlinesoftmax.runtime import emulator

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    entries = [f"{NAME}_dot_{tag}", f"{NAME}_keys_{tag}_d{d}", f"{NAME}_queries_{tag}_d{d}"]
    module = emulator.Module(BACKWARD.path, entries, schedule=schedule, seed=seed)
    words = (lambda a: np.ascontiguousarray(a)) if q.dtype == np.float32 else \
        (lambda a: np.ascontiguousarray(a).view(np.uint16))
    poison = np.float32(np.nan) if q.dtype == np.float32 else np.uint16(0x7FC1)
    dq, dk, dv = (np.full(shape, poison, np.float32 if q.dtype == np.float32 else np.uint16)
                  for shape in (q.shape, k.shape, v.shape))
    delta = np.full(batch * heads * n_q, np.nan, np.float32)
    acc = None if deterministic else np.zeros(q.shape, np.float32)
    scale = np.float32(1 / math.sqrt(d))
    dims = (*map(np.int32, (heads, kv_heads, n_q, n_k)), scale, np.int32(bool(causal)))
    lse = np.ascontiguousarray(lse, np.float32)
    module.launch(entries[0], (batch * heads * n_q,), (32,), (words(out), words(dout), delta, np.int32(d)), 0,
                  isolated=True)
    module.launch(entries[1], (math.ceil(n_k / BLOCK_K), kv_heads, batch), (256,),
                  (words(q), words(k), words(v), words(dout), lse, delta, acc, dk, dv, *dims), shared_bytes(d),
                  isolated=True)
    if deterministic:
        module.launch(entries[2], (math.ceil(n_q / BLOCK_Q), heads, batch), (256,),
                      (words(q), words(k), words(v), words(dout), lse, delta, dq, *dims), shared_bytes(d), isolated=True)
    else:
        dq = acc if q.dtype == np.float32 else checks.to_dtype(acc, q.dtype.name).view(np.uint16)
    view = (lambda a: a) if q.dtype == np.float32 else (lambda a: a.view(q.dtype))
    return view(dq), view(dk), view(dv)
