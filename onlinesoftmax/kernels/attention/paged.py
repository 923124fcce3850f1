"""attention_08_paged_decode: split-K decoding over a paged KV cache with one length per sequence
(plan, NumPy model, float64 reference, registration, the emulator's launch).

The cache is two pools [pages][page_size][kv_heads][d] (keys, values), a page table
[batch][pages_per_seq] of page numbers and lengths [batch]: key j of sequence b is slot
j % page_size of page page_table[b][j // page_size]. `gather` turns that into one contiguous
[kv_heads][length][d] cache per sequence; the reference and the model read those.

The plan's number of splits depends on the batch, the heads and the GPU, never on the lengths
(the kernel shares the batch's keys out among the splits itself, in proportion to each sequence's
length: kernels/attention/attention_08_paged_decode.cu), so one plan serves every step of a decode
loop.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from onlinesoftmax import attention_checks, checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention.decode_mma import row_chunks
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register

NAME = "attention_08_paged_decode"
DTYPES = ("float16", "bfloat16")
SUPPORTED_D = (64, 128)
KEYS, WARPS = 16, 4                    # as attention_06_decode_mma: keys per warp step, warps (rows: its row_chunks)
BLOCKS_PER_SM = 3
MIN_KEYS = ab.DECODE_KEYS_MIN         # a split takes at least MIN_KEYS keys (unless its sequence has fewer)
BALANCE = 8                           # batch > 1: the grid holds BALANCE x the base splits, for the longest sequences
F32 = np.float32
POINTER, INT, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


def gather(k_pages, v_pages, page_table, lengths, b: int):
    """Sequence b's keys and values as contiguous (kv_heads, length, d) float32 arrays."""
    page_size = k_pages.shape[1]
    n = int(lengths[b])
    keys = np.arange(n)
    pages = np.asarray(page_table)[b, keys // page_size]
    slots = keys % page_size
    k = np.asarray(k_pages, F32)[pages, slots].transpose(1, 0, 2)
    v = np.asarray(v_pages, F32)[pages, slots].transpose(1, 0, 2)
    return k, v


def example(batch, heads, kv_heads, n_q, lengths, d, page_size, dtype, seed=0, spare=3):
    """Random (q, k_pages, v_pages, page_table, lengths) in numpy: each sequence's pages in a shuffled
    order in one pool with `spare` pages no sequence uses; table entries past a sequence's pages -1."""
    rng = np.random.default_rng(seed)
    lengths = np.array(lengths, np.int32)
    per_seq = max(1, -(-int(lengths.max(initial=1)) // page_size))
    n_pages = batch * per_seq + spare
    q = checks.to_dtype(rng.standard_normal((batch, heads, n_q, d)).astype(F32), dtype)
    pools = [checks.to_dtype(rng.standard_normal((n_pages, page_size, kv_heads, d)).astype(F32), dtype)
             for _ in range(2)]
    table = rng.permutation(n_pages)[:batch * per_seq].reshape(batch, per_seq).astype(np.int32)
    table[np.arange(per_seq)[None, :] >= -(-lengths // page_size)[:, None]] = -1
    return q, pools[0], pools[1], table, lengths


def reference(q, k_pages, v_pages, page_table, lengths, causal: bool = False, scale: float | None = None):
    """float64 (out, lse) of shapes (batch, heads, n_q, d) and (batch, heads, n_q); a sequence of
    length 0 (or a query that sees no key) gives zeros and -inf."""
    batch, heads, n_q, d = q.shape
    out = np.zeros((batch, heads, n_q, d))
    lse = np.full((batch, heads, n_q), -np.inf)
    for b in range(batch):
        k, v = gather(k_pages, v_pages, page_table, lengths, b)
        if k.shape[1] == 0:
            continue
        o, l = ab.reference(np.asarray(q[b:b + 1], np.float64), k[None], v[None], causal=causal, scale=scale)
        out[b], lse[b] = o[0], l[0]
    return out, lse


def splits_for(batch: int, heads: int, kv_heads: int, n_q: int, capacity: int, sms: int,
               blocks_per_sm: int = BLOCKS_PER_SM) -> int:
    """The base splits, from the shapes alone: attention_06's rule (the fewest splits whose blocks fill
    their waves of resident blocks, none under MIN_KEYS keys) for a sequence as long as the page table
    holds (capacity = pages_per_seq x page_size keys); grid_splits and split_share divide the keys."""
    return ab.decode_splits(batch, kv_heads, row_chunks(heads, kv_heads, n_q), max(capacity, 1), sms,
                            blocks_per_sm)[0]


def plan_splits(batch: int, heads: int, kv_heads: int, n_q: int, capacity: int, sms: int,
                blocks_per_sm: int = BLOCKS_PER_SM) -> tuple[int, int, int]:
    """(base splits, the grid's splits, most_splits) of a launch: splits_for, grid_splits, wave_pairs."""
    base = splits_for(batch, heads, kv_heads, n_q, capacity, sms, blocks_per_sm)
    groups = kv_heads * row_chunks(heads, kv_heads, n_q)
    return base, grid_splits(base, batch), wave_pairs(base, batch, groups, sms * blocks_per_sm)


def grid_splits(base: int, batch: int) -> int:
    """The grid's splits: the base count at batch 1, BALANCE times it for a batch, so that a sequence
    up to BALANCE times the batch's mean length still takes an even share a block."""
    return base * BALANCE if batch > 1 else base


def wave_pairs(base: int, batch: int, groups: int, resident: int) -> int:
    """The kernel's most_splits: when the base plan's blocks (base x batch pairs of a sequence and a
    split, `groups` blocks each: kv heads x row chunks) fit one wave of `resident` blocks, the pairs
    that wave holds, so that rounding each sequence's splits up never spills into a second wave;
    0 (no bound) when the plan takes several waves."""
    return resident // groups if base * batch * groups <= resident else 0


def split_share(lengths, base: int, most: int = 0, capacity: int | None = None) -> int:
    """The keys a split takes, as the kernel's split_share: at least MIN_KEYS and the batch's keys over
    base x batch splits; with most > 0 the smallest such share at which the sequences take at most
    `most` splits together (sequence_splits' count each), found by the kernel's bisection. With the
    table's capacity, a length outside [0, capacity] counts as no keys, as the kernel reads it."""
    lengths = np.asarray(lengths, np.int64)
    if capacity is not None:
        lengths = np.where((lengths >= 0) & (lengths <= capacity), lengths, 0)
    batch = max(len(lengths), 1)
    grid, total = grid_splits(base, batch), int(lengths.sum())

    def count(share: int) -> int:
        return int(np.maximum(1, np.minimum(grid, -(-lengths // share))).sum())

    lo = max(MIN_KEYS, -(-total // (base * batch)))
    if most > 0 and count(lo) > most:
        spare = most - batch
        hi = max(lo, -(-total // spare) if spare > 0 else int(lengths.max(initial=0)))
        while lo < hi:
            mid = lo + (hi - lo) // 2
            lo, hi = (lo, mid) if count(mid) <= most else (mid + 1, hi)
    return lo


def sequence_splits(length: int, splits: int, share: int = MIN_KEYS) -> tuple[int, int]:
    """(splits used, keys per split) of one sequence, as the kernel's PagedCache::range: one split
    per `share` keys, at most the grid's, each a multiple of 32 keys."""
    used = max(1, min(splits, math.ceil(length / share)))
    return used, 32 * math.ceil(math.ceil(length / used) / 32)


def block_keys(lengths, base: int, most: int = 0) -> tuple[np.ndarray, float]:
    """The keys each sequence's busiest block reads (its first split) for a grid of base splits'
    plan (and most, wave_pairs' bound), and the keys a block would read if all the grid's blocks
    with work shared the keys evenly: all of them over batch x base splits (per kv head)."""
    lengths = np.asarray(lengths, np.int64)
    grid, share = grid_splits(base, len(lengths)), split_share(lengths, base, most)
    busiest = np.array([min(sequence_splits(int(k), grid, share)[1], int(k)) for k in lengths])
    return busiest, float(lengths.sum()) / (len(lengths) * base)


def wrong_sequences(page_table, lengths, pages: int, page_size: int) -> np.ndarray:
    """Which sequences the kernel turns to NaN: a length outside [0, capacity], or a page number
    outside [0, pages) among the entries the length uses."""
    table, lengths = np.asarray(page_table, np.int64), np.asarray(lengths, np.int64)
    bad_length = (lengths < 0) | (lengths > table.shape[1] * page_size)
    used = np.arange(table.shape[1])[None, :] < -(-np.where(bad_length, 0, lengths) // page_size)[:, None]
    return bad_length | (used & ((table < 0) | (table >= pages))).any(axis=1)


def simulate(q, k_pages, v_pages, page_table, lengths, causal: bool = False, scale: float | None = None,
             sms: int = 132):
    """(out in q's dtype, lse float32) as the kernel computes them: scores and sums in float32, P rounded
    to the input dtype before P V, each sequence's splits merged by their LSEs (the order of the
    additions inside the mma is the hardware's: compare within a tolerance, not bit for bit)."""
    batch, heads, n_q, d = q.shape
    kv_heads = k_pages.shape[2]
    group = heads // kv_heads
    dtype = q.dtype.name
    scale = F32(1.0 / math.sqrt(d) if scale is None else scale)
    capacity = page_table.shape[1] * k_pages.shape[1]
    base, splits, most = plan_splits(batch, heads, kv_heads, n_q, capacity, sms)
    share = split_share(lengths, base, most, capacity)
    out = np.zeros((batch, heads, n_q, d), F32)
    lse = np.full((batch, heads, n_q), -np.inf, F32)
    wrong = wrong_sequences(page_table, lengths, k_pages.shape[0], k_pages.shape[1])
    out[wrong], lse[wrong] = np.nan, np.nan
    with np.errstate(all="ignore"):
        for b in np.flatnonzero(~wrong):
            k, v = gather(k_pages, v_pages, page_table, lengths, b)
            n = k.shape[1]
            used, per = sequence_splits(n, splits, share)
            limit = ab.visible_limit(n_q, n) if causal else np.full(n_q, n)
            for h in range(heads):
                s = (np.asarray(q[b, h], F32) @ k[h // group].T * scale).astype(F32)          # (n_q, n)
                s = np.where(np.arange(n)[None, :] < limit[:, None], s, -np.inf).astype(F32)
                parts = []
                for split in range(used):
                    piece = s[:, split * per:(split + 1) * per]
                    m = piece.max(axis=1, initial=-np.inf)
                    base = np.where(np.isfinite(m), m, 0).astype(F32)
                    p = np.exp(piece - base[:, None]).astype(F32)
                    l = p.sum(axis=1, dtype=F32)
                    o = checks.to_dtype(p, dtype).astype(F32) @ v[h // group, split * per:(split + 1) * per]
                    parts.append((np.where(l > 0, base + np.log(np.where(l > 0, l, 1)), -np.inf).astype(F32),
                                  (o / np.where(l > 0, l, 1)[:, None]).astype(F32)))
                if not parts:
                    continue
                lses = np.stack([p[0] for p in parts])
                top = lses.max(axis=0)
                w = np.exp(lses - np.where(np.isfinite(top), top, 0)).astype(F32)
                total = w.sum(axis=0)
                out[b, h] = np.where(total[:, None] > 0, sum(wi[:, None] * p[1] for wi, p in zip(w, parts))
                                     / np.where(total > 0, total, 1)[:, None], 0)
                lse[b, h] = np.where(total > 0, top + np.log(np.where(total > 0, total, 1)), -np.inf)
    return checks.to_dtype(out, dtype), lse


def compare(out, lse, q, k_pages, v_pages, page_table, lengths, causal: bool = False) -> tuple[bool, str]:
    """(passed, message) for the kernel's out and lse (host arrays) against the float64 reference: no
    NaN; zeros and -inf where a query sees no key; the output within checks.tolerance of the model's
    own error (twice it plus two ulps), the LSE within 1e-5 relative."""
    ref, lse_ref = reference(q, k_pages, v_pages, page_table, lengths, causal=causal)
    model, _ = simulate(q, k_pages, v_pages, page_table, lengths, causal=causal)
    return attention_checks.compare_outputs(out, lse, ref, lse_ref, model, q.dtype.name)


# --- plan and registration -----------------------------------------------------------------------

def plan_paged(variant: Variant, q, out, k_pages=None, v_pages=None, page_table=None, cache_lengths=None, lse=None,
               causal=False, scale=1.0):
    """runner(q, out, k_pages=, v_pages=, page_table=, cache_lengths=, lse=): the split launch, then the
    merge over partials the runner owns (its splits from the shape and the GPU, not the lengths)."""
    import cupy

    from onlinesoftmax.runtime import device, driver
    from onlinesoftmax.runtime.loader import get_kernel

    batch, heads, n_q, d = q.shape
    page_size, kv_heads = k_pages.shape[1], k_pages.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    split_entry, merge_entry = f"{NAME}_{tag}_d{d}", f"{NAME}_merge_{tag}_d{d}"
    per_sm = ab.resident_per_sm(variant, split_entry)
    base, splits, most = plan_splits(batch, heads, kv_heads, n_q, page_table.shape[1] * page_size,
                                     device.sm_count(), per_sm)
    chunks = row_chunks(heads, kv_heads, n_q)
    n_rows = batch * heads * n_q
    o_part = cupy.empty((splits, n_rows, d), cupy.float32) if splits > 1 else None
    lse_part = cupy.empty((splits, n_rows), cupy.float32) if splits > 1 else None
    split_launch = driver.prepare_launch(
        get_kernel(variant.path, split_entry), (splits, kv_heads * chunks, batch), (32 * WARPS,), 0, 1,
        (POINTER,) * 9 + (INT,) * 9 + (FLOAT, INT),
        fixed={5: 0 if o_part is None else o_part.data.ptr, 6: 0 if lse_part is None else lse_part.data.ptr,
               9: heads, 10: kv_heads, 11: n_q, 12: k_pages.shape[0], 13: page_table.shape[1], 14: page_size,
               15: MIN_KEYS, 16: base, 17: most, 18: scale * ab.LOG2E, 19: int(bool(causal))})
    merge_launch = None if splits == 1 else driver.prepare_launch(
        get_kernel(variant.path, merge_entry), (n_rows,), (d,), 0, 1, (POINTER,) * 4 + (INT,),
        fixed={0: o_part.data.ptr, 1: lse_part.data.ptr, 4: splits},
        programmatic=device.compute_capability() >= 90 and driver.has_driver_bindings())

    def run(q, out, k_pages=None, v_pages=None, page_table=None, cache_lengths=None, lse=None, **_):
        lse_ptr = None if lse is None else lse.data.ptr
        split_launch(q.data.ptr, k_pages.data.ptr, v_pages.data.ptr, page_table.data.ptr, cache_lengths.data.ptr,
                     out.data.ptr, lse_ptr)
        if merge_launch is not None:
            merge_launch(out.data.ptr, lse_ptr)
    run.splits, run.base_splits, run.most_splits, run.blocks_per_sm = splits, base, most, per_sm
    run.workspace = (o_part, lse_part)    # the launches hold the partials' addresses: the runner owns them
    return run


def geometry(n_q: int, n_k: int) -> Launch:
    """One sequence of n_k keys with one kv head and one row chunk on this GPU (the H200's SM count
    without one)."""
    from onlinesoftmax.runtime import device

    return Launch(grid=(splits_for(1, 1, 1, 1, n_k, device.sm_count()),), block=(32 * WARPS,))


PAGED = register(Variant(
    name=NAME, family="attention", file=f"attention/{NAME}.cu", short="paged",
    story="decoding against a paged KV cache of sequences of different lengths: attention_06's tensor-core "
          "split-K, keys found through a page table, each sequence splitting its own keys",
    geometry=geometry, simulate=simulate, plan=plan_paged, reads_per_element=1, writes_per_element=1,
    dtypes=DTYPES, entry=f"{NAME}_bf16_d128",
    entries=lambda variant: tuple(f"{NAME}{kind}_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes
                                  for d in SUPPORTED_D for kind in ("", "_merge")),
    min_cc=80))


def emulate(q, k_pages, v_pages, page_table, lengths, causal: bool = False, *, sms: int = 132,
            schedule: str = "random", seed: int = 1, partials: bool = False):
    """(out, lse) of the kernel's own CUDA source on the CPU emulator (runtime/emulator.py), both
    launches with this plan's grid and arguments on a GPU of `sms` SMs, in a child process; numpy
    float16 or bfloat16 q and pools. Outputs and partials start poisoned. partials: also the splits'
    LSEs (splits, batch x heads x n_q; -inf where a split has no key)."""
    from onlinesoftmax.runtime import emulator

    batch, heads, n_q, d = q.shape
    page_size, kv_heads = k_pages.shape[1], k_pages.shape[2]
    tag = DTYPE_TAGS[q.dtype.name]
    base, splits, most = plan_splits(batch, heads, kv_heads, n_q, page_table.shape[1] * page_size, sms)
    split_entry, merge_entry = f"{NAME}_{tag}_d{d}", f"{NAME}_merge_{tag}_d{d}"
    module = emulator.Module(PAGED.path, [split_entry, merge_entry], schedule=schedule, seed=seed)
    out = np.full(q.shape, 0x7B7B, np.uint16)
    lse = np.full(q.shape[:3], np.float32(1.2345e30), np.float32)
    n_rows = batch * heads * n_q
    o_part = np.full((splits, n_rows, d), np.nan, np.float32)
    lse_part = np.full((splits, n_rows), np.nan, np.float32)
    words = [np.ascontiguousarray(a).view(np.uint16) for a in (q, k_pages, v_pages)]
    module.launch(split_entry, (splits, kv_heads * row_chunks(heads, kv_heads, n_q), batch), (32 * WARPS,),
                  (*words, np.ascontiguousarray(page_table, np.int32), np.ascontiguousarray(lengths, np.int32),
                   o_part, lse_part, out, lse, *map(np.int32, (heads, kv_heads, n_q, k_pages.shape[0],
                                                               page_table.shape[1], page_size, MIN_KEYS, base, most)),
                   np.float32(1 / math.sqrt(d) * ab.LOG2E), np.int32(bool(causal))), 0, isolated=True)
    if splits > 1:
        module.launch(merge_entry, (n_rows,), (d,), (o_part, lse_part, out, lse, np.int32(splits)), 0, isolated=True)
    if int((out == 0x7B7B).sum()):
        raise emulator.EmulatorFault(f"{NAME} left {int((out == 0x7B7B).sum())} outputs unwritten")
    return (out.view(q.dtype), lse, lse_part) if partials else (out.view(q.dtype), lse)
