"""The GPU tier fails when it cannot run: `pytest -m gpu` on a machine where CuPy sees no GPU exits
non-zero with a message, unless ONLINESOFTMAX_ALLOW_NO_GPU=1 (then the GPU tests are skipped with
the reason). A CPU run (`-m "not gpu"`) is unaffected.

Each case runs pytest in a subprocess on a tiny test file next to a copy of the repository's
conftest.py, with CUDA_VISIBLE_DEVICES="" so that no GPU is visible even on a GPU machine.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
GPU_TESTS = REPO_ROOT / "tests" / "gpu"

TINY_TESTS = '''
import pytest


@pytest.mark.gpu
def test_on_the_gpu():
    pass


def test_on_the_cpu():
    pass
'''

PYTEST_INI = '''
[pytest]
markers =
    gpu: needs a CUDA GPU
addopts = -ra --strict-markers
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gating")
    shutil.copy(REPO_ROOT / "conftest.py", folder / "conftest.py")
    (folder / "pytest.ini").write_text(PYTEST_INI)
    (folder / "test_tiny.py").write_text(TINY_TESTS)
    return folder


def run_pytest(folder: Path, markexpr: str | None, allow: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ONLINESOFTMAX_ALLOW_NO_GPU", "PYTEST_ADDOPTS")}
    env["CUDA_VISIBLE_DEVICES"] = ""   # no GPU, whatever this machine has
    if allow is not None:
        env["ONLINESOFTMAX_ALLOW_NO_GPU"] = allow
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c", str(folder / "pytest.ini"),
               "--rootdir", str(folder), str(folder / "test_tiny.py")]
    if markexpr is not None:
        command += ["-m", markexpr]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_gpu_run_without_a_gpu_fails_loudly(project):
    done = run_pytest(project, "gpu")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "no CUDA GPU is visible" in output, output
    assert "ONLINESOFTMAX_ALLOW_NO_GPU=1" in output, output
    assert "passed" not in output and "skipped" not in output, output


def test_gpu_run_without_a_gpu_skips_when_allowed(project):
    done = run_pytest(project, "gpu", allow="1")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"\b1 skipped\b", output) and "1 deselected" in output, output
    assert "needs a CUDA GPU" in output, output   # the reason, in -ra's summary


def test_cpu_run_is_unchanged(project):
    done = run_pytest(project, "not gpu")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"\b1 passed\b", output) and "1 deselected" in output and "skipped" not in output, output


# Owned elsewhere for now: they still carry their own skips (importorskip, skipif on has_gpu).
OWN_SKIPS_PENDING = set()


def test_gpu_tests_have_no_skip_of_their_own():
    """conftest.py is the one place a GPU test is skipped for want of a GPU (or of cupy)."""
    own = re.compile(r"importorskip\(\s*[\"']cupy|skipif\([^)]*has_gpu|allow_module_level")
    offenders = [f.name for f in sorted(GPU_TESTS.glob("test_*.py"))
                 if f.name not in OWN_SKIPS_PENDING and own.search(f.read_text())]
    assert not offenders, f"GPU test files that skip themselves (leave it to conftest.py): {offenders}"


SANITIZE = REPO_ROOT / "scripts" / "sanitize.sh"


def sanitize_families():
    import runpy

    return runpy.run_path(str(REPO_ROOT / "scripts" / "sanitize.py"))["FAMILIES"]


def test_the_sanitizer_reports_the_sanitizers_own_exit(tmp_path):
    """Each `<family> <tool> exit N` line is compute-sanitizer's own status and the script fails with it: a
    fake compute-sanitizer that finds errors (exit 3) must show as "memcheck exit 3", never as 0."""
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/usr/bin/env bash\nexit 3\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SANITIZE), "teaching", "fast"], env=env, capture_output=True, text=True,
                          timeout=60)
    lines = [line for line in done.stdout.splitlines() if " exit " in line]
    assert len(lines) == 6 and all(line.endswith(" exit 3") for line in lines), done.stdout
    assert done.returncode != 0


def test_the_sanitizer_refuses_an_unknown_family():
    done = subprocess.run(["bash", str(SANITIZE), "fastt"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown family fastt" in done.stdout


def test_every_registered_kernel_is_in_a_sanitizer_family_and_each_family_launches_only_its_own():
    """A kernel no family names would never be sanitized; a family that launches another's kernel would
    run it where SANITIZE_ONLY cannot reach it by its family."""
    import inspect

    from onlinesoftmax.registry import REGISTRY

    families = sanitize_families()
    named = {kernel for _, kernels, _ in families.values() for kernel in kernels}
    missing = sorted(name for name in REGISTRY if name not in named and not name.endswith("_unguarded"))
    assert not missing, f"registered kernels no sanitizer family launches: {missing}"
    kernel = r"\b(?:softmax|log_softmax|logsumexp|attention|softmax_topk)_\d\d_[a-z0-9_]*[a-z0-9]"
    for name, (_, kernels, fn) in families.items():
        source = inspect.getsource(fn)
        if name in ("attention", "decode"):
            source += inspect.getsource(families["attention"][2].__globals__["_attention_cuda_cores"])
        assert set(re.findall(kernel, source)) <= set(kernels), name


def _gpu_conftest():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_tier_conftest", GPU_TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_big_gpu_tests_are_weighed_and_share_the_memory(tmp_path):
    """The tests that hold gigabytes are found by file and name or by their row sizes, weighed in GiB,
    and hold slots in proportion: a test larger than the share runs with no other big one."""
    c = _gpu_conftest()
    assert c.big_gib("test_attention_gpu.py::test_decode_mma_long_caches_and_the_model", {"n": 131072}) == 40
    assert c.big_gib("test_masked_gpu.py::test_edge_matrix", {"n_rows": 4000, "n_cols": 65536}) == 20
    assert c.big_gib("test_logsumexp_gpu.py::test_log_softmax_edge_matrix", {"n_rows": 4000, "n_cols": 32000}) == 10
    assert c.big_gib("test_masked_gpu.py::test_edge_matrix", {"n_rows": 7, "n_cols": 65536}) == 0
    assert c.big_gib("test_attention_gpu.py::test_every_length_pair", {}) == 0   # no 16384^2 pair there
    h100, h200 = 79.2 * 2**30, 139.8 * 2**30
    assert (c.slot_count(h100), c.slot_count(h200)) == (11, 20)
    assert c.slots_needed(40, c.slot_count(h100)) == 10 and c.slots_needed(400, 11) == 11
    assert c.slots_needed(1, 11) == 1

    import threading
    import time

    paths = [str(tmp_path / f"slot{i}") for i in range(4)]
    order = []
    release = threading.Event()

    def first():
        with c.holding(paths, 3):
            order.append("first in")
            release.wait(5)
            order.append("first out")

    def second():
        with c.holding(paths, 2):   # only one slot is free while the first runs: it waits
            order.append("second in")

    a = threading.Thread(target=first)
    a.start()
    while not order:
        time.sleep(0.01)
    b = threading.Thread(target=second)
    b.start()
    b.join(0.5)
    assert order == ["first in"] and b.is_alive()
    release.set()
    a.join(5)
    b.join(5)
    assert order == ["first in", "first out", "second in"]


def test_failures_are_named_at_once_when_asked(tmp_path):
    """ONLINESOFTMAX_NAME_FAILURES=1 (the device round): a failing test's id is printed when its report
    arrives, ahead of pytest's summary (which a time limit may never let it write), under xdist too."""
    shutil.copy(REPO_ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    (tmp_path / "test_two.py").write_text("def test_ok():\n    pass\n\n\ndef test_bad():\n    assert False\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ONLINESOFTMAX_NAME_FAILURES", "PYTEST_ADDOPTS")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(tmp_path / "pytest.ini"),
               "--rootdir", str(tmp_path), str(tmp_path / "test_two.py")]
    for extra, named in (([], "0"), ([], "1"), (["-n", "2"], "1")):
        done = subprocess.run(command + extra, cwd=tmp_path, env={**env, "ONLINESOFTMAX_NAME_FAILURES": named},
                              capture_output=True, text=True, timeout=120)
        line = "FAILED test_two.py::test_bad (call)"
        assert (line in done.stdout) == (named == "1"), done.stdout
        if named == "1":
            assert done.stdout.index(line) < done.stdout.index("= FAILURES ="), done.stdout


OOM_TESTS = """
import pytest

RUNS = []


class OutOfMemoryError(MemoryError):   # named as CuPy's and torch's are
    pass


@pytest.fixture
def tensor():
    return [1]


def test_first_run_short_of_memory(tensor):
    RUNS.append("short")
    if RUNS.count("short") == 1:
        big = [0] * 1000
        raise OutOfMemoryError("Out of memory allocating 4,294,967,296 bytes")
    assert tensor == [1]


def test_never_fits():
    RUNS.append("never")
    raise RuntimeError("cudaErrorMemoryAllocation: out of memory")


def test_wrong_answer():
    RUNS.append("wrong")
    assert False


def test_runs_counted():
    assert RUNS == ["short", "short", "never", "never", "wrong"], RUNS
"""


def test_a_test_out_of_device_memory_runs_once_more_and_nothing_else_does(tmp_path):
    """The GPU tier's conftest reruns a test that ran out of memory once (after freeing and taking the
    big-test slots); one that runs out again fails, and a wrong answer is never rerun."""
    shutil.copy(GPU_TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    (tmp_path / "test_oom.py").write_text(OOM_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("ONLINESOFTMAX_NAME_FAILURES", "PYTEST_ADDOPTS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path / "test_oom.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "2 failed, 2 passed" in done.stdout, done.stdout
    assert "FAILED test_oom.py::test_never_fits" in done.stdout and "FAILED test_oom.py::test_wrong_answer" in done.stdout
    assert "run again alone among the big tests" in done.stdout + done.stderr
