"""Chapter 02's "row x" box: the recurrence set beside its definition, step by step (CPU tier)."""
import numpy as np
import pytest

from onlinesoftmax import reference
from onlinesoftmax.book.widgets import widgets_steps


@pytest.mark.parametrize("row, final", [
    ("-inf, 3, 1, -inf, 5", (5.0, 1.0 + np.exp(-2.0) + np.exp(-4.0))),
    ("-inf, -inf, 1", (1.0, 1.0)),
    ("3, 1, -inf, 5", (5.0, 1.0 + np.exp(-2.0) + np.exp(-4.0))),   # chapter 02, exercise 1
    ("-inf", (-np.inf, 0.0)),
])
def test_rows_with_minus_infinity_agree_with_the_definition(row, final):
    shown = widgets_steps.show_steps(row)
    assert shown["mismatches"] == []
    assert shown["final"][0] == final[0] and np.isclose(shown["final"][1], final[1], rtol=1e-14)
    values = widgets_steps.parse_numbers(row)
    leading = len(values) - len(np.trim_zeros(np.isfinite(values).astype(int), "f")) if -np.inf in values else 0
    for step in shown["steps"][1:leading + 1]:   # the all -inf prefix is the empty state
        assert (step["m"], step["l"]) == (-np.inf, 0.0) and (step["m_def"], step["l_def"]) == (-np.inf, 0.0)


def test_the_definition_of_an_all_minus_infinity_prefix_is_the_empty_state():
    # reference.row_stats gives NaN there (the unguarded arithmetic); the box must not
    m, l = reference.row_stats(np.array([-np.inf, -np.inf]))
    assert m[0] == -np.inf and np.isnan(l[0])
    assert widgets_steps.state_by_definition([-np.inf, -np.inf]) == (-np.inf, 0.0)
    assert widgets_steps.state_by_definition([]) == (-np.inf, 0.0)


def wrong_rescale(x):
    """A recurrence that forgets the rescale when the maximum moves (l + e^(x - m))."""
    m, l = -np.inf, 0.0
    steps = [{"n": 0, "x": None, "m": m, "rescale": None, "l": l}]
    for n, xn in enumerate(x, start=1):
        m = max(m, xn)
        l = l + float(np.exp(xn - m))
        steps.append({"n": n, "x": xn, "m": m, "rescale": 1.0, "l": l})
    return steps


def test_a_wrong_recurrence_is_flagged():
    shown = widgets_steps.show_steps("1, 5, 3", recurrence=wrong_rescale)
    assert shown["mismatches"] == [2, 3]
    assert "MISMATCH at n = 2" in shown["message"]


def test_a_wrong_state_at_one_step_is_flagged():
    steps = reference.online_steps([-np.inf, 1.0, 2.0])
    steps[1] = {**steps[1], "l": float("nan")}   # what the unguarded kernel computes at n = 1
    compared, _, mismatches = widgets_steps.step_table([-np.inf, 1.0, 2.0], steps=steps)
    assert mismatches == [1] and not compared[1]["agrees"] and compared[2]["agrees"]


def test_text_that_is_not_a_row_is_refused(capsys):
    assert widgets_steps.show_steps("1, x") is None
    assert widgets_steps.show_steps("1, nan") is None
    assert widgets_steps.show_steps("") is None
    assert "Type" in capsys.readouterr().out


def test_the_box_builds():
    pytest.importorskip("ipywidgets")
    box = widgets_steps.row_steps_box("-inf, 2")
    assert box.children[0].value == "-inf, 2"
