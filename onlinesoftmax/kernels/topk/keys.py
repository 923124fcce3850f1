"""The top-k order as 64-bit keys, bit for bit as kernels/common/top_keys.cuh builds them, and the
replays of the selections built on keys: the radix select (block_kth_key) and the lists with their
shared threshold (the per-thread lists of softmax_topk_01 .. 04, in topk_rows_model.py).

key = order_bits(value) << 32 | ~column (32 bits): a larger key is ahead in the book's order (larger
value first, equal values by the lower column, NaN above everything, -0.0 equal to +0.0); no real
key is 0, which stands for "no element".
"""
from __future__ import annotations

import numpy as np

U32, U64 = np.uint32, np.uint64
SIGN = U32(0x80000000)
ALL = U32(0xFFFFFFFF)
EMPTY = U64(0)


def order_bits(values) -> np.ndarray:
    """order_bits of top_keys.cuh: float32 -> uint32 that sorts as the floats (NaN highest, -0 as +0)."""
    v = np.asarray(values, dtype=np.float32)
    u = v.view(U32).copy()
    u[u == SIGN] = 0                                        # -0.0 ranks as +0.0
    bits = np.where(u & SIGN, ~u, u | SIGN).astype(U32)
    return np.where(np.isnan(v), ALL, bits).astype(U32)


def order_value(bits) -> np.ndarray:
    """The float32 an order_bits value stands for (NaN for 0xffffffff)."""
    o = np.asarray(bits, dtype=U32)
    u = np.where(o & SIGN, o & ~SIGN, ~o).astype(U32)
    u = np.where(o == ALL, U32(0x7FFFFFFF), u).astype(U32)
    return u.view(np.float32)


def make_keys(values, columns) -> np.ndarray:
    """top_key(value, column) for arrays of the same shape (columns >= 0)."""
    low = (~np.asarray(columns, dtype=np.int64).astype(U32)).astype(U64)
    return (order_bits(values).astype(U64) << U64(32)) | low


def key_values(keys) -> np.ndarray:
    return order_value((np.asarray(keys, dtype=U64) >> U64(32)).astype(U32))


def key_columns(keys) -> np.ndarray:
    """Columns of keys as int64 (-1 for the empty key 0)."""
    low = (np.asarray(keys, dtype=U64) & U64(0xFFFFFFFF)).astype(U32)
    return (~low).view(np.int32).astype(np.int64)


def row_keys(x) -> np.ndarray:
    """The key of every element of a 2-D array (its values as float32, columns 0 .. N-1)."""
    x32 = np.asarray(x).astype(np.float32)
    return make_keys(x32, np.broadcast_to(np.arange(x32.shape[1]), x32.shape))


def top_keys(keys, k: int) -> np.ndarray:
    """The k largest keys of each row, best first (what the kernels' merges return)."""
    return np.sort(np.asarray(keys, dtype=U64), axis=-1)[..., ::-1][..., :k]


# --- the radix select of block_kth_key -----------------------------------------------------------

def radix_kth_key(keys, k: int) -> tuple[int, int]:
    """(threshold, passes): block_kth_key's answer for one block's keys (1-D, no zeros) and how many
    digit passes it took. threshold is the leading digits of the k-th largest key followed by zeros
    (as many digits as it took to single out the k best), or 0 when there are at most k keys:
    exactly min(k, len(keys)) keys are >= threshold."""
    keys = np.asarray(keys, dtype=U64)
    if keys.size <= k:
        return 0, 1
    prefix, mask, remaining = U64(0), U64(0), k
    for passes, shift in enumerate(range(56, -1, -8), start=1):
        shared = keys[(keys & mask) == prefix]
        histogram = np.bincount(((shared >> U64(shift)) & U64(255)).astype(np.int64), minlength=256)
        through = np.cumsum(histogram[::-1])                 # keys at digit 255, 255..254, ...
        j = int(np.searchsorted(through, remaining))        # the first with through >= remaining
        digit = 255 - j
        above = int(through[j] - histogram[digit])
        left = remaining - above
        prefix = prefix | (U64(digit) << U64(shift))
        mask = mask | (U64(255) << U64(shift))
        if histogram[digit] == left or shift == 0:
            return int(prefix), passes
        remaining = left
    raise AssertionError("unreachable: the last pass always ends the search")


def select_by_radix(keys, k: int) -> tuple[np.ndarray, int]:
    """The keys >= block_kth_key's threshold (best first) and the passes it took."""
    keys = np.asarray(keys, dtype=U64)
    keys = keys[keys != EMPTY]
    threshold, passes = radix_kth_key(keys, k)
    chosen = np.sort(keys[keys >= U64(threshold)])[::-1]
    return chosen, passes
