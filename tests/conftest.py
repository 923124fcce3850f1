"""Fixtures shared by the CPU tier's test files."""
import os

import pytest


@pytest.fixture
def needs_emulator():
    """Skips without a C++ compiler for the CPU emulator, except under CI=true, where it fails: there
    the emulated kernels must run."""
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("no C++ compiler, and CI=true: the emulated kernels must run in CI")
        pytest.skip("no C++ compiler (g++) for the CPU emulator")
