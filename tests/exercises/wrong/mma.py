"""Wrong answers to chapter 09's Python exercises, each with what the grader must say."""
from onlinesoftmax.book.exercises import exercises_mma as em

EXERCISES = {
    "c_owner": (em.check_c_owner, lambda row, col: tuple(int(v) for v in em.c_owner(row, col)), [
        # returns a value (the lane alone): the grader must say what it returned, not "None"
        (lambda row, col: int(em.c_owner(row, col)[0]), "returned int 0"),
        (lambda row, col: (4 * row + col // 2, col % 2), "FAILED on"),
    ]),
    "p_fragment": (em.check_p_fragment, em.p_fragment_expected, [
        (lambda s, kk: em.p_fragment_expected(s, 0), "FAILED on"),
    ]),
}
