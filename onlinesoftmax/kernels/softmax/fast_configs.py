"""Configurations of the fast softmax kernels softmax_07 .. softmax_13: how a row of N elements of
a dtype is cut into lanes, vectors and chunks, and the launch geometry that follows.

Pure functions of (rows, N, dtype, vector width): the plan builders (fast.py) and the
NumPy models (fast_models.py) both use them, so a model partitions a row exactly as
its kernel does. Each `.cu` holds template instantiations with extern "C" entries named
`<file stem>_<dtype>_v<V>[_...]`: V = 16 / itemsize elements per 16-byte access, or V = 1
(the scalar path); `entry_names` lists them. softmax_09 .. 12 run their V > 1 builds on rows at any
start and of any length whenever x's and y's rows have the same phase (`aligned_for_vectors`):
each row is split at its first 16-byte boundary into a head (< V elements), whole vectors and a
tail (< V), and the chunk geometry below covers the vector part of every row (C x chunk_elems >=
N >= the vectors of any row). softmax_07 / 08 / 13 need rows on 16 bytes and N % V == 0
(`rows_aligned_for_vectors`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from onlinesoftmax.registry import DTYPE_ITEMSIZE, DTYPE_TAGS, DTYPES, Launch
from onlinesoftmax.simulate import data_address, row_heads as sim_row_heads

F32 = np.float32
LOG2E = F32(1.4426950408889634)
SMS_H200 = 132
SHARED_LIMIT_BYTES = 227 * 1024 - 1024      # dynamic shared memory per block, minus the static part
SHARED_TWO_BLOCKS_BYTES = 112 * 1024        # a row (chunk) this small leaves room for a second block
CHUNK_UNROLL = 4                            # row_chunk.cuh: vectors per thread per step
MAX_CLUSTER = 16                            # 16 is Hopper's non-portable maximum (8 portable)
WARP_ROWS_BLOCK = 128                       # softmax_07's block size
PIPELINED_MIN_ROWS = 1024                   # dispatcher: 16-bit rows of 64K go to softmax_12 from here (measured at 4000)

# softmax_07: (vectors per lane NV, lanes per row G) for the 16-byte and the scalar path.
CONFIGS_07 = {
    "float32": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(2, 32), (4, 32), (8, 32)],
    "float16": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(2, 32), (4, 32)],
    "bfloat16": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(2, 32), (4, 32)],
    "scalar": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(n, 32) for n in (2, 4, 8, 16, 32)],
}
# softmax_08: (vectors per thread NV, threads T), smallest capacity first.
CONFIGS_08 = {
    "float32": [(4, 128), (4, 256), (4, 512), (4, 1024), (8, 1024)],
    "float16": [(2, 128), (4, 128), (4, 256), (4, 512), (4, 1024)],
    "bfloat16": [(2, 128), (4, 128), (4, 256), (4, 512), (4, 1024)],
    "scalar": [(16, 128), (16, 256), (16, 512), (16, 1024), (32, 1024)],
}
MAX_COLS_07 = 1024
MAX_COLS_08 = 32768


def dtype_name(dtype) -> str:
    if isinstance(dtype, str) and dtype in DTYPES:  # "bfloat16" needs no ml_dtypes import
        return dtype
    name = getattr(dtype, "name", None) or np.dtype(dtype).name
    if name not in DTYPES:
        raise TypeError(f"the fast kernels take {', '.join(DTYPES)}, got {name}")
    return name


def vector_width(dtype) -> int:
    """Elements per 16-byte access."""
    return 16 // DTYPE_ITEMSIZE[dtype_name(dtype)]


def aligned_for_vectors(x, y) -> bool:
    """The condition of the V > 1 builds of softmax_09 .. 12: x's and y's rows (2-D, unit column
    stride) lie at the same offset from a 16-byte boundary in every row, x_row % 16 == y_row % 16
    (same start phase, row strides equal mod 16). Any start, any N: the kernels split each row at
    its first 16-byte boundary (kernels/common/row_chunk.cuh, row_parts) and index y like x."""
    x_start, y_start = data_address(x), data_address(y)
    if x_start % x.itemsize or x.strides[0] % x.itemsize or y_start % y.itemsize or y.strides[0] % y.itemsize:
        return False   # an element split across the boundary: no vector path
    if x_start % 16 != y_start % 16:
        return False
    return x.shape[0] == 1 or x.strides[0] % 16 == y.strides[0] % 16


def rows_aligned_for_vectors(*arrays) -> bool:
    """The condition of the V > 1 builds of softmax_07, 08 and 13: every row of every (2-D, unit column
    stride) array starts on 16 bytes and N is a multiple of the vector width."""
    for a in arrays:
        if data_address(a) % 16 or a.strides[0] % 16 or (a.shape[1] * a.itemsize) % 16:
            return False
    return True


def row_heads(x, vec: int) -> np.ndarray:
    """Per row of x (numpy or cupy): the elements before its first 16-byte boundary, at most N
    (row_parts in row_chunk.cuh); all 0 for vec = 1."""
    n_rows, n_cols = x.shape
    if vec == 1:
        return np.zeros(n_rows, dtype=np.int64)
    return np.minimum(sim_row_heads(x), n_cols)


def pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


# ---- configurations ---------------------------------------------------------------------

def config_07(n_cols: int, dtype: str, vec: int) -> tuple[int, int]:
    """(NV, G) for softmax_07: the fewest lanes, then the fewest vectors, that hold the row."""
    key = dtype if vec > 1 else "scalar"
    n_vec = -(-n_cols // vec)
    for nv, g in CONFIGS_07[key]:
        if nv * g >= n_vec:
            return nv, g
    raise ValueError(f"softmax_07_warp_per_row holds at most {MAX_COLS_07} columns, got {n_cols}")


def config_08(n_cols: int, dtype: str, vec: int) -> tuple[int, int]:
    """(NV, T) for softmax_08: the smallest register footprint that holds the row."""
    key = dtype if vec > 1 else "scalar"
    for nv, t in CONFIGS_08[key]:
        if nv * t * vec >= n_cols:
            return nv, t
    raise ValueError(f"softmax_08_registers holds at most {MAX_COLS_08} columns, got {n_cols}")


BIG_CHUNK_BYTES = 96 * 1024   # above this only one block fits an SM: give it 1024 threads


def chunk_threads(chunk_elems: int, vec: int, itemsize: int = 4) -> int:
    """Threads for a chunk kernel: about 8 vectors per thread, 128 .. 512; 1024 for a chunk so
    large that its block is alone on the SM (then it alone must keep ~64 KB of loads in flight)."""
    if chunk_elems * itemsize > BIG_CHUNK_BYTES:
        return 1024
    return int(min(512, max(128, pow2_at_least(-(-chunk_elems // (8 * vec))))))


def chunk_elems_for(n_cols: int, n_chunks: int, vec: int) -> int:
    """Elements per chunk, a multiple of the vector width; n_chunks of them hold n_cols, so also the
    vector part of any row (which starts at the row's first 16-byte boundary and is at most n_cols)."""
    return -(-n_cols // (n_chunks * vec)) * vec


@dataclass(frozen=True)
class ChunkPlan:
    n_chunks: int
    chunk_elems: int
    cache_elems: int
    threads: int


MAX_SPLIT_CHUNKS = 1024                     # softmax_11: one partial state per merge thread


def check_chunks(n_chunks, variant_name: str) -> None:
    """An explicit chunk count: an int (not a bool); softmax_10/12 take a cluster size 1, 2, 4, 8 or 16,
    softmax_11 and softmax_13 any count in 1 .. 1024. None (choose one) passes."""
    if n_chunks is None:
        return
    if isinstance(n_chunks, (bool, np.bool_)) or not isinstance(n_chunks, (int, np.integer)):
        raise TypeError(f"{variant_name}: n_chunks must be an int, got {type(n_chunks).__name__} {n_chunks!r}")
    if variant_name.startswith(("softmax_11", "softmax_13")):
        if not 1 <= n_chunks <= MAX_SPLIT_CHUNKS:
            raise ValueError(f"{variant_name}: n_chunks must be in 1 .. {MAX_SPLIT_CHUNKS}, got {n_chunks}")
    elif not (1 <= n_chunks <= MAX_CLUSTER and n_chunks & (n_chunks - 1) == 0):
        raise ValueError(f"{variant_name}: n_chunks is a cluster size, one of 1, 2, 4, 8, {MAX_CLUSTER}; "
                         f"got {n_chunks}")


def chunks_09(n_cols: int, dtype: str, vec: int) -> ChunkPlan:
    itemsize = DTYPE_ITEMSIZE[dtype]
    chunk = chunk_elems_for(n_cols, 1, vec)
    cache = min(chunk, (SHARED_LIMIT_BYTES // itemsize) // vec * vec)
    return ChunkPlan(1, chunk, cache, chunk_threads(chunk, vec, itemsize))


def chunks_10(n_rows: int, n_cols: int, dtype: str, vec: int, n_chunks: int | None = None,
            sms: int = SMS_H200) -> ChunkPlan:
    """Cluster size: enough blocks to fill the GPU and chunks small enough for ~3 blocks/SM."""
    check_chunks(n_chunks, "softmax_10_cluster")
    itemsize = DTYPE_ITEMSIZE[dtype]
    if n_chunks is None:
        fit = pow2_at_least(-(-n_cols * itemsize // (64 * 1024)))
        fill = pow2_at_least(-(-2 * sms // n_rows))
        min_chunk = pow2_at_least(-(-n_cols // 4096))  # chunks of at least ~4K elements
        n_chunks = int(min(MAX_CLUSTER, max(1, fit, min(fill, min_chunk))))
    chunk = chunk_elems_for(n_cols, n_chunks, vec)
    cache = min(chunk, (SHARED_LIMIT_BYTES // itemsize) // vec * vec)
    return ChunkPlan(n_chunks, chunk, cache, chunk_threads(chunk, vec, itemsize))


def chunks_11(n_rows: int, n_cols: int, dtype: str, vec: int, n_chunks: int | None = None,
            sms: int = SMS_H200) -> ChunkPlan:
    """Chunks of >= 2K elements, enough of them for ~4 blocks per SM (at most 1024 per row)."""
    check_chunks(n_chunks, "softmax_11_split")
    if n_chunks is None:
        fill = -(-4 * sms // n_rows)
        n_chunks = int(max(1, min(1024, fill, -(-n_cols // 2048))))
    chunk = chunk_elems_for(n_cols, n_chunks, vec)
    return ChunkPlan(n_chunks, chunk, 0, chunk_threads(chunk, vec, DTYPE_ITEMSIZE[dtype]))


COOP_CHUNK_BYTES = 32 * 1024               # softmax_13: chunk per block when rows are many (>= 4 blocks/SM)
COOP_MIN_CHUNK_BYTES = 8 * 1024            # ... and the smallest chunk when few rows must fill the GPU
COOP_MAX_CHUNKS = 1024
RESIDENT_BLOCKS_H200 = 4 * SMS_H200         # CPU-side estimate; on a GPU the occupancy API answers


def coop_buffers(vec: int, prefetch: bool = True) -> int:
    """Shared-memory buffers of a softmax_13 block: two (this row, the prefetched next) in the 16-byte
    builds, one in the scalar builds or without prefetch (-DCOOPERATIVE_PREFETCH=0)."""
    return 2 if prefetch and vec > 1 else 1


def chunks_13(n_rows: int, n_cols: int, dtype: str, vec: int, n_chunks: int | None = None,
            resident: int = RESIDENT_BLOCKS_H200, prefetch: bool = True) -> ChunkPlan:
    """Chunks of ~32 KB (so several blocks share an SM); with few rows, smaller chunks (>= 8 KB) until the
    rows' blocks fill the resident grid. The whole chunk is cached (twice with prefetch): the buffers must
    fit the shared memory limit."""
    check_chunks(n_chunks, "softmax_13_cooperative")
    itemsize = DTYPE_ITEMSIZE[dtype]
    row_bytes = n_cols * itemsize
    if n_chunks is None:
        target = -(-row_bytes // COOP_CHUNK_BYTES)
        fill = min(-(-resident // n_rows), -(-row_bytes // COOP_MIN_CHUNK_BYTES))
        n_chunks = int(max(1, min(COOP_MAX_CHUNKS, max(target, fill))))
    chunk = chunk_elems_for(n_cols, n_chunks, vec)
    buffers = coop_buffers(vec, prefetch)
    if buffers * chunk * itemsize > SHARED_LIMIT_BYTES:
        raise ValueError(f"softmax_13_cooperative: {n_chunks} chunks of a {n_cols}-column row are "
                         f"{chunk * itemsize} B each; {buffers} of them exceed one block's {SHARED_LIMIT_BYTES} B "
                         "of shared memory")
    return ChunkPlan(n_chunks, chunk, chunk, chunk_threads(chunk, vec, itemsize))


def launches_11(n_rows: int, plan: ChunkPlan) -> tuple[Launch, Launch]:
    """softmax_11's two launches: stats with block T; output with block max(T, C rounded up to a power of
    two, 32), so that every one of the row's C partial states has a thread in the merge."""
    grid = (n_rows * plan.n_chunks,)
    merge_threads = max(plan.threads, pow2_at_least(plan.n_chunks), 32)
    return Launch(grid=grid, block=(plan.threads,)), Launch(grid=grid, block=(merge_threads,))



def entry(stem: str, dtype: str, vec: int, suffix: str = "") -> str:
    return f"{stem}_{DTYPE_TAGS[dtype]}_v{vec}{suffix}"


# ---- geometry (fp32, a contiguous x and a fresh y) for the registry ---------------------------
# softmax_09 .. 12 run their 16-byte build (V = 4) for any N there (x and y rows in the same phase);
# softmax_07 / 08 / 13 only when N % 4 == 0.

def geometry_07(n_rows: int, n_cols: int) -> Launch:
    nv, g = config_07(n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return Launch(grid=(-(-n_rows // (WARP_ROWS_BLOCK // g)),), block=(WARP_ROWS_BLOCK,))


def geometry_08(n_rows: int, n_cols: int) -> Launch:
    nv, t = config_08(n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return Launch(grid=(n_rows,), block=(t,), shared_bytes=0)


def geometry_09(n_rows: int, n_cols: int) -> Launch:
    plan = chunks_09(n_cols, "float32", 4)
    return Launch(grid=(n_rows,), block=(plan.threads,), shared_bytes=plan.cache_elems * 4)


def geometry_10(n_rows: int, n_cols: int) -> Launch:
    plan = chunks_10(n_rows, n_cols, "float32", 4)
    return Launch(grid=(n_rows * plan.n_chunks,), block=(plan.threads,), shared_bytes=plan.cache_elems * 4)


def geometry_12(n_rows: int, n_cols: int) -> Launch:
    """Per cluster launched; the grid is capped at the clusters resident at once (known on the GPU only)."""
    plan = chunks_10(n_rows, n_cols, "float32", 4)
    return Launch(grid=(n_rows * plan.n_chunks,), block=(plan.threads,), shared_bytes=plan.cache_elems * 4)


def geometry_11(n_rows: int, n_cols: int) -> Launch:
    """The output (merge) launch, the larger block; the stats launch has the same grid and block (T,)
    (`launches_11` gives both)."""
    plan = chunks_11(n_rows, n_cols, "float32", 4)
    return launches_11(n_rows, plan)[1]


def geometry_13(n_rows: int, n_cols: int) -> Launch:
    """Blocks per row and block shape; the grid is G * P with G capped by residency (known on the GPU only)."""
    vec = 4 if n_cols % 4 == 0 else 1
    plan = chunks_13(n_rows, n_cols, "float32", vec)
    return Launch(grid=(n_rows * plan.n_chunks,), block=(plan.threads,),
                  shared_bytes=coop_buffers(vec) * plan.cache_elems * 4)

