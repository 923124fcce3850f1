"""GPU tier: how deep a first call goes into the package (scripts/first_call_frames.py, in a fresh
process so that nothing is cached): the longest chain of onlinesoftmax frames on the stack while the
call validates, chooses, builds its plan (compiling the kernel) and launches. A repeated call is the
fast path: its chain is the public function, the lookup and the launch."""
import os
import subprocess
import sys

import pytest

from onlinesoftmax.runtime.loader import REPO_ROOT

pytestmark = pytest.mark.gpu
LIMITS = {"softmax": 10, "log_softmax": 9, "logsumexp": 10, "softmax_topk": 10, "softmax again": 3}


def test_first_calls_stay_shallow():
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "first_call_frames.py")], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    depths = {}
    for line in done.stdout.splitlines():
        if " frames deep" in line:
            name = line.split(" (")[0]
            depths[name] = int(line.split(": ")[1].split(" frames")[0])
    assert set(depths) == set(LIMITS), done.stdout
    over = {name: depth for name, depth in depths.items() if depth > LIMITS[name]}
    assert not over, f"calls deeper than their limit: {over}\n{done.stdout}"
