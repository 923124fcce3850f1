"""Every CUDA kernel compiles for the GPUs readers have: sm_80 (for every arch before sm_90), sm_90a and the newest.

One test per build and arch. A file the registry knows (`onlinesoftmax.registry.compile_configurations()`,
which yields (path, define flags, name)) is built in each of the registry's configurations; any
other `kernels/**/*.cu` is built once with no defines. No GPU is needed.

- sm_90a, the H200 the book is measured on: nvcc (the loader's flags), no register spill, every
  entry the launcher uses is compiled; and the NVRTC build (the compiler cupy uses at run time)
  has no stack or local memory.
- sm_80 and NEWEST_ARCH: NVRTC (what cupy runs on a reader's GPU; faster here than
  nvcc), no compile error, every launched entry compiled. A spill on these archs is reported as
  a SpillWarning (pytest's warnings summary), not a failure: some builds spill there today.
- A variant must build for every arch whose compute capability is at least the variant's `min_cc`
  (onlinesoftmax/registry.py). Below it the build may fail (the Hopper-only kernels stop at the
  `#error` in kernels/common/cluster.cuh); one that compiles anyway is reported as a MinCcWarning,
  since the variant might declare a lower min_cc.

The builds run on COMPILE_WORKERS threads (nvcc in subprocesses, NVRTC with the GIL released),
queued once for the selected tests; each test waits for its own.

Without nvcc the nvcc tests skip, and without NVRTC (cuda-bindings, nvidia-cuda-nvrtc) the NVRTC
tests skip, except under CI (CI=true), where they fail: CI must compile.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
KERNELS_DIR = REPO_ROOT / "kernels"

from onlinesoftmax.runtime import loader  # noqa: E402
from onlinesoftmax.runtime.loader import COMPILE_OPTIONS, INCLUDE_DIRS, NVCC_ARCH  # noqa: E402  (the loader's flags)

NVCC_FLAGS = [*COMPILE_OPTIONS, NVCC_ARCH, "--cubin", "-Xptxas", "-v", *(f"-I{d}" for d in INCLUDE_DIRS)]
SPILL = re.compile(r"(\d+) bytes spill (stores|loads)")
PTXAS_FUNCTION = re.compile(r"Compiling entry function '([^']+)'|Function properties for (\S+)")
PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
COMPILE_TIMEOUT_S = 300
# The farm's threads start nvcc while others run NVRTC in this process with the GIL released. With
# vfork (CPython's default on Linux, the GIL dropped while the child starts) one start in CI failed
# with "OSError: [Errno 14] Bad address": the child, sharing this process's memory until it execs,
# read memory another thread had changed. fork gives the child its own copy (subprocess's documented
# switch; the process is large, so each start costs a few milliseconds more).
subprocess._USE_VFORK = False
COMPILE_WORKERS = 2   # CI has 2 cores
PREFETCH = 2          # builds queued ahead of the test that waits (CompileFarm)

# The arch the nvcc build (NVCC_ARCH) targets, and the others every kernel is built for.
NVCC_TARGET = re.search(r"code=(sm_\w+)", NVCC_ARCH).group(1)          # sm_90a
NEWEST_ARCH = "sm_121"   # the newest real arch of the pinned nvcc 13.0 / nvidia-cuda-nvrtc 13.0.88
# The kernels branch on the arch only below 8.0, from 8.0 and from 9.0 (`__CUDA_ARCH__`), so sm_80
# stands for every arch before sm_90 (sm_86 and sm_89 built the same code again, a third of this
# file's time); the newest arch catches what a later toolchain target refuses.
OTHER_ARCHS = ("sm_80", NEWEST_ARCH)
ARCHS = (OTHER_ARCHS[0], NVCC_TARGET, OTHER_ARCHS[1])


# (defined in the package: pytest-xdist's controller re-creates a worker's warning by importing its
# category's module, which a test module is not)
from onlinesoftmax.runtime.loader import MinCcWarning, SpillWarning  # noqa: E402


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


def _variant(name: str):
    registry = importlib.import_module("onlinesoftmax.registry") if importlib.util.find_spec("onlinesoftmax") else None
    return getattr(registry, "REGISTRY", {}).get(name) or getattr(registry, "EXTRA_BUILDS", {}).get(name)


def launched_entries(name: str) -> tuple[str, ...]:
    """Entries the registered variant `name` launches (none for a file the registry does not know)."""
    variant = _variant(name)
    return tuple(variant.launched_entries) if variant is not None else ()


def min_cc(name: str) -> int:
    """The compute capability build `name` needs: the variant's `min_cc` (the registry's default for
    a file the registry does not know)."""
    from onlinesoftmax.registry import Variant

    variant = _variant(name)
    return variant.min_cc if variant is not None else Variant.__dataclass_fields__["min_cc"].default


def arch_cc(arch: str) -> int:
    """sm_90a -> 90, sm_121 -> 121."""
    return int(re.fullmatch(r"sm_(\d+)[af]?", arch).group(1))


def missing_entries(log: str, expected) -> list[str]:
    """Entries in `expected` that ptxas did not compile (its `-v` log names each entry it builds)."""
    compiled = set(PTXAS_ENTRY.findall(log))
    return sorted(set(expected) - compiled)


def spills(log: str) -> list[str]:
    """'entry: N bytes spill stores|loads' for every non-zero spill in a ptxas -v log."""
    found, function = [], "?"
    for line in log.splitlines():
        named = PTXAS_FUNCTION.search(line)
        if named:
            function = named.group(1) or named.group(2)
        for count, kind in SPILL.findall(line):
            if int(count) > 0:
                found.append(f"{function}: {count} bytes spill {kind}")
    return found


# ---- the builds (run on the farm's threads) -----------------------------------------------------

def nvcc_build(nvcc: str, path: Path, define_flags: tuple[str, ...]) -> tuple[int, str]:
    """(exit status, report) of the nvcc sm_90a build with ptxas -v."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [nvcc, *NVCC_FLAGS, *define_flags, "-o", str(Path(tmp) / "kernel.cubin"), str(path)]
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    return result.returncode, f"$ {' '.join(command)}\n{result.stdout}{result.stderr}"


def nvrtc_build(path: Path, define_flags: tuple[str, ...], arch: str) -> tuple[bool, str]:
    """(compiled, log) of the NVRTC build of `path` for the real arch `arch`, ptxas -v in the log."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        from onlinesoftmax.runtime import disasm

        raise disasm.ToolMissing("NVRTC bindings not found: pip install cuda-bindings nvidia-cuda-nvrtc") from error
    text, _ = loader.expand_source(path)
    options = [*COMPILE_OPTIONS, f"-arch={arch}", "-Xptxas=-v", *define_flags]
    err, program = nvrtc.nvrtcCreateProgram(text.encode(), path.name.encode(), 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
        text = loader.nvrtc_log(program).rstrip()
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    report = f"NVRTC {' '.join(options)} {loader._rel(path)}\n{text}"
    return err == nvrtc.nvrtcResult.NVRTC_SUCCESS, report


def nvrtc_local_memory(path: Path, define_flags: tuple[str, ...]) -> dict:
    """{entry: cuobjdump resource usage} of the NVRTC build cupy makes on the H200 (sm_90)."""
    from onlinesoftmax.runtime import disasm

    return disasm.resource_usage(disasm.nvrtc_cubin(path, define_flags))


class CompileFarm:
    """Builds keyed by (kind, name, arch) on a thread pool: submitted once, awaited by the tests. A
    test's build is submitted when it asks for it, with the builds of the next PREFETCH tests in run
    order, so that the pool works ahead of the tests. Not every build up front: under pytest-xdist
    each worker collects every test but runs only some, and would build the others' kernels too."""

    def __init__(self, pool: ThreadPoolExecutor, order=()):
        self.pool, self.jobs = pool, {}
        self.order = list(order)                        # (key, function, *args) of each test, in run order
        self.position = {job[0]: i for i, job in reversed(list(enumerate(self.order)))}

    def submit(self, key, function, *args):
        if key not in self.jobs:
            self.jobs[key] = self.pool.submit(function, *args)
        return self.jobs[key]

    def result(self, key, function, *args):
        future = self.submit(key, function, *args)
        start = self.position.get(key)
        if start is not None:
            for job in self.order[start + 1:start + 1 + PREFETCH]:
                self.submit(*job)
        return future.result()


def _job(item, nvcc: str | None):
    """The build a collected test of this module waits for: (key, function, *args), or None."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "path" not in params or Path(str(item.path)).resolve() != Path(__file__).resolve():
        return None
    path, flags, name = params["path"], params["define_flags"], params["name"]
    test = getattr(item, "originalname", item.name)
    if test == "test_kernel_compiles_without_spills" and nvcc is not None:
        return ("nvcc", name, NVCC_TARGET), nvcc_build, nvcc, path, flags
    if test == "test_nvrtc_build_uses_no_local_memory":
        return ("nvrtc-local", name, "sm_90"), nvrtc_local_memory, path, flags
    if test == "test_kernel_compiles_for_arch":
        return ("nvrtc", name, params["arch"]), nvrtc_build, path, flags, params["arch"]
    return None


@pytest.fixture(scope="module")
def farm(request):
    """The builds of this module's tests, made on COMPILE_WORKERS threads as the tests ask (CompileFarm)."""
    nvcc = find_nvcc()
    with ThreadPoolExecutor(COMPILE_WORKERS, thread_name_prefix="compile") as pool:
        jobs = [job for job in (_job(item, nvcc) for item in request.session.items) if job is not None]
        yield CompileFarm(pool, jobs)
        pool.shutdown(wait=True, cancel_futures=True)   # a run stopped early (-x) waits for no queued build


@pytest.fixture(scope="module")
def nvcc() -> str:
    found = find_nvcc()
    if found is None:
        if running_in_ci():
            pytest.fail("nvcc not found, and CI=true: CI must compile every kernel")
        pytest.skip("nvcc not found (set CI=true to make this a failure)")
    return found


def tool_missing(missing: Exception):
    if running_in_ci():
        pytest.fail(f"CI must check the NVRTC builds: {missing}")
    pytest.skip(str(missing))


def check_below_min_cc(name: str, arch: str, compiled: bool, report: str) -> None:
    """Below the variant's min_cc a build need not compile (the Hopper-only kernels stop at the #error
    in cluster.cuh); one that compiles anyway is reported: the declaration may be higher than needed."""
    if compiled:
        warnings.warn(MinCcWarning(f"{name} compiles for {arch} although it declares min_cc {min_cc(name)}"))
    else:
        print(f"{name} does not build for {arch} (min_cc {min_cc(name)}), as declared")


# ---- the tests --------------------------------------------------------------------------------

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


def test_spill_check_can_fail():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
           "ptxas info    : Function properties for k\n"
           "    16 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n")
    assert spills(log) == ["k: 16 bytes spill stores", "k: 12 bytes spill loads"]
    assert spills(log.replace("16 bytes spill", "0 bytes spill").replace("12 bytes", "0 bytes")) == []


def test_arch_list():
    """The archs are the ones readers have, in order, and every build is checked on at least one."""
    assert ARCHS == ("sm_80", "sm_90a", NEWEST_ARCH)
    assert [arch_cc(a) for a in ARCHS] == sorted(arch_cc(a) for a in ARCHS)
    for _, _, name in BUILDS:
        assert arch_cc(NEWEST_ARCH) >= min_cc(name), f"{name}: min_cc {min_cc(name)} is above every arch built"


def test_newest_arch_is_the_newest_the_toolchain_knows():
    """NEWEST_ARCH is the newest real arch (no a/f suffix) NVRTC and nvcc know: a newer toolchain updates it."""
    known = []
    try:
        from cuda.bindings import nvrtc

        known.append(("NVRTC", nvrtc.nvrtcGetSupportedArchs()[1]))
    except ImportError as missing:
        tool_missing(missing)
    found = find_nvcc()
    if found is not None:
        listed = subprocess.run([found, "--list-gpu-code"], capture_output=True, text=True, check=True).stdout
        known.append(("nvcc", [int(n) for n in re.findall(r"\bsm_(\d+)\b", listed)]))
    for tool, ccs in known:
        assert max(ccs) == arch_cc(NEWEST_ARCH), f"{tool} knows sm_{max(ccs)}: set NEWEST_ARCH to it"


@pytest.mark.parametrize(
    ("path", "define_flags", "name"),
    [pytest.param(path, flags, name, id=name) for path, flags, name in BUILDS],
)
def test_kernel_compiles_without_spills(nvcc, farm, path: Path, define_flags: tuple[str, ...], name: str):
    returncode, report = farm.result(("nvcc", name, NVCC_TARGET), nvcc_build, nvcc, path, define_flags)
    print(report)
    if arch_cc(NVCC_TARGET) < min_cc(name):
        check_below_min_cc(name, NVCC_TARGET, returncode == 0, report)
        return
    assert returncode == 0, f"nvcc failed (exit {returncode}):\n{report}"
    found = spills(report)
    assert not found, "register spills:\n" + "\n".join(found) + f"\n\n{report}"
    assert "ptxas info" in report, f"no ptxas report (is -Xptxas -v honoured?):\n{report}"
    missing = missing_entries(report, launched_entries(name))
    assert not missing, f"{name} launches entries this build does not compile: {missing}\n\n{report}"


@pytest.mark.parametrize(
    ("path", "define_flags", "name"),
    [pytest.param(path, flags, name, id=name) for path, flags, name in BUILDS],
)
def test_nvrtc_build_uses_no_local_memory(farm, path: Path, define_flags: tuple[str, ...], name: str):
    """The runtime build (NVRTC, as cupy compiles on the GPU) has no stack or local memory either:
    on the H200 an NVRTC build put a two-pointer array on the stack where nvcc had not."""
    from onlinesoftmax.runtime import disasm

    if arch_cc("sm_90") < min_cc(name):
        pytest.skip(f"{name} declares min_cc {min_cc(name)}")
    try:
        usage = farm.result(("nvrtc-local", name, "sm_90"), nvrtc_local_memory, path, define_flags)
    except disasm.ToolMissing as missing:
        tool_missing(missing)
    assert usage, f"{name}: no entries in the NVRTC build"
    on_stack = {entry: u for entry, u in usage.items() if u.get("STACK", 0) or u.get("LOCAL", 0)}
    assert not on_stack, f"{name}: NVRTC build uses local memory: {on_stack}"


@pytest.mark.parametrize(
    ("path", "define_flags", "name", "arch"),
    [pytest.param(path, flags, name, arch, id=f"{name}-{arch}") for path, flags, name in BUILDS for arch in OTHER_ARCHS],
)
def test_kernel_compiles_for_arch(farm, path: Path, define_flags: tuple[str, ...], name: str, arch: str):
    """NVRTC builds `name` for `arch` where min_cc allows (and fails below it); spills are reported."""
    from onlinesoftmax.runtime import disasm

    try:
        compiled, report = farm.result(("nvrtc", name, arch), nvrtc_build, path, define_flags, arch)
    except disasm.ToolMissing as missing:
        tool_missing(missing)
    print(report)
    if arch_cc(arch) < min_cc(name):
        check_below_min_cc(name, arch, compiled, report)
        return
    assert compiled, f"{name} does not compile for {arch} (its min_cc is {min_cc(name)}):\n{report}"
    assert "ptxas info" in report, f"no ptxas report (is -Xptxas=-v honoured?):\n{report}"
    missing = missing_entries(report, launched_entries(name))
    assert not missing, f"{name} launches entries the {arch} build does not compile: {missing}\n\n{report}"
    found = spills(report)
    if found:
        warnings.warn(SpillWarning(f"{name} spills registers on {arch} (NVRTC): " + "; ".join(found)))


def test_an_nvrtc_build_leaves_python_s_bytes_alone(tmp_path):
    """NVRTC writes its log and cubin into the buffers it is handed; an empty log is one NUL, and a
    buffer made as b" " * 1 is CPython's shared b" ": writing into it turns every b" " of the process
    into b"\\x00" (torch's import then fails on its own operator schemas, and the process may crash)."""
    pytest.importorskip("cuda.bindings")
    source = tmp_path / "tiny.cu"
    source.write_text('extern "C" __global__ void tiny(float* x) { x[0] = 1.0f; }\n')
    assert loader.nvrtc_cubin(source, arch="sm_90")[:4] == b"\x7fELF"
    ok, report = nvrtc_build(source, (), "sm_90")
    assert ok, report
    assert " ".encode()[0] == 32 and bytes([32]) + b"a" == b" a"
    # the wrong answer it rejects: the old buffer, written by NVRTC, corrupts the shared object
    from cuda.bindings import nvrtc

    err, program = nvrtc.nvrtcCreateProgram(source.read_bytes(), b"tiny.cu", 0, [], [])
    try:
        nvrtc.nvrtcCompileProgram(program, 1, [b"-arch=sm_90"])
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        assert size == 1   # an empty log: the case that hands over the shared object
        probe = bytearray(b"x")    # what b" " * size would be, without touching the shared b" "
        nvrtc.nvrtcGetProgramLog(program, probe)
        assert probe == b"\x00"
    finally:
        nvrtc.nvrtcDestroyProgram(program)
