"""Graders for the exercises of the chapter "From the merge to blocked attention".

Each `check_<exercise>(fn)` runs `fn` on a small readable case and then awkward ones (grading.py:
the call, the answer's form, then its values), prints "passed" or the first problem and returns
True or False. The solutions are `solution_<exercise>`; the references are computed another way
(the whole score row in float64, the kernel's own split rule).
"""
from __future__ import annotations

import math

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade
from onlinesoftmax.kernels.attention import blocked as ab

NEG_INF = -np.inf


# --- exercise: the memory a score matrix takes, and the LSE that replaces it -------------------

def memory_reference(batch, heads, n, score_bytes):
    """(bytes of the n x n score matrices of every head, bytes of one fp32 LSE per query row)."""
    return batch * heads * n * n * score_bytes, batch * heads * n * 4


def solution_attention_memory(batch, heads, n, score_bytes):
    """Every head of every sequence has an n x n score matrix; the LSE is one fp32 per query row."""
    scores = batch * heads * n * n * score_bytes
    lse = batch * heads * n * 4
    return scores, lse


def memory_cases():
    return [Case("one head, 4 tokens, fp32 scores", (1, 1, 4, 4), None),
            Case("the exercise: 4 sequences of 16384 tokens, 32 heads, bf16 scores", (4, 32, 16384, 2), None),
            Case("one token", (2, 8, 1, 2), None),
            Case("8 sequences of 4097 tokens, 40 heads, fp32 scores", (8, 40, 4097, 4), None)]


def hidden_memory_cases(rng):
    return [Case("a random shape", (int(rng.integers(1, 64)), int(rng.integers(1, 129)), int(rng.integers(1, 70000)),
                                    int(rng.choice([1, 2, 4]))), None)]


def check_attention_memory(fn, quiet: bool = False) -> bool:
    """fn(batch, heads, n, score_bytes) -> (score_bytes_total, lse_bytes_total), two numbers."""
    return grade("attention_memory", fn, memory_cases(), memory_reference, ("score bytes", "lse bytes"),
                 Tolerance(rtol=0.0, atol=0.0), quiet=quiet, hidden=hidden_memory_cases)


# --- exercise: FlashAttention-2's loop for one query row, masked tiles included ----------------

def row_reference(scores, values, tiles):
    """The whole row at once in float64: (o, lse); a row with no visible key gives (0, -inf), as the
    book's kernels do (flash-attention's output is 0 too; its LSE +inf)."""
    s, v = np.asarray(scores, np.float64), np.asarray(values, np.float64)
    m = s.max()
    if m == NEG_INF:
        return np.zeros(v.shape[1]), NEG_INF
    e = np.exp(s - m)
    return e @ v / e.sum(), float(m + np.log(e.sum()))


def solution_fa2_row(scores, values, tiles):
    """(m, l, o) over the tiles, o unnormalized; re-based on 0 while every score so far is -inf."""
    m, l, o = NEG_INF, 0.0, np.zeros(values.shape[1])
    for tile in tiles:
        s, v = scores[tile], values[tile]
        m_new = max(m, s.max())
        base = 0.0 if m_new == NEG_INF else m_new       # the guard: no -inf - -inf
        alpha, p = np.exp(m - base), np.exp(s - base)
        l, o, m = alpha * l + p.sum(), alpha * o + p @ v, m_new
    if l == 0.0:                                       # no visible key: o = 0, lse = -inf (the book's kernels)
        return np.zeros(values.shape[1]), NEG_INF
    return o / l, m + np.log(l)


def _tiles(n: int, cuts) -> list[slice]:
    edges = [0, *cuts, n]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def fa2_row_cases():
    rng = np.random.default_rng(8)
    s = rng.standard_normal(1000) * 3
    v = rng.standard_normal((1000, 16))
    uneven = _tiles(1000, sorted(rng.choice(np.arange(1, 1000), 9, replace=False)))
    first_masked = s.copy()
    first_masked[:100] = NEG_INF                     # a causal-style mask: the first tile sees nothing
    middle_masked = s.copy()
    middle_masked[300:500] = NEG_INF
    return [Case("the worked example: scores [1, 2, 3], values [10, 0, -10], tiles [0:2] [2:3]",
                 (np.array([1.0, 2.0, 3.0]), np.array([[10.0], [0.0], [-10.0]]), _tiles(3, [2])), None),
            Case("1000 scores in 10 tiles of uneven sizes", (s, v, uneven), None),
            Case("the first tile all -inf", (first_masked, v, _tiles(1000, [100, 400, 700])), None),
            Case("a middle tile all -inf", (middle_masked, v, _tiles(1000, [300, 500])), None),
            Case("every score -inf (a query that sees no key)", (np.full(64, NEG_INF), v[:64], _tiles(64, [32])), None),
            Case("scores near 500, one key per tile", (s[:20] + 500, v[:20], _tiles(20, list(range(1, 20)))), None),
            Case("scores near -1e306 (below any finite starting state but the most negative float), -inf mixed in",
                 (np.where(np.arange(40) % 3 == 0, NEG_INF, s[:40] * 1e304 - 1e306), v[:40], _tiles(40, [10, 25])), None)]


def hidden_fa2_row_cases(rng):
    n, d = int(rng.integers(2, 600)), int(rng.integers(1, 33))
    s = rng.standard_normal(n) * rng.uniform(0.5, 10) + rng.uniform(-1e3, 1e3)
    s[rng.random(n) < 0.15] = NEG_INF
    cuts = sorted(rng.choice(np.arange(1, n), min(n - 1, int(rng.integers(1, 12))), replace=False).tolist())
    return [Case(f"{n} random scores in {len(cuts) + 1} tiles, d = {d}", (s, rng.standard_normal((n, d)),
                                                                          _tiles(n, cuts)), None)]


class TileList(list):
    """The tiles, as a list that notes whether the answer read it (an answer that never does
    computed the whole row at once, not the loop the exercise is about) and how many times it
    walked it (twice: a first pass for the maximum, then the sums, not one online pass)."""
    read = False
    walks = 0

    def __iter__(self):
        self.read = True
        self.walks += 1
        return super().__iter__()

    def __getitem__(self, index):
        self.read = True
        return super().__getitem__(index)

    def __len__(self):
        self.read = True
        return super().__len__()

    def __reversed__(self):   # a walk from the last tile is one pass too
        self.read = True
        self.walks += 1
        return super().__reversed__()


class WatchedScores(np.ndarray):
    """The scores, noting the slices read from them (`reads`): a tile read again after another tile was
    read is a second pass over the row, whatever list the answer walked. What is read or computed from
    them is a plain ndarray."""
    reads = None

    def __getitem__(self, index):
        if isinstance(index, slice) and self.reads is not None:
            self.reads.append((index.start, index.stop))
        return self.view(np.ndarray)[index]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(i.view(np.ndarray) if isinstance(i, WatchedScores) else i for i in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)


def _second_pass(reads) -> bool:
    """A slice read again after a different one was read (reading one tile twice in a row is one pass)."""
    done, last = set(), None
    for read in reads:
        if read != last and read in done:
            return True
        done.add(read)
        last = read
    return False


def _watched_tiles(args):
    scores, values, tiles = args
    watched = np.array(scores, dtype=np.float64).view(WatchedScores)
    watched.reads = []
    return watched, values, TileList(tiles)


def _read_the_tiles(args):
    # a second pass: a tile's scores read again after others; or, where the scores were not read through
    # the tiles (np.asarray first), a second walk over the tiles (a walk that only looks at them is none)
    reads = args[0].reads
    if _second_pass(reads) or (args[2].walks > 1 and not reads):
        return ("your function walked the tiles more than once: the exercise is one pass, the online state "
                "updated once per tile")
    if args[2].read:
        return None
    return ("your function never read the tiles: the exercise is FlashAttention-2's loop over them "
            "(one state update per tile), not the whole row at once")

def check_fa2_row(fn, quiet: bool = False) -> bool:
    """fn(scores, values, tiles) -> (o, lse) for one query row: scores (n,), values (n, d), tiles
    a list of slices covering 0..n; o of shape (d,), lse a number."""
    return grade("fa2_row", fn, fa2_row_cases(), row_reference, ("o", "lse"), Tolerance(rtol=1e-10, atol=1e-13),
                 quiet=quiet, hidden=hidden_fa2_row_cases, wrap=_watched_tiles, require=_read_the_tiles)


# --- exercise: the split count of the decode kernel ------------------------------------------

def decode_splits_reference(batch, heads, kv_heads, n_q, n_k, sms):
    """What attention_02_decode_split's plan chooses (attention_blocked.plan_decode) on a GPU that holds
    as many of its blocks per SM as an H200 does (attention_blocked.decode_blocks_per_sm)."""
    rows_per_kv = heads // kv_heads * n_q
    rows_per_block = ab.decode_rows_per_block(rows_per_kv)
    chunks = math.ceil(rows_per_kv / rows_per_block)
    return ab.decode_splits(batch, kv_heads, chunks, n_k, sms, ab.decode_blocks_per_sm(rows_per_block))


def solution_decode_splits(batch, heads, kv_heads, n_q, n_k, sms):
    """Blocks without a split; the GPU holds 4 of them per SM at once (3 with 2 rows a block). The
    fewest splits (at most ceil(n_k / 256) of them) whose blocks fill their waves of resident blocks to 95 %,
    else the fullest; the keys per split rounded up to a multiple of 32 (which can lower the count)."""
    rows_per_kv = heads // kv_heads * n_q                 # query rows that read one kv head
    rows_per_block = next((r for r in (1, 2, 4) if r >= rows_per_kv), 4)
    blocks = batch * kv_heads * math.ceil(rows_per_kv / rows_per_block)
    resident = (3 if rows_per_block == 2 else 4) * sms     # blocks the GPU holds at once

    def fill(splits):                                      # blocks over the slots of the waves they take
        return blocks * splits / (resident * math.ceil(blocks * splits / resident))
    counts = range(1, math.ceil(n_k / 256) + 1)
    splits = next((s for s in counts if fill(s) >= 0.95), max(counts, key=fill))
    keys = 32 * math.ceil(math.ceil(n_k / splits) / 32)
    return math.ceil(n_k / keys), keys


def decode_splits_cases(sms: int):
    shapes = [(1, 32, 32, 1, 32768), (32, 32, 32, 1, 32768), (1, 32, 8, 1, 32768), (32, 32, 8, 1, 32768),
              (1, 32, 32, 1, 100), (8, 32, 8, 4, 262144), (1, 8, 1, 8, 4097), (1, 16, 8, 1, 32768),
              (3, 32, 8, 4, 2000)]   # (no count reaches 95 %: the fullest, not the largest)
    return [Case(f"batch {b}, heads {h}, kv heads {kv}, {nq} quer{'y' if nq == 1 else 'ies'}, {nk} keys, {sms} SMs",
                 (b, h, kv, nq, nk, sms), None) for b, h, kv, nq, nk in shapes]


def hidden_decode_splits_cases(sms: int):
    """A random shape on a random SM count other than the shown one, drawn again until its answer
    differs from the answer at the shown count: an answer that ignores `sms` fails every time."""
    def cases(rng):
        while True:
            kv = int(rng.choice([1, 2, 4, 8, 32]))
            heads = kv * int(rng.choice([1, 2, 4, 8]))
            other = int(rng.integers(8, 200))
            shape = (int(rng.integers(1, 65)), heads, kv, int(rng.choice([1, 2, 4])), int(rng.integers(1, 300000)), other)
            if other != sms and decode_splits_reference(*shape) != decode_splits_reference(*shape[:5], sms):
                break
        return [Case("a random decode shape: batch {}, heads {}, kv heads {}, {} queries, {} keys, {} SMs".format(*shape),
                     shape, None)]
    return cases


def check_decode_splits(fn, sms: int = 132, quiet: bool = False) -> bool:
    """fn(batch, heads, kv_heads, n_q, n_k, sms) -> (splits, keys_per_split), two integers."""
    return grade("decode_splits", fn, decode_splits_cases(sms), decode_splits_reference, ("splits", "keys per split"),
                 Tolerance(rtol=0.0, atol=0.0), quiet=quiet, hidden=hidden_decode_splits_cases(sms))
