"""The GPU tier under pytest-xdist (`pytest -m gpu -n 12`): many processes share one GPU.

Two things keep them from running it out of memory:
- after each test, a process hands its cached device memory back (CuPy's pools, torch's cache),
  so that memory freed by one test is free for the other processes, not held for this one;
- at most BIG_AT_ONCE tests marked `big_memory` (gigabytes: the longest rows, long KV caches) run
  at the same time, each holding one slot (a file locked exclusively) while it runs.
Without xdist there are no slots; the frees cost a few milliseconds per test.
"""
import contextlib
import fcntl
import os
import sys
import tempfile
import time

import pytest

# Tests holding gigabytes (long caches, float64 references of 4000 x 65536 rows), marked big_memory
# here rather than in each file: by name, or by a (n_rows, n_cols) parameter pair of 2^26 elements or more.
BIG = {"test_a_long_cache_is_split_over_blocks_and_merged", "test_one_split_writes_the_output_directly",
       "test_decode_mma_long_caches_and_the_model"}
BIG_ELEMENTS = 1 << 26
BIG_AT_ONCE = 3   # about 10 GB each at most: 3 of them and the small tests fit in the H200's 141 GB


def _slot_paths(config) -> list[str] | None:
    run = getattr(config, "workerinput", {}).get("testrunuid")
    if run is None:
        return None
    base = os.path.join(tempfile.gettempdir(), f"onlinesoftmax-gpu-{run}")
    return [f"{base}.{slot}" for slot in range(BIG_AT_ONCE)]


@contextlib.contextmanager
def _big_slot(paths):
    """One of BIG_AT_ONCE slots (a file locked exclusively) for the test's duration."""
    if paths is None:
        yield
        return
    while True:
        for path in paths:
            fd = os.open(path, os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        time.sleep(0.1)


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
    big = request.node.get_closest_marker("big_memory") is not None
    with _big_slot(_slot_paths(request.config)) if big else contextlib.nullcontext():
        yield
        _free_cached_memory()
