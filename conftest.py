"""Repository-wide pytest hook: the GPU tier fails when there is no GPU to run it on.

The marker `gpu` is registered in pyproject.toml. `make test` runs `pytest -m "not gpu"` (the CPU
tier, CI); `make gpu-test` runs `pytest -m gpu` on a CUDA machine.

A run whose `-m` expression selects tests marked `gpu` on a machine where CuPy sees no GPU stops
before running anything, with exit status 4 (a usage error) and a message saying why: a GPU tier that
skips every test and exits 0 looks like a pass. Set ONLINESOFTMAX_ALLOW_NO_GPU=1 to skip those
tests instead (each with the reason). A run without `-m` (plain `pytest`) skips them with the
reason, as does any run with the variable set; a CPU run (`-m "not gpu"`) selects none.
This is the only place a GPU test is skipped for want of a GPU: the test files import cupy
(a requirement, which imports without a GPU) and carry no skip of their own.

With ONLINESOFTMAX_NAME_FAILURES=1 (scripts/device_round.sh sets it) each failing test is named on
its own line the moment its report arrives ("FAILED <test id> (<phase>)"), so a run stopped by a time
limit before pytest's summary still says which tests failed.

Tests marked `multi_gpu` (also marked `gpu`) need two GPUs: with fewer they are skipped with the
reason, except when `-m` names `multi_gpu` itself (`pytest -m multi_gpu` on the two-GPU machine),
where the run stops with exit status 4 as above.
"""

from __future__ import annotations

import functools
import os

import pytest

ALLOW_NO_GPU = "ONLINESOFTMAX_ALLOW_NO_GPU"


@functools.lru_cache(maxsize=None)
def _gpu_count() -> int:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) if cupy.is_available() else 0
    except Exception:
        return 0


@functools.lru_cache(maxsize=None)
def _why_no_gpu() -> str | None:
    """None when CuPy sees a CUDA GPU (as onlinesoftmax.runtime.device.has_gpu), else why not."""
    try:
        import cupy
    except Exception as error:  # cupy is in requirements.txt: a broken install
        return f"cupy does not import ({type(error).__name__}: {error})"
    try:
        if cupy.is_available():
            return None
        count = cupy.cuda.runtime.getDeviceCount()  # raises with the driver's reason, if it has one
        return f"cupy.is_available() is False ({count} devices)"
    except Exception as error:  # no driver, no device, CUDA_VISIBLE_DEVICES=""
        return f"cupy.is_available() is False ({type(error).__name__}: {error})"


def _allowed() -> bool:
    return os.environ.get(ALLOW_NO_GPU, "").strip().lower() in {"1", "true", "yes"}


# trylast: after pytest's own hook has deselected by `-m`, so `items` is what will run.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    markexpr = config.getoption("markexpr", default="") or ""
    why = _why_no_gpu()
    if why is None:
        _skip_multi_gpu(items, markexpr)
        return
    if markexpr.strip() and not _allowed():
        message = (
            f"-m {markexpr!r} selects {len(gpu_items)} GPU tests, but no CUDA GPU is visible: {why}.\n"
            f"The GPU tier needs a GPU CuPy can use (check nvidia-smi, the driver, CUDA_VISIBLE_DEVICES).\n"
            f"To skip the GPU tests instead, set {ALLOW_NO_GPU}=1."
        )
        raise pytest.UsageError(message)  # exit status 4, "ERROR: <message>"
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {why}")
    for item in gpu_items:
        item.add_marker(skip)


def _skip_multi_gpu(items, markexpr: str) -> None:
    """Tests marked multi_gpu on a machine with fewer than two GPUs: skipped, or a usage error when
    `-m` asks for them by name."""
    multi = [item for item in items if item.get_closest_marker("multi_gpu") is not None]
    count = _gpu_count()
    if not multi or count >= 2:
        return
    if "multi_gpu" in markexpr and not _allowed():
        raise pytest.UsageError(f"-m {markexpr!r} selects {len(multi)} tests that need two GPUs, but {count} is visible; "
                                f"set {ALLOW_NO_GPU}=1 to skip them instead")
    skip = pytest.mark.skip(reason=f"needs two GPUs, {count} visible")
    for item in multi:
        item.add_marker(skip)


def pytest_runtest_logreport(report):
    """Under ONLINESOFTMAX_NAME_FAILURES=1: a failure named at once (under pytest-xdist, by the
    process that gathers the workers' reports)."""
    if report.failed and os.environ.get("ONLINESOFTMAX_NAME_FAILURES", "").strip() in {"1", "true", "yes"}:
        print(f"\nFAILED {report.nodeid} ({report.when})", flush=True)
