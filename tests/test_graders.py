"""Every grader of the book's exercises rejects wrong answers with a message that says what is
wrong, and accepts the right ones (onlinesoftmax/book/grading.py and the exercises' modules)."""
import numpy as np
import pytest

from onlinesoftmax import merge, reference
from onlinesoftmax.book import exercises_logsumexp as el
from onlinesoftmax.book import exercises_monoid as em
from onlinesoftmax.book import grading


def merge_partials_right(m, l):
    return em.merge_partials_reference(m, l)


def split_softmax_right(x, blocks):
    return reference.softmax(x).astype(np.float32)


def logsumexp_right(x):
    return reference.logsumexp(x)


def probabilities_right(scores, lse):
    return np.exp(scores - lse[:, None])


GRADERS = {   # grader, a right answer, wrong answers with the message each must produce
    "merge_partials": (em.check_merge_partials, merge_partials_right, [
        (lambda m, l: (m.max(1),), "expected 2 values (m, l), got 1"),
        (lambda m, l: None, "not answered yet"),
        (lambda m, l: (m.max(1)[:, None], l.sum(1)), "extra axis of length 1"),
        (lambda m, l: (m.max(1), l.sum(1)), "l["),            # forgets the rescaling: values differ
        (lambda m, l: (m.max(1), (l * np.exp(m - m.max(1))).sum(1)), "raised ValueError"),   # no [:, None]
        (lambda m, l: ("m", "l"), "should be a numpy or cupy array"),
    ]),
    "split_softmax": (em.check_split_softmax, split_softmax_right, [
        (lambda x, b: reference.softmax(x).T, "transposed"),
        (lambda x, b: reference.softmax(x)[:, :-1], "has shape"),
        (lambda x, b: np.exp(x) / np.exp(x).sum(1, keepdims=True), "softmax["),   # overflow on big rows
        (lambda x, b: reference.softmax(x).astype(np.float16), "softmax[0, 0]"),  # rounded to fp16
    ]),
    "logsumexp_rows": (el.check_logsumexp_rows, logsumexp_right, [
        (lambda x: reference.logsumexp(x)[:, None], "extra axis of length 1"),
        (lambda x: np.log(np.exp(x.astype(np.float64)).sum(1)), "lse[0] is inf"),
        (lambda x: x.max(1), "lse[0]"),
        (lambda x: reference.logsumexp(x)[None, :], "has shape (1, 1)"),
    ]),
    "merge_attention": (el.check_merge_attention, merge.merge, [
        (lambda a, b: merge.merge(a, b)[:2], "expected 3 values (m, l, u), got 2"),   # leaves out u
        (lambda a, b: (max(a[0], b[0]), a[1] + b[1], a[2] + b[2]), "l is"),            # no rescaling
        (lambda a, b: None, "not answered yet"),
    ]),
    "probabilities_from_lse": (el.check_probabilities_from_lse, probabilities_right, [
        (lambda s, lse: np.exp(s - lse), "raised ValueError"),
        (lambda s, lse: np.exp(s - lse[:, None]).T, "transposed"),
        (lambda s, lse: np.exp(s - s.max(1, keepdims=True)), "P[0, "),   # forgets the sum
    ]),
}


@pytest.mark.parametrize("exercise", GRADERS)
def test_the_right_answer_passes(exercise, capsys):
    check, right, _ = GRADERS[exercise]
    assert check(right)
    assert capsys.readouterr().out.strip().endswith(f"{exercise}: passed")


@pytest.mark.parametrize("exercise, index", [(e, i) for e, (_, _, wrong) in GRADERS.items() for i in range(len(wrong))])
def test_each_wrong_answer_is_rejected_with_its_reason(exercise, index, capsys):
    check, _, wrong = GRADERS[exercise]
    answer, message = wrong[index]
    assert not check(answer)
    out = capsys.readouterr().out
    verdict = "not answered yet" if message == "not answered yet" else "FAILED"   # a stub is not a failure
    assert f"{exercise}: {verdict}" in out and message in out, out
    assert "passed" not in out


def test_a_wrong_row_is_quoted_with_its_input_row(capsys):
    def off_in_one_row(x, blocks):
        y = reference.softmax(x).astype(np.float32)
        if x.shape == (5, 1000):
            y[3, 7] += 0.01
        return y
    assert not em.check_split_softmax(off_in_one_row)
    out = capsys.readouterr().out
    assert "softmax[3, 7]" in out and "yours:" in out and "expected:" in out and "input row 3:" in out


def test_the_grader_does_not_let_the_answer_change_its_cases():
    def destructive(m, l):
        result = em.merge_partials_reference(m, l)
        m[...] = 0.0   # writes into its input
        return result
    assert em.check_merge_partials(destructive)
    assert em.check_merge_partials(merge_partials_right)


def test_form_and_mismatch_helpers():
    assert grading.form_problem((np.zeros(3),), (np.zeros(3),), ("a",)) is None
    assert "tuple" in grading.form_problem(np.zeros(3), (np.zeros(3), np.zeros(3)), ("a", "b"))
    assert grading.first_mismatch(np.array([1.0, np.nan]), np.array([1.0, np.nan]), grading.Tolerance()) is None
    assert grading.first_mismatch(np.array([1.0, 2.0]), np.array([1.0, np.nan]), grading.Tolerance()) == (1,)
    assert grading.first_mismatch(np.array([np.inf]), np.array([-np.inf]), grading.Tolerance()) == (0,)
