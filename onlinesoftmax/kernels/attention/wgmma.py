"""attention_10_wgmma, attention_11_wgmma_tma and attention_12_wgmma_overlap: the FlashAttention-2
forward on Hopper's warpgroup instruction (wgmma.mma_async, sm_90a); the second with TMA copies by a
producer warp; the third with a producer warpgroup (setmaxnreg) and each tile's softmax overlapped
with the previous tile's P V. Their NumPy model, plans, emulator launches and registration.

The arithmetic is attention_07_fragment_reuse's (mma.py's `simulate`: scores in fp32, the scale
applied as the exponent is taken, P rounded to the input dtype before P V), over key tiles of
KEYS = 128. One block takes BLOCK_Q = 128 query rows with two warpgroups of 64; both products are
wgmma instructions with operands in shared memory (wgmma_layout.py holds the layout in NumPy).
attention_11 and 12 compute the same numbers with the copies handed to TMA: their launch takes three
tensor maps (onlinesoftmax/runtime/tensor_maps.py), made per call for the tensors given. The
instruction exists only on sm_90a: the variants need compute capability 9.0, and the loader builds
them with NVRTC for sm_90a.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from onlinesoftmax.kernels.attention import mma
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register
from onlinesoftmax.runtime import driver, emulator, tensor_maps
from onlinesoftmax.runtime.loader import KERNELS_DIR, get_kernel

NAME = "attention_10_wgmma"
TMA_NAME = "attention_11_wgmma_tma"
OVERLAP_NAME = "attention_12_wgmma_overlap"
BLOCK_Q, KEYS, THREADS, GROUP_ROWS = 128, 128, 256, 64
# Per kernel: (threads: 2 consumer warpgroups and a producer warp or warpgroup, stages of K and V).
LAYOUT = {NAME: (THREADS, 2), TMA_NAME: (288, 2), OVERLAP_NAME: (384, 3)}
SUPPORTED_D = mma.SUPPORTED_D
DTYPES = mma.DTYPES


def shared_bytes(d: int, name: str = NAME) -> int:
    """Dynamic shared memory of one block: the Q tile, the stages of K and V tiles (16-bit), 1 KiB to
    align them to the swizzle's 1024 bytes, and the TMA kernels' barriers (Q's, a full and an empty
    one per stage), 8 bytes each."""
    stages = LAYOUT[name][1]
    barriers = 1 + 2 * stages if name != NAME else 0
    return (BLOCK_Q + 2 * stages * KEYS) * d * 2 + 1024 + 8 * barriers


def threads(name: str) -> int:
    return LAYOUT[name][0]


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


def plan_tma(variant: Variant, q, out, k=None, v=None, lse=None, causal=False, scale=1.0):
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    dtype = q.dtype.name
    entry = f"{variant.path.stem}_{DTYPE_TAGS[dtype]}_d{d}"
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry), grid(batch, heads, n_q), (threads(variant.name),), shared_bytes(d, variant.name), 1,
        (tensor_maps.TENSOR_MAP,) * 3 + (mma.POINTER,) * 5 + (mma.INT, mma.INT, mma.INT, mma.INT, mma.FLOAT, mma.INT),
        fixed={8: heads, 9: kv_heads, 10: n_q, 11: n_k, 12: scale * mma.LOG2E, 13: int(bool(causal))})

    last = [((), ())]   # (addresses, maps) of the latest call: a loop over the same tensors encodes them once

    def run(q, out, k=None, v=None, lse=None, **_):
        addresses = (q.data.ptr, k.data.ptr, v.data.ptr)
        seen, maps = last[0]   # one read of the pair: a thread never mixes another call's maps with its addresses
        if seen != addresses:
            maps = (tensor_maps.encode(addresses[0], dtype, batch * heads, n_q, d, BLOCK_Q),
                    tensor_maps.encode(addresses[1], dtype, batch * kv_heads, n_k, d, KEYS),
                    tensor_maps.encode(addresses[2], dtype, batch * kv_heads, n_k, d, KEYS))
            last[0] = (addresses, maps)
        launch(*maps, *addresses, out.data.ptr, None if lse is None else lse.data.ptr)
    return run


def emulate(q, k, v, causal: bool = False, scale: float | None = None, *, name: str = NAME, source: str | None = None,
            optimize: str = "-O2", schedule: str = "random", seed: int = 1):
    """(out, lse) of one launch of the kernel's own CUDA source (or `source` in its place) on the CPU
    emulator, with kernel `name`'s grid, block, shared memory and arguments (attention_11's tensor maps
    in the emulator's form), isolated in a child process;
    q (batch, heads, n_q, d), k and v (batch, kv_heads, n_k, d) numpy arrays in float16 or bfloat16.
    EmulatorFault when the emulator stops the launch or outputs are left unwritten."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    if q.dtype.name not in DTYPES or d not in SUPPORTED_D:
        raise ValueError(f"{NAME} takes {' or '.join(DTYPES)} with d in {SUPPORTED_D}, got {q.dtype.name} with d = {d}")
    path = KERNELS_DIR / "attention" / f"{name}.cu"
    entry = f"{name}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    module = emulator.Module(path, [entry], source=source, optimize=optimize, schedule=schedule, seed=seed)
    out = np.full(q.shape, mma.POISON_BITS, np.uint16)
    lse = np.full(q.shape[:3], mma.LSE_POISON, np.float32)
    scale_log2 = np.float32((1 / math.sqrt(d) if scale is None else scale) * mma.LOG2E)
    inputs = tuple(np.ascontiguousarray(a).view(np.uint16) for a in (q, k, v))
    maps = () if name == NAME else (tensor_maps.emulated(batch * heads, n_q, d, BLOCK_Q),
                                         tensor_maps.emulated(batch * kv_heads, n_k, d, KEYS),
                                         tensor_maps.emulated(batch * kv_heads, n_k, d, KEYS))
    module.launch(entry, grid(batch, heads, n_q), (threads(name),),
                  (*maps, *inputs, out, lse, *map(np.int32, (heads, kv_heads, n_q, n_k)), scale_log2,
                   np.int32(bool(causal))), shared_bytes(d, name), isolated=True)
    unwritten = int((out == mma.POISON_BITS).sum())
    if unwritten:
        raise emulator.EmulatorFault(f"{Path(path).name} left {unwritten} of {out.size} outputs unwritten")
    return out.view(q.dtype), lse


def _geometry(name: str):
    def geometry(n_q: int, n_k: int) -> Launch:
        """One head's launch (the grid grows by heads and batch), at d = 128."""
        return Launch(grid=(math.ceil(n_q / BLOCK_Q),), block=(threads(name),), shared_bytes=shared_bytes(128, name))
    return geometry


def _entries(variant: Variant) -> tuple[str, ...]:
    return tuple(f"{variant.path.stem}_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes for d in SUPPORTED_D)


def _register(name: str, short: str, story: str, plan_of) -> Variant:
    """A Hopper kernel (compute capability 9.0, the sm_90a build), with the one model of the three."""
    return register(Variant(
        name=name, family="attention", file=f"attention/{name}.cu", short=short, story=story,
        geometry=_geometry(name), simulate=simulate, plan=plan_of, reads_per_element=1, writes_per_element=1,
        dtypes=DTYPES, entry=f"{name}_bf16_d128", entries=_entries, min_cc=90, max_cc=90))


WGMMA = _register(NAME, "wgmma", "Hopper's warpgroup instruction: S = Q K^T and O += P V as wgmma, 64 rows by 128 "
                                 "keys each, operands read by the tensor cores from shared memory", plan)
WGMMA_TMA = _register(TMA_NAME, "wgmma_tma", "copies by TMA from one producer warp, mbarriers per stage: the two "
                                             "consumer warpgroups only compute", plan_tma)
WGMMA_OVERLAP = _register(OVERLAP_NAME, "wgmma_overlap", "a producer warpgroup hands its registers to the consumers "
                          "(setmaxnreg); each tile's softmax runs while the previous tile's P V is on the tensor cores",
                          plan_tma)
HOPPER = (WGMMA, WGMMA_TMA, WGMMA_OVERLAP)
