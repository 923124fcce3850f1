"""Wrong answers to chapter 04's exercises, each with what the grader must say."""
import numpy as np

from onlinesoftmax import reference
from onlinesoftmax.book.exercises import exercises_monoid as em


def merge_from_minus_1e4(m_parts, l_parts):
    """The fold of the partial states started at (-1e4, 0) instead of (-inf, 0)."""
    m_out, l_out = [], []
    for m_row, l_row in zip(m_parts, l_parts):
        m, l = -1e4, 0.0
        for m_k, l_k in zip(m_row, l_row):
            m_new = max(m, m_k)
            l = l * np.exp(m - m_new) + l_k * np.exp(m_k - m_new)
            m = m_new
        m_out.append(m if l > 0 else -np.inf)
        l_out.append(l)
    return np.array(m_out), np.array(l_out)


def whole_row(x, blocks_per_row):
    """No split at all: the softmax of the whole row, in float32."""
    return reference.softmax(x).astype(np.float32)


def in_float64(x, blocks_per_row):
    """Splits, but returns float64."""
    return em.solution_split_softmax(x, blocks_per_row).astype(np.float64)


def zeros(x, blocks_per_row):
    """Every value ~1/N is within a fixed absolute tolerance of 0 on long rows."""
    return np.zeros(np.shape(x), np.float32) + 0 * blocks_per_row


def split_from_minus_1e6(x, blocks_per_row):
    """The chunks' states started at -1e6: wrong for rows below it."""
    x = np.asarray(x, np.float32)
    chunk = -(-x.shape[1] // blocks_per_row)
    m = np.full(x.shape[0], -1e6)
    for k in range(blocks_per_row):
        part = x[:, k * chunk:(k + 1) * chunk].astype(np.float64)
        if part.shape[1]:
            m = np.maximum(m, part.max(axis=1))
    with np.errstate(all="ignore"):
        e = np.exp(x - m[:, None])
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


EXERCISES = {
    "merge_partials": (em.check_merge_partials, em.solution_merge_partials, [
        (merge_from_minus_1e4, "m[4] is -inf, expected -1e+30"),
    ]),
    "split_softmax": (em.check_split_softmax, em.solution_split_softmax, [
        (whole_row, "never used blocks_per_row"),
        (in_float64, "has dtype float64"),
        (zeros, "softmax[0, 0] is 0"),
        (split_from_minus_1e6, "-1e30"),
    ]),
}
