"""Wrong answers to chapter 10's exercises (the monoid across GPUs), each with what the grader must say."""
import numpy as np

from onlinesoftmax.book.exercises import exercises_distributed as ed

BYTES = {case.args: ed.exchanged_bytes_reference(*case.args) for case in ed.exchanged_bytes_cases()}


def shard_statistics(shard, targets, vocab_start):
    """A right answer: the guarded state per row, t where this rank owns the target."""
    m = shard.max(axis=1)
    base = np.where(m == -np.inf, 0.0, m)
    l = np.exp(shard - base[:, None]).sum(axis=1)
    column = targets - vocab_start
    owned = (column >= 0) & (column < shard.shape[1])
    t = np.where(owned, shard[np.arange(shard.shape[0]), np.clip(column, 0, shard.shape[1] - 1)], 0.0)
    return m, l, t


def merge_records(m, l, t):
    big = m.max(axis=0)
    base = np.where(big == -np.inf, 0.0, big)
    return big, (l * np.exp(m - base)).sum(axis=0), t.sum(axis=0)


def shard_from_minus_1e6(shard, targets, vocab_start):
    m, l, t = shard_statistics(shard, targets, vocab_start)
    floor = np.maximum(m, -1e6)
    return m, np.exp(shard - floor[:, None]).sum(axis=1), t


def merge_from_minus_1e4(m, l, t):
    big = np.maximum(m.max(axis=0), -1e4)
    return m.max(axis=0), (l * np.exp(m - big)).sum(axis=0), t.sum(axis=0)


EXERCISES = {
    "shard_statistics": (ed.check_shard_statistics, shard_statistics, [(shard_from_minus_1e6, "-1e30")]),
    "merge_records": (ed.check_merge_records, merge_records, [(merge_from_minus_1e4, "-1e30")]),
    "fix_merge": (ed.check_fix_merge, merge_records, [(ed.buggy_merge_records, "FAILED on")]),
    "exchanged_bytes": (ed.check_exchanged_bytes, ed.exchanged_bytes_reference, [
        (lambda *args: BYTES.get(args, 0.0), "hidden case"),
    ]),
}
