"""Wrong answers to chapter 02's stream exercises, each with what the grader must say."""
import numpy as np

from onlinesoftmax.book.exercises import exercises_stream as es


def gathers_with_list(values):
    """Reads the whole stream into a list first."""
    values = list(values)
    m = max(values, default=-np.inf)
    return m, float(np.exp(np.array(values) - m).sum()) if m > -np.inf else 0.0


def asks_for_len(values):
    """Asks the stream for its length."""
    n = len(values)
    return es.solution_stream_state(values) if n else (-np.inf, 0.0)


def reads_twice(values):
    """Two passes: the maximum, then the sum."""
    m = max(values)
    return m, sum(np.exp(x - m) for x in values)


def gathers_in_a_comprehension(values):
    """A comprehension gathers every value without asking for a length."""
    kept = [x for x in values]
    return es.solution_stream_state(iter(kept))


def starts_at_minus_1e6(values):
    """The state starts at -1e6 instead of -inf: wrong once every value lies below it."""
    m, l = -1e6, 0.0
    for x in values:
        m_new = max(m, x)
        l = l * np.exp(m - m_new) + np.exp(x - m_new)
        m = m_new
    return (m, l) if l > 0 else (-np.inf, 0.0)


def starts_at_minus_1e4(values):
    m, l = -1e4, 0.0
    for x in values:
        m_new = max(m, x)
        l = l * np.exp(m - m_new) + np.exp(x - m_new)
        m = m_new
    return (m, l) if l > 0 else (-np.inf, 0.0)


EXERCISES = {
    "stream_state": (es.check_stream_state, es.solution_stream_state, [
        (gathers_with_list, "gathered whole"),
        (asks_for_len, "no len()"),
        (reads_twice, "no second pass"),
        (gathers_in_a_comprehension, "KiB at once"),
        (starts_at_minus_1e6, "-1e30"),
        (starts_at_minus_1e4, "FAILED on"),
    ]),
    "stream_argmax": (es.check_stream_argmax, es.solution_stream_argmax, [
        (lambda values: (lambda v: (*es.solution_stream_state(iter(v)), int(np.argmax(v)) if v else -1))(list(values)),
         "gathered whole"),
    ]),
}
