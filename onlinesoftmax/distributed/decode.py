"""Decoding attention with the KV cache split across ranks along the sequence.

    out = decode_attention(comm, q, k_shard, v_shard)          # q the same on every rank

Rank r holds keys and values [start_r, start_r + n_r) of the cache, in rank order. Each rank runs
the book's split-K decode kernel, attention_02_decode_split, on its own piece (its NumPy model for
numpy arrays), which returns the piece's output O_r (normalized over the piece) and its
log-sum-exp LSE_r. The pieces are the chapter 05 pairs (O, LSE); as a state they are
(m, l, u) = (LSE_r, 1, O_r), so the schedules of schedules.py merge them: with
w_r = e^(LSE_r - max LSE), O = sum_r w_r O_r / sum_r w_r and LSE = max + ln sum_r w_r.

A causal mask (bottom-right aligned, as attention()) touches only the last n_q - 1 keys: the last
rank runs causal, the others see all their keys; the last rank must hold at least n_q - 1 keys.
O_r arrives in q's dtype (the kernel rounds its output once), the merge is float32 and the result
is rounded once more, to q's dtype: one extra rounding of a 16-bit dtype, within the book's rule.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.attention_api import attention, check_inputs
from onlinesoftmax.distributed import schedules
from onlinesoftmax.distributed.comm import Communicator
from onlinesoftmax.distributed.vocab_parallel import DTYPE_CODES, _to_float32, _xp
from onlinesoftmax.registry import DTYPES


@dataclass(frozen=True)
class KVLayout:
    """Each rank's number of keys, in rank order."""

    lengths: tuple[int, ...]

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(int(s) for s in np.concatenate([[0], np.cumsum(self.lengths)[:-1]]))

    @property
    def n_k(self) -> int:
        return int(sum(self.lengths))


def kv_layout(comm: Communicator | None, q, k) -> KVLayout:
    """Every rank's key count from one all-gather of (dtype, q's shape, kv heads, d, n_k); a clear error
    on every rank when the ranks disagree on anything but n_k."""
    if comm is None:
        return KVLayout((int(k.shape[2]),))
    xp = _xp(q)
    mine = xp.asarray([DTYPE_CODES[q.dtype.name], *q.shape, k.shape[1], k.shape[3], k.shape[2]], dtype=xp.int64)
    table = comm.all_gather(mine)
    table = table.get() if xp is not np else table
    described = [f"rank {r}: {DTYPES[int(row[0])]} q {tuple(int(v) for v in row[1:5])}, kv_heads {int(row[5])}, "
                 f"d {int(row[6])}" for r, row in enumerate(table)]
    if len({tuple(row[:7].tolist()) for row in table}) != 1:
        raise ValueError("decode across ranks: every rank must pass the same q (dtype and shape) and kv heads, got "
                         + "; ".join(described))
    return KVLayout(tuple(int(n) for n in table[:, 7]))


def decode_attention(comm: Communicator | None, q, k, v, *, causal: bool = False, scale=None,
                     schedule: str = schedules.DEFAULT, layout: KVLayout | None = None, return_lse: bool = False,
                     variant: str = "decode"):
    """softmax(q K^T * scale) V over the whole cache, from this rank's piece of K and V; the same
    (out in q's dtype[, lse float32]) on every rank. Shapes as attention(): q (batch, heads, n_q, d),
    k and v (batch, kv_heads, n_k_r, d)."""
    schedules.check_schedule(schedule)
    batch, heads, kv_heads, n_q, n_k, d, scale = check_inputs(q, k, v, scale)
    layout = kv_layout(comm, q, k) if layout is None else layout
    rank = 0 if comm is None else comm.rank
    if layout.lengths[rank] != n_k:
        raise ValueError(f"decode across ranks: the layout says rank {rank} holds {layout.lengths[rank]} keys, got {n_k}")
    last = len(layout.lengths) - 1
    if causal and layout.lengths[last] < n_q - 1:
        raise ValueError(f"decode across ranks: with causal=True the last rank must hold at least n_q - 1 = {n_q - 1} "
                         f"keys (the mask reaches that far back), it holds {layout.lengths[last]}")
    out_r, lse_r = attention(q, k, v, causal=bool(causal) and rank == last, scale=scale, return_lse=True,
                             variant=variant)
    xp = _xp(q)
    rows = batch * heads * n_q
    record = xp.empty((2 + d, rows), dtype=xp.float32)
    record[0] = lse_r.reshape(rows)                                   # m = LSE_r
    record[1] = (record[0] > -np.inf).astype(xp.float32)             # l = 1 (0 for a piece that saw no key)
    record[2:] = _to_float32(out_r.reshape(rows, d)).T               # u = O_r
    merged = schedules.merge(comm, record, n_scaled=d, schedule=schedule)
    total = merged[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        o32 = xp.where(total != 0, merged[2:] / xp.where(total != 0, total, 1), 0).T   # a query that saw no key: 0
    out = checks.from_float32(xp.ascontiguousarray(o32, dtype=xp.float32), q.dtype.name).reshape(q.shape)
    if not return_lse:
        return out
    lse = xp.where(total != 0, schedules.lse_of(merged), -np.inf).astype(xp.float32).reshape(batch, heads, n_q)
    return out, lse


def split_sequence(k, v, ranks: int, sizes=None):
    """[(k_r, v_r)] pieces of the cache along its sequence axis (2), near-equal or of `sizes`."""
    from onlinesoftmax.distributed.vocab_parallel import split_sizes

    total = k.shape[2]
    sizes = split_sizes(total, ranks) if sizes is None else tuple(int(s) for s in sizes)
    if len(sizes) != ranks or sum(sizes) != total or min(sizes) < 1:
        raise ValueError(f"cache piece sizes {sizes} must be {ranks} positive numbers summing to {total}")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return [(k[:, :, int(s):int(s) + n], v[:, :, int(s):int(s) + n]) for s, n in zip(starts, sizes)]
