"""A thread-level NumPy model of the block-per-row kernels.

It follows the kernels' schedule, not just their algebra: thread t of a block scans
columns t, t + T, t + 2T, ... in order; each warp reduces with an xor butterfly
(offsets 16, 8, 4, 2, 1, each lane combining `own, partner` in that order); lane 0
of every warp writes shared memory; warp 0 reads one value per warp, the identity in
the other lanes, and runs the butterfly again over the offsets below the warp count. Arithmetic is float32, like the kernel
(NumPy's exp is not CUDA's expf, so the last bit can differ; the order cannot).

`thread_fold` replays kernels/common/thread_fold.cuh, the teaching kernels' per-thread schedule:
each thread folds its strided columns in chunks of THREAD_FOLD_CHUNK, each into a fresh state,
and merges the chunks' states pairwise; `sequential=True` replays the one running state that
`strided_scan` models (the kernels built with -DTHREAD_FOLD_SEQUENTIAL=1).

Per-thread values are arrays of shape (rows, T): every row of a batch is simulated
at once, as a grid of blocks would run them.
"""
from __future__ import annotations

import numpy as np

WARP = 32
F32 = np.float32
NEG_INF = F32(-np.inf)
THREAD_FOLD_CHUNK = 16    # kernels/common/thread_fold.cuh
THREAD_FOLD_LEVELS = 8


def strided_scan(x: np.ndarray, n_threads: int, init, step):
    """Run `state = step(state, x_col, valid)` for every thread's strided slice.

    `init` is a tuple of (rows, T) arrays; `step` gets the column values (rows, T)
    and a (T,) mask of threads that own a column at this iteration.
    """
    n_rows, n_cols = x.shape
    state = init
    threads = np.arange(n_threads)
    for start in range(0, n_cols, n_threads):
        cols = start + threads
        valid = cols < n_cols
        values = np.empty((n_rows, n_threads), dtype=x.dtype)
        values[:, valid] = x[:, cols[valid]]
        values[:, ~valid] = 0
        state = step(state, values, valid)
    return state


def thread_fold(x: np.ndarray, n_threads: int, identity, push, merge, sequential: bool = False):
    """Every thread's state over its strided columns, folded as kernels/common/thread_fold.cuh does.

    `identity` holds one value per field; a state is a tuple of (rows, T) float32 arrays.
    `push(state, values)` folds the (rows, T) column values into a state (only threads that own
    the column keep the result, as in strided_scan); `merge(a, b)` merges two states, a holding
    the earlier columns. Chunk c of thread t is its columns t + (c * CHUNK + k) * T, k < CHUNK,
    folded into a fresh state; the chunks' states are merged as a binary counter (level k holds
    2^k chunks while bit k of the count is set; the top level merges on), and the levels from the
    top down at the end. Every thread runs ceil(N / (CHUNK T)) chunks. `sequential`: one running
    state for every column, the schedule of -DTHREAD_FOLD_SEQUENTIAL=1.
    """
    n_rows, n_cols = x.shape
    threads = np.arange(n_threads)

    def fresh():
        return tuple(np.full((n_rows, n_threads), value, F32) for value in identity)

    def push_columns(state, cols):
        valid = cols < n_cols
        values = np.zeros((n_rows, n_threads), dtype=x.dtype)
        values[:, valid] = x[:, cols[valid]]
        pushed = push(state, values)
        return tuple(np.where(valid, p, s) for p, s in zip(pushed, state))

    if sequential:
        state = fresh()
        for start in range(0, n_cols, n_threads):
            state = push_columns(state, start + threads)
        return state
    chunk_cols = THREAD_FOLD_CHUNK * n_threads
    n_chunks = -(-n_cols // chunk_cols)
    top = THREAD_FOLD_LEVELS - 1
    level = [None] * THREAD_FOLD_LEVELS
    for c in range(n_chunks):
        s = fresh()
        for k in range(THREAD_FOLD_CHUNK):
            first = c * chunk_cols + k * n_threads
            if first < n_cols:                 # a step where no thread owns a column pushes nothing
                s = push_columns(s, first + threads)
        for k in range(THREAD_FOLD_LEVELS):    # the binary carry
            occupied = (c >> k) != 0 if k == top else (c >> k) & 1
            if occupied:
                s = merge(level[k], s)
            if not occupied or k == top:
                level[k] = s
                break
    total = None
    for k in range(top, -1, -1):               # oldest level first, the first present one as it is
        present = (n_chunks >> k) != 0 if k == top else (n_chunks >> k) & 1
        if present:
            total = level[k] if total is None else merge(total, level[k])
    return total


def warp_butterfly(state, combine, width: int = WARP):
    """xor butterfly inside each warp over offsets below `width`; arrays are (rows, T)."""
    n_rows, n_threads = state[0].shape
    shaped = tuple(s.reshape(n_rows, n_threads // WARP, WARP) for s in state)
    lanes = np.arange(WARP)
    for offset in (o for o in (16, 8, 4, 2, 1) if o < width):
        partner = tuple(s[..., lanes ^ offset] for s in shaped)
        shaped = combine(shaped, partner)
    return tuple(s.reshape(n_rows, n_threads) for s in shaped)


def block_reduce(state, combine, identity):
    """The kernels' block reduction; returns the row's value, shape (rows,) per field."""
    n_rows, n_threads = state[0].shape
    n_warps = -(-n_threads // WARP)
    state = warp_butterfly(state, combine)
    per_warp = tuple(s[:, ::WARP] for s in state)  # lane 0 of each warp -> scratch
    warp0 = tuple(np.full((n_rows, WARP), ident, dtype=F32) for ident in identity)
    for w0, pw in zip(warp0, per_warp):
        w0[:, :n_warps] = pw
    warp0 = warp_butterfly(warp0, combine, n_warps)
    return tuple(s[:, 0] for s in warp0)


# --- the (m, l) state, as in kernels/common/online_state.cuh ---------------------

def online_base(m_new: np.ndarray, guards: bool) -> np.ndarray:
    return np.where(m_new == NEG_INF, F32(0), m_new) if guards else m_new


def online_push(state, x, guards: bool = True):
    m, l = state
    m_new = np.fmax(m, x)  # fmaxf: a NaN operand is ignored
    base = online_base(m_new, guards)
    l_new = l * np.exp(m - base) + np.exp(x - base)
    return m_new, l_new.astype(F32)


def online_combine(a, b, guards: bool = True):
    (m1, l1), (m2, l2) = a, b
    m = np.fmax(m1, m2)
    base = online_base(m, guards)
    return m, (l1 * np.exp(m1 - base) + l2 * np.exp(m2 - base)).astype(F32)


def online_row_state(x: np.ndarray, n_threads: int = 256, guards: bool = True, chunked: bool = False):
    """(m, l) per row exactly as the online kernels compute them: each thread's strided slice, then
    the block reduction. `chunked`: the slice folded as thread_fold does (softmax_02_online,
    softmax_03_online_masked); otherwise one running state per thread (the other kernels' loop)."""
    x = np.asarray(x, dtype=F32)

    def combine(a, b):
        return online_combine(a, b, guards)

    with np.errstate(all="ignore"):
        state = thread_fold(x, n_threads, (NEG_INF, F32(0)), lambda s, v: online_push(s, v, guards),
                            combine, sequential=not chunked)
        return block_reduce(state, combine, (NEG_INF, F32(0)))


def block_max(per_thread: np.ndarray) -> np.ndarray:
    return block_reduce((per_thread,), lambda a, b: (np.fmax(a[0], b[0]),), (NEG_INF,))[0]


def block_sum(per_thread: np.ndarray) -> np.ndarray:
    return block_reduce((per_thread,), lambda a, b: ((a[0] + b[0]).astype(F32),), (F32(0),))[0]


def thread_partials(x: np.ndarray, n_threads: int, f, reduce, init_value) -> np.ndarray:
    """Per-thread `reduce` of f(x) over the strided slice, shape (rows, T)."""
    n_rows = x.shape[0]
    init = (np.full((n_rows, n_threads), init_value, F32),)

    def step(state, values, valid):
        return (np.where(valid, reduce(state[0], f(values)), state[0]).astype(F32),)

    return strided_scan(x, n_threads, init, step)[0]


def data_address(a) -> int:
    """The first byte of a numpy or cupy array (numpy first: .data of a bfloat16 numpy array raises)."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def row_heads(x, boundary_bytes: int = 16) -> np.ndarray:
    """Per row of a 2-D array (numpy or cupy): the elements before the row's first address that is a
    multiple of `boundary_bytes` (the scalar head a kernel with aligned vector loads peels off)."""
    starts = data_address(x) + np.arange(x.shape[0], dtype=np.int64) * x.strides[0]
    return ((boundary_bytes - starts % boundary_bytes) % boundary_bytes) // x.itemsize
