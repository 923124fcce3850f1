"""The communication interface the schedules need, and what every implementation records.

A `Communicator` is one rank's handle on a group of `size` ranks. The schedules of this package
use three calls and nothing else:

    comm.all_reduce(buffer, "max" | "sum")   # in place: every rank gets the elementwise max / sum
    comm.all_gather(buffer)                  # a new array (size, *buffer.shape): rank r's buffer at [r]
    comm.rank, comm.size

Two implementations: `simulated.SimulatedComm` (every rank a thread of one process, the
collectives done by local reductions, on NumPy arrays or on one GPU) and
`torch_comm.TorchComm` (one process per rank, torch.distributed with NCCL on GPUs or gloo on
CPUs). Each collective is written down in `comm.log` (kind, op, bytes this rank contributes and
bytes a ring algorithm puts on this rank's link), and timed with CUDA events when
`comm.timing` is True and the buffers are cupy arrays: the benchmark's communication time.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

OPS = ("max", "sum")


@dataclass
class Collective:
    """One collective as a rank saw it."""

    kind: str                 # "all_reduce" or "all_gather"
    op: str | None            # "max" / "sum" for an all-reduce
    payload_bytes: int        # the buffer this rank put in
    wire_bytes: int           # what a ring algorithm sends from this rank: 2 (R-1)/R x for all-reduce, (R-1) x for all-gather
    events: tuple = field(default=(), repr=False)   # (start, end) cupy events when timed

    def elapsed_ms(self) -> float | None:
        if not self.events:
            return None
        import cupy

        start, end = self.events
        end.synchronize()
        return float(cupy.cuda.get_elapsed_time(start, end))


def ring_wire_bytes(kind: str, payload_bytes: int, size: int) -> int:
    """Bytes one rank sends in a ring all-reduce (reduce-scatter + all-gather) or ring all-gather."""
    if size <= 1:
        return 0
    if kind == "all_reduce":
        return 2 * (size - 1) * payload_bytes // size
    return (size - 1) * payload_bytes


def describe(a) -> str:
    return f"{type(a).__module__.split('.')[0]} {a.dtype} {tuple(a.shape)}" if hasattr(a, "dtype") else type(a).__name__


class Communicator:
    """Base class: argument checks, the log and the event timing around `_all_reduce` / `_all_gather`."""

    rank: int = 0
    size: int = 1

    def __init__(self):
        self.log: list[Collective] = []
        self.timing = False

    # -- what implementations provide ------------------------------------------------------------
    def _all_reduce(self, buffer, op: str) -> None:
        raise NotImplementedError

    def _all_gather(self, buffer, out) -> None:
        raise NotImplementedError

    # -- the interface ----------------------------------------------------------------------------
    def all_reduce(self, buffer, op: str):
        """Elementwise max or sum of `buffer` over the ranks, in place; returns `buffer`."""
        if op not in OPS:
            raise ValueError(f"all_reduce: op must be one of {OPS}, got {op!r}")
        self._check_buffer(buffer, "all_reduce")
        record = Collective("all_reduce", op, buffer.nbytes, ring_wire_bytes("all_reduce", buffer.nbytes, self.size))
        with self._timed(record, buffer):
            self._all_reduce(buffer, op)
        self.log.append(record)
        return buffer

    def all_gather(self, buffer):
        """Every rank's `buffer`, stacked: a new array of shape (size, *buffer.shape)."""
        self._check_buffer(buffer, "all_gather")
        xp = _module(buffer)
        out = xp.empty((self.size,) + tuple(buffer.shape), dtype=buffer.dtype)
        record = Collective("all_gather", None, buffer.nbytes, ring_wire_bytes("all_gather", buffer.nbytes, self.size))
        with self._timed(record, buffer):
            self._all_gather(buffer, out)
        self.log.append(record)
        return out

    def reset_log(self) -> None:
        self.log.clear()

    # -- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _check_buffer(buffer, what: str) -> None:
        if not hasattr(buffer, "flags") or not buffer.flags.c_contiguous:
            raise ValueError(f"{what}: the buffer must be a C-contiguous numpy or cupy array, got {describe(buffer)}")

    @contextmanager
    def _timed(self, record: Collective, buffer):
        """CUDA events on the current stream before and after the collective (cupy buffers, timing on)."""
        if not (self.timing and _module(buffer) is not np):
            yield
            return
        import cupy

        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        yield
        end.record()
        record.events = (start, end)


def _module(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy

    return cupy


def bytes_per_row(log: list[Collective], n_rows: int) -> dict:
    """What a sequence of collectives cost per row (token): payload and ring wire bytes, and the count."""
    return {"collectives": len(log),
            "payload_bytes_per_row": sum(c.payload_bytes for c in log) / n_rows,
            "wire_bytes_per_row": sum(c.wire_bytes for c in log) / n_rows}
