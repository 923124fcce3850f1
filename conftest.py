"""Repository-wide pytest hook: tests marked `gpu` skip on a machine without a CUDA GPU.

The marker is registered in pyproject.toml. `make test` runs `pytest -m "not gpu"` (the CPU
tier, CI); `make gpu-test` runs `pytest -m gpu` on a CUDA machine.
"""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=None)
def _gpu_available() -> bool:
    try:
        import cupy

        return bool(cupy.is_available())
    except Exception:  # no cupy, no driver, no device
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not _gpu_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (cupy.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)
