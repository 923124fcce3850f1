"""Is there a usable CUDA GPU? (cupy imports without one; allocation then fails.)"""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def has_gpu() -> bool:
    try:
        import cupy

        return bool(cupy.is_available())
    except Exception:  # no cupy, no driver, no device
        return False


def is_cupy_array(x) -> bool:
    try:
        import cupy
    except Exception:
        return False
    return isinstance(x, cupy.ndarray)


def nvtx_range(name: str):
    """An NVTX range named after the variant (nvtx package, else cupy's, else nothing)."""
    try:
        import nvtx

        return nvtx.annotate(name)
    except Exception:
        pass
    try:
        from cupyx.profiler import time_range

        return time_range(name)
    except Exception:
        from contextlib import nullcontext

        return nullcontext()
