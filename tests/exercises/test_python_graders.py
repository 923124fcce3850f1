"""Every Python exercise's grader accepts its official solution and rejects the wrong answers kept
in tests/exercises/wrong/ (one module per chapter's exercises), each with the message it must
print. The wrong answers are the ones that beat earlier graders: lookup tables of the visible cases,
"streaming" answers that gather the stream, states started at -1e4 or -1e6 instead of -inf, splits
that never split or compute in float64, answers that ignore lse, return zeros or write into their
inputs."""
import importlib

import numpy as np
import pytest

from onlinesoftmax.book.exercises import grading

MODULES = ["stream", "logsumexp", "monoid", "attention", "distributed", "overflow", "mma", "profile", "topk"]
EXERCISES = {name: entry for module in MODULES
             for name, entry in importlib.import_module(f"tests.exercises.wrong.{module}").EXERCISES.items()}
WRONG = [(name, index) for name, (_, _, wrong) in EXERCISES.items() for index in range(len(wrong))]


@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_official_solution_passes(name, capsys):
    check, right, _ = EXERCISES[name]
    for _ in range(2):   # fresh hidden cases each time
        assert check(right), capsys.readouterr().out
    assert capsys.readouterr().out.strip().endswith("passed")


@pytest.mark.parametrize("name, index", WRONG)
def test_each_wrong_answer_is_rejected_with_its_reason(name, index, capsys):
    check, _, wrong = EXERCISES[name]
    answer, message = wrong[index]
    assert not check(answer)
    out = capsys.readouterr().out
    assert "FAILED" in out and message in out and "passed" not in out, out


def test_every_exercise_has_a_difficulty():
    names = {name.split(",")[0] for name in EXERCISES} | {"swizzle", "copy_fraction"}
    assert names <= set(grading.DIFFICULTY)
    assert set(grading.DIFFICULTY.values()) <= {grading.WARM_UP, grading.CORE, grading.CHALLENGE}


def test_a_mismatch_prints_the_digits_where_the_values_differ(capsys):
    assert grading.differing(1.0 + 2e-16, 1.0) == ("1.0000000000000002", "1")
    assert grading.differing(0.1234567891, 0.1234567892) == ("0.1234567891", "0.1234567892")
    from onlinesoftmax.book.exercises import exercises_monoid as em

    def a_hair_off(m, l):   # off by 1e-11 relative: a nine-digit print would show the same number twice
        m_out, l_out = em.solution_merge_partials(m, l)
        return m_out, l_out * (1 + 1e-11)
    assert not em.check_merge_partials(a_hair_off)
    line = capsys.readouterr().out.splitlines()[0]
    yours, expected = line.split(" is ")[1].split(", expected ")
    assert float(yours) != float(expected) and yours != expected, line


def test_a_malformed_answer_is_described_as_what_it_returned(capsys):
    from onlinesoftmax.book.exercises import exercises_mma as em
    assert not em.check_c_owner(lambda row, col: [1, 2, 3])
    out = capsys.readouterr().out
    assert "returned a list of 3 values" in out and "None" not in out and "not answered" not in out, out


def test_the_answer_gets_fresh_buffers_and_never_the_expected_ones():
    from onlinesoftmax.book.exercises import exercises_logsumexp as el
    seen = []

    def keeps_everything(x):   # holds every input it is given, so no id can be reused
        seen.append(x)
        return np.full(x.shape[0], np.nan)

    el.check_logsumexp_rows(keeps_everything, quiet=True)
    el.check_logsumexp_rows(keeps_everything, quiet=True)
    visible = [case.args[0] for case in el.logsumexp_cases()]
    assert len({id(x) for x in seen}) == len(seen) == 2
    assert not any(x is v or np.shares_memory(x, v) for x in seen for v in visible)


def test_hidden_cases_change_from_one_grading_to_the_next():
    from onlinesoftmax.book.exercises import exercises_stream as es
    shown = []

    def records(values):
        row = []
        for x in values:
            row.append(x)
        shown.append(row)
        return es.solution_stream_state(iter(row))

    es.check_stream_state(records, quiet=True)
    first = [tuple(r) for r in shown]
    shown.clear()
    es.check_stream_state(records, quiet=True)
    second = [tuple(r) for r in shown]
    assert first[:len(es.stream_cases())] == second[:len(es.stream_cases())]   # the visible cases
    assert first[len(es.stream_cases()):] != second[len(es.stream_cases()):]   # the hidden ones


def test_a_hidden_width_is_never_a_visible_one():
    rng = np.random.default_rng(0)
    shown = set(range(2, 30))
    widths = [grading.width_not_shown(rng, 2, 40, shown) for _ in range(500)]
    assert not shown & set(widths) and set(widths) == set(range(30, 40))
