"""NumPy replay of kernels/common/topk_rows.cuh: which thread of a 128-thread block reads which
element of a row, and in which step; each thread's list of the K best with the shared threshold;
the maximum pass and the sum for a known maximum. The online (m, l) of the same schedule is
logsumexp_online.lane_states (online_rows.cuh's order, which row_top_pass keeps).

Everything is float32 as in the kernels and vectorised over the rows of one 16-byte phase and the
threads of a block. The threshold is replayed with one interleaving of the warps (in a step, warp
0 publishes and reads first, then warp 1, ...); on the GPU the warps meet it in any order, and any
order gives the same selection (top_keys.cuh: a stale threshold only lets more elements in).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.topk import keys as tk
from onlinesoftmax.kernels.logsumexp.online import LAYOUTS, group_reduce, lane_states

F32 = np.float32
THREADS = 128
WARP = 32
LOG2E = F32(1.4426950408889634)


@dataclass
class ListStats:
    """What the lists did over a batch of rows: elements read, elements that entered a list, and, in
    the vector loop, the element slots the warps ran (16 per lane and step) and the list walks they
    made: after a step the warp pushes at one push site as many times as its busiest lane has
    entering elements (a push is predicated: one lane pushing costs the whole warp the walk)."""

    elements: int = 0
    pushed: int = 0
    slots: int = 0
    walks: int = 0

    @property
    def walks_per_slot(self) -> float:
        return self.walks / self.slots if self.slots else 0.0


def phase_groups(x):
    """(rows, head, n_vec, tail) for each 16-byte phase among the rows of x (numpy, any dtype)."""
    n_cols = x.shape[1]
    vec = LAYOUTS[x.dtype.name].vec
    phases = sim.row_heads(x)
    for phase in np.unique(phases):
        head = min(int(phase), n_cols)
        n_vec = (n_cols - head) // vec
        yield np.flatnonzero(phases == phase), head, n_vec, head + n_vec * vec


def steps(x32, head, n_vec, layout, threads=THREADS):
    """The vector loop of one phase group: (values (rows, T, STEP), columns (T, STEP), valid (T, STEP),
    running (T,)) per step; `running` marks the lanes of warps that run the step (warp-uniform)."""
    vec, unroll = layout.vec, layout.unroll
    lanes = np.arange(threads)
    warp_first = lanes - lanes % WARP
    for first0 in range(0, n_vec, threads * unroll):
        index = first0 + lanes[:, None] + np.arange(unroll)[None, :] * threads          # (T, UNROLL)
        valid_vec = index < n_vec
        columns = (head + index[:, :, None] * vec + np.arange(vec)).reshape(threads, unroll * vec)
        valid = np.repeat(valid_vec, vec, axis=1)
        values = np.full((x32.shape[0], threads, unroll * vec), -np.inf, F32)
        values[:, valid] = x32[:, columns[valid]]
        yield values, columns, valid, first0 + warp_first < n_vec


def warp_kth_key(x, k: int):
    """warp_kth_key of top_keys.cuh on (rows, 32) keys: the bitonic network across the lanes, then
    lane k - 1 (the k-th largest)."""
    x = np.array(x, dtype=tk.U64)
    lanes = np.arange(WARP)
    size = 2
    while size <= WARP:
        stride = size // 2
        while stride:
            other = x[:, lanes ^ stride]
            keep_max = ((lanes & stride) == 0) == ((lanes & size) == 0)
            x = np.where(keep_max, np.maximum(x, other), np.minimum(x, other))
            stride //= 2
        size *= 2
    return x[:, k - 1]


def push(lists, keys, entering):
    """Each thread's list after pushing its entering keys: the K best of the list and them."""
    K = lists.shape[-1]
    offered = np.where(entering, keys, tk.EMPTY)
    return np.sort(np.concatenate([lists, offered], axis=-1), axis=-1)[..., ::-1][..., :K]


def _threshold_value(thr):
    return np.where(thr == tk.EMPTY, F32(-np.inf), tk.key_values(thr)).astype(F32)


def thread_lists(x, k: int, K: int, threads: int = THREADS, stats: ListStats | None = None, shared: bool = True):
    """Every thread's list (rows, T, K) of uint64 keys after row_top_pass over x (2-D numpy, any of
    the three dtypes; the values are the float32 the kernel loads). shared=False replays the lists
    without the block threshold (every element offered to its thread's list)."""
    x32 = np.asarray(x).astype(F32)
    n_rows, n_cols = x32.shape
    layout = LAYOUTS[x.dtype.name]
    lists = np.zeros((n_rows, threads, K), tk.U64)
    for rows, head, n_vec, tail in phase_groups(x):
        xs, own = x32[rows], np.zeros((len(rows), threads, K), tk.U64)
        thr = np.zeros((len(rows), threads // WARP), tk.U64)     # each warp's copy of the threshold
        tau = np.zeros(len(rows), tk.U64)                          # the block's, in shared memory
        if head:
            keys = tk.make_keys(xs[:, :head], np.arange(head))
            own[:, :head] = push(own[:, :head], keys[:, :, None], np.ones((1, 1, 1), bool))
        for values, columns, valid, running in steps(xs, head, n_vec, layout, threads):
            t_value = np.repeat(_threshold_value(thr), WARP, axis=1)[:, :, None] if shared else F32(-np.inf)
            entering = valid[None] & ~(values < t_value)
            own = push(own, tk.make_keys(values, np.broadcast_to(columns, values.shape)), entering)
            pushed = entering.any(axis=-1)                                           # (rows, T)
            if stats is not None:
                warps_running = running[::WARP]
                stats.pushed += int(entering.sum())
                stats.slots += int(warps_running.sum()) * len(rows) * values.shape[-1]
                busiest = entering.sum(axis=-1).reshape(len(rows), -1, WARP).max(axis=2)     # (rows, W)
                stats.walks += int((busiest * warps_running[None, :]).sum())
            heads = own[:, :, 0].reshape(len(rows), -1, WARP)
            warp_pushed = pushed.reshape(len(rows), -1, WARP).any(axis=-1)
            for w in np.flatnonzero(running[::WARP]):                                # one interleaving
                kth = np.where(warp_pushed[:, w], warp_kth_key(heads[:, w], k), tk.EMPTY)
                best = np.maximum(kth, tau)
                tau = best
                thr[:, w] = np.maximum(thr[:, w], best)
        for i in range(tail, n_cols):
            lane = (i - tail) % threads
            t_value = _threshold_value(thr[:, lane // WARP]) if shared else F32(-np.inf)
            entering = ~(xs[:, i] < t_value)
            keys = tk.make_keys(xs[:, i], np.full(len(rows), i))
            own[:, lane] = push(own[:, lane], keys[:, None], entering[:, None])
            if stats is not None:
                stats.pushed += int(entering.sum())
        if stats is not None:
            stats.elements += len(rows) * n_cols
            stats.pushed += len(rows) * head
        lists[rows] = own
    return lists


def block_top(lists, k: int):
    """block_top_keys: the k best keys of the block's lists, best first (rows, k)."""
    return tk.top_keys(lists.reshape(lists.shape[0], -1), k)


def row_max(x) -> np.ndarray:
    """row_max_pass then block_max: fmaxf over the row (NaN ignored; all NaN gives -inf)."""
    return np.fmax.reduce(np.asarray(x).astype(F32), axis=1, initial=-np.inf).astype(F32)


def exp_terms(values, base):
    with np.errstate(all="ignore"):
        return np.exp2((values - base) * LOG2E).astype(F32)


def tree_sum(terms):
    """fold_values' tree over the last axis (a power of two), in float32."""
    width = terms.shape[-1] // 2
    while width:
        terms = (terms[..., :width] + terms[..., width:2 * width]).astype(F32)
        width //= 2
    return terms[..., 0]


def row_sums(x, base, threads: int = THREADS) -> np.ndarray:
    """row_sum_pass (and row_top_pass in TOPK_SAFE mode) then block_sum: sum e^(x - base) per row."""
    x32 = np.asarray(x).astype(F32)
    n_rows, n_cols = x32.shape
    layout = LAYOUTS[x.dtype.name]
    sums = np.zeros((n_rows, threads), F32)
    with np.errstate(all="ignore"):
        for rows, head, n_vec, tail in phase_groups(x):
            b = base[rows][:, None]
            s = sums[rows]
            for i in range(head):
                s[:, i] = (s[:, i] + exp_terms(x32[rows, i], b[:, 0])).astype(F32)
            for values, _, _, _ in steps(x32[rows], head, n_vec, layout, threads):
                s = (s + tree_sum(exp_terms(values, b[:, :, None]))).astype(F32)
            for i in range(tail, n_cols):
                lane = (i - tail) % threads
                s[:, lane] = (s[:, lane] + exp_terms(x32[rows, i], b[:, 0])).astype(F32)
            sums[rows] = s
        return sim.block_sum(sums)


def online_state(x, threads: int = THREADS):
    """row_top_pass in TOPK_ONLINE mode then online_block_reduce: (m, l) per row."""
    m, l = lane_states(x, threads, LAYOUTS[x.dtype.name])
    return group_reduce(m, l, threads)


def base_of(m):
    return np.where(m == -np.inf, F32(0), m).astype(F32)


def warp_total(e):
    """The warp butterfly sum of k values held by lanes 0 .. k-1 (the others 0): (rows,)."""
    lanes = np.zeros((e.shape[0], WARP), F32)
    lanes[:, :e.shape[1]] = e
    return sim.warp_butterfly((lanes,), lambda a, b: ((a[0] + b[0]).astype(F32),))[0][:, 0]


def probabilities(keys, m, l, renormalize: bool):
    """write_top_probabilities: e^(v - base) times 1 / l (or 1 / the warp sum of the k kept), float32."""
    with np.errstate(all="ignore"):
        e = np.exp(tk.key_values(keys) - base_of(m)[:, None]).astype(F32)
        scale = F32(1) / (warp_total(e) if renormalize else l)
        return (e * scale.astype(F32)[:, None]).astype(F32)
