"""Wrong answers to chapter 05's exercises, each with what the grader must say."""
import numpy as np

from onlinesoftmax import merge, reference
from onlinesoftmax.book.exercises import exercises_logsumexp as el


def logsumexp_rows(x):
    """Chapter 05's solution."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=1)
    base = np.where(m == -np.inf, 0.0, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        return m + np.log(np.exp(x - base[:, None]).sum(axis=1))


def logsumexp_from_minus_1e6(x):
    """The row maximum floored at -1e6 (a state started at -1e6 instead of -inf)."""
    x = np.asarray(x, dtype=np.float64)
    m = np.maximum(x.max(axis=1), -1e6)
    with np.errstate(divide="ignore", invalid="ignore"):
        return m + np.log(np.exp(x - m[:, None]).sum(axis=1))


VISIBLE = {el.logsumexp_cases()[i].args[0].tobytes(): reference.logsumexp(el.logsumexp_cases()[i].args[0])
           for i in range(len(el.logsumexp_cases()))}


def table_of_visible_cases(x):
    """A lookup table of the cases the chapter shows."""
    return VISIBLE.get(np.asarray(x).tobytes(), np.zeros(np.shape(x)[0]))


def probabilities_from_lse(scores, lse):
    """Chapter 05's solution."""
    return np.exp(scores - lse[:, None])


def ignores_lse(scores, lse):
    """Recomputes the softmax from the scores; lse unread."""
    return reference.softmax(scores)


def zeros_like_scores(scores, lse):
    return np.zeros_like(scores)


def writes_nan_into_its_input(scores, lse):
    """Right values, but the scores (and lse) it was given are overwritten with NaN."""
    p = np.exp(scores - lse[:, None])
    scores[...] = np.nan
    lse[...] = np.nan
    return p


def merge_from_minus_1e4(a, b):
    """The merge with the empty state taken as m = -1e4."""
    (m_a, l_a, u_a), (m_b, l_b, u_b) = a, b
    m_a, m_b = max(m_a, -1e4), max(m_b, -1e4)
    m = max(m_a, m_b)
    return m, l_a * np.exp(m_a - m) + l_b * np.exp(m_b - m), u_a * np.exp(m_a - m) + u_b * np.exp(m_b - m)


EXERCISES = {
    "logsumexp_rows": (el.check_logsumexp_rows, logsumexp_rows, [
        (logsumexp_from_minus_1e6, "-1e30"),
        (table_of_visible_cases, "hidden case"),
        (lambda x: logsumexp_rows(x).astype(np.float32) + np.float32(1e-3), "lse[0] is"),
    ]),
    "merge_attention": (el.check_merge_attention, lambda a, b: merge.merge(a, b), [
        (merge_from_minus_1e4, "two masked blocks: m is -10000, expected -inf"),
    ]),
    "probabilities_from_lse": (el.check_probabilities_from_lse, probabilities_from_lse, [
        (ignores_lse, "hint: yours is the softmax of the scores"),
        (zeros_like_scores, "P[0, 0] is 0"),
        (writes_nan_into_its_input, "changed its argument 1 in place"),
    ]),
}
