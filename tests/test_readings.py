"""The reading helpers chapters glue numbers from: teaching_speed (chapters 02 and 03) and
teaching_accuracy.fold_time_cost (chapter 04), on made-up runs whose answers are known."""
import math

import pytest

from onlinesoftmax.book.readings import teaching_accuracy, teaching_speed


def row(kernel, n_rows, n_cols, ms, **extra):
    return {"kernel": kernel, "n_rows": n_rows, "n_cols": n_cols, "ms": ms, "GBps": 8 * n_rows * n_cols / ms / 1e6,
            **extra}


ROWS = [row("softmax_02_online", 4000, 1024, 0.030), row("softmax_01_safe", 4000, 1024, 0.045),
        row("softmax_02_online", 4000, 4096, 0.100), row("softmax_01_safe", 4000, 4096, 0.080),
        row("softmax_01_safe", 4000, 16384, 0.300),                      # no online row at this length
        row("softmax_02_online", 10, 1024, 0.010), row("softmax_01_safe", 10, 1024, 0.011),
        row("copy", 4000, 1024, 0.010)]


def test_online_over_safe_is_safe_time_over_online_time():
    common, ratio = teaching_speed.online_over_safe(ROWS, 4000)
    assert list(common) == [1024, 4096]                      # only lengths where both were timed
    assert ratio == pytest.approx([1.5, 0.8])
    assert teaching_speed.ratio(ROWS, 4000, 1024) == pytest.approx(1.5)
    assert teaching_speed.ratio(ROWS, 10, 1024) == pytest.approx(1.1)
    # the inverted ratio (online time over safe time) is a different number: the helper is not it
    assert teaching_speed.ratio(ROWS, 4000, 1024) != pytest.approx(0.030 / 0.045)


def test_ratio_agrees_with_the_gbps_ratio_chapter_02_plotted():
    for n_cols in (1024, 4096):
        online, safe = (next(r for r in ROWS if r["kernel"] == k and r["n_rows"] == 4000 and r["n_cols"] == n_cols)
                        for k in ("softmax_02_online", "softmax_01_safe"))
        assert teaching_speed.ratio(ROWS, 4000, n_cols) == pytest.approx(online["GBps"] / safe["GBps"])


def test_missing_shape_duplicate_rows_and_bad_times_are_refused():
    with pytest.raises(KeyError):
        teaching_speed.ratio(ROWS, 4000, 16384)
    with pytest.raises(ValueError, match="two rows"):
        teaching_speed.online_over_safe(ROWS + [row("softmax_01_safe", 4000, 1024, 0.05)], 4000)
    for bad in (math.nan, 0.0, -1.0):
        rows = [r for r in ROWS if not (r["kernel"] == "softmax_01_safe" and r["n_cols"] == 1024)]
        with pytest.raises(ValueError):
            teaching_speed.online_over_safe(rows + [row("softmax_01_safe", 4000, 1024, 1.0) | {"ms": bad}], 4000)


def test_series_elements_per_second():
    points = teaching_speed.series(ROWS, "softmax_02_online", 4000, "elements_per_s")
    assert points[:, 0].tolist() == [1024, 4096]
    assert points[0, 1] == pytest.approx(4000 * 1024 / 30e-6)


def test_the_recorded_suite_loads_and_both_chapters_read_one_ratio():
    data = teaching_speed.load()
    common, ratio = teaching_speed.online_over_safe(data["rows"], 4000)
    assert len(common) >= 3 and all(r > 0 for r in ratio)


def run(commit, date, safe_us, online_us, n_cols=1024):
    return {"meta": {"git_commit": commit, "date": date},
            "rows": [row("softmax_01_safe", 4000, n_cols, safe_us / 1e3), row("softmax_02_online", 4000, n_cols, online_us / 1e3)]}


FOLD = {"old": False, "new": True, "newer": True, "lost": None}


def test_fold_time_cost_pairs_the_newest_run_on_each_side():
    runs = [run("new", "2026-12-02", 46.8, 38.8), run("old", "2026-11-29", 21.5, 23.8),
            run("newer", "2026-12-03", 40.0, 35.0)]
    cost = teaching_accuracy.fold_time_cost(runs, has_fold=FOLD.get)
    assert cost["before"]["commit"] == "old" and cost["after"]["commit"] == "newer"
    assert cost["before"]["us"]["softmax_01_safe"] == pytest.approx(21.5)
    assert cost["after"]["us"]["softmax_02_online"] == pytest.approx(35.0)


def test_fold_time_cost_refuses_what_it_cannot_place():
    # only runs with the fold, or a "before" run whose commit git cannot place: no pair
    assert teaching_accuracy.fold_time_cost([run("new", "2026-12-02", 46.8, 38.8)], has_fold=FOLD.get) is None
    assert teaching_accuracy.fold_time_cost([run("lost", "2026-11-29", 21.5, 23.8), run("new", "2026-12-02", 46.8, 38.8)],
                                            has_fold=FOLD.get) is None
    # a run without the asked shape does not count
    assert teaching_accuracy.fold_time_cost([run("old", "2026-11-29", 21.5, 23.8, n_cols=4096),
                                             run("new", "2026-12-02", 46.8, 38.8)], has_fold=FOLD.get) is None
    # a NaN time does not count either
    assert teaching_accuracy.fold_time_cost([run("old", "2026-11-29", math.nan, 23.8),
                                             run("new", "2026-12-02", 46.8, 38.8)], has_fold=FOLD.get) is None
