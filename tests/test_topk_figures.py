"""The chapter's figures and reading of the suite softmax-topk, on a small made-up file in the suite's
schema (nothing written to data/): every figure keeps the book's figure rule, the reading quotes the
rows (and the paper's figures as the paper's), and without a file the reading says nothing is recorded."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from onlinesoftmax.book.readings import figures, topk_figures, topk_reading  # noqa: E402

PAPER4 = ["softmax_topk_01_topk_only", "softmax_topk_02_safe_unfused", "softmax_topk_03_safe_fused",
          "softmax_topk_04_online_fused"]


def made_up_suite() -> dict:
    """Rows shaped as onlinesoftmax/bench/softmax_topk.py writes them; the numbers are invented."""
    rng = np.random.default_rng(0)
    rows = [{"kernel": "copy", "GBps": 4000.0, "ms": 1.0}, {"kernel": "read", "GBps": 4200.0, "ms": 1.0}]
    shapes = [("paper", b, n, k, "float32", PAPER4) for b, ns in ((4000, (1024, 32768)), (10, (65536,)))
              for n in ns for k in (1, 5, 10, 15, 30)]
    shapes += [("sampling", b, 128256, 20, d, ["softmax_topk_06_split", "softmax_topk_04_online_fused"])
               for b in (1, 256) for d in ("float32", "bfloat16")]
    shapes += [("moe", t, 256, 8, "bfloat16", ["softmax_topk_05_warp_rows", "softmax_topk_04_online_fused"])
               for t in (64, 4096)]
    shapes += [("large_k", 4000, 32768, k, "float32", ["softmax_topk_04_online_fused", "softmax_topk_06_split"])
               for k in (1, 8, 32)]
    shapes += [("large_k", 256, 262144, k, "float32", ["softmax_topk_06_split"]) for k in (64, 1024)]
    for case, n_rows, n_cols, k, dtype, ours in shapes:
        nbytes = n_rows * n_cols * (4 if dtype == "float32" else 2)
        times = {name: rng.uniform(0.01, 1.0) for name in ours + ["torch_softmax_topk", "torch_topk"]}
        if case == "sampling" and n_rows == 1:
            times[ours[0]] = 10.0                             # slower than both torch paths
        if case == "large_k" and n_rows == 4000:
            times["softmax_topk_06_split"] = 0.5
            times["softmax_topk_04_online_fused"] = 0.1 * k   # the lists lose from k = 8 on
        by = {}
        for name, ms in times.items():
            row = by[name] = {"kernel": name, "case": case, "n_rows": n_rows, "n_cols": n_cols, "k": k,
                              "dtype": dtype, "bytes": nbytes, "ms": ms, "GBps": nbytes / ms / 1e6,
                              "fraction_of_read": nbytes / ms / 1e6 / 4200, "end_to_end_us": ms * 1e3 + 10}
            if name.startswith("softmax_topk"):
                row["auto"] = name == ours[0] and case != "paper"
                for peer in ("torch_softmax_topk", "torch_topk"):
                    row[f"speedup_vs_{peer}"] = times[peer] / ms
            rows.append(row)
        if case == "paper":
            u, s, o = (times[n] for n in PAPER4[1:])
            by[PAPER4[3]].update(paper_total=u / o, paper_fusion=u / s, paper_online=s / o)
    meta = {"gpu": "NVIDIA H200", "sm_count": 132, "date": "2026-12-01", "cupy": "14", "git_commit": "0" * 40,
            "method": "made up"}
    return {"meta": meta, "rows": rows, "quick": False}


@pytest.mark.parametrize("plot, panels", [(topk_figures.plot_speedups, 3), (topk_figures.plot_fraction_of_read, 3),
                                          (topk_figures.plot_paper, 2), (topk_figures.plot_large_k, 2)])
def test_the_figures_keep_the_rule(plot, panels, monkeypatch):
    monkeypatch.setattr(plt, "show", lambda: None)
    plot(made_up_suite(), "made up for a test")
    fig = plt.gcf()
    assert len(fig.axes) == panels and figures.check_legends(fig) == []
    labels = {h for ax in fig.axes for h in ax.get_legend_handles_labels()[1]}
    if plot is topk_figures.plot_paper:
        assert "total, the paper's V100 figure" in labels and any(label.startswith("k = 5") for label in labels)
    if plot is topk_figures.plot_speedups:
        assert any(label.startswith("softmax_topk_05_warp_rows") for label in labels)
    plt.close("all")


def test_the_reading_quotes_the_rows():
    data = made_up_suite()
    text = topk_reading.reading_markdown(data)
    assert "$" not in text, "Markdown from a cell's output is not typeset: no dollar math"
    r = topk_figures.reading(data)
    assert f"{r['head_vs_unfused']:.2f}" in text or "slower than" in text
    assert f"{r['paper_k5_total']:.2f}" in text and "the paper's V100 figures are 5, 3.5, 2, 1.4" in text
    assert "slower than the unfused path" in text and r["sampling_shapes"] == 4 and r["moe_shapes"] == 2
    assert "from *k* = 8 on" in text and "Large k" in text
    assert all(row["kernel"] == "softmax_topk_05_warp_rows"
               for row in topk_figures.ours_auto(topk_figures.case_rows(data, "moe")))
    assert "quick run" in topk_reading.reading_markdown({**data, "quick": True})


def made_up_host_run():
    def row(kernel, n_rows, n_cols, k, dtype, us):
        return {"kernel": kernel, "method": "host_per_call", "n_rows": n_rows, "n_cols": n_cols, "k": k,
                "dtype": dtype, "us": us}
    return {"rows": [row("softmax_topk_06_split", 1, 32000, 20, "float32", 17.25),
                     row("softmax_topk_06_split", 8, 128256, 1, "float32", 21.5),
                     row("torch_softmax_topk", 1, 32000, 20, "float32", 140.0),
                     row("torch_softmax_topk", 8, 128256, 1, "float32", 120.0),
                     row("torch_softmax_topk", 64, 512, 8, "bfloat16", 36.0),    # not a split shape: left out
                     row("softmax_topk_05_warp_rows", 64, 512, 8, "bfloat16", 12.5),
                     row("torch_topk", 64, 512, 8, "bfloat16", 25.0),
                     {"kernel": "cupy.RawKernel", "method": "host_per_call", "us": 4.5}]}


def test_the_host_reading_quotes_the_host_run():
    host = made_up_host_run()
    h = topk_figures.host_reading(host)
    assert h == {"split": (17.25, 21.5), "one": (12.5, 12.5), "torch_unfused": (120.0, 140.0), "floor": 4.5}
    text = topk_reading.reading_markdown(made_up_suite(), host)
    assert ("two launches) costs 17.2 to 21.5 µs" in text or "two launches) costs 17.3 to 21.5 µs" in text)
    assert "costs 120.0 to 140.0 µs" in text and "one kernel (gating, the row pass) costs 12.5 µs" in text
    assert "cupy costs 4.5 µs" in text and "$" not in text
    assert "What one call costs the host" not in topk_reading.reading_markdown(made_up_suite()), "no host run"


def test_without_a_file_nothing_is_quoted(monkeypatch):
    monkeypatch.setattr(topk_figures.results, "recorded_files", lambda suite: [])
    assert topk_figures.load() is None
    text = topk_reading.reading_markdown(None)
    assert "not been recorded" in text and not any(ch.isdigit() for ch in text)


def test_the_widget_draws_the_k_returned(monkeypatch):
    monkeypatch.setattr(plt, "show", lambda: None)
    for n_rows, n_cols in ((1, 100), (1, 40000), (4000, 40000)):
        topk_figures.show_choice(n_cols=n_cols, k=5, dtype="bfloat16", renormalize=True, n_rows=n_rows)
        fig = plt.gcf()
        assert figures.check_legends(fig) == [] and len(fig.axes[0].patches) == 60 + 5
        plt.close("all")


def test_the_measuring_widget_shows_the_error_and_the_recorded_time(monkeypatch):
    from onlinesoftmax.book.widgets import topk_widgets

    monkeypatch.setattr(plt, "show", lambda: None)
    data = made_up_suite()
    for n_rows, n_cols, k, dtype, bars in ((1, 128256, 20, "float32", 4), (8, 3000, 5, "bfloat16", 0)):
        topk_widgets.show_measured(n_rows, n_cols, k, dtype, data=data)
        fig = plt.gcf()
        assert figures.check_legends(fig) == []
        left, right = fig.axes
        assert (left.lines[0].get_ydata() <= 1).all()          # the model is within the tolerance
        assert len(right.patches) == bars      # the split kernel, the lists and the two torch paths, or nothing
        plt.close("all")
