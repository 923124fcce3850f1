"""The public cross-entropy call's two steps on a GPU (cross_entropy_01_rows_targets and _reduce,
entries of cross_entropy_01_rows.cu, launched by onlinesoftmax/loss.py around either row kernel), their
sources on the CPU emulator against NumPy: the targets cleaned, counted and flagged, the loss reduced;
and sources changed into wrong ones, which the same checks reject."""
import math

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax.kernels.cross_entropy import rows as kce

VARIANT = osm.REGISTRY["cross_entropy_01_rows"]


def module_of(source=None):
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    return emulator.Module(VARIANT.path, list(kce.STEPS), source=source)


@pytest.fixture(scope="module")
def steps():
    return module_of()


def targets_step(module, t, n_classes, ignore_index, mean):
    n = len(t)
    clean, counts, scale = np.full(n, 7777, np.int64), np.full(2, -1, np.int64), np.full(1, np.nan, np.float32)
    module.launch(kce.STEPS[0], (1,), (kce.step_threads(n),),
                  (np.ascontiguousarray(t, np.int64), clean, np.int64(n), np.int64(n_classes), np.int64(ignore_index),
                   np.int32(mean), counts, scale))
    return clean, counts, scale


def reduce_step(module, rows, t, n_classes, ignore_index, mark_outside, reduce, counted):
    rows = rows.copy()
    loss = np.full(1, -12345.0, np.float32)   # poisoned: a sum the step never wrote is seen
    module.launch(kce.STEPS[1], (1,), (kce.step_threads(len(rows)),),
                  (rows, np.ascontiguousarray(t, np.int64), np.int64(len(rows)), np.int64(n_classes),
                   np.int64(ignore_index), np.int32(mark_outside), np.int32(reduce), np.array([counted, 0], np.int64),
                   loss))
    return rows, loss[0]


def cases():
    """(targets, n_classes, ignore_index): in range, ignored, negative, too large, ignore_index a class."""
    rng = np.random.default_rng(7)
    for n_rows, ignore_index in ((1, -100), (5, -100), (33, 0), (1500, -100)):
        t = rng.integers(-3, 12, n_rows)
        t[rng.random(n_rows) < 0.2] = ignore_index
        yield t, 10, ignore_index
    yield np.full(40, -100), 10, -100            # every row ignored: nothing counted, a scale of 1
    yield np.array([9, 10, -1, 2**40]), 10, -100  # the edges of [0, V)


def expected_targets(t, n_classes, ignore_index, mean):
    outside = (t != ignore_index) & ((t < 0) | (t >= n_classes))
    counted = int(((t != ignore_index) & ~outside).sum())
    scale = np.float32(1) / np.float32(max(counted, 1)) if mean else np.float32(1)
    return np.where(outside, ignore_index, t), np.array([counted, int(outside.any())]), np.float32(scale)


def check_targets_step(module):
    """(passed, message) of the targets step over every case, for a mean and a sum."""
    for t, n_classes, ignore_index in cases():
        for mean in (1, 0):
            clean, counts, scale = targets_step(module, t, n_classes, ignore_index, mean)
            want_clean, want_counts, want_scale = expected_targets(t, n_classes, ignore_index, mean)
            if not np.array_equal(clean, want_clean):
                return False, f"{len(t)} rows: clean targets {clean[:8]} where {want_clean[:8]}"
            if not np.array_equal(counts, want_counts):
                return False, f"{len(t)} rows: counts {counts} where {want_counts}"
            if scale[0] != want_scale:
                return False, f"{len(t)} rows, mean {mean}: scale {scale[0]} where {want_scale}"
    return True, ""


def check_reduce_step(module):
    """(passed, message) of the reduce step: rows of mixed magnitudes, each reduction, with and
    without the outside rows marked."""
    rng = np.random.default_rng(11)
    # and one thread's rows 1e8, 1, -1e8, 1 (threads 1024 apart): a float32 running sum keeps 1 of the 2
    cancelling = np.repeat(np.array([1e8, 1, -1e8, 1], np.float32), 1024)
    for t, n_classes, ignore_index in [*cases(), (np.zeros(4096, np.int64), 10, -100)]:
        n = len(t)
        rows = cancelling if n == 4096 else (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 6, n)).astype(np.float32)
        outside = (t != ignore_index) & ((t < 0) | (t >= n_classes))
        counted = int(((t != ignore_index) & ~outside).sum())
        for mark in (0, 1):
            marked = np.where(outside & bool(mark), np.float32(np.nan), rows)
            for reduce in (0, 1, 2):
                got_rows, loss = reduce_step(module, rows, t, n_classes, ignore_index, mark, reduce, counted)
                if not np.array_equal(got_rows, marked, equal_nan=True):
                    return False, f"{n} rows, mark {mark}: rows {got_rows[:6]} where {marked[:6]}"
                if reduce == 0:
                    if loss != np.float32(-12345.0):
                        return False, "reduction none wrote a loss"
                    continue
                total = math.fsum(marked.astype(np.float64)) if not np.isnan(marked).any() else math.nan
                want = np.float32(total / counted if reduce == 2 and counted else
                                  math.nan if reduce == 2 and total == 0 else total if reduce == 1 else
                                  math.copysign(math.inf, total))
                if not (np.isnan(want) and np.isnan(loss)) and abs(float(loss) - float(want)) > \
                        2 * np.spacing(np.float32(abs(want))):
                    return False, f"{n} rows, mark {mark}, reduce {reduce}: loss {loss} where {want}"
    return True, ""


def test_the_targets_step_cleans_counts_and_flags(steps):
    passed, message = check_targets_step(steps)
    assert passed, message


def test_the_reduce_step_sums_in_order_and_marks_the_outside_rows(steps):
    passed, message = check_reduce_step(steps)
    assert passed, message


@pytest.mark.parametrize("change, check", [
    (("counted += (!bad && t != ignore_index) ? 1 : 0;", "counted += (t != ignore_index) ? 1 : 0;"),
     check_targets_step),                                  # an outside row counted in the mean
    (("clean[i] = bad ? ignore_index : t;", "clean[i] = t;"), check_targets_step),   # an outside target kept
    (("(total > 1 ? total : 1)", "(total > 0 ? total + 1 : 1)"), check_targets_step),   # 1 / (n + 1)
    (("if (mark_outside) {", "if (0) {"), check_reduce_step),   # outside rows never NaN
    (("total / (double)counts[0]", "total / (double)n_rows"), check_reduce_step),   # a mean over every row
    (("sum += (double)value;", "sum = (double)((float)sum + value);"), check_reduce_step),   # a float32 sum
])
def test_the_checks_reject_wrong_steps(change, check):
    from onlinesoftmax.runtime.loader import expand_source

    source = expand_source(VARIANT.path)[0]
    assert change[0] in source
    passed, _ = check(module_of(source.replace(*change)))
    assert not passed, f"{change[1]!r} passed"
