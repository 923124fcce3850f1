"""NumPy models of the fast softmax kernels softmax_07 .. softmax_13.

Each model follows its kernel's partition of a row (softmax_fast_configs.py), its exponent
form (2^((x - m) log2e), or the fused FMA form for 16-bit rows) and its reduction order
(butterfly, block tree, cluster exchange, fold), so a model's output is what the kernel's
should be on a machine without a GPU. The models of softmax_09 .. 12 split each row where the
kernels do, at its first 16-byte boundary, found from the array's own addresses (row_heads):
the vector part is chunked, the head goes to chunk 0 and the tail to the last chunk.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.softmax.fast_configs import (
    CHUNK_UNROLL, F32, LOG2E, ChunkPlan, pow2_at_least, config_07, config_08, dtype_name,
    chunks_09, chunks_10, chunks_11, chunks_13, row_heads, vector_width)
from onlinesoftmax.registry import DTYPE_ITEMSIZE

# ---- NumPy models ------------------------------------------------------------------------

def as_float32(x) -> np.ndarray:
    """Storage -> fp32 (exact for fp16 and bf16)."""
    return np.asarray(x).astype(F32)


def to_storage(y32: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes

        return y32.astype(ml_dtypes.bfloat16)
    return y32.astype(dtype)


def exp_sub(v: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The kernels' e^(v - m) (vec_io.cuh's exp_sub): 2^((v - m) log2e) in fp32, the subtraction first."""
    with np.errstate(all="ignore"):
        return np.exp2(((v - m).astype(F32) * LOG2E).astype(F32)).astype(F32)


def online_base(m):
    return np.where(m == -np.inf, F32(0), m).astype(F32)


def combine(a, b):
    with np.errstate(all="ignore"):
        return sim.online_combine(a, b, guards=True)


def register_lanes(x32: np.ndarray, vec: int, nv: int, lanes: int):
    """softmax_07 / 08's layout: lane t of `lanes` holds vectors k lanes + t. Returns the values each
    lane holds, (rows, lanes, nv vec) with -inf padding past N, and their columns (lanes, nv vec)."""
    n_rows, n_cols = x32.shape
    k, t, j = np.meshgrid(np.arange(nv), np.arange(lanes), np.arange(vec), indexing="ij")
    cols = ((k * lanes + t) * vec + j).transpose(1, 0, 2).reshape(lanes, nv * vec)   # (lanes, E)
    valid = cols < n_cols
    v = np.full((n_rows, lanes, nv * vec), -np.inf, dtype=F32)
    v[:, valid] = x32[:, cols[valid]]
    return v, cols, valid


def registers_model(x, dtype: str, vec: int, nv: int, lanes: int, reduce) -> np.ndarray:
    """softmax_07 / 08 / 14: lane t of `lanes` holds vectors k lanes + t; one exp per element."""
    x32 = as_float32(x)
    n_rows, n_cols = x32.shape
    v, cols, valid = register_lanes(x32, vec, nv, lanes)
    with np.errstate(all="ignore"):
        m = np.fmax.reduce(v, axis=2, initial=-np.inf).astype(F32)
        e = exp_sub(v, online_base(m)[..., None])
        l = e.sum(axis=2, dtype=F32)
        row_m, row_l = reduce((m, l))
        rebase = np.where(m == -np.inf, F32(0), np.exp2(((m - row_m[:, None]) * LOG2E).astype(F32)))
        scale = (rebase * (F32(1) / row_l)[:, None]).astype(F32)
        y = (e * scale[..., None]).astype(F32)
    out = np.empty((n_rows, n_cols), dtype=F32)
    out[:, cols[valid]] = y[:, valid]
    return to_storage(out, dtype)


def group_butterfly(state, width: int):
    """xor butterfly over offsets below `width` (arrays (rows, lanes)); lane 0's result per row."""
    lanes = np.arange(state[0].shape[1])
    for offset in (o for o in (16, 8, 4, 2, 1) if o < width):
        partner = tuple(s[:, lanes ^ offset] for s in state)
        state = combine(state, partner)
    return state[0][:, 0], state[1][:, 0]


def simulate_07(x, vec: int | None = None) -> np.ndarray:
    dtype = dtype_name(np.asarray(x).dtype)
    v = vec or vector_width(dtype)
    if v > 1 and x.shape[1] % v:
        v = 1
    nv, g = config_07(x.shape[1], dtype, v)
    return registers_model(x, dtype, v, nv, g, lambda s: group_butterfly(s, g))


def simulate_08(x, vec: int | None = None) -> np.ndarray:
    dtype = dtype_name(np.asarray(x).dtype)
    v = vec or vector_width(dtype)
    if v > 1 and x.shape[1] % v:
        v = 1
    nv, t = config_08(x.shape[1], dtype, v)
    return registers_model(x, dtype, v, nv, t,
                           lambda s: sim.block_reduce(s, combine, (F32(-np.inf), F32(0))))


def chunk_states(x32: np.ndarray, threads: int, vec: int):
    """row_chunk.cuh's chunk_state for every chunk row of x32 (rows, chunk): per-thread (m, l)."""
    n_rows, length = x32.shape
    n_vec = length // vec
    m = np.full((n_rows, threads), -np.inf, dtype=F32)
    l = np.zeros((n_rows, threads), dtype=F32)
    t = np.arange(threads)
    with np.errstate(all="ignore"):
        for first in range(0, n_vec, CHUNK_UNROLL * threads):
            idx = first + t[:, None] + np.arange(CHUNK_UNROLL)[None, :] * threads      # (T, U)
            ok = idx < n_vec
            cols = idx[..., None] * vec + np.arange(vec)                              # (T, U, V)
            vals = np.full((n_rows, threads, CHUNK_UNROLL, vec), -np.inf, dtype=F32)
            vals[:, ok] = x32[:, cols[ok]]
            vals = vals.reshape(n_rows, threads, -1)
            batch_max = np.fmax.reduce(vals, axis=2, initial=-np.inf).astype(F32)
            m_new = np.fmax(m, batch_max)
            base = online_base(m_new)
            l = (l * np.exp2(((m - base) * LOG2E).astype(F32))).astype(F32) + \
                exp_sub(vals, base[..., None]).sum(axis=2, dtype=F32)
            l = l.astype(F32)
            m = m_new
    return m, l


def chunk_push(m: np.ndarray, l: np.ndarray, v: np.ndarray):
    """row_chunk.cuh's chunk_push: one element folded in as a chunk_state step folds its vectors."""
    with np.errstate(all="ignore"):
        m_new = np.fmax(m, v)
        base = online_base(m_new)
        l = (l * np.exp2(((m - base) * LOG2E).astype(F32))).astype(F32) + exp_sub(v, base)
        return m_new, l.astype(F32)


def chunk_output(x32: np.ndarray, row_m: np.ndarray, row_l: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (exp_sub(x32, row_m[:, None]) * (F32(1) / row_l)[:, None]).astype(F32)


def split_rows(x32: np.ndarray, n_chunks: int, chunk: int) -> np.ndarray:
    """(rows, N) -> (rows * n_chunks, chunk), padded with -inf past N (never read by the kernels)."""
    n_rows, n_cols = x32.shape
    padded = np.full((n_rows, n_chunks * chunk), -np.inf, dtype=F32)
    padded[:, :n_cols] = x32
    return padded.reshape(n_rows * n_chunks, chunk)


def chunked_states(x, x32: np.ndarray, plan: ChunkPlan, vec: int, any_start: bool):
    """Per-thread (m, l) of every chunk, shape (rows * n_chunks, threads). any_start (softmax_09 .. 12):
    each row splits at its first 16-byte boundary (row_parts): the vector part is chunked, thread t < head
    of chunk 0 then folds head element t, thread t < tail of the last chunk tail element t (edge_push).
    Otherwise (softmax_13) the whole row is chunked."""
    n_rows, n_cols = x32.shape
    count, threads = plan.n_chunks, plan.threads
    heads = row_heads(x, vec) if any_start else np.zeros(n_rows, dtype=np.int64)
    m = np.empty((n_rows, count, threads), dtype=F32)
    l = np.empty((n_rows, count, threads), dtype=F32)
    for head in np.unique(heads):
        rows = np.flatnonzero(heads == head)
        head = int(head)
        end = head + (n_cols - head) // vec * vec          # first tail element
        assert end - head <= count * plan.chunk_elems
        # a chunk's length is what lies inside the vector part; padding is -inf, which the kernels treat alike
        cm, cl = chunk_states(split_rows(x32[rows, head:end], count, plan.chunk_elems), threads, vec)
        cm, cl = cm.reshape(len(rows), count, threads), cl.reshape(len(rows), count, threads)
        for t in range(head):
            cm[:, 0, t], cl[:, 0, t] = chunk_push(cm[:, 0, t], cl[:, 0, t], x32[rows, t])
        for t in range(n_cols - end):
            cm[:, -1, t], cl[:, -1, t] = chunk_push(cm[:, -1, t], cl[:, -1, t], x32[rows, end + t])
        m[rows], l[rows] = cm, cl
    return m.reshape(n_rows * count, threads), l.reshape(n_rows * count, threads)


def log_chunk_output(x32: np.ndarray, row_m: np.ndarray, row_l: np.ndarray) -> np.ndarray:
    """log_softmax_04: y = (x - M) - log L, M subtracted first, in float32."""
    with np.errstate(all="ignore"):
        return ((x32 - row_m[:, None]).astype(F32) - np.log(row_l).astype(F32)[:, None]).astype(F32)


def chunked_model(x, plan: ChunkPlan, vec: int, merge: str, any_start: bool = False,
                  output=chunk_output) -> np.ndarray:
    """softmax_09 / 10 / 11 / 13: per-chunk block states, then the row's merge ("cluster", "block" or "fold");
    `output` turns the rows and their (M, L) into y (log_chunk_output: log_softmax_04's)."""
    x = np.asarray(x)   # the same array (its addresses give the rows' heads)
    dtype = dtype_name(x.dtype)
    x32 = as_float32(x)
    n_rows, n_cols = x32.shape
    m, l = chunked_states(x, x32, plan, vec, any_start)
    block = sim.block_reduce((m, l), combine, (F32(-np.inf), F32(0)))
    states = tuple(s.reshape(n_rows, plan.n_chunks) for s in block)
    if plan.n_chunks == 1:
        row_m, row_l = states[0][:, 0], states[1][:, 0]
    elif merge == "cluster":
        pad = tuple(np.concatenate([s, np.full((n_rows, 32 - plan.n_chunks), ident, F32)], axis=1)
                    for s, ident in zip(states, (-np.inf, 0)))
        row_m, row_l = group_butterfly(pad, plan.n_chunks)
    elif merge == "fold":   # softmax_13: thread t folds states t, t + T, ..., then the block reduction
        threads = plan.threads
        width = -(-plan.n_chunks // threads) * threads
        pad = tuple(np.concatenate([s, np.full((n_rows, width - plan.n_chunks), ident, F32)], axis=1)
                    for s, ident in zip(states, (-np.inf, 0)))
        folded_m = np.full((n_rows, threads), -np.inf, F32)
        folded_l = np.zeros((n_rows, threads), F32)
        for k in range(0, width, threads):
            folded_m, folded_l = combine((folded_m, folded_l), (pad[0][:, k:k + threads], pad[1][:, k:k + threads]))
        row_m, row_l = sim.block_reduce((folded_m, folded_l), combine, (F32(-np.inf), F32(0)))
    else:
        merge_threads = max(plan.threads, pow2_at_least(plan.n_chunks), 32)
        pad = tuple(np.concatenate([s, np.full((n_rows, merge_threads - plan.n_chunks), ident, F32)], axis=1)
                    for s, ident in zip(states, (-np.inf, 0)))
        row_m, row_l = sim.block_reduce(pad, combine, (F32(-np.inf), F32(0)))
    y = output(x32, row_m.astype(F32), row_l.astype(F32))
    return to_storage(y, dtype)


def _model_vec(x, vec):
    """softmax_13: the 16-byte build only when N % V == 0 (its launcher also needs rows on 16 bytes)."""
    dtype = dtype_name(np.asarray(x).dtype)
    v = vec or vector_width(dtype)
    return dtype, (1 if v > 1 and x.shape[1] % v else v)


def _model_vec_any_start(x, vec):
    """softmax_09 .. 12: the 16-byte build for any N and any start (vec=1: the scalar build). The launcher
    takes it when y's rows have x's phase, as a fresh output of a contiguous x has."""
    dtype = dtype_name(np.asarray(x).dtype)
    return dtype, vec or vector_width(dtype)


def simulate_09(x, vec: int | None = None, cache_elems: int | None = None) -> np.ndarray:
    dtype, v = _model_vec_any_start(x, vec)
    return chunked_model(x, chunks_09(x.shape[1], dtype, v), v, "block", any_start=True)


def simulate_10(x, vec: int | None = None, n_chunks: int | None = None, cache_elems: int | None = None) -> np.ndarray:
    dtype, v = _model_vec_any_start(x, vec)
    return chunked_model(x, chunks_10(x.shape[0], x.shape[1], dtype, v, n_chunks), v, "cluster", any_start=True)


def simulate_12(x, vec: int | None = None, n_chunks: int | None = None, cache_elems: int | None = None,
                max_clusters: int | None = None) -> np.ndarray:
    """softmax_12 partitions and reduces a row exactly as softmax_10 (persistence changes only the order of rows)."""
    return simulate_10(x, vec=vec, n_chunks=n_chunks, cache_elems=cache_elems)


def simulate_11(x, vec: int | None = None, n_chunks: int | None = None, programmatic: bool = True) -> np.ndarray:
    dtype, v = _model_vec_any_start(x, vec)
    return chunked_model(x, chunks_11(x.shape[0], x.shape[1], dtype, v, n_chunks), v, "block", any_start=True)


def simulate_13(x, vec: int | None = None, n_chunks: int | None = None, max_groups: int | None = None,
                prefetch: bool = True) -> np.ndarray:
    """softmax_13: softmax_10's chunk states, merged as thread t folding states t, t + T, ... then the
    block reduction (the number of groups and the prefetch change only when a row is loaded, not its sums)."""
    dtype, v = _model_vec(x, vec)
    return chunked_model(x, chunks_13(x.shape[0], x.shape[1], dtype, v, n_chunks, prefetch=prefetch), v, "fold")

