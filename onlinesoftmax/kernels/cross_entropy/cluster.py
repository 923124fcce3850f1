"""Launcher module of cross_entropy_02_cluster: cross_entropy_01_rows' loss, LSE and gradient with the
row held on chip by a thread-block cluster (kernels/cross_entropy/cross_entropy_02_cluster.cu), so the
logits are read once where 01 reads them twice. Options and outputs as cross_entropy_01_rows'
(rows.py); its NumPy model is 01's (the same arithmetic, summed in another order).

`chunks(n_cols, dtype, piece)` is the plan: C blocks per row, a power of two from 1 to 16, each
caching at most CHUNK_BYTES of the row; a row longer than 16 such chunks is not for this kernel
(`fits` says so and the caller takes cross_entropy_01_rows).
"""
from __future__ import annotations

import functools

from onlinesoftmax.kernels.cross_entropy import rows
from onlinesoftmax.registry import DTYPES, Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

CHUNK_BYTES = 64 * 1024    # a chunk's cache: three blocks' fit one SM's 228 KB of shared memory
PIECES_PER_THREAD = 16
MAX_CLUSTER = 16           # Hopper's non-portable maximum (8 portable)
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
TAGS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


@functools.lru_cache(maxsize=None)
def chunks(n_cols: int, dtype: str, piece: int, chunk_bytes: int = CHUNK_BYTES,
           threads: int | None = None) -> tuple[int, int, int]:
    """(C, pieces per chunk, threads) for rows of n_cols elements loaded `piece` at a time (a 16-byte
    vector or 1), chunks of at most `chunk_bytes`; C = 0 when the row needs more than MAX_CLUSTER.
    Threads: about PIECES_PER_THREAD pieces each (the work per element, not the bytes, sets the pace of
    16-bit rows: measured on an H100, 16 pieces a thread beat 8 at every chunk size), or as given."""
    n_pieces = n_cols // piece
    piece_bytes = piece * ITEMSIZE[dtype]
    wanted = max(1, -(-n_pieces * piece_bytes // chunk_bytes))
    n_chunks = 1 << (wanted - 1).bit_length()
    if n_chunks > MAX_CLUSTER:
        return 0, 0, 0
    per_chunk = max(1, -(-n_pieces // n_chunks))
    if threads is None:
        threads = int(min(1024, max(32, 1 << (max(1, -(-per_chunk // PIECES_PER_THREAD)) - 1).bit_length())))
    return n_chunks, per_chunk, threads


def piece_for(x, dx) -> int:
    """The 16-byte vector build when every row of x (and dx) starts on a 16-byte boundary, else 1."""
    vec = rows.VEC[x.dtype.name]
    return vec if x.shape[1] >= vec and rows._vectors(x, *(() if dx is None else (dx,))) else 1


def fits(n_cols: int, dtype: str) -> bool:
    """Whether a row of n_cols elements fits 16 chunks (at the scalar build's pieces, the larger count)."""
    return chunks(n_cols, dtype, 1)[0] > 0


def geometry(n_rows: int, n_cols: int) -> Launch:
    n_chunks, _, threads = chunks(n_cols, "float32", 4)
    return Launch(grid=(n_rows * max(1, n_chunks),), block=(threads or 32,))


def entry_names(variant: Variant) -> tuple[str, ...]:
    return tuple(f"{variant.name}_{TAGS[d]}_v{v}" for d in DTYPES for v in (rows.VEC[d], 1))


def plan(variant: Variant, x, loss, targets=None, lse=None, dx=None, grad_scale=None, ignore_index=-100,
         label_smoothing=0.0, z_loss=0.0, softcap=0.0, chunk_bytes: int = CHUNK_BYTES, threads: int | None = None):
    """runner(x, loss, targets=, lse=, dx=, grad_scale=): one cluster launch over the (rows, V) logits,
    chunks of at most chunk_bytes and `threads` a block (None: chunks' choice; a benchmark's sweep sets
    them); a ValueError when a row needs more than 16 chunks or no cluster of the plan can be resident."""
    dtype = x.dtype.name
    if (dx is None) != (grad_scale is None):
        raise ValueError(f"{variant.name}: dx and grad_scale go together")
    if dx is not None and (dx.dtype != x.dtype or dx.shape != x.shape):
        raise TypeError(f"{variant.name}: dx must have x's shape and dtype")
    n_rows, n_cols = x.shape
    piece = piece_for(x, dx)
    n_chunks, per_chunk, threads = chunks(n_cols, dtype, piece, chunk_bytes, threads)
    if n_chunks == 0:
        raise ValueError(f"{variant.name}: a row of {n_cols} {dtype} logits needs more than {MAX_CLUSTER} chunks "
                         f"of {chunk_bytes} bytes (cross_entropy_01_rows takes it)")
    name = f"{variant.name}_{TAGS[dtype]}_v{piece}"
    shared = per_chunk * piece * ITEMSIZE[dtype]
    if driver.max_active_clusters(variant.file, name, threads, shared, n_chunks) < 1:
        raise ValueError(f"{variant.name}: a cluster of {n_chunks} blocks with {shared} B of shared memory each "
                         "cannot be resident on this GPU")
    kernel = get_kernel(variant.path, name)
    driver.raise_shared_limit(kernel, shared)
    # x, dx, targets, loss, lse, grad_scale, n_cols, x_stride, dx_stride, chunk_pieces, ignore_index,
    # label_smoothing, z_loss, softcap
    types = (rows.POINTER,) * 6 + (rows.INT, rows.LONG, rows.LONG, rows.INT, rows.LONG, rows.FLOAT, rows.FLOAT,
                                   rows.FLOAT)
    fixed = {6: n_cols, 7: x.strides[0] // x.itemsize, 8: 0 if dx is None else dx.strides[0] // dx.itemsize,
             9: per_chunk, 10: int(ignore_index), 11: float(label_smoothing), 12: float(z_loss),
             13: float(softcap)}
    launch = driver.prepare_launch(kernel, (n_rows * n_chunks,), (threads,), shared, n_chunks, types, fixed=fixed)

    def run(x, loss, targets=None, lse=None, dx=None, grad_scale=None, **_):
        launch(x.data.ptr, None if dx is None else dx.data.ptr, targets.data.ptr, loss.data.ptr, lse.data.ptr,
               None if grad_scale is None else grad_scale.data.ptr)
    return run


CROSS_ENTROPY_CLUSTER = register(Variant(
    name="cross_entropy_02_cluster", family="cross_entropy", file="cross_entropy/cross_entropy_02_cluster.cu",
    short="cluster", story="the row held on chip by a cluster of blocks: the logits read once, the gradient "
    "written from shared memory", geometry=geometry, simulate=rows.simulate, plan=plan, reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entry="cross_entropy_02_cluster_f32_v4", entries=entry_names, min_cc=90))
