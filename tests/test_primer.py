"""The GPU primer's diagrams draw what they claim, and its butterfly model reduces like the hardware."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from onlinesoftmax.book import primer

from onlinesoftmax.book.readings import figures


def count(fig, gid):
    return sum(1 for ax in fig.axes for patch in ax.patches if patch.get_gid() == gid)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_execution_model_draws_32_lanes_per_warp_and_every_block():
    fig = primer.draw_execution_model(n_warps=4, n_blocks=12, n_sms=4)
    assert count(fig, "lane") == 4 * 32
    assert count(fig, "block") == 12
    assert figures.check_legends(fig) == []


def test_memory_hierarchy_draws_one_box_per_level():
    levels = [("registers", "a"), ("shared memory", "b"), ("L2", "c"), ("HBM", "d")]
    assert count(primer.draw_memory_hierarchy(levels), "level") == 4


@pytest.mark.parametrize("stride, segments", [(1, 1), (2, 2), (8, 8), (32, 32), (64, 32)])
def test_coalescing_counts_128_byte_segments(stride, segments):
    assert primer.segments_touched(stride) == segments


def test_coalescing_diagram_draws_32_lanes_per_panel():
    fig = primer.draw_coalescing(strides=(1, 32))
    assert count(fig, "lane") == 2 * 32
    assert count(fig, "segment") == 4 + 32


def test_butterfly_diagram_draws_every_lane_at_every_stage():
    fig = primer.draw_butterfly()
    assert count(fig, "lane") == 32 * (len(primer.BUTTERFLY_OFFSETS) + 1)
    assert len(fig.axes[0].lines) == 32 * len(primer.BUTTERFLY_OFFSETS)   # two lines per pair of lanes


@pytest.mark.parametrize("seed", range(5))
def test_butterfly_equals_np_max_in_every_lane(seed):
    values = np.random.default_rng(seed).standard_normal(32).astype(np.float32)
    assert np.array_equal(primer.butterfly_reduce(values), np.full(32, values.max()))
    assert np.allclose(primer.butterfly_reduce(values, op=np.add), values.sum(), rtol=1e-5)


@pytest.mark.parametrize("offsets", [(16, 8, 4, 2), (16, 8, 4, 2, 2), (1, 1, 1, 1, 1)])
def test_a_broken_schedule_is_caught(offsets):
    values = np.random.default_rng(1).permutation(32).astype(np.float32)
    assert not np.array_equal(primer.butterfly_reduce(values, offsets=offsets), np.full(32, values.max()))


def test_plots_keep_the_figure_rule():
    assert figures.check_legends(primer.draw_littles_law(per_sm_GBps=16.0, latency_ns=600)) == []
    assert figures.check_legends(primer.draw_roofline(4000.0, 60000.0, {"softmax fp32": 0.6})) == []


def test_machine_numbers_without_gpu_come_from_the_recorded_run():
    m = primer.machine()
    assert m["sm_count"] > 0 and m["l2_bytes"] > 0 and m["copy_GBps"] > 0
    if not m["live"]:
        assert m["source"].startswith("recorded")
