"""The blocked attention forward (FlashAttention-2 loop order): its NumPy model, tile by tile.

For each (batch, head) and each tile of BLOCK_Q query rows, the key/value tiles of BLOCK_K rows go
by; the state is the chapter 05 triple per query row — m (running maximum of the scaled scores),
l (sum of e^(s - m)) and O (the unnormalized output, sum of e^(s - m) v) — updated per tile:

    m' = max(m, rowmax S);  P = e^(S - m');  l' = l e^(m - m') + rowsum P;  O' = O e^(m - m') + P V

and divided by l once at the end (FA2: one division per row, not one per tile). With causal
masking a key tile entirely past a query tile's last visible key is skipped. Arithmetic in
float32 (inputs widened exactly), output rounded once to q's dtype; LSE = m + ln l in float32.
A query row that sees no key keeps l = 0: its output is 0 (as flash-attention's) and its LSE -inf (flash-attention's is +inf).

Two kernels compute it (kernels/attention/): attention_01_blocked, the tiles of this model (its
exponentials in base 2 with the scale folded into q, which changes only the rounding), and
attention_02_decode_split for a few queries against a long cache: the keys split over blocks, the
pieces' (O, LSE) merged by a second kernel. Both are checked against `reference` with an error
tolerance, not bit for bit against this model. Plans and registration are at the end.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from onlinesoftmax.registry import DTYPE_TAGS, DTYPES, Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

NAME = "attention_01_blocked"
BLOCK_Q, BLOCK_K = 64, 64
F32 = np.float32
SUPPORTED_D = (32, 64, 96, 128)
LOG2E = 1.4426950408889634
POINTER, INT, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


def visible_limit(n_q: int, n_k: int) -> np.ndarray:
    """Causal, bottom-right aligned: query i sees keys j < i + 1 + n_k - n_q."""
    return np.arange(n_q) + 1 + n_k - n_q


def simulate(q, k, v, causal: bool = False, scale: float | None = None):
    """(out in q's dtype, lse float32) of shapes (batch, heads, n_q, d) and (batch, heads, n_q)."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = F32(1.0 / np.sqrt(d) if scale is None else scale)
    q32, k32, v32 = (np.asarray(a, dtype=F32) for a in (q, k, v))
    out = np.zeros((batch, heads, n_q, d), F32)
    lse = np.empty((batch, heads, n_q), F32)
    limit = visible_limit(n_q, n_k) if causal else np.full(n_q, n_k)
    with np.errstate(all="ignore"):
        for b in range(batch):
            for h in range(heads):
                kh = h // group
                for q0 in range(0, n_q, BLOCK_Q):
                    rows = slice(q0, min(q0 + BLOCK_Q, n_q))
                    qt = q32[b, h, rows]
                    m = np.full(qt.shape[0], -np.inf, F32)
                    l = np.zeros(qt.shape[0], F32)
                    o = np.zeros((qt.shape[0], d), F32)
                    last = int(limit[rows].max())          # keys past it are masked for every row of the tile
                    for k0 in range(0, min(n_k, max(last, 0)), BLOCK_K):
                        cols = np.arange(k0, min(k0 + BLOCK_K, n_k))
                        s = (qt @ k32[b, kh, cols].T).astype(F32) * scale
                        s = np.where(cols[None, :] < limit[rows][:, None], s, F32(-np.inf)).astype(F32)
                        m_new = np.fmax(m, s.max(axis=1))
                        base = np.where(m_new == -np.inf, F32(0), m_new).astype(F32)
                        p = np.exp(s - base[:, None]).astype(F32)
                        rescale = np.exp(m - base).astype(F32)
                        l = (l * rescale + p.sum(axis=1, dtype=F32)).astype(F32)
                        o = (o * rescale[:, None] + (p @ v32[b, kh, cols]).astype(F32)).astype(F32)
                        m = m_new
                    inv = np.where(l != 0, F32(1) / l, F32(0)).astype(F32)
                    out[b, h, rows] = o * inv[:, None]
                    lse[b, h, rows] = np.where(l != 0, m + np.log(l), -np.inf)
    return (out if q.dtype == np.float32 else out.astype(q.dtype)), lse


def reference(q, k, v, causal: bool = False, scale: float | None = None):
    """float64 attention over the whole score matrix: (out, lse) with the same conventions.
    numpy in, numpy out; cupy in (the GPU tests' long rows), cupy out."""
    xp = np if isinstance(q, np.ndarray) else __import__("cupy")
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    q64, k64, v64 = (xp.asarray(a, dtype=xp.float64) for a in (q, k, v))
    k64, v64 = xp.repeat(k64, heads // kv_heads, axis=1), xp.repeat(v64, heads // kv_heads, axis=1)
    s = xp.matmul(q64, k64.swapaxes(-1, -2)) * scale
    if causal:
        s = xp.where(xp.asarray(np.arange(n_k)[None, :] < visible_limit(n_q, n_k)[:, None]), s, -xp.inf)
    with np.errstate(all="ignore"):
        m = s.max(axis=-1, keepdims=True)
        e = xp.exp(s - xp.where(xp.isfinite(m), m, 0))
        l = e.sum(axis=-1, keepdims=True)
        out = xp.where(l != 0, xp.matmul(e, v64) / xp.where(l != 0, l, 1), 0.0)
        lse = xp.where(l[..., 0] != 0, m[..., 0] + xp.log(xp.where(l[..., 0] != 0, l[..., 0], 1)), -xp.inf)
    return out, lse


# --- the CUDA kernels: plans and registration ------------------------------------------------
# A plan is built by onlinesoftmax.runtime.plan.get_runner for (q, out, options): options hold k,
# v and lse (their layouts are part of the key), causal and scale.

def blocked_shared_bytes(d: int) -> int:
    """Dynamic shared memory of attention_01_blocked: Q and K transposed, V, P transposed (fp32)."""
    ld = BLOCK_Q + 4
    return 4 * (2 * d * ld + BLOCK_K * d + BLOCK_K * ld)


def plan_blocked(variant: Variant, q, out, k=None, v=None, lse=None, causal=False, scale=1.0):
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    entry = f"{variant.path.stem}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry), (math.ceil(n_q / BLOCK_Q), heads, batch), (256,), blocked_shared_bytes(d), 1,
        (POINTER,) * 5 + (INT, INT, INT, INT, FLOAT, INT),
        fixed={5: heads, 6: kv_heads, 7: n_q, 8: n_k, 9: scale * LOG2E, 10: int(bool(causal))})

    def run(q, out, k=None, v=None, lse=None, **_):
        launch(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, None if lse is None else lse.data.ptr)
    return run


DECODE_KEYS_MIN = 256       # splits are at most ceil(n_k / 256) (more, shorter splits: the merge costs more than they spread)
DECODE_ROWS = (1, 2, 4)     # query rows per block the decode kernel is built for


def decode_rows_per_block(rows_per_kv_head: int) -> int:
    """R: the rows of one kv head a block takes (the heads sharing it times n_q), at most 4."""
    return next((r for r in DECODE_ROWS if r >= rows_per_kv_head), DECODE_ROWS[-1])


DECODE_WAVE_FILL = 0.95     # the fewest splits whose blocks fill their waves of resident blocks this well


def decode_blocks_per_sm(rows_per_block: int) -> int:
    """Blocks of attention_02_decode_split resident on one SM of an H200 (4, and 3 with 2 rows a block:
    more than its __launch_bounds__ promise, 4 and 2): what the rule assumes without a GPU. The plan
    asks the GPU (driver.resident_blocks); the GPU tests check the two agree on the H200."""
    return 3 if rows_per_block == 2 else 4


def wave_fill(blocks: int, resident: int) -> float:
    """How full the waves of `blocks` blocks are when `resident` run at once: blocks over the slots of
    all the waves they take (a last, partial wave leaves a few blocks reading alone)."""
    return blocks / (resident * math.ceil(blocks / resident))


def decode_splits(batch: int, kv_heads: int, row_chunks: int, n_k: int, sms: int,
                  blocks_per_sm: int = 4) -> tuple[int, int]:
    """(splits, keys per split): the fewest splits whose blocks fill their waves of resident blocks
    (blocks_per_sm x sms at once) to DECODE_WAVE_FILL or more, else the fullest; no split under
    DECODE_KEYS_MIN keys; keys per split a multiple of 32 (which can lower the count)."""
    base = batch * kv_heads * row_chunks
    resident = blocks_per_sm * sms
    counts = range(1, max(1, math.ceil(n_k / DECODE_KEYS_MIN)) + 1)
    splits = next((s for s in counts if wave_fill(base * s, resident) >= DECODE_WAVE_FILL),
                  max(counts, key=lambda s: wave_fill(base * s, resident)))
    keys = 32 * math.ceil(math.ceil(n_k / splits) / 32)
    return math.ceil(n_k / keys), keys


def resident_per_sm(variant: Variant, entry: str) -> int:
    """Blocks of 128 threads of `entry` resident on one SM of the current GPU (the occupancy API)."""
    from onlinesoftmax.runtime import device

    return max(1, driver.resident_blocks(variant.path, entry, 128, 0) // device.sm_count())


def decode_runner(variant: Variant, q, k, split_entry: str, merge_entry: str, grid, splits: int, keys: int,
                  scale: float, causal: bool, rows_per_block: int, blocks_per_sm: int = 0):
    """The runner of a split decode kernel (attention_02, attention_06: the same arguments): the split
    launch over `grid` with 128 threads, then, with more than one split, the merge kernel over the
    fp32 partials the runner owns (a programmatic dependent launch where the GPU and cuda-bindings
    allow it: its blocks start as the split kernel's last ones do)."""
    import cupy

    from onlinesoftmax.runtime import device

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    n_rows = batch * heads * n_q
    o_part = cupy.empty((splits, n_rows, d), dtype=cupy.float32) if splits > 1 else None
    lse_part = cupy.empty((splits, n_rows), dtype=cupy.float32) if splits > 1 else None
    split_launch = driver.prepare_launch(
        get_kernel(variant.path, split_entry), grid, (128,), 0, 1, (POINTER,) * 7 + (INT, INT, INT, INT, INT, FLOAT, INT),
        fixed={3: 0 if o_part is None else o_part.data.ptr, 4: 0 if lse_part is None else lse_part.data.ptr,
               7: heads, 8: kv_heads, 9: n_q, 10: n_k, 11: keys, 12: scale * LOG2E, 13: int(bool(causal))})
    merge_launch = None if splits == 1 else driver.prepare_launch(
        get_kernel(variant.path, merge_entry), (n_rows,), (d,), 0, 1,
        (POINTER,) * 4 + (INT,), fixed={0: o_part.data.ptr, 1: lse_part.data.ptr, 4: splits},
        programmatic=device.compute_capability() >= 90 and driver.has_driver_bindings())

    def run(q, out, k=None, v=None, lse=None, **_):
        lse_ptr = None if lse is None else lse.data.ptr
        split_launch(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse_ptr)
        if merge_launch is not None:
            merge_launch(out.data.ptr, lse_ptr)
    run.splits, run.keys_per_split, run.rows_per_block = splits, keys, rows_per_block   # for the chapter and the tests
    run.blocks_per_sm = blocks_per_sm
    # The launches hold only the partials' addresses: the runner must own the arrays, or the pool hands
    # their memory to the next allocation while every later call still writes there (the H200 showed it
    # as garbage in the arrays of other simulated ranks that shared this plan).
    run.workspace = (o_part, lse_part)
    return run


def plan_decode(variant: Variant, q, out, k=None, v=None, lse=None, causal=False, scale=1.0):
    from onlinesoftmax.runtime import device

    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    rows_per_kv = heads // kv_heads * n_q
    r = decode_rows_per_block(rows_per_kv)
    row_chunks = math.ceil(rows_per_kv / r)
    tag = DTYPE_TAGS[q.dtype.name]
    entry = f"attention_02_decode_split_{tag}_d{d}_r{r}"
    per_sm = resident_per_sm(variant, entry)
    splits, keys = decode_splits(batch, kv_heads, row_chunks, n_k, device.sm_count(), per_sm)
    return decode_runner(variant, q, k, entry, f"attention_02_decode_split_merge_{tag}_d{d}",
                         (splits, kv_heads * row_chunks, batch), splits, keys, scale, causal, r, per_sm)


def geometry_blocked(n_q: int, n_k: int) -> Launch:
    """One head's launch of attention_01_blocked (the grid grows by heads and batch)."""
    return Launch(grid=(math.ceil(n_q / BLOCK_Q),), block=(256,), shared_bytes=blocked_shared_bytes(128))


def geometry_decode(n_q: int, n_k: int) -> Launch:
    """One (batch, kv head) of attention_02_decode_split on this GPU (the H200's SM count without one)."""
    from onlinesoftmax.runtime import device

    splits, _ = decode_splits(1, 1, 1, n_k, device.sm_count())
    return Launch(grid=(splits,), block=(128,))


def _entries(prefix: str, suffixes):
    return lambda variant: tuple(f"{prefix}_{DTYPE_TAGS[t]}_d{d}{s}" for t in variant.dtypes
                                 for d in SUPPORTED_D for s in suffixes)


BLOCKED = register(Variant(
    name=NAME, family="attention", file="attention/attention_01_blocked.cu", short="blocked",
    story="the FlashAttention-2 forward on CUDA cores: query tiles of 64, key tiles of 64 through shared memory",
    geometry=geometry_blocked, simulate=simulate, plan=plan_blocked, reads_per_element=1, writes_per_element=1,
    dtypes=DTYPES, entry="attention_01_blocked_f32_d128", entries=_entries(NAME, ("",)), min_cc=70))

DECODE = register(Variant(
    name="attention_02_decode_split", family="attention", file="attention/attention_02_decode_split.cu",
    short="decode",
    story="decoding: the KV cache split over blocks, each split's (O, LSE) merged by a second kernel",
    geometry=geometry_decode, simulate=simulate, plan=plan_decode, reads_per_element=1, writes_per_element=1,
    dtypes=DTYPES, entry="attention_02_decode_split_f32_d128_r1",
    entries=lambda variant: _entries("attention_02_decode_split", ("_r1", "_r2", "_r4"))(variant)
    + _entries("attention_02_decode_split_merge", ("",))(variant), min_cc=70))
