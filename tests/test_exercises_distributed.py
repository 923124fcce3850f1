"""CPU tier: the graders of chapter 10 accept the solutions and reject wrong answers."""
import numpy as np

from onlinesoftmax.book.exercises import exercises_distributed as ex


def statistics(shard, targets, vocab_start):
    x = np.asarray(shard, dtype=np.float64)
    m = x.max(axis=1)
    base = np.where(m == -np.inf, 0.0, m)
    l = np.exp(x - base[:, None]).sum(axis=1)
    column = np.asarray(targets) - vocab_start
    owned = (column >= 0) & (column < x.shape[1])
    t = np.where(owned, x[np.arange(len(x)), np.clip(column, 0, x.shape[1] - 1)], 0.0)
    return m, l, t


def statistics_without_guard(shard, targets, vocab_start):
    m, _, t = statistics(shard, targets, vocab_start)
    with np.errstate(invalid="ignore"):
        return m, np.exp(np.asarray(shard, np.float64) - m[:, None]).sum(axis=1), t


def statistics_target_unshifted(shard, targets, vocab_start):
    return statistics(shard, np.asarray(targets) + vocab_start, vocab_start)


def statistics_without_max(shard, targets, vocab_start):
    _, l, t = statistics(shard, targets, vocab_start)
    with np.errstate(over="ignore"):
        return np.zeros(len(l)), np.exp(np.asarray(shard, np.float64)).sum(axis=1), t


def merge(m, l, t):
    big = m.max(axis=0)
    base = np.where(big == -np.inf, 0.0, big)
    return big, (l * np.exp(m - base)).sum(axis=0), t.sum(axis=0)


def merge_without_guard(m, l, t):
    big = m.max(axis=0)
    with np.errstate(invalid="ignore"):
        return big, (l * np.exp(m - big)).sum(axis=0), t.sum(axis=0)


def merge_taking_the_owner_max(m, l, t):
    big, total, tt = merge(m, l, t)
    return big, total, t.max(axis=0)


def test_statistics_grader():
    assert ex.check_shard_statistics(statistics)
    for wrong in (statistics_without_guard, statistics_target_unshifted, statistics_without_max):
        assert not ex.check_shard_statistics(wrong), wrong.__name__
    assert not ex.check_shard_statistics(lambda *a: None)


def test_merge_and_fix_graders(capsys):
    assert ex.check_merge_records(merge) and ex.check_fix_merge(merge)
    assert not ex.check_fix_merge(ex.buggy_merge_records)
    assert "fix_merge: FAILED" in capsys.readouterr().out
    for wrong in (merge_without_guard, merge_taking_the_owner_max):
        assert not ex.check_merge_records(wrong), wrong.__name__
    assert not ex.check_merge_records(lambda m, l, t: (m.max(axis=0), l.sum(axis=0)))   # two values of three


def bytes_per_row(schedule, ranks, planes):
    step = 2 * (ranks - 1) / ranks
    return step * 4 + step * 4 * (planes - 1) if schedule == "megatron" else (ranks - 1) * 4 * planes


def test_bytes_grader():
    assert ex.check_exchanged_bytes(bytes_per_row)
    assert not ex.check_exchanged_bytes(lambda s, r, p: 4 * p)                    # the payload, not the wire
    assert not ex.check_exchanged_bytes(lambda s, r, p: r * 4 * p)                # every record, own included
    assert not ex.check_exchanged_bytes(lambda s, r, p: 2 * 4 * p if s == "megatron" else (r - 1) * 4 * p)
