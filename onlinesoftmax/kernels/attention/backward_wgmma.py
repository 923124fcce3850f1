"""attention_backward_04_wgmma: attention_backward_03_pipelined's block (128 keys, the next query tile
copied during this one) with every product a Hopper warpgroup instruction (wgmma, sm_90a): plan,
registration, the emulator's launches.

The arithmetic, and so the NumPy model, is attention_backward_02_mma's: S, dP and every product sum in
float32 from 16-bit operands, P and dS rounded to the input dtype before they are multiplied; only
the order of the fp32 additions (inside an instruction, and into dq by atomics) differs.
"""
from __future__ import annotations

import math

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import backward_mma as bm
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register

NAME = "attention_backward_04_wgmma"
DTYPES, SUPPORTED_D = bm.DTYPES, bm.SUPPORTED_D
KEYS, QUERIES = 128, 64
THREADS = 256
DOT_ROWS = 8   # rows of a dot block, a warp each
simulate = bm.simulate


def shared_bytes(d: int) -> int:
    """K and V tiles of 128 x d, two Q and two dO tiles of 64 x d, dS of 64 x 128 (16-bit), two tiles'
    LSE and D (floats), and 1 KiB to align the tiles to the swizzle's 1024 bytes."""
    return 2 * (2 * KEYS * d + 4 * QUERIES * d + KEYS * QUERIES) + 4 * 4 * QUERIES + 1024


def plan(variant: Variant, dout, dq, q=None, k=None, v=None, out=None, lse=None, dk=None, dv=None, causal=False,
         scale=1.0, **_):
    """runner(dout, dq, q=, k=, v=, out=, lse=, dk=, dv=): dot (D, and the fp32 dq buffer the runner owns
    zeroed), then keys into that buffer, cast into dq."""
    import cupy

    from onlinesoftmax.runtime import driver
    from onlinesoftmax.runtime.loader import get_kernel

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    rows = batch * heads * n_q
    delta = cupy.empty(rows, cupy.float32)
    acc = cupy.empty(q.shape, cupy.float32)
    dot = driver.prepare_launch(get_kernel(variant.path, f"{NAME}_dot_{tag}"), (math.ceil(rows / DOT_ROWS),),
                                (32 * DOT_ROWS,), 0, 1, (bm.POINTER,) * 4 + (bm.INT,) * 2,
                                fixed={2: delta.data.ptr, 3: acc.data.ptr, 4: rows, 5: d})
    keys = driver.prepare_launch(
        get_kernel(variant.path, f"{NAME}_keys_{tag}_d{d}"), (math.ceil(n_k / KEYS), kv_heads, batch), (THREADS,),
        shared_bytes(d), 1, (bm.POINTER,) * 9 + (bm.INT,) * 4 + (bm.FLOAT, bm.INT),
        fixed={5: delta.data.ptr, 6: acc.data.ptr,
               **dict(enumerate(bm.arguments(heads, kv_heads, n_q, n_k, scale, causal), start=9))})

    def run(dout, dq, q=None, k=None, v=None, out=None, lse=None, dk=None, dv=None, **_):
        dot(out.data.ptr, dout.data.ptr)   # D, and acc zeroed
        keys(q.data.ptr, k.data.ptr, v.data.ptr, dout.data.ptr, lse.data.ptr, dk.data.ptr, dv.data.ptr)
        cupy.copyto(dq, acc, casting="unsafe")   # one pass: fp32 to dq's dtype
    run.workspace = (delta, acc)
    return run


def geometry(n_q: int, n_k: int) -> Launch:
    """One kv head's keys launch (the grid grows by kv heads and batch)."""
    return Launch(grid=(math.ceil(n_k / KEYS),), block=(THREADS,), shared_bytes=shared_bytes(128))


BACKWARD_WGMMA = register(Variant(
    name=NAME, family="attention_backward", file=f"attention/{NAME}.cu", short="wgmma",
    story="the backward's five products as Hopper's warpgroup instruction: 64 keys a warpgroup, operands read "
          "by the tensor cores from shared memory, P^T and dS^T from registers",
    geometry=geometry, simulate=simulate, plan=plan, reads_per_element=2, writes_per_element=1, dtypes=DTYPES,
    entry=f"{NAME}_keys_bf16_d128",
    entries=lambda variant: tuple(f"{NAME}_keys_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes for d in SUPPORTED_D)
    + tuple(f"{NAME}_dot_{DTYPE_TAGS[t]}" for t in variant.dtypes), min_cc=90, max_cc=90))


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
    module = emulator.Module(BACKWARD_WGMMA.path, entries, source=source, schedule=schedule, seed=seed)
    words = lambda a: np.ascontiguousarray(a).view(np.uint16)   # noqa: E731
    dk, dv = (np.full(shape, 0x7FC1, np.uint16) for shape in (k.shape, v.shape))
    delta = np.full(batch * heads * n_q, np.nan, np.float32)
    acc = np.full(q.shape, np.nan, np.float32)   # the dot entry zeroes it
    scale = np.float32(1 / math.sqrt(d))
    dims = bm.arguments(*map(np.int32, (heads, kv_heads, n_q, n_k)), scale, causal)
    rows = batch * heads * n_q
    module.launch(entries[0], (math.ceil(rows / DOT_ROWS),), (32 * DOT_ROWS,),
                  (words(out), words(dout), delta, acc, np.int32(rows), np.int32(d)), 0, isolated=True)
    module.launch(entries[1], (math.ceil(n_k / KEYS), kv_heads, batch), (THREADS,),
                  (words(q), words(k), words(v), words(dout), np.ascontiguousarray(lse, np.float32), delta, acc, dk, dv,
                   *dims[:4], dims[4], np.int32(dims[5])), shared_bytes(d), isolated=True)
    return checks.to_dtype(acc, q.dtype.name), dk.view(q.dtype), dv.view(q.dtype)
