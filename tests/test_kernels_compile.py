"""Every CUDA kernel compiles for sm_90a with nvcc, and ptxas reports no register spills.

One test per build. A file the registry knows (`onlinesoftmax.registry.compile_configurations()`,
which yields (path, define flags, name)) is built in each of the registry's configurations; any
other `kernels/**/*.cu` is built once with no defines. No GPU is needed, only nvcc.

Without nvcc the tests skip, except under CI (CI=true), where they fail: CI must compile.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
KERNELS_DIR = REPO_ROOT / "kernels"

from onlinesoftmax.runtime.loader import COMPILE_OPTIONS, INCLUDE_DIRS, NVCC_ARCH  # noqa: E402  (the loader's flags)

NVCC_FLAGS = [*COMPILE_OPTIONS, NVCC_ARCH, "--cubin", "-Xptxas", "-v", *(f"-I{d}" for d in INCLUDE_DIRS)]
SPILL = re.compile(r"(\d+) bytes spill (stores|loads)")
PTXAS_FUNCTION = re.compile(r"Compiling entry function '([^']+)'|Function properties for (\S+)")
PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
COMPILE_TIMEOUT_S = 300


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def find_nvcc() -> str | None:
    candidates = [shutil.which("nvcc")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "nvcc"))
    return next((c for c in candidates if c and Path(c).is_file()), None)


def kernel_builds() -> list[tuple[Path, tuple[str, ...], str]]:
    """(path, define flags, name) for every build to check."""
    builds: list[tuple[Path, tuple[str, ...], str]] = []
    # --- Hook: the kernel registry decides which configurations each file is built in. -------
    # `import onlinesoftmax` registers every kernel family; compile_configurations() then
    # yields (path, list_of_define_flags, name). An error in the package fails collection.
    if importlib.util.find_spec("onlinesoftmax") is not None:
        importlib.import_module("onlinesoftmax")
        registry = importlib.import_module("onlinesoftmax.registry")
        compile_configurations = getattr(registry, "compile_configurations", None)
        if compile_configurations is not None:
            for path, define_flags, name in compile_configurations():
                builds.append((Path(path).resolve(), tuple(define_flags), str(name)))
    # --- Every .cu the registry does not build: once, with no defines. ------------------------
    covered = {path for path, _, _ in builds}
    for path in sorted(KERNELS_DIR.rglob("*.cu")):
        if path.resolve() not in covered:
            builds.append((path.resolve(), (), path.stem))
    return builds


BUILDS = kernel_builds()


def launched_entries(name: str) -> tuple[str, ...]:
    """Entries the registered variant `name` launches (none for a file the registry does not know)."""
    registry = importlib.import_module("onlinesoftmax.registry") if importlib.util.find_spec("onlinesoftmax") else None
    variant = getattr(registry, "REGISTRY", {}).get(name)
    return tuple(variant.launched_entries) if variant is not None else ()


def missing_entries(log: str, expected) -> list[str]:
    """Entries in `expected` that ptxas did not compile (its `-v` log names each entry it builds)."""
    compiled = set(PTXAS_ENTRY.findall(log))
    return sorted(set(expected) - compiled)


@pytest.fixture(scope="module")
def nvcc() -> str:
    found = find_nvcc()
    if found is None:
        if running_in_ci():
            pytest.fail("nvcc not found, and CI=true: CI must compile every kernel")
        pytest.skip("nvcc not found (set CI=true to make this a failure)")
    return found


def test_every_kernel_file_is_built():
    """Sanity check on the list itself: each .cu under kernels/ has at least one build."""
    built = {path for path, _, _ in BUILDS}
    missing = [p for p in KERNELS_DIR.rglob("*.cu") if p.resolve() not in built]
    assert not missing, f"kernel files with no build: {missing}"
    names = [name for _, _, name in BUILDS]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"two builds share a name: {duplicates}"


def test_entry_check_can_fail():
    log = "ptxas info    : Compiling entry function 'softmax_02_online' for 'sm_90a'\n"
    assert missing_entries(log, ["softmax_02_online"]) == []
    assert missing_entries(log, ["softmax_02_online", "softmax_02_onlin"]) == ["softmax_02_onlin"]


@pytest.mark.parametrize(
    ("path", "define_flags", "name"),
    [pytest.param(path, flags, name, id=name) for path, flags, name in BUILDS],
)
def test_kernel_compiles_without_spills(nvcc, tmp_path, path: Path, define_flags: tuple[str, ...], name: str):
    command = [nvcc, *NVCC_FLAGS, *define_flags, "-o", str(tmp_path / "kernel.cubin"), str(path)]
    result = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
    )
    report = f"$ {' '.join(command)}\n{result.stdout}{result.stderr}"
    print(report)
    assert result.returncode == 0, f"nvcc failed (exit {result.returncode}):\n{report}"

    spills = []
    function = "?"
    for line in (result.stdout + result.stderr).splitlines():
        named = PTXAS_FUNCTION.search(line)
        if named:
            function = named.group(1) or named.group(2)
        for count, kind in SPILL.findall(line):
            if int(count) > 0:
                spills.append(f"{function}: {count} bytes spill {kind}")
    assert not spills, "register spills:\n" + "\n".join(spills) + f"\n\n{report}"
    assert "ptxas info" in report, f"no ptxas report (is -Xptxas -v honoured?):\n{report}"
    missing = missing_entries(result.stdout + result.stderr, launched_entries(name))
    assert not missing, f"{name} launches entries this build does not compile: {missing}\n\n{report}"


@pytest.mark.parametrize(
    ("path", "define_flags", "name"),
    [pytest.param(path, flags, name, id=name) for path, flags, name in BUILDS],
)
def test_nvrtc_build_uses_no_local_memory(path: Path, define_flags: tuple[str, ...], name: str):
    """The runtime build (NVRTC, as cupy compiles on the GPU) has no stack or local memory either:
    on the H200 an NVRTC build put a two-pointer array on the stack where nvcc had not."""
    from onlinesoftmax.runtime import disasm

    try:
        usage = disasm.resource_usage(disasm.nvrtc_cubin(path, define_flags))
    except disasm.ToolMissing as missing:
        if running_in_ci():
            pytest.fail(f"CI must check the NVRTC build: {missing}")
        pytest.skip(str(missing))
    assert usage, f"{name}: no entries in the NVRTC build"
    on_stack = {entry: u for entry, u in usage.items() if u.get("STACK", 0) or u.get("LOCAL", 0)}
    assert not on_stack, f"{name}: NVRTC build uses local memory: {on_stack}"
