"""Launcher module of the log-sum-exp kernels: logsumexp_01_online, log_softmax_01_online.

Both kernels give each row a group of `group` consecutive lanes (a power of two, 1 .. 1024),
chosen from N: short rows share a block, long rows get up to 1024 lanes. Each row is read
with 16-byte vectors after a per-row scalar head (kernels/common/online_rows.cuh). The
NumPy models below follow that schedule: the same head / vector / tail split (from the
array's own addresses), the same lane order and loop steps, the same exp2 re-scaling and
tree sums, and the same group reduction.

Each file holds one entry per input dtype, `<stem>_f32`, `<stem>_f16` and `<stem>_bf16`
(the fast kernels' tags); the plan builder picks it from x's dtype. All arithmetic is fp32.
log_softmax writes x's dtype; the LSE is float32 for every input dtype. The models take
numpy float32, float16 and bfloat16 (ml_dtypes) and return the same dtypes.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.registry import Launch, Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel
from onlinesoftmax.runtime.plan import two_pointer_runner

F32 = np.float32
LOG2E = F32(1.4426950408889634)
MIN_BLOCK_THREADS = 256
MAX_GROUP = 1024
VECTORS_PER_LANE = 8      # aim for about 8 16-byte vectors per lane (2 loop steps for fp32)
ONE_VALUE_PER_ROW = "one_value_per_row"   # feature flag: the output has shape (n_rows,)


@dataclass(frozen=True)
class RowLayout:
    """How one dtype is read: elements per 16-byte vector, vectors per loop step."""

    vec: int
    unroll: int


LAYOUTS = {"float32": RowLayout(vec=4, unroll=4), "float16": RowLayout(vec=8, unroll=2),
           "bfloat16": RowLayout(vec=8, unroll=2)}
DTYPES = tuple(LAYOUTS)
def group_size(n_cols: int, vec: int) -> int:
    """Lanes per row: the power of two near n_vectors / VECTORS_PER_LANE, within 4 .. 1024."""
    wanted = max(1, -(-(n_cols // vec) // VECTORS_PER_LANE))
    return int(min(MAX_GROUP, max(4, 1 << (wanted - 1).bit_length())))


def check_group(group) -> None:
    if not isinstance(group, (int, np.integer)) or group < 1 or group > MAX_GROUP or group & (group - 1):
        raise ValueError(f"group must be a power of two in 1 .. {MAX_GROUP}, got {group!r}")


def launch_for(n_rows: int, group: int) -> Launch:
    block = max(MIN_BLOCK_THREADS, group)
    rows_per_block = block // group
    return Launch(grid=(-(-n_rows // rows_per_block),), block=(block,))


def geometry_for(dtype: str):
    vec = LAYOUTS[dtype].vec
    return lambda n_rows, n_cols: launch_for(n_rows, group_size(n_cols, vec))


# --- the model --------------------------------------------------------------------------------

def push_exp2(state, values, guards: bool = True):
    """online_push_exp2: fold values[..., k] into (m, l) with one re-scale and a tree sum."""
    m, l = state
    m_new = np.fmax(m, np.fmax.reduce(values, axis=-1))
    base = sim.online_base(m_new, guards)
    terms = np.exp2((values - base[..., None]) * LOG2E)
    width = terms.shape[-1] // 2
    while width:
        terms = terms[..., :width] + terms[..., width:2 * width]
        width //= 2
    return m_new, (l * np.exp2((m - base) * LOG2E) + terms[..., 0]).astype(F32)


def lane_states(x, group: int, layout: RowLayout, phases=None):
    """Every lane's (m, l) after its share of the row, shape (n_rows, group) each."""
    x32 = np.asarray(x).astype(F32)  # fp16 / bf16 -> fp32 is exact, as cvt.f32.f16 / the shift
    n_rows, n_cols = x32.shape
    phases = sim.row_heads(x) if phases is None else np.asarray(phases)
    m = np.full((n_rows, group), sim.NEG_INF, F32)
    l = np.zeros((n_rows, group), F32)
    lanes = np.arange(group)
    vec, unroll = layout.vec, layout.unroll
    with np.errstate(all="ignore"):
        for phase in np.unique(phases):
            rows = np.flatnonzero(phases == phase)
            xs = x32[rows]
            sm, sl = m[rows], l[rows]
            head = min(int(phase), n_cols)
            n_vec = (n_cols - head) // vec
            tail = head + n_vec * vec

            def push_scalar(i, lane):
                sm[:, lane], sl[:, lane] = push_exp2((sm[:, lane], sl[:, lane]), xs[:, i:i + 1])

            for i in range(head):
                push_scalar(i, i % group)
            body = xs[:, head:tail].reshape(len(rows), n_vec, vec)
            for first in range(0, n_vec, group * unroll):
                chunk = np.full((len(rows), group, unroll * vec), sim.NEG_INF, F32)
                for u in range(unroll):
                    index = first + u * group + lanes
                    ok = index < n_vec
                    chunk[:, ok, u * vec:(u + 1) * vec] = body[:, index[ok], :]
                new_m, new_l = push_exp2((sm, sl), chunk)
                active = first + lanes < n_vec   # a lane runs this step if its first vector exists
                sm, sl = np.where(active, new_m, sm), np.where(active, new_l, sl)
            for i in range(tail, n_cols):
                push_scalar(i, (i - tail) % group)
            m[rows], l[rows] = sm, sl
    return m, l


def butterfly(state, width: int):
    """xor butterfly over the last axis (offsets below `width`), each lane combining own, partner."""
    lanes = np.arange(state[0].shape[-1])
    for offset in (16, 8, 4, 2, 1):
        if offset < width:
            state = sim.online_combine(state, tuple(s[..., lanes ^ offset] for s in state))
    return state


def group_reduce(m, l, group: int):
    """online_group_reduce: the row's (m, l), shape (n_rows,) each."""
    with np.errstate(all="ignore"):
        if group <= 32:
            m, l = butterfly((m, l), group)
            return m[:, 0], l[:, 0]
        n_rows, warps = m.shape[0], group // 32
        m, l = butterfly((m.reshape(n_rows, warps, 32), l.reshape(n_rows, warps, 32)), 32)
        m, l = butterfly((m[..., 0], l[..., 0]), warps)   # one state per warp, then warp 0's butterfly
        return m[:, 0], l[:, 0]


def row_state(x, group: int | None = None, phases=None):
    """(m, l) per row as the kernels compute them (float32)."""
    layout = LAYOUTS[np.asarray(x).dtype.name]
    n_cols = x.shape[1]
    group = group_size(n_cols, layout.vec) if group is None else group
    check_group(group)
    return group_reduce(*lane_states(x, group, layout, phases), group)


def simulate_logsumexp(x, group: int | None = None, phases=None) -> np.ndarray:
    """LSE per row, float32 whatever x's dtype (float32, float16 or bfloat16). A row whose maximum is
    +inf gives +inf unless it holds a NaN (lse_rows.cuh reads such a row again for NaN)."""
    m, l = row_state(x, group, phases)
    with np.errstate(all="ignore"):
        lse = (m + np.log(l)).astype(F32)
        nan_seen = np.isnan(np.asarray(x, dtype=F32)).any(axis=1)
        return np.where((m == np.inf) & ~nan_seen, F32(np.inf), lse).astype(F32)


def simulate_log_softmax(x, group: int | None = None, phases=None) -> np.ndarray:
    """(x - m) - log l in float32, rounded once to x's dtype (nearest even, as the kernel's cvt)."""
    x = np.asarray(x)
    m, l = row_state(x, group, phases)
    with np.errstate(all="ignore"):
        y = (x.astype(F32) - m[:, None]) - np.log(l)[:, None]
        return y.astype(x.dtype)


# --- the launchers ----------------------------------------------------------------------------

def _plan(variant: Variant, x, y, group: int | None, per_element_output: bool):
    dtype = x.dtype.name
    entry = variant.dtype_entry(dtype)
    out_dtype = dtype if per_element_output else "float32"   # the LSE is float32 for every input
    if y.dtype.name != out_dtype:
        raise TypeError(f"{variant.name} on {dtype} input writes {out_dtype}, got an output of {y.dtype.name}")
    n_rows, n_cols = x.shape
    group = group_size(n_cols, LAYOUTS[dtype].vec) if group is None else group
    check_group(group)
    geometry = launch_for(n_rows, group)
    kernel = get_kernel(variant.path, entry, variant.defines)
    sizes = [n_rows, n_cols, x.strides[0] // x.itemsize] + ([y.strides[0] // y.itemsize] if per_element_output else [])
    types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong) \
        + ((ctypes.c_longlong,) if per_element_output else ()) + (ctypes.c_int,)
    launch = driver.prepare_launch(kernel, geometry.grid, geometry.block, 0, 1, types,
                                   fixed={2 + i: value for i, value in enumerate((*sizes, group))})
    return two_pointer_runner(launch)


def plan_logsumexp(variant: Variant, x, y, group: int | None = None):
    return _plan(variant, x, y, group, per_element_output=False)


def plan_log_softmax(variant: Variant, x, y, group: int | None = None):
    return _plan(variant, x, y, group, per_element_output=True)


# `geometry` answers for float32 rows (4 per 16-byte vector); fp16 / bf16 rows hold 8 per vector,
# and the plan builder sizes their groups from LAYOUTS[dtype] (geometry_for(dtype) gives the same).
register(Variant(
    name="logsumexp_01_online", family="logsumexp", file="logsumexp/logsumexp_01_online.cu",
    short="online", story="LSE = m + log l from the online state: one read per element, 16-byte loads",
    geometry=geometry_for("float32"), simulate=simulate_logsumexp, plan=plan_logsumexp,
    reads_per_element=1, writes_per_element=0, features=frozenset({ONE_VALUE_PER_ROW}),
    dtypes=DTYPES, entry="logsumexp_01_online_f32", entries=dtype_entries))

register(Variant(
    name="log_softmax_01_online", family="log_softmax", file="logsumexp/log_softmax_01_online.cu",
    short="online", story="log-softmax = (x - m) - log l: the statistics pass, then one output pass",
    geometry=geometry_for("float32"), simulate=simulate_log_softmax, plan=plan_log_softmax,
    reads_per_element=2, writes_per_element=1,
    dtypes=DTYPES, entry="log_softmax_01_online_f32", entries=dtype_entries))
