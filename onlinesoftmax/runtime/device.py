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


def current_device_id() -> int:
    """The id of cupy's current device, -1 without a GPU."""
    if not has_gpu():
        return -1
    import cupy

    return cupy.cuda.runtime.getDevice()


_properties: dict = {}
_simulated: dict = {}
ASSUMED_WITHOUT_GPU = {"compute_capability": 90, "sm_count": 132}   # the H200 the book was measured on


def _property(name: str):
    if name in _simulated:
        return _simulated[name]
    if not has_gpu():
        return ASSUMED_WITHOUT_GPU[name]
    key = (current_device_id(), name)
    value = _properties.get(key)
    if value is None:
        import cupy

        dev = cupy.cuda.Device()
        value = int(dev.compute_capability) if name == "compute_capability" else \
            int(dev.attributes["MultiProcessorCount"])
        _properties[key] = value
    return value


def compute_capability() -> int:
    """Compute capability of the current device as major * 10 + minor (90 for an H100/H200).
    Without a GPU: 90, the H200 the book was measured on. Asked once per device."""
    return _property("compute_capability")


def sm_count() -> int:
    """Streaming multiprocessors of the current device (132 without a GPU: the H200). Asked once."""
    return _property("sm_count")


class simulate_device:
    """Pretend the device has another compute capability / SM count (tests of the dispatcher):

        with device.simulate_device(compute_capability=80, sm_count=108): ...
    """

    def __init__(self, **properties):
        unknown = set(properties) - set(ASSUMED_WITHOUT_GPU)
        if unknown:
            raise ValueError(f"unknown device properties {sorted(unknown)}; known: {sorted(ASSUMED_WITHOUT_GPU)}")
        self.properties = properties

    def __enter__(self):
        self.saved = dict(_simulated)
        _simulated.update(self.properties)
        return self

    def __exit__(self, *exc):
        _simulated.clear()
        _simulated.update(self.saved)
        return False
