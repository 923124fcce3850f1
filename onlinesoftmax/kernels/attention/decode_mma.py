"""attention_06_decode_mma: split-K decoding with the heads of a kv head on tensor cores (plan,
NumPy model, registration).

The kernel (kernels/attention/attention_06_decode_mma.cu) splits the cache over blocks as
attention_02_decode_split does and merges the splits with the same second kernel, but a block's
rows (the heads that share one kv head, times the queries: at most ROWS of them) are the columns
of m16n8k16 tiles: S^T = K Q^T and O^T += V^T P^T. Inside a split, warp w takes the key steps
w, w + WARPS, ... of KEYS keys each and keeps the online state (m, l, O) of every row; the warps'
states combine in shared memory, the splits in the merge kernel.

The model (`simulate`) follows those rounding points: scores and sums in float32, P rounded to
the input dtype before P V (the mma's operand) while l sums the float32 P, each warp's steps in
its order, the warps and then the splits combined by their LSEs (base 2). The order of the
additions inside an mma is the hardware's, so the kernel is checked against the float64
reference with the error rule and against this model with the same tolerance, not bit for bit.
"""
from __future__ import annotations

import math

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register

NAME = "attention_06_decode_mma"
DTYPES = ("float16", "bfloat16")
SUPPORTED_D = (64, 128)
ROWS, KEYS, WARPS = 8, 16, 4       # query rows per block (the mma's n), keys per warp step (its m), warps
BLOCKS_PER_SM = 3                  # resident per SM, as __launch_bounds__(128, 3) promises (the H200 holds 3)
F32 = np.float32


def row_chunks(heads: int, kv_heads: int, n_q: int) -> int:
    """Blocks per (split, kv head): the kv head's rows (heads sharing it times n_q) in chunks of ROWS."""
    return math.ceil(heads // kv_heads * n_q / ROWS)


def splits_for(batch: int, heads: int, kv_heads: int, n_q: int, n_k: int, sms: int,
               blocks_per_sm: int = BLOCKS_PER_SM) -> tuple[int, int]:
    """(splits, keys per split): attention_02's rule (one wave of resident blocks, no split under its
    minimum of keys) with this kernel's blocks per (split, kv head) and per SM."""
    return ab.decode_splits(batch, kv_heads, row_chunks(heads, kv_heads, n_q), n_k, sms, blocks_per_sm)


def _warp_state(q_rows, limits, steps, dtype):
    """One warp over its steps of one split: (m, l, O) per row, O unnormalized, base 2.
    q_rows (R, d) pre-scaled into base 2; steps: (first keys, K slices, V slices); limits (R,)
    absolute (keys j < limit are visible)."""
    n_rows, d = q_rows.shape
    m = np.full(n_rows, -np.inf, F32)
    l = np.zeros(n_rows, F32)
    o = np.zeros((n_rows, d), F32)
    for j0, ks, vs in zip(*steps):
        cols = j0 + np.arange(ks.shape[0])
        s = (q_rows @ ks.T).astype(F32)
        s = np.where(cols[None, :] < limits[:, None], s, F32(-np.inf)).astype(F32)
        m_new = np.fmax(m, s.max(axis=1))
        base = np.where(m_new == -np.inf, F32(0), m_new).astype(F32)
        p = np.exp2(s - base[:, None]).astype(F32)
        alpha = np.exp2(m - base).astype(F32)
        l = (l * alpha + p.sum(axis=1, dtype=F32)).astype(F32)
        p16 = checks.to_dtype(p, dtype).astype(F32)
        o = (o * alpha[:, None] + (p16 @ vs).astype(F32)).astype(F32)
        m = m_new
    return m, l, o


def _combine(states):
    """(value = O / l, lse base 2) of several (m, l, O) of the same rows, weighed by 2^(m - max)."""
    ms = np.stack([s[0] for s in states])
    mm = ms.max(axis=0)
    base = np.where(mm == -np.inf, F32(0), mm).astype(F32)
    weights = np.exp2(ms - base).astype(F32)
    ll = sum(w * s[1] for w, s in zip(weights, states)).astype(F32)
    oo = sum(w[:, None] * s[2] for w, s in zip(weights, states)).astype(F32)
    value = np.where(ll[:, None] != 0, oo / np.where(ll != 0, ll, 1)[:, None], 0).astype(F32)
    lse2 = np.where(ll != 0, mm + np.log2(np.where(ll != 0, ll, 1)), -np.inf).astype(F32)
    return value, lse2


def simulate(q, k, v, causal: bool = False, scale: float | None = None, sms: int = 132):
    """(out in q's dtype, lse float32 natural log) as the kernel computes them on a GPU with `sms` SMs."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    group = heads // kv_heads
    dtype = q.dtype.name
    scale_log2 = F32((1.0 / math.sqrt(d) if scale is None else scale) * ab.LOG2E)
    q32, k32, v32 = (np.asarray(a, dtype=F32) for a in (q, k, v))
    splits, per_split = splits_for(batch, heads, kv_heads, n_q, n_k, sms)
    query_limit = ab.visible_limit(n_q, n_k) if causal else np.full(n_q, n_k)
    out = np.zeros((batch, heads, n_q, d), F32)
    lse = np.empty((batch, heads, n_q), F32)
    with np.errstate(all="ignore"):
        for b in range(batch):
            for kh in range(kv_heads):
                rows = np.arange(group * n_q)                 # (head in group, query), as the kernel
                heads_of, queries = kh * group + rows // n_q, rows % n_q
                q_rows = (q32[b, heads_of, queries] * scale_log2).astype(F32)
                parts = []
                for split in range(splits):
                    begin, end = split * per_split, min(n_k, (split + 1) * per_split)
                    limits = np.minimum(query_limit[queries], end)
                    warps = []
                    for w in range(WARPS):
                        starts = range(begin + KEYS * w, end, KEYS * WARPS)
                        steps = ([j0 for j0 in starts], [k32[b, kh, j0:min(j0 + KEYS, end)] for j0 in starts],
                                 [v32[b, kh, j0:min(j0 + KEYS, end)] for j0 in starts])
                        warps.append(_warp_state(q_rows, limits, steps, dtype))
                    parts.append(_combine(warps))
                if splits == 1:
                    value, lse2 = parts[0]
                else:   # the merge kernel: the splits' O / l weighed by 2^(lse_s - max)
                    value, lse2 = _combine([(p[1], np.ones_like(p[1]), p[0]) for p in parts])
                out[b, heads_of, queries] = value
                lse[b, heads_of, queries] = (lse2 * F32(math.log(2))).astype(F32)
    return checks.to_dtype(out, dtype), lse


# --- plan and registration -----------------------------------------------------------------------

def plan_decode_mma(variant: Variant, q, out, k=None, v=None, lse=None, causal=False, scale=1.0):
    from onlinesoftmax.runtime import device

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    per_sm = ab.resident_per_sm(variant, f"{NAME}_{tag}_d{d}")
    splits, keys = splits_for(batch, heads, kv_heads, n_q, n_k, device.sm_count(), per_sm)
    return ab.decode_runner(variant, q, k, f"{NAME}_{tag}_d{d}", f"{NAME}_merge_{tag}_d{d}",
                            (splits, kv_heads * row_chunks(heads, kv_heads, n_q), batch), splits, keys, scale,
                            causal, ROWS, per_sm)


def geometry(n_q: int, n_k: int) -> Launch:
    """One (batch, kv head) with one row chunk on this GPU (the H200's SM count without one)."""
    from onlinesoftmax.runtime import device

    splits, _ = ab.decode_splits(1, 1, 1, n_k, device.sm_count(), BLOCKS_PER_SM)
    return Launch(grid=(splits,), block=(32 * WARPS,))


DECODE_MMA = register(Variant(
    name=NAME, family="attention", file=f"attention/{NAME}.cu", short="decode_mma",
    story="decoding with grouped heads on tensor cores: the heads of a kv head are the 8 columns of "
          "S^T = K Q^T and O^T += V^T P^T, the cache split over blocks as in attention_02",
    geometry=geometry, simulate=simulate, plan=plan_decode_mma, reads_per_element=1, writes_per_element=1,
    dtypes=DTYPES, entry=f"{NAME}_bf16_d128",
    entries=lambda variant: tuple(f"{NAME}{kind}_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes
                                  for d in SUPPORTED_D for kind in ("", "_merge")),
    min_cc=80))


def emulate(q, k, v, causal: bool = False, *, sms: int = 132, schedule: str = "random", seed: int = 1):
    """(out, lse) of the kernel's own CUDA source run on the CPU emulator (runtime/emulator.py), both
    launches, with this plan's grid, block and arguments on a GPU of `sms` SMs, in a child process;
    q, k, v numpy float16 or bfloat16 arrays. Outputs and partials start poisoned."""
    from onlinesoftmax.runtime import emulator

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    splits, keys = splits_for(batch, heads, kv_heads, n_q, n_k, sms)
    split_entry, merge_entry = f"{NAME}_{tag}_d{d}", f"{NAME}_merge_{tag}_d{d}"
    module = emulator.Module(DECODE_MMA.path, [split_entry, merge_entry], schedule=schedule, seed=seed)
    out = np.full(q.shape, 0x7B7B, np.uint16)
    lse = np.full(q.shape[:3], np.float32(1.2345e30), np.float32)
    n_rows = batch * heads * n_q
    o_part = np.full((splits, n_rows, d), np.nan, np.float32)
    lse_part = np.full((splits, n_rows), np.nan, np.float32)
    inputs = [np.ascontiguousarray(a).view(np.uint16) for a in (q, k, v)]
    scale_log2 = np.float32(1 / math.sqrt(d) * ab.LOG2E)
    module.launch(split_entry, (splits, kv_heads * row_chunks(heads, kv_heads, n_q), batch), (32 * WARPS,),
                  (*inputs, o_part, lse_part, out, lse, *map(np.int32, (heads, kv_heads, n_q, n_k, keys)), scale_log2,
                   np.int32(bool(causal))), 0, isolated=True)
    if splits > 1:
        module.launch(merge_entry, (n_rows,), (d,), (o_part, lse_part, out, lse, np.int32(splits)), 0, isolated=True)
    if int((out == 0x7B7B).sum()):
        raise emulator.EmulatorFault(f"{NAME} left {int((out == 0x7B7B).sum())} outputs unwritten")
    return out.view(q.dtype), lse
