"""Vocabulary-parallel softmax, log-softmax, log-sum-exp and cross-entropy: each rank holds a slice of
the vocabulary (the columns of the logits) and no rank ever sees a whole row.

Every function is per-rank code: call it on every rank with that rank's `comm` and its shard.

    loss = cross_entropy(comm, logits_shard, targets)      # (tokens,) float32, the same on every rank
    y = log_softmax(comm, logits_shard)                    # this rank's columns of log softmax(row)

Shards are the vocabulary in rank order: rank r holds columns [start_r, start_r + width_r). The
widths may differ (`VocabLayout`, from one small all-gather that also checks that every rank
passed the same dtype and number of rows). Each rank reads its shard once with the
logsumexp_02_state kernel (its NumPy model for numpy arrays), which writes (m, l) per row and, for
the cross entropy, the target's logit where this rank owns the target column and 0 elsewhere.
The records are merged across ranks (schedules.py: "allgather" or "megatron"); the loss is
LSE - x_target, and softmax / log-softmax are one elementwise pass over the shard with the
merged (M, L): e^(x - M) / L and (x - M) - ln L, in float32, rounded once to x's dtype.

comm=None is one rank holding the whole vocabulary (no collective): the unsharded computation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.distributed import schedules
from onlinesoftmax.distributed.comm import Communicator, describe
from onlinesoftmax.kernels.logsumexp.state import row_state_planes
from onlinesoftmax.registry import DTYPES

IGNORE_INDEX = -100          # torch's default: the loss of such a token is 0
DTYPE_CODES = {name: i for i, name in enumerate(DTYPES)}


def _xp(a):
    return np if isinstance(a, np.ndarray) else __import__("cupy")


@dataclass(frozen=True)
class VocabLayout:
    """Which columns of the vocabulary each rank holds, and what every rank agreed on."""

    widths: tuple[int, ...]
    n_rows: int
    dtype: str

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(int(s) for s in np.concatenate([[0], np.cumsum(self.widths)[:-1]]))

    @property
    def vocab(self) -> int:
        return int(sum(self.widths))

    def start(self, rank: int) -> int:
        return self.starts[rank]


def _as_rows(logits, function: str):
    """(rows, width) view of logits with the vocabulary on the last axis (copied if its columns are strided)."""
    if not hasattr(logits, "dtype") or not (isinstance(logits, np.ndarray) or type(logits).__module__.startswith("cupy")):
        raise TypeError(f"{function}: logits must be a numpy or cupy array, got {describe(logits)}")
    if logits.dtype.name not in DTYPES:
        raise TypeError(f"{function}: logits must be float32, float16 or bfloat16, got {logits.dtype.name}")
    if logits.ndim < 1 or logits.size == 0:
        raise ValueError(f"{function}: logits must be a non-empty array with the vocabulary on the last axis, "
                         f"got shape {tuple(logits.shape)}")
    xp = _xp(logits)
    rows = logits.reshape(-1, logits.shape[-1]) if logits.flags.c_contiguous else None
    if rows is None:
        rows = logits if logits.ndim == 2 and logits.strides[1] == logits.itemsize else \
            xp.ascontiguousarray(logits).reshape(-1, logits.shape[-1])
    return rows


def vocab_layout(comm: Communicator | None, logits) -> VocabLayout:
    """Every rank's shard width from one all-gather of (dtype, rows, width); a clear error, on every
    rank, when the ranks disagree on dtype or rows."""
    rows = _as_rows(logits, "vocab_layout")
    n_rows, width = rows.shape
    if comm is None:
        return VocabLayout((width,), n_rows, rows.dtype.name)
    xp = _xp(rows)
    mine = xp.asarray([DTYPE_CODES[rows.dtype.name], n_rows, width], dtype=xp.int64)
    table = comm.all_gather(mine)
    table = table.get() if xp is not np else table
    dtypes = [DTYPES[int(code)] for code in table[:, 0]]
    if len(set(dtypes)) != 1:
        raise ValueError("vocab-parallel: every rank must pass logits of one dtype, got "
                         + ", ".join(f"rank {r}: {d}" for r, d in enumerate(dtypes)))
    if len(set(table[:, 1].tolist())) != 1:
        raise ValueError("vocab-parallel: every rank must hold the same rows (tokens), got "
                         + ", ".join(f"rank {r}: {int(n)} rows" for r, n in enumerate(table[:, 1])))
    return VocabLayout(tuple(int(w) for w in table[:, 2]), n_rows, dtypes[0])


def _checked_layout(comm, rows, layout: VocabLayout | None) -> VocabLayout:
    layout = vocab_layout(comm, rows) if layout is None else layout
    rank = 0 if comm is None else comm.rank
    if (layout.n_rows, layout.widths[rank], layout.dtype) != (rows.shape[0], rows.shape[1], rows.dtype.name):
        raise ValueError(f"vocab-parallel: the layout says rank {rank} holds {layout.n_rows} rows x "
                         f"{layout.widths[rank]} columns of {layout.dtype}, got {rows.shape[0]} x {rows.shape[1]} "
                         f"of {rows.dtype.name}")
    return layout


def _targets(targets, logits, layout: VocabLayout, ignore_index: int, check: bool):
    xp = _xp(logits)
    if not hasattr(targets, "dtype") or targets.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: targets must be an integer numpy or cupy array, got {describe(targets)}")
    if _xp(targets) is not xp:
        raise TypeError(f"cross_entropy: targets and logits must both be numpy or both cupy arrays, "
                        f"got {describe(targets)} and {describe(logits)}")
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"cross_entropy: targets must have the logits' shape without the vocabulary axis, "
                         f"{tuple(logits.shape[:-1])}, got {tuple(targets.shape)}")
    flat = xp.ascontiguousarray(targets.reshape(-1), dtype=xp.int64)
    if check:
        bad = ((flat < 0) | (flat >= layout.vocab)) & (flat != ignore_index)
        if bool(bad.any()):
            first = int(xp.argmax(bad))
            raise ValueError(f"cross_entropy: target {int(flat[first])} of token {first} is outside the vocabulary "
                             f"[0, {layout.vocab}) and is not ignore_index ({ignore_index})")
    return flat


def _record(comm, logits, targets=None, vocab_start=0, schedule="allgather"):
    planes = row_state_planes(logits, targets, vocab_start)
    return schedules.merge(comm, planes, n_scaled=0, schedule=schedule)


def cross_entropy(comm: Communicator | None, logits, targets, *, schedule: str = schedules.DEFAULT,
                  layout: VocabLayout | None = None, ignore_index: int = IGNORE_INDEX, check_targets: bool = True):
    """Loss per token, LSE(row) - row[target], float32 of targets' shape, the same on every rank.

    logits: this rank's (..., width) shard; targets: (...) integer indices into the whole
    vocabulary (the same on every rank); a target equal to `ignore_index` gives loss 0 (torch's
    reduction="none"). check_targets: one reduction and a host sync to reject targets outside the
    vocabulary (off, a wrong target gives LSE - 0)."""
    schedules.check_schedule(schedule)
    rows = _as_rows(logits, "cross_entropy")
    layout = _checked_layout(comm, rows, layout)
    flat = _targets(targets, logits, layout, ignore_index, check_targets)
    rank = 0 if comm is None else comm.rank
    merged = _record(comm, rows, flat, layout.start(rank), schedule)
    xp = _xp(rows)
    with np.errstate(invalid="ignore"):
        loss = schedules.lse_of(merged) - merged[2]
    loss = xp.where(flat == ignore_index, xp.float32(0), loss).astype(xp.float32)
    return loss.reshape(targets.shape)


def logsumexp(comm: Communicator | None, logits, *, schedule: str = schedules.DEFAULT,
              layout: VocabLayout | None = None):
    """log sum e^x over the whole vocabulary per row: float32, the logits' shape without the last axis."""
    schedules.check_schedule(schedule)
    rows = _as_rows(logits, "logsumexp")
    _checked_layout(comm, rows, layout)
    return schedules.lse_of(_record(comm, rows, schedule=schedule)).reshape(logits.shape[:-1])


def _to_float32(x):
    xp = _xp(x)
    if x.dtype.name == "bfloat16" and xp is not np:   # widen through the bits (exact)
        return (x.view(xp.uint16).astype(xp.uint32) << 16).view(xp.float32)
    return x.astype(xp.float32)


def _elementwise(comm, logits, schedule, layout, function: str, op):
    schedules.check_schedule(schedule)
    rows = _as_rows(logits, function)
    _checked_layout(comm, rows, layout)
    merged = _record(comm, rows, schedule=schedule)
    x32 = _to_float32(rows)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y32 = op(x32, merged[0][:, None], merged[1][:, None], _xp(rows))
    return checks.from_float32(y32.astype(np.float32), rows.dtype.name).reshape(logits.shape)


def log_softmax(comm: Communicator | None, logits, *, schedule: str = schedules.DEFAULT,
                layout: VocabLayout | None = None):
    """This rank's columns of log softmax over the whole vocabulary, in the logits' dtype."""
    return _elementwise(comm, logits, schedule, layout, "log_softmax", lambda x, m, l, xp: (x - m) - xp.log(l))


def softmax(comm: Communicator | None, logits, *, schedule: str = schedules.DEFAULT,
            layout: VocabLayout | None = None):
    """This rank's columns of softmax over the whole vocabulary, in the logits' dtype."""
    return _elementwise(comm, logits, schedule, layout, "softmax", lambda x, m, l, xp: xp.exp(x - m) / l)


# ---- shards of an unsharded array (tests, the chapter, the simulated ranks) ----------------------

def split_sizes(total: int, ranks: int) -> tuple[int, ...]:
    """Near-equal pieces in rank order, the first total % ranks one longer (numpy.array_split's rule)."""
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise ValueError(f"the rank count must be a positive int, got {ranks!r}")
    if total < ranks:
        raise ValueError(f"{total} columns cannot be split over {ranks} ranks: every shard needs at least one")
    return tuple(total // ranks + (r < total % ranks) for r in range(ranks))


def shard_columns(x, ranks: int, sizes=None) -> list:
    """The column shards (views) of x's last axis: near-equal, or `sizes` (positive, summing to the axis)."""
    total = x.shape[-1]
    sizes = split_sizes(total, ranks) if sizes is None else tuple(int(s) for s in sizes)
    if len(sizes) != ranks or sum(sizes) != total or min(sizes) < 1:
        raise ValueError(f"shard sizes {sizes} must be {ranks} positive numbers summing to {total}")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return [x[..., int(s):int(s) + n] for s, n in zip(starts, sizes)]
