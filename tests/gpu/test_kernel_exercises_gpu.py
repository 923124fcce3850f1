"""GPU tier for the CUDA exercises: every solution passes its grader, every starter of a
fix-the-bug exercise is rejected (and the empty online_softmax starter too), and a crashing or
hanging kernel is reported as a failure while this process's own launches keep working."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax.book import kernel_exercises as kx

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", list(kx.EXERCISES))
def test_the_solution_passes(name):
    result = kx.run(kx.SOLUTIONS / f"{name}.cu", name, timeout_s=120, measure=False)
    assert result["passed"], kx.report(name, result)


@pytest.mark.parametrize("name", list(kx.EXERCISES))
def test_the_starter_is_rejected(name):
    result = kx.run(kx.STARTERS / f"{name}.cu", name, timeout_s=30, measure=False)
    assert not result["passed"], f"{name}: the starter passed the grader"


@pytest.mark.parametrize("fault, body", [
    ("illegal address", "y[(long long)n_cols * 1000000000LL] = 1.0f;"),
    ("hang", "while (n_cols > 0) { __nanosleep(1000); }"),
])
def test_a_crashing_kernel_is_a_failure_and_this_process_goes_on(tmp_path, fault, body):
    path = tmp_path / "online_softmax.cu"
    path.write_text('extern "C" __global__ void online_softmax(const float* x, float* y, int n_cols, '
                    'long long xs, long long ys) { ' + body + " }\n")
    result = kx.run(path, "online_softmax", timeout_s=20, measure=False)
    assert not result["passed"] and result.get("fault"), result
    x = cp.asarray(np.random.default_rng(0).standard_normal((3, 100), dtype=np.float32))
    y = osm.softmax(x)
    assert bool(cp.allclose(y.sum(axis=1), 1, rtol=1e-5)), "the next launch here must work"


def test_grading_measures_against_a_copy(capsys):
    assert kx.grade("online_softmax", path=kx.SOLUTIONS / "online_softmax.cu")
    out = capsys.readouterr().out
    assert "GB/s" in out and "of a copy measured in the same run" in out
