"""The one timer. Every benchmark in the book goes through `time_gpu`.

Its method is the string `METHOD`, stored verbatim in every result file (`meta.method`).
"""
from __future__ import annotations

import time

import numpy as np

L2_BYTES_H200 = 60 * 2**20
METHOD = (
    "CUDA events around each call on the default stream; before each timed call one "
    "kernel reads a buffer of twice the L2 size (evicting the inputs from L2, so the "
    "timed call reads DRAM) and a second spins for twice the host time of one call "
    "(at least 50 us), so host launch overhead is hidden and only device time is "
    "measured; warm-up calls first (compilation excluded); median of the timed calls"
)

_SOURCE = r"""
extern "C" __global__ void timer_spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}
extern "C" __global__ void timer_evict_l2(const int4* __restrict__ buffer, long long n, int* sink) {
    int acc = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int4 v = buffer[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;  // never true for the buffer's contents; keeps the loads
}
"""
_state: dict = {}


def _module():
    import cupy

    if "module" not in _state:
        _state["module"] = cupy.RawModule(code=_SOURCE)
        n_bytes = 2 * l2_bytes()
        _state["buffer"] = cupy.ones(n_bytes // 4, dtype=cupy.int32)  # XOR of ones per int4 is 0
        _state["sink"] = cupy.zeros(1, dtype=cupy.int32)
        _state["clock_khz"] = cupy.cuda.Device().attributes["ClockRate"]
        _state["sms"] = cupy.cuda.Device().attributes["MultiProcessorCount"]
    return _state["module"]


def _evict_and_spin(us: float) -> None:
    """Read 2x L2 bytes (evicts the timed call's inputs), then busy-wait `us` microseconds."""
    module = _module()
    buffer = _state["buffer"]
    module.get_function("timer_evict_l2")((4 * _state["sms"],), (512,),
                                          (buffer, np.int64(buffer.size // 4), _state["sink"]))
    module.get_function("timer_spin")((1,), (1,), (np.int64(us * _state["clock_khz"] / 1000),))


def l2_bytes() -> int:
    import cupy

    return int(cupy.cuda.Device().attributes.get("L2CacheSize", L2_BYTES_H200))


def time_gpu(fn, arg_sets, *, warmup: int = 5, reps: int = 30) -> dict:
    """Median device time of `fn(*args)` in ms (see METHOD), cycling over `arg_sets`.

    Returns {"ms": median, "ms_p10": ..., "ms_p90": ..., "reps": reps}.
    """
    import cupy

    arg_sets = list(arg_sets)
    host_us = []
    for i in range(warmup):
        cupy.cuda.Device().synchronize()
        began = time.perf_counter()
        fn(*arg_sets[i % len(arg_sets)])
        host_us.append((time.perf_counter() - began) * 1e6)
    cupy.cuda.Device().synchronize()
    # The host time of a call is at most its enqueue time plus device time; twice the
    # smallest one seen covers the enqueue time.
    spin_us = min(5000.0, max(50.0, 2 * min(host_us[1:] or host_us)))
    starts = [cupy.cuda.Event() for _ in range(reps)]
    ends = [cupy.cuda.Event() for _ in range(reps)]
    for i in range(reps):
        _evict_and_spin(spin_us)
        starts[i].record()
        fn(*arg_sets[i % len(arg_sets)])
        ends[i].record()
    ends[-1].synchronize()
    times = np.array([cupy.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)])
    return {"ms": float(np.median(times)), "ms_p10": float(np.percentile(times, 10)),
            "ms_p90": float(np.percentile(times, 90)), "reps": reps, "spin_us": spin_us}


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
