"""The FlashAttention-2 forward on tensor cores (attention_03_mma, attention_04_ldmatrix,
attention_05_pipelined, attention_07_fragment_reuse): their NumPy model, plans and registration.

The first three compute the same numbers in the same order of tiles; they differ in how K and V
move through shared memory (plain loads; a swizzled layout read by ldmatrix; the same,
double-buffered with cp.async). One block takes BLOCK_Q = 128 query rows (8 warps of 16) of one
(batch, head) and streams key tiles of BLOCK_K = 64 past them. Per tile and query row, in fp32:

    s = (q k^T) * scale * log2(e)      the mma accumulators (bf16/fp16 products, fp32 sums)
    m' = max(m, rowmax s);  p = 2^(s - m');  l' = l 2^(m - m') + rowsum p
    O' = O 2^(m - m') + round(p) V     p rounded to the input dtype: the A operand of P V

then out = O / l rounded to the dtype and LSE = (m + log2 l) ln 2. A row that sees no key keeps
l = 0: output 0, LSE -inf. attention_07_fragment_reuse (4 warps of 32 rows) takes key tiles of
REUSE_KEYS[d] (48 at d = 128, where 64 would not fit the registers) and, for scale > 0, keeps m in
scaled units with p = 2^(round(q k^T scale log2 e) - m'), the max taken on the raw scores: the same
numbers as the others' for the same tiles. (`simulate(..., fold=True)` replays the fused form
p = 2^fma(q k^T, scale log2 e, -m'), which leaves the rounding of m' in the exponent and turns rows
of scores near 1e10 into inf / inf; the tests keep it as a wrong answer.) `simulate` follows these tiles and rounding points (numpy's float32
products stand in for the tensor cores' fp32 accumulation, whose order differs); the GPU tests
compare kernel, model and the float64 reference. Where each element of a fragment lives, and the
loads that fill them, are in mma_fragments.py.
"""
from __future__ import annotations

import ctypes
import math
from pathlib import Path

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.registry import DTYPE_TAGS, Launch, Variant, register
from onlinesoftmax.runtime import driver, emulator
from onlinesoftmax.runtime.loader import KERNELS_DIR, get_kernel

BLOCK_Q, BLOCK_K, THREADS, WARP_ROWS = 128, 64, 256, 16
SUPPORTED_D = (64, 128)
DTYPES = ("float16", "bfloat16")
LOG2E = 1.4426950408889634
LN2 = np.float32(0.69314718056)      # the kernels' constant
F32 = np.float32
POINTER, INT, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


def key_limits(n_q: int, n_k: int, causal: bool) -> np.ndarray:
    """Keys j < limit[i] are visible to query i (bottom-right causal, else all n_k); may be <= 0."""
    return np.minimum(np.arange(n_q) + 1 + n_k - n_q, n_k) if causal else np.full(n_q, n_k)


def simulate(q, k, v, causal: bool = False, scale: float | None = None, *, block_k: int = 64, fold: bool = False):
    """(out in q's dtype, lse float32): the kernels' tiles and rounding points in NumPy (key tiles
    of block_k; fold: the scale inside the exponent's fma, for scale > 0, the fused form no kernel uses)."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    group = heads // kv_heads
    dtype = q.dtype.name
    scale_log2 = F32((1.0 / math.sqrt(d) if scale is None else scale) * LOG2E)
    fold = fold and scale_log2 > 0
    q32, k32, v32 = (np.asarray(a, dtype=F32) for a in (q, k, v))
    out = np.zeros((batch, heads, n_q, d), F32)
    lse = np.empty((batch, heads, n_q), F32)
    limit = key_limits(n_q, n_k, causal)
    with np.errstate(all="ignore"):
        for b in range(batch):
            for h in range(heads):
                kh = h // group
                for q0 in range(0, n_q, BLOCK_Q):
                    rows = slice(q0, min(q0 + BLOCK_Q, n_q))
                    qt, lim = q32[b, h, rows], limit[rows]
                    m = np.full(qt.shape[0], -np.inf, F32)
                    l = np.zeros(qt.shape[0], F32)
                    o = np.zeros((qt.shape[0], d), F32)
                    for k0 in range(0, max(int(lim[-1]), 0), block_k):
                        cols = np.arange(k0, min(k0 + block_k, n_k))
                        raw = (qt @ k32[b, kh, cols].T).astype(F32)
                        s = raw if fold else raw * scale_log2
                        s = np.where(cols[None, :] < lim[:, None], s, F32(-np.inf)).astype(F32)
                        m_new = np.fmax(m, s.max(axis=1) * scale_log2 if fold else s.max(axis=1)).astype(F32)
                        base = np.where(m_new == -np.inf, F32(0), m_new).astype(F32)
                        if fold:   # f32 * f32 is exact in f64: one rounding, as the fma
                            p = np.exp2((s.astype(np.float64) * float(scale_log2) - base[:, None]).astype(F32))
                        else:
                            p = np.exp2(s - base[:, None]).astype(F32)
                        alpha = np.exp2(m - base).astype(F32)
                        l = (l * alpha + p.sum(axis=1, dtype=F32)).astype(F32)
                        p16 = checks.to_dtype(p, dtype).astype(F32)          # P as the mma's A operand
                        o = (o * alpha[:, None] + (p16 @ v32[b, kh, cols]).astype(F32)).astype(F32)
                        m = m_new
                    inv = np.where(l != 0, F32(1) / l, F32(0)).astype(F32)
                    out[b, h, rows] = o * inv[:, None]
                    lse[b, h, rows] = np.where(l != 0, (m + np.log2(l)) * LN2, -np.inf)
    return checks.to_dtype(out, dtype), lse


REUSE_KEYS = {64: 64, 128: 48}   # attention_07_fragment_reuse's key tile, by d


def simulate_reuse(q, k, v, causal: bool = False, scale: float | None = None):
    """attention_07_fragment_reuse's model: its key tiles (the scale applied in the exponent's step,
    rounded before m is subtracted: the same numbers as scaling the scores first)."""
    return simulate(q, k, v, causal, scale, block_k=REUSE_KEYS[q.shape[-1]])


def tile_counts(batch: int, heads: int, n_q: int, n_k: int, causal: bool) -> dict:
    """How much work a launch does, as the kernels loop: "block_tiles", the key tiles blocks load
    (every warp of the block stores its share), and "warp_tiles", the (warp, key tile) pairs whose
    math runs (a warp skips a tile none of its rows sees, and a warp with no row below n_q)."""
    limit = key_limits(n_q, n_k, causal)
    block_tiles = warp_tiles = 0
    for q0 in range(0, n_q, BLOCK_Q):
        block_tiles += math.ceil(max(int(limit[min(q0 + BLOCK_Q, n_q) - 1]), 0) / BLOCK_K)
        for row0 in range(q0, min(q0 + BLOCK_Q, n_q), WARP_ROWS):
            warp_tiles += math.ceil(max(int(limit[min(row0 + WARP_ROWS, n_q) - 1]), 0) / BLOCK_K)
    return {"block_tiles": batch * heads * block_tiles, "warp_tiles": batch * heads * warp_tiles}


# --- plans and registration ----------------------------------------------------------------

REUSE = "attention_07_fragment_reuse"
# Per kernel: (warps of a block, query rows of a warp, (K, V) stages, Q staged in shared memory).
# Every block takes BLOCK_Q query rows; key tiles are BLOCK_K keys, REUSE_KEYS[d] for attention_07.
TILES = {"attention_03_mma": (8, 16, 1, False), "attention_04_ldmatrix": (8, 16, 1, False),
         "attention_05_pipelined": (8, 16, 2, False), REUSE: (4, 32, 2, True)}


def threads(name: str) -> int:
    """Threads of one block: 8 warps of 16 rows, or 4 warps of 32 for attention_07."""
    return 32 * TILES[name][0]


def warp_rows(name: str) -> int:
    """Query rows of one warp: 16, or 32 (two m-tiles) for attention_07."""
    return TILES[name][1]


def block_keys(name: str, d: int) -> int:
    """Keys of one K or V tile."""
    return REUSE_KEYS[d] if name == REUSE else BLOCK_K


def shared_bytes(name: str, d: int) -> int:
    """Dynamic shared memory of one block, 16-bit elements: its (K, V) stages of block_keys x d,
    and the Q tile of BLOCK_Q x d where it is staged (attention_07)."""
    _, _, stages, q_shared = TILES[name]
    return ((BLOCK_Q if q_shared else 0) + stages * 2 * block_keys(name, d)) * d * 2


def grid(batch: int, heads: int, n_q: int) -> tuple[int, int, int]:
    return math.ceil(n_q / BLOCK_Q), heads, batch


def plan_mma(variant: Variant, q, out, k=None, v=None, lse=None, causal=False, scale=1.0):
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    entry = f"{variant.path.stem}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    launch = driver.prepare_launch(
        get_kernel(variant.path, entry), grid(batch, heads, n_q), (threads(variant.name),), shared_bytes(variant.name, d), 1,
        (POINTER,) * 5 + (INT, INT, INT, INT, FLOAT, INT),
        fixed={5: heads, 6: kv_heads, 7: n_q, 8: n_k, 9: scale * LOG2E, 10: int(bool(causal))})

    def run(q, out, k=None, v=None, lse=None, **_):
        launch(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, None if lse is None else lse.data.ptr)
    return run


POISON_BITS = 0x7B7B          # emulate() fills out with these first: 1.3e36 in bf16, 61280 in fp16, never an answer
LSE_POISON = np.float32(1.2345e30)


def emulate(name: str, q, k, v, causal: bool = False, scale: float | None = None, *, path=None,
            source: str | None = None, stem: str | None = None, flags=(), optimize: str = "-O2",
            schedule: str = "random", seed: int = 1):
    """(out, lse) of one launch of kernel `name`'s own CUDA source on the CPU emulator
    (runtime/emulator.py), with this launcher's grid, block, shared memory and arguments, isolated
    in a child process: q (batch, heads, n_q, d), k and v (batch, kv_heads, n_k, d) numpy arrays in
    float16 or bfloat16. The file `path` or the text `source` may stand in for the kernel's file
    (entries <stem>_<bf16|f16>_d<64|128>, stem the file's own by default). EmulatorFault when the
    emulator stops the launch, when it touches memory outside an array, or leaves outputs unwritten."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    if q.dtype.name not in DTYPES or d not in SUPPORTED_D:
        raise ValueError(f"the tensor-core kernels take {' or '.join(DTYPES)} with d in {SUPPORTED_D}, got "
                         f"{q.dtype.name} with d = {d}")
    path = Path(path) if path is not None else KERNELS_DIR / "attention" / f"{name}.cu"
    entry = f"{stem or path.stem}_{DTYPE_TAGS[q.dtype.name]}_d{d}"
    module = emulator.Module(path, [entry], source=source, flags=flags, optimize=optimize, schedule=schedule, seed=seed)
    out = np.full(q.shape, POISON_BITS, np.uint16)
    lse = np.full(q.shape[:3], LSE_POISON, np.float32)
    scale_log2 = np.float32((1 / math.sqrt(d) if scale is None else scale) * LOG2E)
    inputs = (np.ascontiguousarray(a).view(np.uint16) for a in (q, k, v))
    module.launch(entry, grid(batch, heads, n_q), (threads(name),),
                  (*inputs, out, lse, *map(np.int32, (heads, kv_heads, n_q, n_k)), scale_log2, np.int32(bool(causal))),
                  shared_bytes(name, d), isolated=True)
    unwritten = int((out == POISON_BITS).sum())
    if unwritten:
        raise emulator.EmulatorFault(f"{path.name} left {unwritten} of {out.size} outputs unwritten")
    return out.view(q.dtype), lse


def _geometry(name: str):
    def geometry(n_q: int, n_k: int) -> Launch:
        """One head's launch (the grid grows by heads and batch), at d = 128."""
        return Launch(grid=(math.ceil(n_q / BLOCK_Q),), block=(threads(name),), shared_bytes=shared_bytes(name, 128))
    return geometry


def _entries(variant: Variant) -> tuple[str, ...]:
    return tuple(f"{variant.path.stem}_{DTYPE_TAGS[t]}_d{d}" for t in variant.dtypes for d in SUPPORTED_D)


def _register(name: str, short: str, story: str, model=simulate) -> Variant:
    return register(Variant(
        name=name, family="attention", file=f"attention/{name}.cu", short=short, story=story,
        geometry=_geometry(name), simulate=model, plan=plan_mma, reads_per_element=1, writes_per_element=1,
        dtypes=DTYPES, entry=f"{name}_bf16_d128", entries=_entries, min_cc=80))


MMA = _register("attention_03_mma", "mma",
                "tensor cores: S = Q K^T and O += P V as mma.sync m16n8k16, the softmax on the accumulators")
LDMATRIX = _register("attention_04_ldmatrix", "ldmatrix",
                     "K and V swizzled in shared memory and read by ldmatrix.x4: no bank conflicts")
PIPELINED = _register("attention_05_pipelined", "pipelined",
                      "K and V double-buffered with cp.async: the next tile loads during this one's math")
FRAGMENT_REUSE = _register(REUSE, "fragment_reuse",
                           "4 warps of 32 rows: each K and V fragment feeds two mmas; a leaner softmax",
                           model=simulate_reuse)
VARIANTS = (MMA, LDMATRIX, PIPELINED, FRAGMENT_REUSE)
FASTEST = FRAGMENT_REUSE   # what variant="auto" runs for 16-bit prefill (the ladder's last step; see chapter 09)
