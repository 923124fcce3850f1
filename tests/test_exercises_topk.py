"""The grader of the top-k merge exercise: it passes the solution, agrees with the state of the
whole row, and rejects wrong merges (ties by argument order, no -inf guard, lists not cut to k)."""
import numpy as np
import pytest

from onlinesoftmax import reference
from onlinesoftmax.book.exercises import exercises_topk as ex


def test_the_solution_passes():
    assert ex.check_merge_topk(ex.solution_merge_topk, quiet=True)


@pytest.mark.parametrize("split", [0, 1, 2, 5, 17, 40])
def test_merging_two_parts_gives_the_state_of_the_whole_row(split):
    rng = np.random.default_rng(split)
    row = np.round(rng.standard_normal(40) * 2)            # rounded: many ties
    row[[3, 30]] = -np.inf
    whole = ex.state_of(row, 0, 6)
    for merge in (ex.solution_merge_topk, ex.merge_topk_reference):
        m, l, values, columns = merge(ex.state_of(row[:split], 0, 6), ex.state_of(row[split:], split, 6), 6)
        assert m == whole[0] and abs(l - whole[1]) <= 1e-12 * whole[1]
        np.testing.assert_array_equal(values, whole[2])
        np.testing.assert_array_equal(columns, whole[3])


def _ties_by_argument_order(a, b, k):
    m, l = reference.combine(a[:2], b[:2])
    values, columns = np.concatenate([a[2], b[2]]), np.concatenate([a[3], b[3]])
    keep = np.argsort(-values, kind="stable")[:k]            # equal values: a's before b's
    return m, l, values[keep], columns[keep]


def _no_guard(a, b, k):
    m = max(a[0], b[0])
    l = a[1] * np.exp(a[0] - m) + b[1] * np.exp(b[0] - m)    # -inf - -inf: NaN for two empty parts
    return (m, l) + ex.solution_merge_topk(a, b, k)[2:]


def _not_cut(a, b, k):
    m, l, values, columns = ex.solution_merge_topk(a, b, 2 * k)
    return m, l, values, columns


def _sum_not_rescaled(a, b, k):
    return (max(a[0], b[0]), a[1] + b[1]) + ex.solution_merge_topk(a, b, k)[2:]


@pytest.mark.parametrize("wrong", [_ties_by_argument_order, _no_guard, _not_cut, _sum_not_rescaled])
def test_wrong_merges_are_rejected(wrong, capsys):
    assert not ex.check_merge_topk(wrong)
    assert "FAILED" in capsys.readouterr().out


def test_a_stub_is_rejected(capsys):
    assert not ex.check_merge_topk(lambda a, b, k: None)
    assert "not answered yet" in capsys.readouterr().out


def test_a_part_of_only_minus_infinity_holds_no_mass():
    # The state the grader hands out for [-inf, -inf] is the empty state's (-inf, 0), as the pages
    # define it, not (-inf, NaN): merged with [-inf, 0] it must give the whole row's (0, 1).
    part = ex.state_of([-np.inf, -np.inf], 0, 2)
    assert part[0] == -np.inf and part[1] == 0.0
    m, l, _, _ = ex.merge_topk_reference(part, ex.state_of([-np.inf, 0.0], 2, 2), 2)
    assert (m, l) == (0.0, 1.0) == ex.state_of([-np.inf, -np.inf, -np.inf, 0.0], 0, 2)[:2]


def _guard_by_clearing_empty_parts(a, b, k):
    # Right: a part with m = -inf holds nothing, so its l is taken as 0 before the combine.
    (m_a, l_a), (m_b, l_b) = a[:2], b[:2]
    l_a, l_b = (0.0 if m_a == -np.inf else l_a), (0.0 if m_b == -np.inf else l_b)
    m = max(m_a, m_b)
    base = 0.0 if m == -np.inf else m
    return (m, l_a * np.exp(m_a - base) + l_b * np.exp(m_b - base)) + ex.solution_merge_topk(a, b, k)[2:]


def _nan_for_a_part_of_minus_infinity(a, b, k):
    m, l, values, columns = ex.solution_merge_topk(a, b, k)
    return m, (np.nan if -np.inf in (a[0], b[0]) else l), values, columns


def test_merges_that_treat_parts_of_minus_infinity_as_the_pages_do(capsys):
    assert ex.check_merge_topk(_guard_by_clearing_empty_parts, quiet=True)
    assert not ex.check_merge_topk(_nan_for_a_part_of_minus_infinity)
    assert "FAILED" in capsys.readouterr().out
