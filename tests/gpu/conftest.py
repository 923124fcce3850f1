"""The GPU tier under pytest-xdist (`pytest -m gpu -n 12 --dist loadgroup`): many processes share one GPU.

Two things keep them from running it out of memory:
- after each test, a process hands its cached device memory back (CuPy's pools, torch's cache),
  so that memory freed by one test is free for the other processes, not held for this one;
- tests holding gigabytes (long KV caches, float64 scores of 16384^2, float64 references of 4000 x
  65536 rows) are marked `big_memory(gib=...)` at collection (`big_gib`: by file and name, or by
  their (n_rows, n_cols) parameters). While one runs it holds ceil(gib / UNIT_GIB) of the slots (files
  locked exclusively): SHARE of the GPU's memory in units of UNIT_GIB (20 slots on an H200, 11 on an
  H100), so big tests share what the GPU has and a test larger than that share runs with no other.
Without xdist there are no slots; the frees cost a few milliseconds per test.
"""
import contextlib
import fcntl
import gc
import math
import os
import random
import sys
import tempfile
import time

import pytest

# GiB a big test holds at its peak, by file and test function (the decode test's process held 40 GB
# when an H100 ran out under 16 workers; a 16384^2 pair's float64 reference of 2 heads is 4 GiB)
BIG = {"test_attention_gpu.py::test_decode_mma_long_caches_and_the_model": 40,
       "test_attention_gpu.py::test_a_long_cache_is_split_over_blocks_and_merged": 24,
       "test_attention_gpu.py::test_one_split_writes_the_output_directly": 24,
       "test_attention_mma_gpu.py::test_every_length_pair": 16}   # (a process held 13 GB)
BIG_ELEMENTS = 1 << 26    # a (n_rows, n_cols) test of this many elements or more (4000 x 32000 rows)
BYTES_PER_ELEMENT = 80    # holds its rows, outputs and float64 references: a process held 19 GB at 4000 x 65536
UNIT_GIB = 4
SHARE = 0.6               # of the GPU's memory for the big tests; the small ones run beside them


def big_gib(test: str, params: dict) -> int:
    """GiB a test holds ("file::function", its parameters), 0 when it is not a big one."""
    rows, cols = params.get("n_rows"), params.get("n_cols")
    if isinstance(rows, int) and isinstance(cols, int) and rows * cols >= BIG_ELEMENTS:
        return max(math.ceil(rows * cols * BYTES_PER_ELEMENT / 2**30), BIG.get(test, 0))
    return BIG.get(test, 0)


def slot_count(total_bytes: int) -> int:
    """Slots of UNIT_GIB in SHARE of a GPU of `total_bytes` (at least one)."""
    return max(1, int(total_bytes / 2**30 * SHARE // UNIT_GIB))


def slots_needed(gib: int, slots: int) -> int:
    """A test of `gib` holds this many slots: all of them when it is larger than the share."""
    return min(slots, max(1, math.ceil(gib / UNIT_GIB)))


def pytest_collection_modifyitems(config, items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        test = f"{os.path.basename(str(item.fspath))}::{getattr(item, 'originalname', item.name)}"
        gib = big_gib(test, callspec.params if callspec else {})
        if gib:
            item.add_marker(pytest.mark.big_memory(gib=gib))


def slot_paths(run: str, total_bytes: int) -> list[str]:
    base = os.path.join(tempfile.gettempdir(), f"onlinesoftmax-gpu-{run}")
    return [f"{base}.{slot}" for slot in range(slot_count(total_bytes))]


@contextlib.contextmanager
def holding(paths: list[str] | None, need: int):
    """`need` of the slot files, each locked exclusively, for the block's duration. All or none are
    taken at each try (a test holding some while it waits for more could wait on another doing the same)."""
    if paths is None or need == 0:
        yield []
        return
    while True:
        held, taken = [], []
        for i, path in enumerate(paths):
            fd = os.open(path, os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            held.append(fd)
            taken.append(i)
            if len(held) == need:
                break
        if len(held) == need:
            try:
                yield [paths[i] for i in taken]
            finally:
                _release(held)
            return
        _release(held)
        time.sleep(random.uniform(0.05, 0.2))


def _release(fds):
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _slots_of(config) -> list[str] | None:
    run = getattr(config, "workerinput", {}).get("testrunuid")
    if run is None:
        return None
    import cupy

    return slot_paths(run, cupy.cuda.runtime.memGetInfo()[1])


def _free_cached_memory():
    """Best effort: a test that left the context unusable fails by itself, not in this teardown."""
    with contextlib.suppress(Exception):
        _free_pools()


def _free_pools():
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.Device().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


@pytest.fixture(autouse=True)
def _share_the_gpu(request):
    marker = request.node.get_closest_marker("big_memory")
    if marker is None:
        yield
    else:
        paths = _slots_of(request.config)
        with holding(paths, slots_needed(marker.kwargs.get("gib", UNIT_GIB), len(paths or [1]))) as held:
            request.node.held_slots = held
            yield
    _free_cached_memory()


def out_of_memory(error: BaseException) -> bool:
    """CuPy's and torch's OutOfMemoryError, and a CUDA call's "out of memory"."""
    return "OutOfMemory" in type(error).__name__ or "out of memory" in str(error).lower()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test that ran out of device memory runs once more, after this process frees its caches and
    takes every big-test slot it does not hold (no other big test runs meanwhile; the small ones
    still may). It fails if it runs out again: its own need is then more than the GPU gives it."""
    try:
        return (yield)
    except Exception as error:
        if not out_of_memory(error):
            raise
        kind = type(error).__name__
    gc.collect()   # the failed run's frames (its arrays) go with the exception, out of scope here
    _free_cached_memory()
    paths = _slots_of(pyfuncitem.config)
    others = None if paths is None else [p for p in paths if p not in getattr(pyfuncitem, "held_slots", [])]
    print(f"{pyfuncitem.nodeid}: out of device memory ({kind}); run again alone among the big tests",
          file=sys.stderr)
    with holding(others, len(others or [])):
        names = pyfuncitem._fixtureinfo.argnames
        pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names})
    return True
