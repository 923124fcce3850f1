"""softmax_topk_06_split: a row split over C blocks that each write a packed (m, l, k keys) record,
merged by a second kernel (plan with the split rule, NumPy model, registration).

The split rule (`split_shape`): a chunk is T * 16 elements (16 per thread, in registers), T a power
of two in 64 .. 1024; the merge holds all C * k keys of a row in shared memory, so C * k <=
MERGE_CAPACITY. Among the T that keep that, the rule takes the largest T that still gives the GPU at
least TARGET_BLOCKS_PER_SM blocks per SM (fewer, larger records to merge), and none larger than a
row needs; when no T fills the GPU (batch 1 of a short row), the smallest (the most blocks).

The model replays the kernels: the same chunks and slots, each chunk's (m, l) from its registers
(maximum, then the sum in slot order, then block_sum), the floor under each chunk's k-th key
(topk_keys.key_floor) and the radix select of the keys at or above it, and that of the merge,
digit by digit (topk_keys.radix_kth_key), the merge threads' combine of the C states, and the
outputs' formulas. With replay=False it takes the selection exactly instead of by the radix
passes (the tests check both give the same).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels import topk_keys as tk
from onlinesoftmax.kernels import topk_rows_model as rm
from onlinesoftmax.kernels.logsumexp_online import LAYOUTS
from onlinesoftmax.kernels.softmax_topk import build_defines, to_dtype
from onlinesoftmax.registry import DTYPE_TAGS, DTYPES, Variant, Launch, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

F32 = np.float32
ELEMS_PER_THREAD = 16
THREAD_CHOICES = (64, 128, 256, 512, 1024)
MERGE_CAPACITY = 16384           # keys of a row in the merge's shared memory (128 KiB)
MAX_K = 1024
MAX_CHUNKS = 1024
TARGET_BLOCKS_PER_SM = 2
KEY_BYTES = 8
POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


@dataclass(frozen=True)
class SplitShape:
    threads: int          # T of the chunks kernel; a chunk is T * 16 elements
    n_chunks: int         # C per row
    merge_threads: int    # T_m of the merge kernel
    k: int

    @property
    def merge_shared_bytes(self) -> int:
        return (self.n_chunks + 2) * self.k * KEY_BYTES

    def record_keys(self, n_rows: int) -> int:
        return n_rows * self.n_chunks * (self.k + 1)


def _chunks(n_vec: int, threads: int, vec: int) -> int:
    return max(1, -(-n_vec // (threads * (ELEMS_PER_THREAD // vec))))


def max_k(n_cols: int, dtype: str = "float32", capacity: int = MERGE_CAPACITY) -> int:
    """The largest k the split kernel takes for rows of n_cols (MAX_K, or less for very long rows or
    a smaller merge capacity)."""
    vec = LAYOUTS[dtype].vec
    return min(MAX_K, n_cols, capacity // _chunks(n_cols // vec, THREAD_CHOICES[-1], vec))


def merge_capacity(shared_optin_bytes: int) -> int:
    """The C * k keys of a row the merge can hold with a device's opt-in shared memory per block, after
    its 2 k other keys (k <= MAX_K) and 4 KiB of static shared memory; at most MERGE_CAPACITY (the
    H200's 227 KiB hold that; an sm_86 GPU's 99 KiB hold 10112)."""
    return int(min(MERGE_CAPACITY, (shared_optin_bytes - 4096 - 2 * MAX_K * KEY_BYTES) // KEY_BYTES))


def split_shape(n_rows: int, n_cols: int, k: int, dtype: str = "float32", sms: int = 132,
                capacity: int = MERGE_CAPACITY) -> SplitShape:
    """The split rule (module docstring) for n_rows rows of n_cols elements, k kept, on `sms` SMs,
    with a merge of at most `capacity` keys."""
    vec = LAYOUTS[dtype].vec
    n_vec = n_cols // vec
    if not 1 <= k <= max_k(n_cols, dtype, capacity):
        raise ValueError(f"softmax_topk_06_split takes k in 1 .. {max_k(n_cols, dtype, capacity)} for rows of "
                         f"{n_cols} elements (at most {MAX_K}; its merge holds {capacity} keys of a row), "
                         f"got k = {k}")
    cover = next((t for t in THREAD_CHOICES if _chunks(n_vec, t, vec) == 1), THREAD_CHOICES[-1])
    fits = [t for t in THREAD_CHOICES if t <= cover and _chunks(n_vec, t, vec) * k <= capacity
            and _chunks(n_vec, t, vec) <= MAX_CHUNKS]
    filling = [t for t in fits if n_rows * _chunks(n_vec, t, vec) >= TARGET_BLOCKS_PER_SM * sms]
    threads = max(filling) if filling else min(fits)
    n_chunks = _chunks(n_vec, threads, vec)
    wanted = max(k, -(-n_chunks * k // 8))
    merge_threads = int(min(1024, max(64, 1 << (wanted - 1).bit_length())))
    return SplitShape(threads, n_chunks, merge_threads, k)


# --- the model ------------------------------------------------------------------------------------

def chunk_slots(n_cols: int, head: int, n_vec: int, tail: int, shape: SplitShape, vec: int, chunk: int):
    """(columns (T, SLOTS), valid (T, SLOTS)) of one chunk, in the kernel's slot order."""
    threads, per_thread = shape.threads, ELEMS_PER_THREAD // vec
    t = np.arange(threads)
    index = chunk * threads * per_thread + np.arange(per_thread)[None, :] * threads + t[:, None]   # (T, U)
    columns = (head + index[:, :, None] * vec + np.arange(vec)).reshape(threads, ELEMS_PER_THREAD)
    valid = np.repeat(index < n_vec, vec, axis=1)
    head_col, tail_col = t, tail + t
    head_ok = (chunk == 0) & (t < head)
    tail_ok = (chunk == shape.n_chunks - 1) & (t < n_cols - tail)
    columns = np.concatenate([columns, head_col[:, None], tail_col[:, None]], axis=1)
    valid = np.concatenate([valid, head_ok[:, None], tail_ok[:, None]], axis=1)
    return np.where(valid, columns, 0), valid


def records(x, shape: SplitShape, replay: bool = True, passes: list | None = None):
    """Model of softmax_topk_06_split_chunks: (m, l) of every chunk, each (rows, C) float32, and the
    keys of every record, a list per row of C arrays (each the keys >= its chunk's threshold). With
    replay and a list `passes`, the digit passes of every chunk's radix select are appended to it."""
    x32 = np.asarray(x).astype(F32)
    n_rows, n_cols = x32.shape
    vec, k = LAYOUTS[x.dtype.name].vec, shape.k
    m = np.full((n_rows, shape.n_chunks), -np.inf, F32)
    l = np.zeros((n_rows, shape.n_chunks), F32)
    keys = [[None] * shape.n_chunks for _ in range(n_rows)]
    with np.errstate(all="ignore"):
        for rows, head, n_vec, tail in rm.phase_groups(x):
            for chunk in range(shape.n_chunks):
                columns, valid = chunk_slots(n_cols, head, n_vec, tail, shape, vec, chunk)
                values = np.where(valid, x32[rows][:, columns], F32(-np.inf)).astype(F32)    # (rows, T, SLOTS)
                chunk_m = np.fmax.reduce(values.reshape(len(rows), -1), axis=1, initial=-np.inf).astype(F32)
                base = rm.base_of(chunk_m)
                terms = rm.exp_terms(values, base[:, None, None])
                lane_l = np.zeros(terms.shape[:2], F32)
                for s in range(terms.shape[2]):                       # slot order
                    lane_l = (lane_l + terms[:, :, s]).astype(F32)
                m[rows, chunk], l[rows, chunk] = chunk_m, sim.block_sum(lane_l)
                chunk_keys = np.where(valid, tk.make_keys(values, np.broadcast_to(columns, values.shape)), tk.EMPTY)
                for i, row in enumerate(rows):
                    mine = chunk_keys[i][valid]
                    if replay:                                     # the select sees the keys at or above the floor
                        mine = mine[mine >= np.uint64(tk.key_floor(chunk_keys[i], k))]
                        keys[row][chunk], taken = tk.select_by_radix(mine, k)
                        if passes is not None:
                            passes.append(taken)
                    else:
                        keys[row][chunk] = tk.top_keys(mine, k)
    return m, l, keys


def merge_states(m, l, merge_threads: int):
    """The merge's (m, l): thread t combines chunks t, t + T_m, ... in order, then the block reduces."""
    n_rows, n_chunks = m.shape
    state = (np.full((n_rows, merge_threads), -np.inf, F32), np.zeros((n_rows, merge_threads), F32))
    with np.errstate(all="ignore"):
        for first in range(0, n_chunks, merge_threads):
            count = min(merge_threads, n_chunks - first)
            own = (state[0][:, :count], state[1][:, :count])
            state[0][:, :count], state[1][:, :count] = sim.online_combine(
                own, (m[:, first:first + count], l[:, first:first + count]))
        return sim.block_reduce(state, sim.online_combine, (sim.NEG_INF, F32(0)))


def simulate_split(x, k: int, renormalize: bool = False, replay: bool = False, sms: int = 132):
    """softmax_topk_06_split's answers: (probabilities in x's dtype, columns int64, LSE float32)."""
    shape = split_shape(x.shape[0], x.shape[1], k, x.dtype.name, sms)
    m, l, keys = records(x, shape, replay)
    whole_m, whole_l = merge_states(m, l, shape.merge_threads)
    chosen = np.stack([tk.select_by_radix(np.concatenate(row), k)[0] if replay
                       else tk.top_keys(np.concatenate(row), k) for row in keys])
    with np.errstate(all="ignore"):
        e = np.exp(tk.key_values(chosen) - rm.base_of(whole_m)[:, None]).astype(F32)
        if renormalize:
            lanes = np.zeros((e.shape[0], shape.merge_threads), F32)
            lanes[:, :k] = e
            scale = F32(1) / sim.block_sum(lanes)
        else:
            scale = F32(1) / whole_l
        probs = (e * scale.astype(F32)[:, None]).astype(F32)
        lse = (whole_m + np.log(whole_l)).astype(F32)
    return to_dtype(probs, x.dtype), tk.key_columns(chosen), lse


# --- the plan --------------------------------------------------------------------------------------

def geometry(n_rows: int, n_cols: int) -> Launch:
    """The chunks kernel's launch for k = 1 (the real launch depends on k: split_shape)."""
    shape = split_shape(n_rows, n_cols, 1)
    return Launch(grid=(n_rows * shape.n_chunks,), block=(shape.threads,))


def plan_split(variant: Variant, x, probs, k: int = 1, renormalize: bool = False, columns=None, lse=None):
    """Runner of both launches on 2-D cupy arrays (softmax_topk.plan_fused's arguments); the records are
    allocated on every call (the pool's, on the current stream); the merge is a programmatic
    dependent launch where the GPU and cuda-bindings allow it."""
    import cupy

    from onlinesoftmax.runtime import device

    if probs.dtype != x.dtype:
        raise TypeError(f"{variant.name}: probs must have x's dtype {x.dtype.name}, got {probs.dtype.name}")
    n_rows, n_cols = x.shape
    optin = cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
    shape = split_shape(n_rows, n_cols, k, x.dtype.name, device.sm_count(), merge_capacity(optin))
    tag = DTYPE_TAGS[x.dtype.name]
    defines = build_defines(x.dtype.name)          # only this dtype's two entries (topk_build.cuh)
    chunks = driver.prepare_launch(get_kernel(variant.path, f"softmax_topk_06_split_chunks_{tag}", defines),
                                   (n_rows * shape.n_chunks,), (shape.threads,), 0, 1,
                                   (POINTER, POINTER, INT, LONG, INT, INT),
                                   fixed={2: n_cols, 3: x.strides[0] // x.itemsize, 4: shape.n_chunks, 5: k})
    early = device.compute_capability() >= 90 and driver.has_driver_bindings()
    merge = driver.prepare_launch(get_kernel(variant.path, f"softmax_topk_06_split_merge_{tag}", defines),
                                  (n_rows,), (shape.merge_threads,), shape.merge_shared_bytes, 1,
                                  (POINTER, POINTER, POINTER, POINTER, INT, INT, INT),
                                  fixed={4: shape.n_chunks, 5: k, 6: int(bool(renormalize))}, programmatic=early)
    n_keys = shape.record_keys(n_rows)

    def run(x, probs, columns=None, lse=None, **_):
        record = cupy.empty(n_keys, dtype=cupy.uint64)
        chunks(x.data.ptr, record.data.ptr)
        merge(record.data.ptr, probs.data.ptr, columns.data.ptr, None if lse is None else lse.data.ptr)
    return run


SPLIT = register(Variant(
    name="softmax_topk_06_split", family="softmax_topk", file="topk/softmax_topk_06_split.cu", short="split",
    story="few long rows, k up to 1024: C blocks per row, each a packed (m, l, k keys) record from a radix select "
          "over its registers, merged by a second (programmatic) launch",
    geometry=geometry, simulate=simulate_split, plan=plan_split, reads_per_element=1, writes_per_element=0,
    dtypes=DTYPES, entry="softmax_topk_06_split_chunks_f32",
    entries=lambda v: tuple(f"softmax_topk_06_split_{kernel}_{DTYPE_TAGS[d]}" for kernel in ("chunks", "merge")
                            for d in v.dtypes), min_cc=70))
