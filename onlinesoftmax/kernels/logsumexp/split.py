"""Launcher module of logsumexp_03_split and log_softmax_03_split: a few long rows, each row split
over C blocks (one online state per chunk), then a second launch: logsumexp_03's merge writes
m + log l per row; log_softmax_03's output launch gives every chunk a block that merges its row's
states and writes (x - m) - log l over its chunk.

The chunk count fills the GPU: about BLOCKS_PER_SM blocks per SM over all rows, chunks of at
least MIN_CHUNK_BYTES, at most MAX_CHUNKS per row, every chunk a whole number of 64-element
pieces (so in a 16-byte aligned row every chunk starts on a 16-byte boundary). A chunk's block
has the lanes logsumexp_01_online would give a row of that length (`online.group_size`, at least
32). The NumPy model follows both launches: each chunk's lanes and group reduction as
`online.row_state` computes them for a row starting at the chunk's address, then the merge's
block reduction over C states (the identity past C) and lse_rows.cuh's +inf rule.

`choose(n_rows, n_cols, dtype)` is what logsumexp's variant="auto" runs: the split when a group per
row would leave SMs idle and the rows are long enough to split, else logsumexp_01_online;
`choose_log_softmax` the same rule in front of dispatch.choose_log_softmax.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.logsumexp import online as lo
from onlinesoftmax.registry import DTYPE_ITEMSIZE, DTYPE_TAGS, REGISTRY, Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

NAME = "logsumexp_03_split"
LOG_SOFTMAX_NAME = "log_softmax_03_split"
F32 = np.float32
BLOCKS_PER_SM = 4
MIN_CHUNK_BYTES = 32 * 1024     # below this a chunk's block spends more on its start than on its reads
MAX_CHUNKS = 1024               # one state per thread in the merge
PIECE = 64                      # chunk lengths are multiples of this many elements
SPLIT_MIN_ROW_BYTES = 128 * 1024   # auto: rows shorter than this stay whole (logsumexp_01_online)
POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


@dataclass(frozen=True)
class Chunks:
    n_chunks: int
    chunk_elems: int
    threads: int          # the states launch's block
    merge_threads: int    # the merge launch's block


def check_chunks(n_chunks) -> None:
    if n_chunks is None:
        return
    if isinstance(n_chunks, (bool, np.bool_)) or not isinstance(n_chunks, (int, np.integer)):
        raise TypeError(f"{NAME}: n_chunks must be an int, got {type(n_chunks).__name__} {n_chunks!r}")
    if not 1 <= n_chunks <= MAX_CHUNKS:
        raise ValueError(f"{NAME}: n_chunks must be in 1 .. {MAX_CHUNKS}, got {n_chunks}")


def chunks_for(n_rows: int, n_cols: int, dtype: str, n_chunks: int | None = None, sms: int | None = None) -> Chunks:
    """The split of each row: C chunks of chunk_elems (the last one shorter), every chunk non-empty."""
    from onlinesoftmax.runtime import device

    check_chunks(n_chunks)
    n_chunks = None if n_chunks is None else int(n_chunks)
    if n_chunks is None:
        sms = device.sm_count() if sms is None else sms
        fill = -(-BLOCKS_PER_SM * sms // max(1, n_rows))
        longest = max(1, n_cols * DTYPE_ITEMSIZE[dtype] // MIN_CHUNK_BYTES)
        n_chunks = max(1, min(MAX_CHUNKS, fill, longest))
    chunk = -(-n_cols // n_chunks)
    chunk = -(-chunk // PIECE) * PIECE
    n_chunks = -(-n_cols // chunk)          # rounding the length up may leave fewer, all non-empty
    threads = max(32, lo.group_size(chunk, lo.LAYOUTS[dtype].vec))
    merge = max(32, 1 << (n_chunks - 1).bit_length())
    return Chunks(n_chunks, chunk, threads, merge)


def launches(n_rows: int, chunks: Chunks) -> tuple[Launch, Launch]:
    return (Launch(grid=(n_rows * chunks.n_chunks,), block=(chunks.threads,)),
            Launch(grid=(n_rows,), block=(chunks.merge_threads,)))


def geometry(n_rows: int, n_cols: int) -> Launch:
    """The states launch of float32 rows (`launches` gives both)."""
    return launches(n_rows, chunks_for(n_rows, n_cols, "float32"))[0]


def choose(n_rows: int, n_cols: int, dtype="float32", sms: int | None = None):
    """variant="auto" for logsumexp: (variant, reason) as the package's choosers return (dispatch.Choice)."""
    from onlinesoftmax.kernels.dispatch import Choice
    from onlinesoftmax.runtime import device

    dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    sms = device.sm_count() if sms is None else sms
    if n_rows < sms and n_cols * DTYPE_ITEMSIZE[dtype] >= SPLIT_MIN_ROW_BYTES:
        return Choice(SPLIT, "fewer rows than SMs, each of 128 KB or more: split over blocks, states merged")
    return Choice(REGISTRY["logsumexp_01_online"], "a group of lanes per row, one read")


def choose_log_softmax(n_rows: int, n_cols: int, dtype="float32", sms: int | None = None):
    """variant="auto" for log_softmax: the split for few long rows, else dispatch.choose_log_softmax."""
    from onlinesoftmax.kernels import dispatch

    if choose(n_rows, n_cols, dtype, sms).variant is SPLIT:
        return dispatch.Choice(LOG_SOFTMAX_SPLIT, "fewer rows than SMs, each of 128 KB or more: split over "
                                                  "blocks, each block merges its row's states and writes its chunk")
    return dispatch.choose_log_softmax(n_rows, n_cols, dtype)


# --- the model --------------------------------------------------------------------------------

def chunk_states(x, chunks: Chunks):
    """Every chunk's (m, l), shape (n_rows, C) each, as the states launch computes them."""
    layout = lo.LAYOUTS[x.dtype.name]
    n_rows, n_cols = x.shape
    m = np.empty((n_rows, chunks.n_chunks), F32)
    l = np.empty((n_rows, chunks.n_chunks), F32)
    for c in range(chunks.n_chunks):
        piece = x[:, c * chunks.chunk_elems:min(n_cols, (c + 1) * chunks.chunk_elems)]
        m[:, c], l[:, c] = lo.group_reduce(*lo.lane_states(piece, chunks.threads, layout), chunks.threads)
    return m, l


def merge(m, l, merge_threads: int):
    """The merge launch's block reduction: thread t holds state t, the identity past C."""
    n_rows, n_chunks = m.shape
    lanes_m = np.full((n_rows, merge_threads), sim.NEG_INF, F32)
    lanes_l = np.zeros((n_rows, merge_threads), F32)
    lanes_m[:, :n_chunks], lanes_l[:, :n_chunks] = m, l
    return lo.group_reduce(lanes_m, lanes_l, merge_threads)


def output_threads(chunks: Chunks) -> int:
    """log_softmax_03's output block: the chunk's lanes, and at least one thread per state."""
    return max(chunks.threads, chunks.merge_threads)


def simulate_log_softmax(x, n_chunks: int | None = None, sms: int | None = None) -> np.ndarray:
    """log_softmax_03's output from its model: (x - m) - log l in float32, rounded once to x's dtype, with
    the (m, l) every block of a row merges (output_threads lanes, the identity past C)."""
    x = np.asarray(x)
    chunks = chunks_for(x.shape[0], x.shape[1], x.dtype.name, n_chunks, sms)
    m, l = merge(*chunk_states(x, chunks), output_threads(chunks))
    with np.errstate(all="ignore"):
        return ((x.astype(F32) - m[:, None]) - np.log(l)[:, None]).astype(x.dtype)


def simulate(x, n_chunks: int | None = None, sms: int | None = None) -> np.ndarray:
    """LSE per row (float32) from the kernel's model; x float32, float16 or bfloat16, 2-D."""
    x = np.asarray(x)
    chunks = chunks_for(x.shape[0], x.shape[1], x.dtype.name, n_chunks, sms)
    m, l = merge(*chunk_states(x, chunks), chunks.merge_threads)
    with np.errstate(all="ignore"):
        lse = (m + np.log(l)).astype(F32)
        nan_seen = np.isnan(x.astype(F32)).any(axis=1)
        return np.where((m == np.inf) & ~nan_seen, F32(np.inf), lse).astype(F32)


# --- the launcher -----------------------------------------------------------------------------

def _two_launches(variant: Variant, x, chunks: Chunks, second: Launch, second_types, second_fixed: dict,
                  programmatic: bool):
    """(states launch, second launch) of a split plan: the second is the file's other entry (`_second`), on
    `second`'s grid and block, a programmatic dependent launch when asked, from compute capability 9.0
    with cuda-bindings (else an ordinary one: the stream orders it)."""
    from onlinesoftmax.runtime import device

    tag = DTYPE_TAGS[x.dtype.name]
    states_launch = launches(x.shape[0], chunks)[0]
    states = get_kernel(variant.path, f"{variant.name}_states_{tag}", variant.defines)
    other = get_kernel(variant.path, f"{variant.name}_{_second(variant)}_{tag}", variant.defines)
    launch_states = driver.prepare_launch(states, states_launch.grid, states_launch.block, 0, 1,
                                          (POINTER, POINTER, INT, LONG, INT, INT),
                                          fixed={2: x.shape[1], 3: x.strides[0] // x.itemsize, 4: chunks.n_chunks,
                                                 5: chunks.chunk_elems})
    early = programmatic and device.compute_capability() >= 90 and driver.has_driver_bindings()
    launch_second = driver.prepare_launch(other, second.grid, second.block, 0, 1, second_types, fixed=second_fixed,
                                          programmatic=early)
    return launch_states, launch_second


def plan(variant: Variant, x, y, n_chunks: int | None = None, programmatic: bool = True):
    """States, then the merge (a programmatic dependent launch where it can be)."""
    import cupy

    if y.dtype != np.float32 or y.shape != (x.shape[0],):
        raise ValueError(f"{NAME}: the LSE must be float32 of shape ({x.shape[0]},), got {y.dtype} {tuple(y.shape)}")
    chunks = chunks_for(x.shape[0], x.shape[1], x.dtype.name, n_chunks)
    launch_states, launch_merge = _two_launches(
        variant, x, chunks, launches(x.shape[0], chunks)[1], (POINTER, POINTER, POINTER, INT, LONG, INT),
        {3: x.shape[1], 4: x.strides[0] // x.itemsize, 5: chunks.n_chunks}, programmatic)
    n_partials = 2 * x.shape[0] * chunks.n_chunks

    def run(x, y, **_):
        partials = cupy.empty(n_partials, dtype=cupy.float32)
        launch_states(x.data.ptr, partials.data.ptr)
        launch_merge(x.data.ptr, partials.data.ptr, y.data.ptr)
    return run


def plan_log_softmax(variant: Variant, x, y, n_chunks: int | None = None, programmatic: bool = True):
    """States, then the output launch (as `plan`'s merge); y of x's dtype and shape."""
    import cupy

    if y.dtype != x.dtype or y.shape != x.shape or y.strides[1] != y.itemsize:
        raise ValueError(f"{LOG_SOFTMAX_NAME}: y must be {x.dtype.name} of shape {tuple(x.shape)} with unit column "
                         f"stride, got {y.dtype} {tuple(y.shape)}")
    chunks = chunks_for(x.shape[0], x.shape[1], x.dtype.name, n_chunks)
    output = Launch(grid=(x.shape[0] * chunks.n_chunks,), block=(output_threads(chunks),))
    launch_states, launch_output = _two_launches(
        variant, x, chunks, output, (POINTER, POINTER, POINTER, INT, LONG, LONG, INT, INT),
        {3: x.shape[1], 4: x.strides[0] // x.itemsize, 5: y.strides[0] // y.itemsize, 6: chunks.n_chunks,
         7: chunks.chunk_elems}, programmatic)
    n_partials = 2 * x.shape[0] * chunks.n_chunks

    def run(x, y, **_):
        partials = cupy.empty(n_partials, dtype=cupy.float32)
        launch_states(x.data.ptr, partials.data.ptr)
        launch_output(x.data.ptr, y.data.ptr, partials.data.ptr)
    return run


def _second(variant: Variant) -> str:
    """The second launch's entry stem: logsumexp_03's merge, log_softmax_03's output."""
    return "merge" if variant.name == NAME else "output"


def entries(variant: Variant) -> tuple[str, ...]:
    return tuple(f"{variant.name}_{part}_{DTYPE_TAGS[d]}" for d in variant.dtypes for part in ("states", _second(variant)))


SPLIT = register(Variant(
    name=NAME, family="logsumexp", file="logsumexp/logsumexp_03_split.cu", short="split",
    story="a few long rows: each split over blocks, one state per chunk, merged in a second launch",
    geometry=geometry, simulate=simulate, plan=plan, reads_per_element=1, writes_per_element=0,
    features=frozenset({lo.ONE_VALUE_PER_ROW}), dtypes=lo.DTYPES, entry=f"{NAME}_states_f32", entries=entries))

LOG_SOFTMAX_SPLIT = register(Variant(
    name=LOG_SOFTMAX_NAME, family="log_softmax", file="logsumexp/log_softmax_03_split.cu", short="split",
    story="a few long rows: each split over blocks, every chunk's block merges its row's states and writes the chunk",
    geometry=geometry, simulate=simulate_log_softmax, plan=plan_log_softmax, reads_per_element=2,
    writes_per_element=1, dtypes=lo.DTYPES, entry=f"{LOG_SOFTMAX_NAME}_states_f32", entries=entries))
