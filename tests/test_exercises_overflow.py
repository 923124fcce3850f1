"""The grader of chapter 01's overflow exercise accepts the right prediction, rejects wrong ones
with a message that says what is wrong, and its measurement agrees with the formula."""
import numpy as np
import pytest

from onlinesoftmax.book.exercises import exercises_overflow as eo


def not_answered(dtype, n_cols):
    ...   # the reader's stub


WRONG = [   # a wrong answer, and what the grader must say about it
    (not_answered, "not answered yet"),
    (lambda dtype, n_cols: "88.7", "should be a numpy or cupy array or a number, got str"),
    (lambda dtype, n_cols: (88.7, 11.1), "expected 1 value (a), got 2"),
    (lambda dtype, n_cols: np.full(2, 88.7), "has shape (2,), expected ()"),
    (lambda dtype, n_cols: float(np.finfo(dtype).max), "that is the largest value itself"),
    (lambda dtype, n_cols: np.log10(float(np.finfo(dtype).max)), "that is log10"),
    (lambda dtype, n_cols: np.log(float(np.finfo(dtype).max)), "with N equal terms"),   # forgets ln N
    (lambda dtype, n_cols: 88.72, "a is 88.72, expected 11.0898"),                      # fp32 for fp16
    (lambda dtype, n_cols: 1 / 0, "raised ZeroDivisionError"),
    (lambda dtype, n_cols: float(np.log(np.finfo(dtype).max) - np.log(dtype(n_cols))),
     "FAILED on float16, N = 1000000"),                                                # N in the format: inf
    (lambda dtype, n_cols: float(np.log(float(np.finfo(dtype).max) // n_cols)),
     "FAILED on float16, N = 1000000"),                                                # integer division: log 0
    (lambda dtype, n_cols: float(np.log(float(np.finfo(dtype).max)) - np.log(max(n_cols - 1, 1))),
     "FAILED on float32, N = 7"),                                                      # off by one
]


def test_the_solution_passes(capsys):
    assert eo.check_overflow_logit(eo.solution_overflow_logit)
    assert capsys.readouterr().out.strip() == "overflow_logit: passed"


def test_a_typed_prediction_to_two_decimals_passes():
    typed = {("float32", 1): 88.72, ("float16", 1): 11.09, ("float32", 7): 86.78, ("float32", 1000): 81.82,
             ("float32", 1000000): 74.91, ("float16", 1000): 4.18, ("float16", 1000000): -2.72}
    def prediction(dtype, n_cols):   # the visible cases typed in; the hidden ones rounded the same way
        key = (np.dtype(dtype).name, n_cols)
        return typed[key] if key in typed else round(eo.overflow_logit_reference(dtype, n_cols), 2)
    assert eo.check_overflow_logit(prediction, quiet=True)


def test_a_table_of_the_visible_cases_fails():
    typed = {("float32", 1): 88.72, ("float16", 1): 11.09, ("float32", 1000): 81.82,
             ("float32", 1000000): 74.91, ("float16", 1000): 4.18}
    assert not eo.check_overflow_logit(lambda dtype, n_cols: typed.get((np.dtype(dtype).name, n_cols), 0.0),
                                       quiet=True)


@pytest.mark.parametrize("index", range(len(WRONG)))
def test_each_wrong_answer_is_rejected_with_its_reason(index, capsys):
    answer, message = WRONG[index]
    assert not eo.check_overflow_logit(answer)
    out = capsys.readouterr().out
    assert message in out and "passed" not in out, out


@pytest.mark.parametrize("dtype, n_cols", [(np.float32, 1), (np.float16, 1), (np.float32, 1000), (np.float16, 1000)])
def test_the_naive_softmax_breaks_where_the_formula_says(dtype, n_cols):
    def naive(x):
        e = np.exp(x)
        return e / e.sum(axis=1, keepdims=True, dtype=x.dtype)
    measured = eo.measured_overflow_logit(naive, dtype, n_cols)
    assert abs(measured - eo.overflow_logit_reference(dtype, n_cols)) < 0.01
