"""Philox4x32-10 and the Gumbel noise of kernels/common/philox.cuh, in NumPy: the same words for the
same counter and key, so that the NumPy model of a sampling kernel draws the kernel's own noise."""
from __future__ import annotations

import numpy as np

MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
WEYL = (0x9E3779B9, 0xBB67AE85)
GUMBEL_MAX = np.float32(17.0)   # above every value gumbel_from_words gives
MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1) -> np.ndarray:
    """The four output words (4, ...) for counters broadcast from c0..c3 and key (k0, k1), uint32."""
    c = [np.asarray(v, np.uint64) & MASK32 for v in np.broadcast_arrays(c0, c1, c2, c3)]
    k0, k1 = int(k0) & 0xFFFFFFFF, int(k1) & 0xFFFFFFFF
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + WEYL[0]) & 0xFFFFFFFF, (k1 + WEYL[1]) & 0xFFFFFFFF
        p0 = np.uint64(MULTIPLIERS[0]) * c[0]
        p1 = np.uint64(MULTIPLIERS[1]) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & MASK32,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & MASK32]
    return np.stack(c).astype(np.uint32)


def gumbel_from_words(words) -> np.ndarray:
    """-log(-log u), u = (2 (word >> 9) + 1) 2^-24, in float32 (the kernel's gumbel_from_word)."""
    u = ((np.asarray(words, np.uint32) >> np.uint32(9)) * np.uint32(2) + np.uint32(1)).astype(np.float32) \
        * np.float32(2.0 ** -24)
    return -np.log(-np.log(u))


def gumbel(n_rows: int, n_cols: int, seed: int, offset: int, rows=None) -> np.ndarray:
    """The noise g[row, j] the kernels draw: word j % 4 of Philox((j // 4, row, offset), seed)."""
    rows = np.arange(n_rows, dtype=np.uint64) if rows is None else np.asarray(rows, np.uint64)
    groups = np.arange((n_cols + 3) // 4, dtype=np.uint64)
    words = philox4x32_10(groups[None, :], rows[:, None], offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF,
                          seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)          # (4, rows, groups)
    return gumbel_from_words(np.moveaxis(words, 0, -1).reshape(len(rows), -1)[:, :n_cols])
