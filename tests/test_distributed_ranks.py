"""CPU tier: the real multi-process path, two processes under torchrun with torch.distributed's gloo
backend, running the self-check (onlinesoftmax/distributed/check.py) that a two-GPU machine runs
with NCCL. The same TorchComm, launch and collectives; only the backend and the arrays' device differ.

torch is not one of the book's requirements (the chapters do not need it): the test looks for it in
$ONLINESOFTMAX_TORCH_PATH, then in .venv/torch-cpu (`make torch-cpu` installs torch's CPU wheel
there, outside the venv's site-packages), then in the running Python. Without torch it is skipped, except
under CI=true, where it fails: CI must run it (`make test` installs it)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onlinesoftmax.runtime.loader import REPO_ROOT

TIMEOUT_S = 240


def torch_path() -> str | None:
    """A folder to put on PYTHONPATH for torch ("" when the running Python has it), or None."""
    for candidate in (os.environ.get("ONLINESOFTMAX_TORCH_PATH"), str(REPO_ROOT / ".venv" / "torch-cpu")):
        if candidate and (Path(candidate) / "torch" / "__init__.py").is_file():
            return candidate
    return "" if importlib.util.find_spec("torch") is not None else None


def import_torch():
    """torch for a CPU-tier test module, from torch_path(): the module is skipped where torch is not
    installed, and fails in CI, which must run it (make torch-cpu)."""
    path = torch_path()
    if path is None:
        if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
            pytest.fail("torch is not installed: CI must run the operator tests (make torch-cpu)", pytrace=False)
        pytest.skip("needs torch (make torch-cpu installs its CPU wheel into .venv/torch-cpu)", allow_module_level=True)
    if path and path not in sys.path:
        sys.path.append(path)
    import torch

    return torch


def run_job(*args, ranks=2):
    path = torch_path()
    if path is None:
        if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
            pytest.fail("torch is not installed: CI must run the two-process gloo check (make torch-cpu)")
        pytest.skip("needs torch (make torch-cpu installs its CPU wheel into .venv/torch-cpu)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), path) if p),
           "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "-m", "onlinesoftmax.distributed.check", "--backend", "gloo", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def summary(out: str) -> tuple[int, int]:
    line = [l for l in out.splitlines() if l.endswith(" failed") and " passed, " in l][-1]
    passed, failed = line.split(" passed, ")
    return int(passed.split()[-1]), int(failed.split()[0])


def test_two_processes_over_gloo_agree_with_the_unsharded_reference():
    job = run_job()
    assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-4000:]
    passed, failed = summary(job.stdout)
    assert failed == 0 and passed >= 70, job.stdout[-3000:]
    assert "backend gloo" in job.stdout and "2 ranks" in job.stdout


def test_the_check_fails_when_the_merge_forgets_the_maximum():
    job = run_job("--wrong-merge")
    assert job.returncode != 0
    passed, failed = summary(job.stdout)
    assert failed > 0, job.stdout[-3000:]
