"""Wrong answers to chapter 07's exercise, each with what the grader must say."""
from onlinesoftmax.book.exercises import exercises_topk as et

TABLE = {repr(case.args): et.merge_topk_reference(*case.args) for case in et.merge_topk_cases()}

EXERCISES = {
    "merge_topk": (et.check_merge_topk, et.solution_merge_topk, [
        (lambda a, b, k: TABLE.get(repr((a, b, k)), et.solution_merge_topk(b, a, 0)), "hidden case"),
    ]),
}
