"""attention_10_wgmma: the FlashAttention-2 forward on Hopper's warpgroup instruction (wgmma.mma_async,
sm_90a): its NumPy model, plan, emulator launch and registration.

The arithmetic is attention_07_fragment_reuse's (mma.py's `simulate`: scores in fp32, the scale
applied as the exponent is taken, P rounded to the input dtype before P V), over key tiles of
KEYS = 128. One block takes BLOCK_Q = 128 query rows with two warpgroups of 64; both products are
wgmma instructions with operands in shared memory (wgmma_layout.py holds the layout in NumPy).
The instruction exists only on sm_90a: the variant needs compute capability 9.0, and the loader
builds it with NVRTC for sm_90a.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from onlinesoftmax.kernels.attention import mma
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register
from onlinesoftmax.runtime import driver, emulator
from onlinesoftmax.runtime.loader import KERNELS_DIR, get_kernel

NAME = "attention_10_wgmma"
BLOCK_Q, KEYS, THREADS, GROUP_ROWS = 128, 128, 256, 64
SUPPORTED_D = mma.SUPPORTED_D
DTYPES = mma.DTYPES


def shared_bytes(d: int) -> int:
    """Dynamic shared memory of one block: the Q tile, two stages of K and V tiles (16-bit), and
    1 KiB to align them to the swizzle's 1024 bytes."""
    return (BLOCK_Q + 4 * KEYS) * d * 2 + 1024


def simulate(q, k, v, causal: bool = False, scale: float | None = None):
    """attention_10_wgmma's model: attention_07's rounding points over key tiles of KEYS."""
    return mma.simulate(q, k, v, causal, scale, block_k=KEYS)


def grid(batch: int, heads: int, n_q: int) -> tuple[int, int, int]:
    return math.ceil(n_q / BLOCK_Q), heads, batch


def plan(variant: Variant, q, out, k=None, v=None, lse=None, causal=False, scale=1.0):
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    entry = f"{variant.path.stem}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry), grid(batch, heads, n_q), (THREADS,), shared_bytes(d), 1,
        (mma.POINTER,) * 5 + (mma.INT, mma.INT, mma.INT, mma.INT, mma.FLOAT, mma.INT),
        fixed={5: heads, 6: kv_heads, 7: n_q, 8: n_k, 9: scale * mma.LOG2E, 10: int(bool(causal))})

    def run(q, out, k=None, v=None, lse=None, **_):
        launch(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, None if lse is None else lse.data.ptr)
    return run


def emulate(q, k, v, causal: bool = False, scale: float | None = None, *, source: str | None = None,
            optimize: str = "-O2", schedule: str = "random", seed: int = 1):
    """(out, lse) of one launch of the kernel's own CUDA source (or `source` in its place) on the CPU
    emulator, with this plan's grid, block, shared memory and arguments, isolated in a child process;
    q (batch, heads, n_q, d), k and v (batch, kv_heads, n_k, d) numpy arrays in float16 or bfloat16.
    EmulatorFault when the emulator stops the launch or outputs are left unwritten."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    if q.dtype.name not in DTYPES or d not in SUPPORTED_D:
        raise ValueError(f"{NAME} takes {' or '.join(DTYPES)} with d in {SUPPORTED_D}, got {q.dtype.name} with d = {d}")
    path = KERNELS_DIR / "attention" / f"{NAME}.cu"
    entry = f"{NAME}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    module = emulator.Module(path, [entry], source=source, optimize=optimize, schedule=schedule, seed=seed)
    out = np.full(q.shape, mma.POISON_BITS, np.uint16)
    lse = np.full(q.shape[:3], mma.LSE_POISON, np.float32)
    scale_log2 = np.float32((1 / math.sqrt(d) if scale is None else scale) * mma.LOG2E)
    inputs = (np.ascontiguousarray(a).view(np.uint16) for a in (q, k, v))
    module.launch(entry, grid(batch, heads, n_q), (THREADS,),
                  (*inputs, out, lse, *map(np.int32, (heads, kv_heads, n_q, n_k)), scale_log2, np.int32(bool(causal))),
                  shared_bytes(d), isolated=True)
    unwritten = int((out == mma.POISON_BITS).sum())
    if unwritten:
        raise emulator.EmulatorFault(f"{Path(path).name} left {unwritten} of {out.size} outputs unwritten")
    return out.view(q.dtype), lse


def _geometry(n_q: int, n_k: int) -> Launch:
    """One head's launch (the grid grows by heads and batch), at d = 128."""
    return Launch(grid=(math.ceil(n_q / BLOCK_Q),), block=(THREADS,), shared_bytes=shared_bytes(128))


def _entries(variant: Variant) -> tuple[str, ...]:
    return tuple(f"{variant.path.stem}_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes for d in SUPPORTED_D)


WGMMA = register(Variant(
    name=NAME, family="attention", file=f"attention/{NAME}.cu", short="wgmma",
    story="Hopper's warpgroup instruction: S = Q K^T and O += P V as wgmma, 64 rows by 128 keys each, "
          "operands read by the tensor cores from shared memory",
    geometry=_geometry, simulate=simulate, plan=plan, reads_per_element=1, writes_per_element=1,
    dtypes=DTYPES, entry=f"{NAME}_bf16_d128", entries=_entries, min_cc=90))
