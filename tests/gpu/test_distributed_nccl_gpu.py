"""Two GPUs: the self-check (onlinesoftmax/distributed/check.py) on two processes under torchrun, NCCL.

    pytest -m multi_gpu tests/gpu/test_distributed_nccl_gpu.py      # on a machine with two GPUs

Each process takes its own GPU; every per-rank function is checked against the unsharded float64
reference with both schedules, and the run must fail when the merge forgets the maximum."""
import os
import subprocess
import sys

import pytest

from onlinesoftmax.runtime.loader import REPO_ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.multi_gpu]


def run_job(*args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               "-m", "onlinesoftmax.distributed.check", "--backend", "nccl", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_two_gpus_over_nccl_agree_with_the_unsharded_reference():
    job = run_job()
    print(job.stdout[-6000:])
    assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-4000:]
    assert "backend nccl" in job.stdout and " 0 failed" in job.stdout


def test_the_nccl_check_fails_when_the_merge_forgets_the_maximum():
    job = run_job("--wrong-merge")
    assert job.returncode != 0 and " 0 failed" not in job.stdout, job.stdout[-3000:]
