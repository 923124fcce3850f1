"""The suite softmax-topk's script without a GPU: its shapes are ones the kernels take, the kernels it
times for each shape are registered and able to run it, and its check before timing passes a right
answer and stops a wrong one (on the kernels' NumPy models)."""

import numpy as np
import pytest

from onlinesoftmax import checks, topk
from onlinesoftmax.kernels.topk import softmax_topk as kt
from onlinesoftmax.kernels.topk import split as sp
from onlinesoftmax.runtime.loader import REPO_ROOT

from onlinesoftmax.bench import softmax_topk as bench


@pytest.mark.parametrize("quick", [True, False])
def test_every_shape_has_kernels_that_take_it(quick):
    shapes = list(bench.shapes(quick))
    assert {case for case, *_ in shapes} == {"paper", "sampling", "moe", "large_k"}
    for case, n_rows, n_cols, k, dtype in shapes:
        ours = bench.ours_for(case, n_rows, n_cols, k, dtype)
        assert ours and len(set(ours)) == len(ours)
        assert case == "paper" or ours[0] is topk.choose(n_rows, n_cols, k, dtype).variant
        for variant in ours:
            if variant is not kt.TOPK_ONLY:
                topk._check_variant(variant, k, n_cols, dtype)     # raises for a shape it cannot take
    if quick:
        assert len(shapes) <= 8
    else:
        assert (4000, 32768, 5) in {(r, n, k) for case, r, n, k, _ in shapes if case == "paper"}
        assert {k for case, *_, k, _ in shapes if case == "paper"} == set(bench.PAPER_KS)
        assert {k for case, *_, k, _ in shapes if case == "sampling"} == {1, 20, 50}


def test_the_check_before_timing_passes_right_answers_and_stops_wrong_ones():
    x = checks.random_rows(np, 20, 3000, "bfloat16", seed=1)
    for variant in (kt.SAFE_UNFUSED, kt.SAFE_FUSED, kt.ONLINE_FUSED, sp.SPLIT):
        assert "error" in bench.check_ours(variant, x, 5)
    assert "equal" in bench.check_logits(x, 5)
    right = kt.ONLINE_FUSED.simulate

    def off_by_one(x, k, renormalize=False):
        probs, columns, lse = right(x, k, renormalize)
        return probs, np.where(np.arange(x.shape[0])[:, None] == x.shape[0] - 1, columns + 1, columns), lse

    wrong = type("WrongKernel", (), {"simulate": staticmethod(off_by_one), "name": "wrong"})()
    with pytest.raises(AssertionError, match="not timed"):
        bench.check_ours(wrong, x, 5)     # the last row's columns are off by one: the edge rows catch it


def test_the_host_case_holds_the_runtime_budget_and_the_shapes_that_need_it():
    from onlinesoftmax.bench import api_overhead as api
    assert bench.HOST_BUDGET_US == {1: api.TARGET_US[api.ONE_KERNEL], 2: api.TARGET_US[api.CLUSTER_OR_TWO]}
    chosen = [topk.choose(*shape).variant for shape in bench.HOST_SHAPES]
    assert sp.SPLIT in chosen and any(v is not sp.SPLIT for v in chosen)     # both budgets are met by a shape
    assert any(shape[0] == 1 for shape in bench.HOST_SHAPES)
    for (n_rows, n_cols, k, dtype), variant in zip(bench.HOST_SHAPES, chosen):
        topk._check_variant(variant, k, n_cols, dtype)
        assert bench.launches(variant) == (2 if variant is sp.SPLIT else 1)


def test_the_host_verdicts_name_each_call_of_ours_against_its_budget():
    rows = [{"kernel": "softmax_topk_06_split", "n_rows": 1, "n_cols": 32000, "k": 20, "dtype": "float32",
             "us": 26.0, "budget_us": 25.0, "device_bound": False},
            {"kernel": "softmax_topk_05_warp_rows", "n_rows": 64, "n_cols": 512, "k": 8, "dtype": "bfloat16",
             "us": 12.0, "budget_us": 15.0, "device_bound": True},
            {"kernel": "torch_topk", "n_rows": 64, "n_cols": 512, "k": 8, "dtype": "bfloat16", "us": 30.0,
             "device_bound": False}]
    verdicts = bench.host_verdicts(rows)
    assert [(v["kernel"], v["within"], v["device_bound"]) for v in verdicts] == [
        ("softmax_topk_06_split", False, False), ("softmax_topk_05_warp_rows", True, True)]


def test_the_host_case_keeps_a_row_per_call_and_shape(monkeypatch):
    """Every shape keeps its own rows (a key without the shape would keep only the last shape's)."""
    made = []

    def fake_calls(n_rows, n_cols, k, dtype):
        where = (n_rows, n_cols, k, dtype)
        made.append(where)
        shape = {"case": "host", "n_rows": n_rows, "n_cols": n_cols, "k": k, "dtype": dtype}
        return {("softmax_topk_05_warp_rows", "onlinesoftmax.softmax_topk(x, k)", where): (
                    lambda: None, shape | {"budget_us": 15.0}),
                ("torch_topk", "torch.topk(t, k)", where): (lambda: None, shape)}

    monkeypatch.setattr(bench, "host_calls", fake_calls)
    monkeypatch.setattr(bench, "bare_launch", lambda: {})
    monkeypatch.setattr(bench.timer, "host_us_per_call", lambda fn, **_: {"us": 10.0, "drain_us": 1.0})
    monkeypatch.setattr(bench.timer, "time_gpu", lambda fn, args, **_: {"ms": 0.005})
    rows = bench.host_rows()
    assert len(rows) == 2 * len(bench.HOST_SHAPES) and made == bench.HOST_SHAPES
    assert {(r["n_rows"], r["n_cols"], r["k"], r["dtype"]) for r in rows} == set(bench.HOST_SHAPES)
    assert all(len(r["round_us"]) == bench.HOST_ROUNDS and not r["device_bound"] for r in rows)
    assert len(bench.host_verdicts(rows)) == len(bench.HOST_SHAPES)
