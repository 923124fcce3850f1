"""The graders of chapter 02's stream exercises accept the recurrence, reject wrong answers with
a message that says what is wrong, and hand the answer a stream it can read only once."""
import numpy as np
import pytest

from onlinesoftmax.book.exercises import exercises_stream as es


def unguarded(values):
    """The recurrence without the -inf guard: NaN once a stream starts with -inf."""
    m, l = -np.inf, 0.0
    for x in values:
        m_new = max(m, x)
        l = l * np.exp(m - m_new) + np.exp(x - m_new)
        m = m_new
    return m, l


def last_maximum(values):
    """Ties go to the last maximum (>= instead of >)."""
    m, l, index = -np.inf, 0.0, -1
    for position, x in enumerate(values):
        if x >= m and x > -np.inf:
            index = position
        m_new = max(m, x)
        if m_new > -np.inf:
            l, m = l * np.exp(m - m_new) + np.exp(x - m_new), m_new
    return m, l, index


def stub(values):
    ...   # the reader's stub


STATE_WRONG = [
    (stub, "not answered yet"),
    (unguarded, "starts with 1 x -inf: l is nan"),
    (lambda values: (max(values),), "expected 2 values (m, l), got 1"),
    (lambda values: len(values), "raised TypeError"),                          # a stream has no len()
    (lambda values: ("m", "l"), "m should be a numpy or cupy array or a number, got str"),
    (lambda values: (np.zeros(2), 0.0), "m has shape (2,), expected ()"),
    (lambda values: es.solution_stream_state(list(values)[:-1]), "raised StreamReadTwice: the stream was gathered"),
    (lambda values: (lambda v: (max(v, default=-np.inf), float(np.exp(v).sum())))(list(values)), "gathered whole"),
    (lambda values: es.solution_stream_state([v for v in values]), "held"),   # gathered by a comprehension
    (lambda values: (lambda v: (max(v, default=-np.inf), 0.0))(values) and es.solution_stream_state(values),
     "no second pass"),
]

ARGMAX_WRONG = [
    (stub, "not answered yet"),
    (es.solution_stream_state, "expected 3 values (m, l, index), got 2"),      # an incomplete tuple
    (last_maximum, "a tie for the maximum: index is 3, expected 1"),
    (lambda values: (*es.solution_stream_state(values), 0), "index is 0, expected 3"),
]


def test_the_solutions_pass(capsys):
    assert es.check_stream_state(es.solution_stream_state)
    assert es.check_stream_argmax(es.solution_stream_argmax)
    assert capsys.readouterr().out.split() == ["stream_state:", "passed", "stream_argmax:", "passed"]


@pytest.mark.parametrize("index", range(len(STATE_WRONG)))
def test_stream_state_rejects_each_wrong_answer(index, capsys):
    answer, message = STATE_WRONG[index]
    assert not es.check_stream_state(answer)
    out = capsys.readouterr().out
    assert message in out and "passed" not in out, out


@pytest.mark.parametrize("index", range(len(ARGMAX_WRONG)))
def test_stream_argmax_rejects_each_wrong_answer(index, capsys):
    answer, message = ARGMAX_WRONG[index]
    assert not es.check_stream_argmax(answer)
    out = capsys.readouterr().out
    assert message in out and "passed" not in out, out


def test_the_answer_gets_a_stream_it_cannot_read_twice():
    def two_passes(values):
        m = max(values, default=-np.inf)
        return m, sum(np.exp(x - m) for x in values)   # the iterator is spent: the sum is 0
    assert not es.check_stream_state(two_passes, quiet=True)


def test_the_edge_matrix_holds_leading_and_all_neg_inf_rows():
    names = [case.name for case in es.stream_cases()]
    assert any("starts with 1 x -inf" in n for n in names) and any("starts with 300 x -inf" in n for n in names)
    assert "a stream of only -inf" in names and "an empty stream" in names
    assert es.stream_argmax_reference(np.full(3, -np.inf)) == (-np.inf, 0.0, -1)
