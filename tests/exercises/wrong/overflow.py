"""Wrong answers to chapter 01's exercise, each with what the grader must say."""
import numpy as np

from onlinesoftmax.book.exercises import exercises_overflow as eo

TABLE = {case.args: eo.overflow_logit_reference(*case.args) for case in eo.overflow_logit_cases()}

EXERCISES = {
    "overflow_logit": (eo.check_overflow_logit, eo.solution_overflow_logit, [
        (lambda dtype, n_cols: TABLE.get((dtype, n_cols), 0.0), "hidden case"),
        (lambda dtype, n_cols: float(np.log(float(np.finfo(dtype).max))), "a is"),
    ]),
}
