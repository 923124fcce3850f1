"""Simulated ranks: the per-rank code of this package run by R threads of one process, with the
collectives done by local reductions (NumPy arrays on the CPU, or cupy arrays on one GPU).

    group = SimulatedGroup(4)
    losses = group.run(vocab_parallel.cross_entropy, [(shard, targets) for shard in shards])

`run(fn, per_rank_args)` calls fn(comm, *args) for every rank, each with its own
`SimulatedComm`, and returns the ranks' results in rank order. The threads take turns: exactly
one runs at a time (a rank holds the group's lock while it computes and lets go only while it
waits in a collective), so the simulation is deterministic, and a launch plan shared by two
ranks with the same shapes is never called by two threads at once (runtime/driver.py asks
its callers to serialize). NCCL itself refuses two ranks on one GPU: this is how one device runs
the same code as R of them.

A collective checks what every rank brought: the same kind, op, shape and dtype, or every rank
raises the same ValueError naming what each one passed (NCCL would hang or read garbage). A rank
that raises makes the others raise too, instead of waiting for it forever; `run` re-raises the
first error. The sums add the ranks' buffers in rank order, in the buffers' dtype.
"""
from __future__ import annotations

import threading

import numpy as np

from onlinesoftmax.distributed.comm import Communicator, describe

TIMEOUT_S = 120.0


class RankFailed(RuntimeError):
    """Raised in the other ranks when one rank's function raised."""


class SimulatedGroup:
    """R simulated ranks. R >= 2: one rank is the unsharded computation (pass comm=None instead)."""

    def __init__(self, size: int, timeout_s: float = TIMEOUT_S):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"SimulatedGroup: the rank count must be an int, got {type(size).__name__} {size!r}")
        if size < 2:
            raise ValueError(f"SimulatedGroup: simulated ranks need at least 2 ranks, got {size}; with one rank "
                             "the sharded code is the unsharded computation: call it with comm=None")
        self.size = int(size)
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._generation = 0
        self._arrived: dict[int, tuple] = {}
        self._results: dict[int, tuple] = {}   # generation -> (outputs per rank or an error, readers left)
        self._failed: BaseException | None = None

    # -- running ranks ----------------------------------------------------------------------------
    def run(self, fn, per_rank_args, timing: bool = False):
        """fn(comm, *per_rank_args[r]) on every rank; the results in rank order."""
        per_rank_args = list(per_rank_args)
        if len(per_rank_args) != self.size:
            raise ValueError(f"SimulatedGroup.run: {self.size} ranks need {self.size} argument tuples, "
                             f"got {len(per_rank_args)}")
        comms = [SimulatedComm(self, rank) for rank in range(self.size)]
        for comm in comms:
            comm.timing = timing
        results: list = [None] * self.size
        errors: list = [None] * self.size

        def body(rank):
            with self._cond:
                try:
                    args = per_rank_args[rank]
                    results[rank] = fn(comms[rank], *(args if isinstance(args, tuple) else (args,)))
                except BaseException as error:   # reported by run(), after every thread ended
                    errors[rank] = error
                    if self._failed is None:
                        self._failed = error
                    self._cond.notify_all()

        threads = [threading.Thread(target=body, args=(rank,), name=f"simulated-rank-{rank}")
                   for rank in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        first = next((e for e in errors if e is not None and not isinstance(e, RankFailed)),
                     next((e for e in errors if e is not None), None))
        self._reset()
        if first is not None:
            raise first
        self.comms = comms
        return results

    def _reset(self) -> None:
        self._generation, self._arrived, self._results, self._failed = 0, {}, {}, None

    # -- one collective (called with the lock held) ----------------------------------------------
    def exchange(self, rank: int, kind: str, op, buffer):
        """Deposit rank's buffer; when all ranks are in, the last one computes every rank's output."""
        generation = self._generation
        self._arrived[rank] = (kind, op, buffer.copy())
        if len(self._arrived) == self.size:
            self._results[generation] = [self._compute(), self.size]
            self._arrived = {}
            self._generation += 1
            self._cond.notify_all()
        else:
            waited = self._cond.wait_for(lambda: self._generation > generation or self._failed is not None,
                                         timeout=self.timeout_s)
            if self._generation == generation:
                if self._failed is not None:
                    raise RankFailed(f"rank {rank} stopped in {kind}: another rank raised "
                                     f"{type(self._failed).__name__}: {self._failed}")
                if not waited:
                    missing = sorted(set(range(self.size)) - set(self._arrived))
                    raise TimeoutError(f"rank {rank} waited {self.timeout_s:.0f} s in {kind}: ranks {missing} never "
                                       "arrived (did a rank skip a collective?)")
        entry = self._results[generation]
        outputs = entry[0]
        entry[1] -= 1
        if entry[1] == 0:
            del self._results[generation]
        if isinstance(outputs, Exception):
            raise type(outputs)(str(outputs))   # each rank raises its own copy
        return outputs[rank]

    def _compute(self):
        ranks = [self._arrived[r] for r in range(self.size)]
        first_kind, first_op, first = ranks[0]
        shapes = {(kind, op, tuple(b.shape), b.dtype.name, type(b).__module__.split(".")[0]) for kind, op, b in ranks}
        if len(shapes) != 1:
            what = "; ".join(f"rank {r}: {kind}{'(' + op + ')' if op else ''} of {describe(b)}"
                             for r, (kind, op, b) in enumerate(ranks))
            return ValueError(f"the ranks called different collectives or passed different buffers: {what}")
        buffers = [b for _, _, b in ranks]
        xp = np if isinstance(first, np.ndarray) else __import__("cupy")
        if first_kind == "all_gather":
            stacked = xp.stack(buffers)
            return [stacked] * self.size
        total = buffers[0].copy()
        for b in buffers[1:]:
            if first_op == "max":
                total = xp.fmax(total, b)   # NaN is carried by the sums, never by a maximum (see schedules)
            else:
                total = total + b
        return [total] * self.size


class SimulatedComm(Communicator):
    """One simulated rank's communicator."""

    def __init__(self, group: SimulatedGroup, rank: int):
        super().__init__()
        self.group, self.rank, self.size = group, rank, group.size

    def _all_reduce(self, buffer, op: str) -> None:
        buffer[...] = self.group.exchange(self.rank, "all_reduce", op, buffer)

    def _all_gather(self, buffer, out) -> None:
        out[...] = self.group.exchange(self.rank, "all_gather", None, buffer)


def run_ranks(fn, ranks: int, per_rank_args, timing: bool = False):
    """SimulatedGroup(ranks).run(fn, per_rank_args): the results of every rank, in rank order."""
    return SimulatedGroup(ranks).run(fn, per_rank_args, timing=timing)
