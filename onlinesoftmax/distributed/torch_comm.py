"""Real ranks: one process per rank, the collectives through torch.distributed.

    torchrun --standalone --nproc-per-node 2 -m onlinesoftmax.distributed.check   # NCCL on 2 GPUs
    comm = TorchComm.from_env()          # inside each process: backend, rank and GPU from torchrun's env

Why torch.distributed and not cupy.cuda.nccl: the same process-group code runs with the gloo
backend on CPUs, so the real multi-process path (launch, rendezvous, rank bookkeeping, every
collective this package calls) is tested with two processes on a machine without a GPU, and only
the backend and the arrays' device change on GPUs; torchrun is the launcher readers already use,
and torch's NCCL process group is what Megatron-LM's and flash-attention's cross-entropy call, so
the timings compare like with like. torch is imported only here: the kernels, the models and
the simulated ranks do not need it.

Arrays cross into torch without a copy: numpy through torch.from_numpy (gloo), cupy through
DLPack (NCCL). Both libraries issue work on the legacy default stream unless told otherwise,
and torch's NCCL process group makes that stream wait for a collective before later work, so
kernels launched by cupy after a collective see its result. NCCL refuses two ranks on one GPU:
each process takes the GPU `LOCAL_RANK` names.
"""
from __future__ import annotations

import os

import numpy as np

from onlinesoftmax.distributed.comm import Communicator, describe


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as error:   # pragma: no cover - depends on the machine
        raise ImportError("onlinesoftmax.distributed.torch_comm needs torch (pip install torch); the simulated "
                          "ranks (onlinesoftmax.distributed.simulated) need no torch") from error
    return torch, dist


class TorchComm(Communicator):
    """This process's rank in torch.distributed's default group (or `group`)."""

    def __init__(self, group=None):
        super().__init__()
        torch, dist = _torch()
        if not dist.is_initialized():
            raise RuntimeError("TorchComm: torch.distributed is not initialized; use TorchComm.from_env() under torchrun")
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.backend = dist.get_backend(group)
        self._ops = {"max": dist.ReduceOp.MAX, "sum": dist.ReduceOp.SUM}
        # all_gather_single is the newer name of all_gather_into_tensor (same arguments)
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    @classmethod
    def from_env(cls, backend: str | None = None):
        """Initialize torch.distributed from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
        MASTER_ADDR, MASTER_PORT). backend None: "nccl" when CuPy sees a GPU, else "gloo". With NCCL
        the process uses GPU LOCAL_RANK (cupy and torch both)."""
        torch, dist = _torch()
        missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
        if missing:
            raise RuntimeError(f"TorchComm.from_env: {', '.join(missing)} not set; launch with "
                               "torchrun --standalone --nproc-per-node N ...")
        if backend is None:
            from onlinesoftmax.runtime.device import has_gpu

            backend = "nccl" if has_gpu() else "gloo"
        if backend not in ("nccl", "gloo"):
            raise ValueError(f"TorchComm.from_env: backend must be 'nccl' or 'gloo', got {backend!r}")
        local_rank = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        if backend == "nccl":
            import cupy

            count = cupy.cuda.runtime.getDeviceCount()
            if local_rank >= count:
                raise RuntimeError(f"rank with LOCAL_RANK {local_rank} has no GPU of its own: {count} visible. "
                                   "NCCL refuses two ranks on one GPU; use the simulated ranks on one GPU")
            cupy.cuda.Device(local_rank).use()
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        else:
            dist.init_process_group("gloo")
        return cls()

    def close(self) -> None:
        _, dist = _torch()
        if dist.is_initialized():
            dist.destroy_process_group()

    def barrier(self) -> None:
        _, dist = _torch()
        dist.barrier(self.group)

    # -- the two collectives ----------------------------------------------------------------------
    def _tensor(self, a):
        torch, _ = _torch()
        if isinstance(a, np.ndarray):
            if self.backend == "nccl":
                raise TypeError(f"the NCCL backend takes cupy arrays, got {describe(a)}")
            return torch.from_numpy(a)
        if self.backend != "nccl":
            raise TypeError(f"the {self.backend} backend takes numpy arrays, got {describe(a)}")
        return torch.from_dlpack(a)

    def _all_reduce(self, buffer, op: str) -> None:
        _, dist = _torch()
        if buffer.dtype.name not in ("float32", "float64", "int64", "int32"):
            raise TypeError(f"all_reduce takes float32, float64, int32 or int64 buffers here, got {describe(buffer)}")
        dist.all_reduce(self._tensor(buffer), op=self._ops[op], group=self.group)

    def _all_gather(self, buffer, out) -> None:
        # a gather moves bytes: as uint8 every dtype travels exactly (NCCL knows no bfloat16 of cupy's)
        self._gather(self._tensor(out.reshape(-1).view(np.uint8)), self._tensor(buffer.reshape(-1).view(np.uint8)),
                     group=self.group)   # flat: the concatenation form, which gloo and NCCL both take
