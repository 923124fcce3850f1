"""The one timer. Every benchmark in the book goes through it; three methods, three questions.

- `time_gpu` (`METHOD`): device time of a call, host overhead hidden. The kernels' speed.
- `time_end_to_end` (`METHOD_END_TO_END`): one synchronous call as a user makes it, host
  overhead (argument checks, planning, allocation, launch) plus device time.
- `host_us_per_call` (`METHOD_HOST`): the host's cost of one call, from back-to-back calls that
  never wait for the GPU.

Each method is a string stored verbatim in every result file (`meta.method`; a suite that uses
several records them all, and each row names its own).
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

METHOD_END_TO_END = (
    "end to end: one synchronous call as a user makes it. Before each timed call one kernel reads a "
    "buffer of twice the L2 size (evicting the inputs, so the call reads DRAM) and the host waits for "
    "the device to be idle; then a CUDA event is recorded on the default stream, the Python call runs "
    "(argument checks, planning, allocation, launches), a second event is recorded and the host "
    "synchronizes the device. No spin kernel: the events' difference is the host's time up to the "
    "launch plus the device time, as the idle GPU saw it; wall_us adds the rest of the Python call and "
    "the synchronize (perf_counter from just before the call until the synchronize returns). Inputs "
    "rotate over the argument sets; warm-up calls first (compilation excluded); median and 10th / 90th "
    "percentiles in microseconds"
)
METHOD_HOST = (
    "host cost per call: the same call made back to back `calls` times with no synchronization "
    "(time.perf_counter around the loop), the device synchronized once after the timed loop (outside "
    "it); best of `repeats` loops, in microseconds per call. This is the host's cost only while the "
    "GPU keeps up (a call's device time below its host time, as with tiny shapes): drain_us, the time "
    "the synchronize after the loop waited, grows when the GPU queue filled and the loop measured the "
    "device instead"
)
METHODS = {"device": METHOD, "end_to_end": METHOD_END_TO_END, "host_per_call": METHOD_HOST}

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


def _evict_l2() -> None:
    """Read 2x L2 bytes on the device: evicts the next call's inputs from L2."""
    module = _module()
    buffer = _state["buffer"]
    module.get_function("timer_evict_l2")((4 * _state["sms"],), (512,),
                                          (buffer, np.int64(buffer.size // 4), _state["sink"]))


def _evict_and_spin(us: float) -> None:
    """Read 2x L2 bytes (evicts the timed call's inputs), then busy-wait `us` microseconds."""
    _evict_l2()
    _module().get_function("timer_spin")((1,), (1,), (np.int64(us * _state["clock_khz"] / 1000),))


def l2_bytes() -> int:
    import cupy

    return int(cupy.cuda.Device().attributes.get("L2CacheSize", L2_BYTES_H200))


def time_gpu(fn, arg_sets, *, warmup: int = 5, reps: int = 30, sync=None, samples: bool = False) -> dict:
    """Median device time of `fn(*args)` in ms (see METHOD), cycling over `arg_sets`.

    `sync`: a call made after the spin and before the start event of every timed call (and with
    each warm-up call, so the spin covers its host time too): across GPUs, a small collective
    that lines the ranks' timelines up, so that each rank's events time the same step.
    Returns {"ms": median, "ms_p10": ..., "ms_p90": ..., "reps": reps} (and "ms_all", every time,
    with samples=True).
    """
    import cupy

    arg_sets = list(arg_sets)
    host_us = []
    for i in range(warmup):
        cupy.cuda.Device().synchronize()
        began = time.perf_counter()
        if sync is not None:
            sync()
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
        if sync is not None:
            sync()
        starts[i].record()
        fn(*arg_sets[i % len(arg_sets)])
        ends[i].record()
    ends[-1].synchronize()
    times = np.array([cupy.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)])
    result = {"ms": float(np.median(times)), "ms_p10": float(np.percentile(times, 10)),
              "ms_p90": float(np.percentile(times, 90)), "reps": reps, "spin_us": spin_us}
    if samples:
        result["ms_all"] = [float(t) for t in times]
    return result


def _percentiles(values, key: str) -> dict:
    values = np.asarray(values, dtype=np.float64)
    return {key: float(np.median(values)), f"{key}_p10": float(np.percentile(values, 10)),
            f"{key}_p90": float(np.percentile(values, 90)), f"{key}_min": float(values.min())}


def time_end_to_end(fn, arg_sets, *, warmup: int = 3, reps: int = 30) -> dict:
    """End-to-end time of one synchronous call `fn(*args)` in microseconds (see METHOD_END_TO_END).

    Returns {"us", "us_p10", "us_p90", "us_min", "wall_us", "wall_us_p10", ..., "reps"}.
    """
    import cupy

    arg_sets = list(arg_sets)
    device = cupy.cuda.Device()
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    device.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    event_us, wall_us = [], []
    for i in range(reps):
        args = arg_sets[i % len(arg_sets)]
        _evict_l2()
        device.synchronize()                  # an idle GPU and an empty queue before the call
        start.record()
        began = time.perf_counter()
        fn(*args)
        end.record()
        device.synchronize()
        wall_us.append((time.perf_counter() - began) * 1e6)
        event_us.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
    return {**_percentiles(event_us, "us"), **_percentiles(wall_us, "wall_us"), "reps": reps}


def host_us_per_call(fn, args=(), *, calls: int = 1000, repeats: int = 5, warmup: int = 10) -> dict:
    """Host microseconds per call of `fn(*args)` made back to back (see METHOD_HOST).

    Returns {"us": best loop, "us_median": median loop, "drain_us": the wait after the best loop,
    "calls", "repeats"}. Pick shapes whose device time is below the host time (tiny ones).
    """
    import cupy

    device = cupy.cuda.Device()
    for _ in range(warmup):
        fn(*args)
    device.synchronize()
    per_call_us, drain_us = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        ended = time.perf_counter()
        device.synchronize()                  # outside the timed loop
        drain_us.append((time.perf_counter() - ended) * 1e6)
        per_call_us.append((ended - began) * 1e6 / calls)
    best = int(np.argmin(per_call_us))
    return {"us": per_call_us[best], "us_median": float(np.median(per_call_us)), "drain_us": drain_us[best],
            "calls": calls, "repeats": repeats}


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


def read_bandwidth(nbytes: int = 2**31, reps: int = 20) -> dict:
    """Read ceiling in the same run: GB/s of a grid-stride loop of 16-byte loads over `nbytes`
    (the L2-eviction kernel above, on a buffer far larger than L2), counting the bytes read."""
    import cupy

    module = _module()
    src = cupy.ones(nbytes // 4, dtype=cupy.int32)

    def read():
        module.get_function("timer_evict_l2")((8 * _state["sms"],), (512,),
                                              (src, np.int64(src.size // 4), _state["sink"]))

    timing = time_gpu(read, [()], warmup=3, reps=reps)
    del src
    cupy.get_default_memory_pool().free_all_blocks()
    return {"bytes": nbytes, **timing, "GBps": nbytes / timing["ms"] / 1e6}
