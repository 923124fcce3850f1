"""The one timer. Every benchmark in the book goes through `time_gpu`.

Method (also stored, verbatim, in every result file as `meta.method`):
"""
from __future__ import annotations

import math

import numpy as np

L2_BYTES_H200 = 60 * 2**20
SPIN_US = 40
METHOD = (
    "CUDA events around each call on the default stream; before each timed call a "
    f"{SPIN_US} us spin kernel keeps the GPU busy so host launch overhead is hidden and "
    "only device time is measured; inputs rotated over enough copies that each call "
    "reads beyond L2 (>= 4x the L2 size in total); warm-up calls first (compilation "
    "excluded); the median of the timed calls is reported"
)

_SPIN_SOURCE = r"""
extern "C" __global__ void timer_spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""
_spin_kernel = None


def _spin(us: float) -> None:
    """Busy-wait on the GPU for about `us` microseconds (a single-thread kernel)."""
    global _spin_kernel
    import cupy

    if _spin_kernel is None:
        _spin_kernel = cupy.RawKernel(_SPIN_SOURCE, "timer_spin")
    clock_khz = cupy.cuda.Device().attributes["ClockRate"]
    _spin_kernel((1,), (1,), (np.int64(us * clock_khz / 1000),))


def l2_bytes() -> int:
    import cupy

    return int(cupy.cuda.Device().attributes.get("L2CacheSize", L2_BYTES_H200))


def rotation_count(bytes_per_call: int, factor: int = 4, limit: int = 64) -> int:
    """How many input copies make each call read beyond L2 (factor x L2 in total)."""
    return max(1, min(limit, math.ceil(factor * l2_bytes() / max(1, bytes_per_call))))


def time_gpu(fn, arg_sets, *, warmup: int = 5, reps: int = 30) -> dict:
    """Median device time of `fn(*args)` in ms, rotating over `arg_sets`.

    Returns {"ms": median, "ms_p10": ..., "ms_p90": ..., "reps": reps}.
    """
    import cupy

    arg_sets = list(arg_sets)
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    cupy.cuda.Device().synchronize()
    starts = [cupy.cuda.Event() for _ in range(reps)]
    ends = [cupy.cuda.Event() for _ in range(reps)]
    for i in range(reps):
        _spin(SPIN_US)
        starts[i].record()
        fn(*arg_sets[i % len(arg_sets)])
        ends[i].record()
    ends[-1].synchronize()
    times = np.array([cupy.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)])
    return {"ms": float(np.median(times)), "ms_p10": float(np.percentile(times, 10)),
            "ms_p90": float(np.percentile(times, 90)), "reps": reps}


def copy_bandwidth(nbytes: int = 2**31, reps: int = 20) -> dict:
    """Device-to-device copy ceiling in the same run: GB/s counting bytes read + written."""
    import cupy

    src = cupy.empty(nbytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    src.fill(1)

    def copy():
        dst.data.copy_from_device_async(src.data, nbytes)

    timing = time_gpu(copy, [()], warmup=3, reps=reps)
    del src, dst
    cupy.get_default_memory_pool().free_all_blocks()
    return {"bytes": 2 * nbytes, **timing, "GBps": 2 * nbytes / timing["ms"] / 1e6}
