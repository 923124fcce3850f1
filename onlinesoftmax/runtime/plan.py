"""Launch plans: everything one launch needs, worked out once and then found with one lookup.

A variant's plan builder (`Variant.plan`) takes the 2-D views it will run on and its options
and returns a *runner*, called as runner(x, y, **options) on arrays of the same layout. The
runner holds the compiled function, grid, block, shared memory, raised attributes, occupancy
answers and prepared driver configuration, and uses the arrays only for their addresses.
Building it reads files, compiles, asks the device; running it only packs pointers and
launches. `get_runner` keeps one runner per

    (variant, shape, strides, dtype and 16-byte alignment of every array, options, device, stream,
     and the thread where the stream is the per-thread default stream)

so the second call of a shape costs one dictionary lookup before the launch (runtime/cache.py: the
least recently used runner goes past PLAN_LIMIT). `reload()` (the loader's, also
`onlinesoftmax.reload()`) forgets them all, with the kernels they hold.
"""
from __future__ import annotations

import threading

import numpy as np

try:   # the NumPy models run without CuPy; building or running a plan needs it
    import cupy
    _ARRAYS = (np.ndarray, cupy.ndarray)
except ImportError:
    cupy = None
    _ARRAYS = (np.ndarray,)

from onlinesoftmax.runtime.cache import Cache

PLAN_LIMIT = 4096          # runners kept, least recently used out first (shapes, streams and devices vary)
PER_THREAD_STREAM = 2      # cudaStreamPerThread: one address, a different stream in every thread (plans per thread)
PLAN_BYTES = 2**30         # device memory the runners' own buffers (scratch, partial states) may hold
_runners = Cache("plans", PLAN_LIMIT, max_bytes=PLAN_BYTES, nbytes=lambda runner: getattr(runner, "nbytes", 0),
                 about="one runner per (variant, layouts, options, device, stream)")
FAST_PATH_LIMIT = 4096     # repeated calls remembered by a public function (its key -> (runner, ...))


def fast_path_cache(name: str, about: str) -> Cache:
    """A public function's cache of repeated calls: entries (runner, ...), oldest out first. Its runners'
    buffers count against PLAN_BYTES too: a runner the plan cache let go stays alive while an entry here
    holds it, so without this bound a decode loop's growing lengths would keep every length's partials."""
    return Cache(name, FAST_PATH_LIMIT, order="fifo", max_bytes=PLAN_BYTES,
                 nbytes=lambda entry: getattr(entry[0], "nbytes", 0) if isinstance(entry, tuple) else 0, about=about)


def layout(a) -> tuple:
    """What a launch depends on in an array: shape, strides, dtype and the address modulo 16."""
    return (a.shape, a.strides, a.dtype, a.data.ptr & 15)


def extent(a) -> tuple[int, int]:
    """Bytes [low, high) around a.data.ptr that the array `a` can touch (any strides)."""
    low = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + a.itemsize
    return low, high


def options_key(options: dict) -> tuple:
    """Options as a key: an array option (a mask, lengths) changes from call to call, so its
    layout goes in the key (the runner is given the array itself on every call); any other
    option is part of the plan."""
    return tuple((name, layout(value) if isinstance(value, _ARRAYS) else value)
                 for name, value in sorted(options.items()))


def get_runner(variant, x, y, options: dict):
    """The cached runner for this call's layout; call it as runner(x, y, **options)."""
    stream = cupy.cuda.get_current_stream().ptr
    key = (variant.name, layout(x), layout(y), options_key(options), x.device.id, stream,
           threading.get_ident() if stream == PER_THREAD_STREAM else None)
    runner = _runners.get(key)
    if runner is None:
        runner = _runners.put(key, one_call_at_a_time(variant.plan(variant, x, y, **options)))
    return runner


def one_call_at_a_time(runner):
    """A runner that keeps device buffers between its launches (`runner.workspace`: the split kernels'
    partial states) runs one call at a time: two threads on one stream would otherwise queue
    split, split, merge, merge, and the first merge would read the second call's partials. Its
    `nbytes` (the buffers' bytes) counts against the plan cache's PLAN_BYTES."""
    workspace = [a for a in getattr(runner, "workspace", ()) if a is not None]
    if not workspace:
        return runner
    lock = threading.Lock()

    def run(*args, **options):
        with lock:
            runner(*args, **options)
    run.__dict__.update({name: value for name, value in runner.__dict__.items() if name != "pointers"})
    run.nbytes = sum(int(a.nbytes) for a in workspace)
    return run


def two_pointer_runner(launch):
    """The runner of a plan that is one launch taking x's and y's addresses: runner(x, y) launches,
    and `runner.pointers` is that launch itself, launch(x_address, y_address), which the public
    functions' fast path calls directly (one Python call fewer per call)."""
    def run(x, y, **_):
        launch(x.data.ptr, y.data.ptr)
    run.pointers = launch
    return run


def cached_runners() -> int:
    """How many runners are cached (tests and the chapters' explanations use it)."""
    return len(_runners)

