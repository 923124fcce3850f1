"""A machine with an NVIDIA GPU whose driver is too old for the installed CuPy (e.g. a CUDA 12
driver with cupy-cuda13x) must say so loudly on every page, naming the driver's CUDA version and
the pip command for the matching CuPy; a machine without a GPU prints only the ordinary line.
The probes (CuPy's error, the device node / nvidia-smi, the driver and CuPy versions) are
monkeypatched, so this runs on any CPU machine."""
from __future__ import annotations

import pytest

from onlinesoftmax import book
from onlinesoftmax.runtime import device

CPU_LINE = ("executed without a GPU: kernel outputs come from the kernels' NumPy models (and, where a cell "
            "says so, from the kernel's CUDA source run on a CPU emulator), throughput figures from "
            "recorded GPU data")
DRIVER_ERROR = ("CUDARuntimeError: cudaErrorInsufficientDriver: "
                "CUDA driver version is insufficient for CUDA runtime version")


@pytest.fixture
def no_usable_gpu(monkeypatch):
    """has_gpu() is False with CuPy's driver error remembered; the other probes set per test."""
    monkeypatch.setattr(device, "has_gpu", lambda: False)
    monkeypatch.setattr(device, "_no_gpu_reason", DRIVER_ERROR)
    monkeypatch.setattr(device, "_cupy_cuda_major", lambda: 13)
    return monkeypatch


def test_old_driver_names_its_cuda_version_and_the_pip_command(no_usable_gpu, capsys):
    no_usable_gpu.setattr(device, "_nvidia_gpu_present", lambda: True)
    no_usable_gpu.setattr(device, "_driver_cuda_version", lambda: "12.4")
    line = book.execution_mode()
    printed = capsys.readouterr().out
    assert line == CPU_LINE                      # the page's own sentence is unchanged
    assert "An NVIDIA GPU is installed, but CuPy cannot use it" in printed
    assert "12.4" in printed                     # the driver's CUDA version
    assert "cupy-cuda13x" in printed             # what is installed
    assert "pip install cupy-cuda12x" in printed  # what to install instead
    assert "cudaErrorInsufficientDriver" in printed
    assert len(printed.strip().splitlines()) >= 5  # a block, not one line


def test_unreadable_driver_version_still_gives_the_pip_command(no_usable_gpu, capsys):
    no_usable_gpu.setattr(device, "_nvidia_gpu_present", lambda: True)
    no_usable_gpu.setattr(device, "_driver_cuda_version", lambda: None)
    book.execution_mode()
    printed = capsys.readouterr().out
    assert "could not be read" in printed and "pip install cupy-cuda12x" in printed


def test_matching_driver_points_elsewhere(no_usable_gpu, capsys):
    no_usable_gpu.setattr(device, "_nvidia_gpu_present", lambda: True)
    no_usable_gpu.setattr(device, "_driver_cuda_version", lambda: "13.0")
    book.execution_mode()
    printed = capsys.readouterr().out
    assert "13.0" in printed and "pip install" not in printed and "CUDA_VISIBLE_DEVICES" in printed


def test_plain_cpu_machine_prints_only_the_ordinary_line(no_usable_gpu, capsys):
    no_usable_gpu.setattr(device, "_nvidia_gpu_present", lambda: False)
    no_usable_gpu.setattr(device, "_driver_cuda_version", lambda: pytest.fail("not asked without a GPU"))
    assert book.execution_mode() == CPU_LINE
    assert capsys.readouterr().out == ""
    assert device.gpu_diagnosis() is None


def test_has_gpu_remembers_why(monkeypatch):
    """has_gpu() keeps CuPy's exception text (is_available() alone would hide it)."""
    import types

    class Runtime:
        @staticmethod
        def getDeviceCount():
            raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    fake = types.SimpleNamespace(is_available=lambda: False, cuda=types.SimpleNamespace(runtime=Runtime))
    monkeypatch.setitem(__import__("sys").modules, "cupy", fake)
    monkeypatch.setattr(device, "_no_gpu_reason", None)
    device.has_gpu.cache_clear()
    try:
        assert device.has_gpu() is False
        assert "cudaErrorInsufficientDriver" in device.no_gpu_reason()
    finally:
        device.has_gpu.cache_clear()
