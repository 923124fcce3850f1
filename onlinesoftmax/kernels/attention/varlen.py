"""attention_09_varlen: prefill of sequences of different lengths packed without padding (plan, NumPy
model, float64 reference, registration, the emulator's launch).

Layout (flash-attention's varlen forward): q (total_q, heads, d), k and v (total_k, kv_heads, d);
cu_seqlens_q and cu_seqlens_k (batch + 1,) int32 offsets from 0 to the totals, sequence b owning
rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1. The LSE is (heads, total_q) float32. Per sequence the
kernel is attention_07_fragment_reuse on that sequence's rows with key tiles of KEYS[d] (32 at
d = 128, where the lengths it holds leave no registers for 48), so its model is attention_07's model
with those tiles on each sequence in turn; the grid covers the longest query sequence (`max_seqlen_q`, part of the
plan: a caller who passes an upper bound keeps one plan for every batch under it).
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from onlinesoftmax import attention_checks, checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register

NAME = "attention_09_varlen"
DTYPES = am.DTYPES
SUPPORTED_D = am.SUPPORTED_D
F32 = np.float32
POINTER, INT, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
KEYS = {64: 64, 128: 32}      # keys of a K or V tile, by d


def shared_bytes(d: int) -> int:
    """Dynamic shared memory of a block: the Q tile of 128 x d and two stages of a K and a V tile."""
    return (am.BLOCK_Q + 2 * 2 * KEYS[d]) * d * 2


def offsets(lengths) -> np.ndarray:
    """cu_seqlens of these lengths: (batch + 1,) int32, 0 first."""
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, np.int64))]).astype(np.int32)


def example(q_lengths, k_lengths, heads, kv_heads, d, dtype, seed=0):
    """Random packed (q, k, v, cu_seqlens_q, cu_seqlens_k) in numpy."""
    rng = np.random.default_rng(seed)
    cu_q, cu_k = offsets(q_lengths), offsets(k_lengths)
    q = checks.to_dtype(rng.standard_normal((int(cu_q[-1]), heads, d)).astype(F32), dtype)
    k, v = (checks.to_dtype(rng.standard_normal((int(cu_k[-1]), kv_heads, d)).astype(F32), dtype) for _ in range(2))
    return q, k, v, cu_q, cu_k


def sequences(q, k, v, cu_q, cu_k):
    """(b, rows of q, rows of k) per sequence, the rows as slices."""
    cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
    for b in range(len(cu_q) - 1):
        yield b, slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))


def _per_sequence(attend, q, k, v, cu_q, cu_k, dtype):
    """(out (total_q, heads, d), lse (heads, total_q)) from attend(q, k, v) on (1, heads, n, d) views of
    each sequence; a sequence without keys gives zeros and -inf."""
    total_q, heads, d = q.shape
    out = np.zeros((total_q, heads, d), dtype)
    lse = np.full((heads, total_q), -np.inf)
    for _, rows, keys in sequences(q, k, v, cu_q, cu_k):
        if rows.start == rows.stop or keys.start == keys.stop:
            continue
        o, l = attend(*(a[None].transpose(0, 2, 1, 3) for a in (q[rows], k[keys], v[keys])))
        out[rows], lse[:, rows] = o[0].transpose(1, 0, 2), l[0]
    return out, lse


def reference(q, k, v, cu_q, cu_k, causal: bool = False, scale: float | None = None):
    """float64 (out (total_q, heads, d), lse (heads, total_q)), each sequence alone."""
    return _per_sequence(lambda *a: ab.reference(*(np.asarray(x, np.float64) for x in a), causal=causal, scale=scale),
                         q, k, v, cu_q, cu_k, np.float64)


def simulate(q, k, v, cu_q, cu_k, causal: bool = False, scale: float | None = None):
    """(out in q's dtype, lse float32): attention_07's rounding points with key tiles of KEYS[d], on each
    sequence."""
    d = q.shape[-1]
    out, lse = _per_sequence(lambda *a: am.simulate(*a, causal=causal, scale=scale, block_k=KEYS[d]),
                             q, k, v, cu_q, cu_k, np.float32)
    return checks.to_dtype(out, q.dtype.name), lse.astype(F32)


def compare(out, lse, q, k, v, cu_q, cu_k, causal: bool = False) -> tuple[bool, str]:
    """(passed, message) for the kernel's out and lse (host arrays) against the float64 reference: no
    NaN; zeros and -inf where a query sees no key; the output within checks.tolerance of the model's
    own error (twice it plus two ulps), the LSE within 1e-5 relative."""
    ref, lse_ref = reference(q, k, v, cu_q, cu_k, causal=causal)
    model, _ = simulate(q, k, v, cu_q, cu_k, causal=causal)
    return attention_checks.compare_outputs(out, lse, ref, lse_ref, model, q.dtype.name,
                                            by_lse_row=lambda y: y.transpose(1, 0, 2))


# --- plan and registration -----------------------------------------------------------------------

def grid(batch: int, heads: int, max_seqlen_q: int) -> tuple[int, int, int]:
    return max(1, math.ceil(max_seqlen_q / am.BLOCK_Q)), heads, batch


def arguments(heads: int, kv_heads: int, total_q: int, scale: float, causal: bool) -> tuple:
    """The launch's last five arguments, after the seven pointers."""
    return heads, kv_heads, total_q, scale * am.LOG2E, int(bool(causal))


def plan_varlen(variant: Variant, q, out, k=None, v=None, cu_seqlens_q=None, cu_seqlens_k=None, lse=None,
                max_seqlen_q=1, causal=False, scale=1.0):
    """runner(q, out, k=, v=, cu_seqlens_q=, cu_seqlens_k=, lse=): one launch over max_seqlen_q."""
    from onlinesoftmax.runtime import driver
    from onlinesoftmax.runtime.loader import get_kernel

    total_q, heads, d = q.shape
    entry = f"{NAME}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry), grid(cu_seqlens_q.shape[0] - 1, heads, max_seqlen_q),
        (am.threads(am.REUSE),), shared_bytes(d), 1, (POINTER,) * 7 + (INT, INT, INT, FLOAT, INT),
        fixed=dict(enumerate(arguments(heads, k.shape[1], total_q, scale, causal), start=7)))

    def run(q, out, k=None, v=None, cu_seqlens_q=None, cu_seqlens_k=None, lse=None, **_):
        launch(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, None if lse is None else lse.data.ptr,
               cu_seqlens_q.data.ptr, cu_seqlens_k.data.ptr)
    return run


def geometry(n_q: int, n_k: int) -> Launch:
    """One sequence of n_q queries and one head, at d = 128 (as attention_07's)."""
    return Launch(grid=(math.ceil(n_q / am.BLOCK_Q),), block=(am.threads(am.REUSE),),
                  shared_bytes=shared_bytes(128))


VARLEN = register(Variant(
    name=NAME, family="attention", file=f"attention/{NAME}.cu", short="varlen",
    story="prefill of sequences of different lengths packed without padding: attention_07 with each "
          "sequence's rows found through cu_seqlens",
    geometry=geometry, simulate=simulate, plan=plan_varlen, reads_per_element=1, writes_per_element=1,
    dtypes=DTYPES, entry=f"{NAME}_bf16_d128",
    entries=lambda variant: tuple(f"{NAME}_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes for d in SUPPORTED_D),
    min_cc=80))


def emulate(q, k, v, cu_q, cu_k, causal: bool = False, *, max_seqlen_q: int | None = None,
            schedule: str = "random", seed: int = 1, source: str | None = None):
    """(out, lse) of the kernel's own CUDA source (or the text `source` in its place) on the CPU
    emulator (runtime/emulator.py) with this plan's grid and arguments, in a child process; numpy
    float16 or bfloat16 inputs. Outputs start poisoned; EmulatorFault when any is left unwritten."""
    from onlinesoftmax.runtime import emulator

    total_q, heads, d = q.shape
    cu_q, cu_k = (np.ascontiguousarray(a, np.int32) for a in (cu_q, cu_k))
    longest = int(np.diff(cu_q).max(initial=0)) if max_seqlen_q is None else max_seqlen_q
    entry = f"{NAME}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    module = emulator.Module(VARLEN.path, [entry], source=source, schedule=schedule, seed=seed)
    out = np.full(q.shape, am.POISON_BITS, np.uint16)
    lse = np.full((heads, total_q), am.LSE_POISON, np.float32)
    words = [np.ascontiguousarray(a).view(np.uint16) for a in (q, k, v)]
    heads_, kv_heads, total, scale_log2, causal_ = arguments(heads, k.shape[1], total_q, 1 / math.sqrt(d), causal)
    module.launch(entry, grid(len(cu_q) - 1, heads, longest), (am.threads(am.REUSE),),
                  (*words, out, lse, cu_q, cu_k, *map(np.int32, (heads_, kv_heads, total)), np.float32(scale_log2),
                   np.int32(causal_)), shared_bytes(d), isolated=True)
    unwritten = int((out == am.POISON_BITS).sum())
    if unwritten:
        raise emulator.EmulatorFault(f"{NAME} left {unwritten} of {out.size} outputs unwritten")
    return out.view(q.dtype), lse
