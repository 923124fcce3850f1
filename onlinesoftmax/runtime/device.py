"""Is there a usable CUDA GPU? (cupy imports without one; allocation then fails.)"""
from __future__ import annotations

from functools import lru_cache

from onlinesoftmax.runtime.cache import Cache


_no_gpu_reason: str | None = None   # why has_gpu() said False (the error CuPy raised), else None


@lru_cache(maxsize=None)
def has_gpu() -> bool:
    """True when CuPy can use a CUDA device; when not, `no_gpu_reason()` says why."""
    global _no_gpu_reason
    try:
        import cupy

        if cupy.is_available():
            return True
        cupy.cuda.runtime.getDeviceCount()   # is_available() hides the error: raise it to keep it
        _no_gpu_reason = "CuPy finds no CUDA device"
    except Exception as error:  # no cupy, no driver, a driver too old for cupy's CUDA, no device
        _no_gpu_reason = f"{type(error).__name__}: {error}".strip()
    return False


def no_gpu_reason() -> str | None:
    """Why has_gpu() is False (CuPy's error), None when it is True or was not asked yet."""
    return None if has_gpu() else _no_gpu_reason


def _nvidia_gpu_present() -> bool:
    """An NVIDIA GPU is installed (a device node, or `nvidia-smi -L` lists one), usable or not."""
    import os
    import shutil
    import subprocess

    if os.path.exists("/dev/nvidia0"):
        return True
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except Exception:
        return False
    return "GPU " in listing


def _driver_cuda_version() -> str | None:
    """The newest CUDA the installed driver supports, e.g. "12.4": from `nvidia-smi`, else from
    cudaDriverGetVersion (which answers even when the driver is too old); None if neither can."""
    import re
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is not None:
        try:
            banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
            found = re.search(r"CUDA Version:\s*([0-9]+(?:\.[0-9]+)?)", banner)
            if found:
                return found.group(1)
        except Exception:
            pass
    try:
        import cupy

        version = cupy.cuda.runtime.driverGetVersion()   # 12040 for CUDA 12.4, 0 without a driver
    except Exception:
        return None
    return f"{version // 1000}.{version % 1000 // 10}" if version > 0 else None


def _cupy_cuda_major() -> int | None:
    """The CUDA major version the installed CuPy was built for (13 for cupy-cuda13x)."""
    try:
        import cupy

        return cupy.cuda.runtime.runtimeGetVersion() // 1000
    except Exception:
        return None


def gpu_diagnosis() -> str | None:
    """None when CuPy uses the GPU or the machine has no NVIDIA GPU; else a multi-line message
    saying why CuPy cannot use the GPU that is there, and how to install a matching CuPy."""
    if has_gpu() or not _nvidia_gpu_present():
        return None
    driver, cupy_major = _driver_cuda_version(), _cupy_cuda_major()
    lines = ["!" * 88,
             "An NVIDIA GPU is installed, but CuPy cannot use it, so this page runs WITHOUT the GPU.",
             f"CuPy's error: {no_gpu_reason() or 'unknown'}"]
    if cupy_major is not None:
        lines.append(f"The installed CuPy is built for CUDA {cupy_major} (cupy-cuda{cupy_major}x).")
    if driver is not None:
        lines.append(f"The NVIDIA driver supports CUDA up to {driver}.")
        major = int(driver.split(".")[0])
        if cupy_major is not None and major < cupy_major:
            lines += [f"The driver is too old for cupy-cuda{cupy_major}x. Either update the driver to one for "
                      f"CUDA {cupy_major}, or install the CuPy for CUDA {major}:",
                      f"    pip uninstall -y cupy-cuda{cupy_major}x && pip install cupy-cuda{major}x",
                      f"(without a CUDA {major} toolkit, pip install \"cupy-cuda{major}x[ctk]\" also brings its "
                      "NVRTC and libraries)"]
        else:
            lines.append("The versions match: check CUDA_VISIBLE_DEVICES and that the GPU is not in use "
                         "by another process (nvidia-smi).")
    else:
        lines += ["The driver's CUDA version could not be read (nvidia-smi prints it as 'CUDA Version').",
                  "Install the CuPy that matches it, e.g. for a CUDA 12 driver:",
                  "    pip uninstall -y cupy-cuda13x && pip install cupy-cuda12x",
                  "(without a CUDA 12 toolkit, pip install \"cupy-cuda12x[ctk]\" also brings its NVRTC and libraries)"]
    lines.append("!" * 88)
    return "\n".join(lines)


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


_properties = Cache("device properties", 1024, about="attributes asked of a device")
_simulated: dict = {}
# the H200 the book was measured on (shared_memory_optin: the most shared memory one block may ask for)
ASSUMED_WITHOUT_GPU = {"compute_capability": 90, "sm_count": 132, "shared_memory_optin": 232448}
ATTRIBUTES = {"sm_count": "MultiProcessorCount", "shared_memory_optin": "MaxSharedMemoryPerBlockOptin"}


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
            int(dev.attributes[ATTRIBUTES[name]])
        _properties[key] = value
    return value


def compute_capability() -> int:
    """Compute capability of the current device as major * 10 + minor (90 for an H100/H200).
    Without a GPU: 90, the H200 the book was measured on. Asked once per device."""
    return _property("compute_capability")


def sm_count() -> int:
    """Streaming multiprocessors of the current device (132 without a GPU: the H200). Asked once."""
    return _property("sm_count")


def shared_memory_optin() -> int:
    """The most dynamic shared memory one block of the current device may opt in to, in bytes (232448,
    227 KiB, on an H100/H200 and without a GPU; 101376 on sm_86 and sm_89). Asked once."""
    return _property("shared_memory_optin")


def check_shared_room(caller: str, variant: str, d: int, need: int, instead: str) -> None:
    """RuntimeError when `need` bytes of shared memory a block exceed what this GPU allows (without a
    GPU: the H200's), naming the variant, the head dimension and the variant that needs less."""
    if need > shared_memory_optin():
        raise RuntimeError(f"{caller}: variant {variant!r} at d = {d} needs {need} bytes of shared memory a block, "
                           f"this GPU allows {shared_memory_optin()}; variant {instead!r} needs less")


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


def blocks_by_registers(registers: int, threads: int = 256) -> int:
    """Blocks of `threads` threads that fit an SM by registers alone, at compute capability 8.0 to 9.0:
    65536 registers per SM, handed out per warp in units of 256, at most 2048 threads (so never more
    than 2048 // threads blocks)."""
    per_warp = -(-registers * 32 // 256) * 256
    return min(65536 // (per_warp * (threads // 32)), 2048 // threads)
