"""Wrong answers to chapter 08's exercises, each with what the grader must say."""
import numpy as np

from onlinesoftmax.book.exercises import exercises_attention as ea

MEMORY = {case.args: ea.memory_reference(*case.args) for case in ea.memory_cases()}
SPLITS = {case.args[:5]: ea.decode_splits_reference(*case.args) for case in ea.decode_splits_cases(132)}


def fa2_whole_row(scores, values, tiles):
    """The right numbers from the whole row at once: the tiles never read."""
    return ea.row_reference(scores, values, None)


def fa2_from_minus_1e6(scores, values, tiles):
    """The loop with m started at -1e6."""
    m, l, o = -1e6, 0.0, np.zeros(values.shape[1])
    for tile in tiles:
        s, v = scores[tile], values[tile]
        m_new = max(m, s.max())
        alpha, p = np.exp(m - m_new), np.exp(s - m_new)
        l, o, m = alpha * l + p.sum(), alpha * o + p @ v, m_new
    if l == 0.0:
        return np.zeros(values.shape[1]), -np.inf
    return o / l, m + np.log(l)


EXERCISES = {
    "attention_memory": (ea.check_attention_memory, ea.solution_attention_memory, [
        (lambda *shape: MEMORY.get(shape, (0, 0)), "hidden case"),
    ]),
    "fa2_row": (ea.check_fa2_row, ea.solution_fa2_row, [
        (fa2_whole_row, "never read the tiles"),
        (fa2_from_minus_1e6, "-1e30"),
    ]),
    "decode_splits": (ea.check_decode_splits, ea.solution_decode_splits, [
        (lambda *shape: SPLITS.get(shape[:5], (1, 256)), "hidden case"),
    ]),
}
