"""softmax_topk_06_split: a row split over C blocks that each write a packed (m, l, k keys) record,
merged by a second kernel (plan with the split rule, NumPy model, registration).

The split rule (`split_shape`): blocks of THREADS threads read a row in steps of THREADS * 16
elements (16 per thread); a chunk is `subs` consecutive steps, C = ceil(steps / subs) chunks per
row. C is as large as gives the GPU about BLOCKS_PER_SM blocks per SM (with few rows, every step
its own chunk), no larger than the merge can hold (C * k <= MERGE_CAPACITY) or MAX_CHUNKS. A chunk
keeps its candidates in shared memory: `capacity` = k + 2 * THREADS * 18 keys (a step appends at
most 18 per thread: 16 elements, the head and the tail), and k more for the selection.

The model replays the kernels: the same chunks, steps and slots; each thread's online (m, l) over
its steps (the head and tail pair first on the steps that may hold them, then the step's 16 values
as two folds of 8) and the block's combine;
the candidates each step appends (not below the thread's floor value: on a chunk's first step the
warp's k-th largest lane maximum for k <= 32, else the smallest of the warps' ceil(k / warps)-th;
then every selection's threshold), the radix select
and gather whenever the buffer could not take another step, and the last one (digit by digit,
topk_keys.radix_kth_key); the merge threads' combine of the C states and the merge's select; the
outputs' formulas. With replay=False it takes each chunk's k best exactly instead (the tests check
both give the same).
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.topk import keys as tk
from onlinesoftmax.kernels.topk import rows_model as rm
from onlinesoftmax.kernels.logsumexp.online import LAYOUTS, group_reduce, push_exp2
from onlinesoftmax.kernels.topk.softmax_topk import build_defines, to_dtype
from onlinesoftmax.registry import DTYPE_TAGS, DTYPES, Variant, Launch, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

F32 = np.float32
STEP = 16                        # elements a thread reads per step
SLOTS = STEP + 2                 # and the row's head and tail element
THREADS = 256                    # and BLOCKS_PER_SM: the best of the H200 probe (logs/h200/2026-12-03-topk-split-probe.log)
BLOCKS_PER_SM = 4
MERGE_CAPACITY = 16384           # keys of a row in the merge's shared memory (128 KiB)
MAX_K = 1024
MAX_CHUNKS = 1024
KEY_BYTES = 8
POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


@dataclass(frozen=True)
class SplitShape:
    threads: int          # T of the chunks kernel
    n_chunks: int         # C per row
    subs: int             # steps of T * 16 elements per chunk
    merge_threads: int    # T_m of the merge kernel
    k: int

    @property
    def room(self) -> int:
        """The most candidates one step appends."""
        return self.threads * SLOTS

    @property
    def capacity(self) -> int:
        """Candidates a chunk's buffer holds (a selection when the next step might not fit)."""
        return self.k + 2 * self.room

    @property
    def chunk_shared_bytes(self) -> int:
        return (self.capacity + self.k) * KEY_BYTES

    @property
    def merge_shared_bytes(self) -> int:
        return (self.n_chunks + 2) * self.k * KEY_BYTES

    def record_keys(self, n_rows: int) -> int:
        return n_rows * self.n_chunks * (self.k + 1)


def max_k(n_cols: int, dtype: str = "float32", capacity: int = MERGE_CAPACITY) -> int:
    """The largest k the split kernel takes for rows of n_cols (MAX_K, or the row length; a chunk per
    row holds any k, so neither the dtype nor the row's length beyond that matters)."""
    return min(MAX_K, n_cols, capacity)


def merge_capacity(shared_optin_bytes: int) -> int:
    """The C * k keys of a row the merge can hold with a device's opt-in shared memory per block, after
    its 2 k other keys (k <= MAX_K) and 4 KiB of static shared memory; at most MERGE_CAPACITY (the
    H200's 227 KiB hold that; an sm_86 GPU's 99 KiB hold 10112)."""
    return int(min(MERGE_CAPACITY, (shared_optin_bytes - 4096 - 2 * MAX_K * KEY_BYTES) // KEY_BYTES))


def split_shape(n_rows: int, n_cols: int, k: int, dtype: str = "float32", sms: int = 132,
                capacity: int = MERGE_CAPACITY, threads: int = THREADS,
                blocks_per_sm: float = BLOCKS_PER_SM) -> SplitShape:
    """The split rule (module docstring) for n_rows rows of n_cols elements, k kept, on `sms` SMs,
    with a merge of at most `capacity` keys."""
    if not 1 <= k <= max_k(n_cols, dtype, capacity):
        raise ValueError(f"softmax_topk_06_split takes k in 1 .. {max_k(n_cols, dtype, capacity)} for rows of "
                         f"{n_cols} elements (at most {MAX_K}), got k = {k}")
    vec = LAYOUTS[dtype].vec
    steps = max(1, -(-(n_cols // vec) // (threads * STEP // vec)))
    wanted = max(1, math.ceil(blocks_per_sm * sms / n_rows))
    subs = -(-steps // min(wanted, steps, capacity // k, MAX_CHUNKS))
    n_chunks = -(-steps // subs)
    merged = max(k, -(-n_chunks * k // 8))
    merge_threads = int(min(1024, max(64, 1 << (merged - 1).bit_length())))
    return SplitShape(threads, n_chunks, subs, merge_threads, k)


# --- the model ------------------------------------------------------------------------------------

def _step_slots(xs, head: int, n_vec: int, tail: int, shape: SplitShape, vec: int, chunk: int, step: int,
                first_step: bool, last_step: bool):
    """One step of one chunk: values (rows, T, 16) (-inf past the row's vectors), their columns and
    validity (T, 16), and each thread's head and tail value (rows, T) (-inf where it has none)."""
    n_rows, n_cols = xs.shape
    threads, unroll = shape.threads, STEP // vec
    t = np.arange(threads)
    index = (chunk * shape.subs + step) * threads * unroll + np.arange(unroll)[None, :] * threads + t[:, None]
    columns = (head + index[:, :, None] * vec + np.arange(vec)).reshape(threads, STEP)
    valid = np.repeat(index < n_vec, vec, axis=1)
    values = np.full((n_rows, threads, STEP), -np.inf, F32)
    values[:, valid] = xs[:, columns[valid]]
    head_ok = first_step & (t < head)
    tail_ok = last_step & (t < n_cols - tail)
    head_values = np.where(head_ok, xs[:, np.minimum(t, n_cols - 1)], F32(-np.inf)).astype(F32)
    tail_values = np.where(tail_ok, xs[:, np.minimum(tail + t, n_cols - 1)], F32(-np.inf)).astype(F32)
    return values, columns, valid, (head_values, head_ok, t), (tail_values, tail_ok, tail + t)


def _first_floor_values(values, head_values, tail_values, k: int):
    """Each warp's floor value on a chunk's first step, (rows, warps): over the lanes' largest values
    (fmaxf: NaN passed over) as keys without a column, warp_kth_key's k-th best for k <= 32; for
    larger k the smallest over the warps of their j-th best, j = ceil(k / warps) (-inf past 32)."""
    best = np.fmax(np.fmax(head_values, tail_values), np.fmax.reduce(values, axis=2))      # (rows, T)
    keys = tk.order_bits(best).astype(tk.U64) << tk.U64(32)
    n_rows, threads = best.shape
    warps = threads // rm.WARP
    j = k if k <= 32 else -(-k // warps)
    if j > 32:
        return np.full((n_rows, warps), -np.inf, F32)
    kth = rm.warp_kth_key(keys.reshape(-1, rm.WARP), j).reshape(n_rows, warps)
    if k > 32:
        kth = np.repeat(kth.min(axis=1, keepdims=True), warps, axis=1)
    return tk.key_values(kth)


def records(x, shape: SplitShape, replay: bool = True, passes: list | None = None, appended: list | None = None):
    """Model of softmax_topk_06_split_chunks: (m, l) of every chunk, each (rows, C) float32, and the
    keys of every record, a list per row of C arrays (each its chunk's k best, or all of them when
    it has fewer). With replay and a list `passes`, the digit passes of every radix select are
    appended to it; a list `appended` gets the candidates each chunk of each row appended."""
    x32 = np.asarray(x).astype(F32)
    n_rows, n_cols = x32.shape
    vec, k, threads = LAYOUTS[x.dtype.name].vec, shape.k, shape.threads
    warp_of = np.arange(threads) // rm.WARP
    m = np.full((n_rows, shape.n_chunks), -np.inf, F32)
    l = np.zeros((n_rows, shape.n_chunks), F32)
    keys = [[None] * shape.n_chunks for _ in range(n_rows)]
    sub_vectors = threads * STEP // vec
    with np.errstate(all="ignore"):
        for rows, head, n_vec, tail in rm.phase_groups(x):
            xs = x32[rows]
            for chunk in range(shape.n_chunks):
                n_steps = max(1, min(shape.subs, -(-(n_vec - chunk * shape.subs * sub_vectors) // sub_vectors)))
                state = (np.full((len(rows), threads), -np.inf, F32), np.zeros((len(rows), threads), F32))
                floor = np.full((len(rows), threads // rm.WARP), -np.inf, F32)     # each warp's floor value
                held = [np.zeros(0, tk.U64) for _ in rows]
                count = np.zeros(len(rows), np.int64)
                for step in range(n_steps):
                    first_step = chunk == 0 and step == 0
                    last_step = chunk == shape.n_chunks - 1 and step == n_steps - 1
                    values, columns, valid, head_slot, tail_slot = _step_slots(
                        xs, head, n_vec, tail, shape, vec, chunk, step, first_step, last_step)
                    if step == 0:
                        floor = _first_floor_values(values, head_slot[0], tail_slot[0], k)
                    thread_floor = floor[:, warp_of]                                       # (rows, T)
                    entering = valid[None] & ~(values < thread_floor[:, :, None])
                    new = tk.make_keys(values, np.broadcast_to(columns, values.shape))
                    for i in range(len(rows)):
                        parts = [held[i], new[i][entering[i]]]
                        for slot_values, ok, slot_columns in (head_slot, tail_slot):
                            enters = ok & ~(slot_values[i] < thread_floor[i])
                            parts.append(tk.make_keys(slot_values[i][enters], slot_columns[enters]))
                        count[i] += sum(len(part) for part in parts[1:])
                        held[i] = np.concatenate(parts)
                    if first_step or last_step:
                        state = push_exp2(state, np.stack([head_slot[0], tail_slot[0]], axis=-1))
                    state = push_exp2(push_exp2(state, values[..., :STEP // 2]), values[..., STEP // 2:])
                    for i in range(len(rows)):                       # the buffer could not take another step
                        if len(held[i]) + shape.room > shape.capacity:
                            threshold, taken = tk.radix_kth_key(held[i], k)
                            held[i] = held[i][held[i] >= tk.U64(threshold)]
                            floor[i] = np.fmax(floor[i], tk.key_values(np.array([threshold], tk.U64))[0])
                            if passes is not None:
                                passes.append(taken)
                m[rows, chunk], l[rows, chunk] = group_reduce(*state, threads)
                if appended is not None:
                    appended.extend(count.tolist())
                for i, row in enumerate(rows):
                    if replay:
                        keys[row][chunk], taken = tk.select_by_radix(held[i], k)
                        if passes is not None:
                            passes.append(taken)
                    else:
                        keys[row][chunk] = tk.top_keys(held[i], k)
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
    return Launch(grid=(n_rows * shape.n_chunks,), block=(shape.threads,), shared_bytes=shape.chunk_shared_bytes)


def plan_split(variant: Variant, x, probs, k: int = 1, renormalize: bool = False, columns=None, lse=None):
    """Runner of both launches on 2-D cupy arrays (softmax_topk.plan_fused's arguments). The records
    are the runner's own, allocated once (as the decode plans' partials): both launches take their
    address as a fixed argument, and a call launches only. Calls of one plan share its stream (the
    plan's key), where the next call's chunks kernel starts after this call's merge has ended. The
    merge is a programmatic dependent launch where the GPU and cuda-bindings allow it."""
    import cupy

    from onlinesoftmax.runtime import device

    if probs.dtype != x.dtype:
        raise TypeError(f"{variant.name}: probs must have x's dtype {x.dtype.name}, got {probs.dtype.name}")
    n_rows, n_cols = x.shape
    optin = cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
    shape = split_shape(n_rows, n_cols, k, x.dtype.name, device.sm_count(), merge_capacity(optin))
    tag = DTYPE_TAGS[x.dtype.name]
    defines = build_defines(x.dtype.name)          # only this dtype's two entries (topk_build.cuh)
    record = cupy.empty(shape.record_keys(n_rows), dtype=cupy.uint64)
    chunks = driver.prepare_launch(get_kernel(variant.path, f"softmax_topk_06_split_chunks_{tag}", defines),
                                   (n_rows * shape.n_chunks,), (shape.threads,), shape.chunk_shared_bytes, 1,
                                   (POINTER, POINTER, INT, LONG, INT, INT, INT, INT),
                                   fixed={1: record.data.ptr, 2: n_cols, 3: x.strides[0] // x.itemsize,
                                          4: shape.n_chunks, 5: shape.subs, 6: k, 7: shape.capacity})
    early = device.compute_capability() >= 90 and driver.has_driver_bindings()
    merge = driver.prepare_launch(get_kernel(variant.path, f"softmax_topk_06_split_merge_{tag}", defines),
                                  (n_rows,), (shape.merge_threads,), shape.merge_shared_bytes, 1,
                                  (POINTER, POINTER, POINTER, POINTER, INT, INT, INT),
                                  fixed={0: record.data.ptr, 4: shape.n_chunks, 5: k, 6: int(bool(renormalize))},
                                  programmatic=early)

    def run(x, probs, columns=None, lse=None, **_):
        chunks(x.data.ptr)
        merge(probs.data.ptr, columns.data.ptr, None if lse is None else lse.data.ptr)
    run.shape = shape   # for the tests and the chapter
    run.workspace = (record,)   # the launches hold only its address: the runner must keep it
    run.launches = (chunks, merge)   # each alone, for scripts/probe_split_host.py
    return run


SPLIT = register(Variant(
    name="softmax_topk_06_split", family="softmax_topk", file="topk/softmax_topk_06_split.cu", short="split",
    story="few long rows, k up to 1024: C blocks per row, each streaming its chunk with the candidates at or "
          "above a rising floor in shared memory and writing a packed (m, l, k keys) record from a radix select, "
          "merged by a second (programmatic) launch",
    geometry=geometry, simulate=simulate_split, plan=plan_split, reads_per_element=1, writes_per_element=0,
    dtypes=DTYPES, entry="softmax_topk_06_split_chunks_f32",
    entries=lambda v: tuple(f"softmax_topk_06_split_{kernel}_{DTYPE_TAGS[d]}" for kernel in ("chunks", "merge")
                            for d in v.dtypes), min_cc=70))


def emulate(x, k: int, renormalize: bool = False, *, sms: int = 132, schedule: str = "random", seed: int = 1,
            source: str | None = None):
    """(probs, columns, lse) of the kernels' own CUDA source run on the CPU emulator
    (runtime/emulator.py), both launches, with this plan's shape on a GPU of `sms` SMs, in a child
    process. x: 2-D numpy rows (float32, float16 or bfloat16) with unit column stride, contiguous or
    a view into a contiguous array (rows at any start and stride). Outputs and records start poisoned.
    `source`: another text for the kernel file (the tests' broken kernels)."""
    from onlinesoftmax.runtime import emulator

    n_rows, n_cols = x.shape
    base = x if x.base is None else x.base
    if x.strides[1] != x.itemsize or not base.flags.c_contiguous:
        raise ValueError("emulate takes rows with unit column stride inside a contiguous array")
    start = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // x.itemsize
    flat = base.reshape(-1)[start:]
    shape = split_shape(n_rows, n_cols, k, x.dtype.name, sms)
    tag = DTYPE_TAGS[x.dtype.name]
    entries = [f"softmax_topk_06_split_{kernel}_{tag}" for kernel in ("chunks", "merge")]
    module = emulator.Module(SPLIT.path, entries, flags=tuple(f"-D{d}" for d in build_defines(x.dtype.name)),
                             schedule=schedule, seed=seed, source=source)
    records_ = np.full(shape.record_keys(n_rows), 0x7B7B7B7B7B7B7B7B, np.uint64)
    probs = np.full((n_rows, k), np.nan, x.dtype)
    columns = np.full((n_rows, k), -7, np.int64)
    lse = np.full(n_rows, np.float32(1.2345e30), np.float32)
    module.launch(entries[0], (n_rows * shape.n_chunks,), (shape.threads,),
                  (flat, records_, np.int32(n_cols), np.int64(x.strides[0] // x.itemsize), np.int32(shape.n_chunks),
                   np.int32(shape.subs), np.int32(k), np.int32(shape.capacity)), shape.chunk_shared_bytes,
                  isolated=True)
    module.launch(entries[1], (n_rows,), (shape.merge_threads,),
                  (records_, probs, columns, lse, np.int32(shape.n_chunks), np.int32(k), np.int32(bool(renormalize))),
                  shape.merge_shared_bytes, isolated=True)
    return probs, columns, lse
