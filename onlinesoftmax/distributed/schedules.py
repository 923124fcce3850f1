"""Merging per-rank states across ranks: two schedules, one result.

Each rank holds a record of float32 planes, one value per row in each plane:

    record[0]                  m     the maximum of this rank's piece of the row
    record[1]                  l     sum of e^(x - m) over the piece
    record[2 : 2 + n_scaled]   u     values weighted like l (attention's output times l)
    record[2 + n_scaled :]     t     values simply added (a target logit that one rank owns)

The merged record is the chapter 04 combine of every rank's (m, l, u), with t summed:
M = max_r m_r, L = sum_r l_r e^(m_r - M), U = sum_r u_r e^(m_r - M), T = sum_r t_r.

NCCL reduces with sum, prod, max, min and avg only; a user's operator such as the combine
cannot be handed to it. Two ways around that:

- "megatron" (Megatron-LM's vocab-parallel cross entropy): an all-reduce MAX of m, then each rank
  re-bases its l and u on M locally, then one all-reduce SUM of the planes 1.. (l, u and t
  together). Two collectives, each reducing on the way; 4 bytes per row, then 4 (P - 1).
- "allgather" (flash-attention's cross entropy gathers the LSE): one all-gather of the whole
  record, then every rank folds the R records itself with the combine. One collective of
  4 P bytes per row from each rank; every rank receives R of them.

With the -inf guard of the combine: a rank whose piece of a row is empty or all -inf has
(m, l) = (-inf, 0) and adds nothing; a row of all -inf everywhere keeps M = -inf. The maxima are
taken with fmax (a NaN is never the maximum, as in the kernels); a NaN in a piece lives in its l
and reaches L through the sums.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.distributed.comm import Communicator

SCHEDULES = ("allgather", "megatron")
DEFAULT = "allgather"


def _xp(a):
    return np if isinstance(a, np.ndarray) else __import__("cupy")


def check_schedule(schedule) -> str:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(map(repr, SCHEDULES))}, got {schedule!r}")
    return schedule


def base_of(m):
    """The exponent each weight is re-based on: M, or 0 where M is -inf (the chapter 04 guard)."""
    xp = _xp(m)
    return xp.where(m == -np.inf, xp.float32(0), m)


def fold(gathered, n_scaled: int):
    """The combine of R records, gathered as (R, P, rows): the merged record (P, rows)."""
    xp = _xp(gathered)
    m = gathered[:, 0]
    with np.errstate(invalid="ignore", over="ignore"):
        big_m = _fmax_over_ranks(m)
        weights = xp.exp(m - base_of(big_m)[None, :])                       # (R, rows); -inf pieces give 0
        l_total = (weights * gathered[:, 1]).sum(axis=0)
        scaled = (weights[:, None, :] * gathered[:, 2:2 + n_scaled]).sum(axis=0)
        plain = gathered[:, 2 + n_scaled:].sum(axis=0)
    return xp.concatenate([big_m[None], l_total[None], scaled, plain]).astype(xp.float32)


def _fmax_over_ranks(m):
    total = m[0]
    for piece in m[1:]:
        total = _xp(m).fmax(total, piece)
    return total


def merge(comm: Communicator | None, record, n_scaled: int = 0, schedule: str = DEFAULT):
    """The merged record on every rank (a new array); `record` is this rank's (P, rows) float32 planes.
    comm None: one rank, the record itself is the merged one."""
    check_schedule(schedule)
    xp = _xp(record)
    if record.ndim != 2 or record.shape[0] < 2 or record.dtype != np.float32:
        raise ValueError(f"merge: the record must be float32 planes (P >= 2, rows), got {record.dtype} {record.shape}")
    if not 0 <= n_scaled <= record.shape[0] - 2:
        raise ValueError(f"merge: n_scaled = {n_scaled} does not fit a record of {record.shape[0]} planes")
    record = xp.ascontiguousarray(record)
    if comm is None:
        return record.copy()
    if schedule == "allgather":
        return fold(comm.all_gather(record), n_scaled)
    big_m = comm.all_reduce(record[0].copy(), "max")                        # collective 1: 4 B per row
    with np.errstate(invalid="ignore", over="ignore"):
        weight = xp.exp(record[0] - base_of(big_m))
    rest = record[1:].copy()
    rest[:1 + n_scaled] *= weight[None, :]                                   # re-base l and u on M, here
    comm.all_reduce(rest, "sum")                                             # collective 2: 4 (P - 1) B per row
    return xp.concatenate([big_m[None], rest]).astype(xp.float32)


def lse_of(merged):
    """log-sum-exp per row of a merged record: M + log L (-inf for a row with L = 0)."""
    xp = _xp(merged)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (merged[0] + xp.log(merged[1])).astype(xp.float32)
