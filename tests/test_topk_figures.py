"""The chapter's figures and reading of the suite softmax-topk, on a small made-up file in the suite's
schema (nothing written to data/): both figures keep the book's figure rule, the reading quotes the
rows, and without a file the reading says nothing is recorded."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from onlinesoftmax.book import figures, topk_figures  # noqa: E402

PAPER = {"k5_total": 5.0, "k5_fusion": 2.5, "k5_online": 2.0, "k10": 3.5, "k15": 2.0, "k30": 1.4}


def made_up_suite() -> dict:
    """Rows shaped as benchmarks/bench_softmax_topk.py writes them; the numbers are invented."""
    rng = np.random.default_rng(0)
    rows = [{"kernel": "copy", "GBps": 4000.0, "ms": 1.0}, {"kernel": "read", "GBps": 4200.0, "ms": 1.0}]
    shapes = [("paper", 4000, n, k, "float32") for n in (1024, 65536) for k in (1, 5, 10, 15, 30)]
    shapes += [("sampling", b, 128256, 20, d) for b in (1, 256) for d in ("float32", "bfloat16")]
    shapes += [("moe", t, 256, 8, "bfloat16") for t in (64, 4096)]
    for case, n_rows, n_cols, k, dtype in shapes:
        nbytes = n_rows * n_cols * (4 if dtype == "float32" else 2)
        ours = ["softmax_topk_02_warp_rows", "softmax_topk_01_online"] if case == "moe" else ["softmax_topk_01_online"]
        times = {name: rng.uniform(0.01, 1.0) for name in ours + ["torch_softmax_topk", "torch_topk"]}
        if case == "sampling" and n_rows == 1:
            times[ours[0]] = 10.0                             # slower than both torch paths
        for name, ms in times.items():
            row = {"kernel": name, "case": case, "n_rows": n_rows, "n_cols": n_cols, "k": k, "dtype": dtype,
                   "bytes": nbytes, "ms": ms, "GBps": nbytes / ms / 1e6, "fraction_of_read": nbytes / ms / 1e6 / 4200,
                   "end_to_end_us": ms * 1e3 + 10}
            if name.startswith("softmax_topk"):
                row["auto"] = name == ours[0]
                for peer in ("torch_softmax_topk", "torch_topk"):
                    row[f"speedup_vs_{peer}"] = times[peer] / ms
            rows.append(row)
    meta = {"gpu": "NVIDIA H200", "sm_count": 132, "date": "2026-12-01", "cupy": "14", "git_commit": "0" * 40,
            "method": "made up"}
    return {"meta": meta, "rows": rows}


@pytest.mark.parametrize("plot", [topk_figures.plot_speedups, topk_figures.plot_fraction_of_read])
def test_the_figures_keep_the_rule(plot, monkeypatch):
    monkeypatch.setattr(plt, "show", lambda: None)
    plot(made_up_suite(), "made up for a test")
    fig = plt.gcf()
    assert len(fig.axes) == 3 and figures.check_legends(fig) == []
    labels = {line.get_label() for ax in fig.axes for line in ax.lines}
    assert any(label.startswith("softmax_topk_02_warp_rows") for label in labels)
    plt.close("all")


def test_the_reading_quotes_the_rows():
    data = made_up_suite()
    text = topk_figures.reading_markdown(data, PAPER, k32_blocks=1)
    r = topk_figures.reading(data)
    assert f"{r['paper_k5_vs_unfused']:.2f}" in text and "The paper's figure" in text
    assert "slower than the unfused path" in text and "at batch 1" in text
    assert r["sampling_shapes"] == 4 and r["moe_shapes"] == 2     # auto rows only
    assert all(row["kernel"] == "softmax_topk_02_warp_rows" for row in topk_figures.ours_auto(
        topk_figures.case_rows(data, "moe")))


def test_without_a_file_nothing_is_quoted(monkeypatch):
    monkeypatch.setattr(topk_figures.results, "recorded_files", lambda suite: [])
    assert topk_figures.load() is None
    text = topk_figures.reading_markdown(None, PAPER)
    assert "not been recorded" in text and not any(ch.isdigit() for ch in text)


def test_the_widget_draws_the_k_returned(monkeypatch):
    monkeypatch.setattr(plt, "show", lambda: None)
    topk_figures.show_choice(n_cols=100, k=5, dtype="bfloat16", renormalize=True)
    fig = plt.gcf()
    assert figures.check_legends(fig) == [] and len(fig.axes[0].patches) == 60 + 5
    plt.close("all")
