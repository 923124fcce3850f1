"""Wrong answers to chapter 03's exercise on torch's softmax dispatch, each with what the grader must say."""
from onlinesoftmax.book.exercises import exercises_profile as ep

TABLE = {case.args: ep.torch_softmax_kernel_reference(*case.args) for case in ep.torch_dispatch_cases()}


def newer_torch(n_cols, element_bytes):
    """What torch 2.11 launches on the H200: the register path where the row fits it."""
    accepted = ep.torch_softmax_kernels_accepted(n_cols, element_bytes)
    return accepted[-1]


EXERCISES = {
    "torch_dispatch": (ep.check_torch_dispatch, ep.solution_torch_softmax_kernel, [
        (lambda n, b: TABLE.get((n, b), ep.BLOCK), "hidden case"),   # the hidden N <= 1024 is never BLOCK
    ]),
    "torch_dispatch, the register path": (ep.check_torch_dispatch, newer_torch, []),
}


def _copy_fraction_entry():
    """The copy-fraction exercise, graded on the recorded data: a table of its visible shapes fails."""
    data = ep.load_softmax_fast()
    table = {case.args[1:]: ep.copy_fraction_reference(data, *case.args[1:]) for case in ep.copy_fraction_cases(data)}
    return (lambda fn: ep.check_copy_fraction(fn, data=data), ep.solution_copy_fraction, [
        (lambda d, dtype, n_rows, n_cols: table.get((dtype, n_rows, n_cols), 1.0), "hidden case"),
    ])


EXERCISES["copy_fraction"] = _copy_fraction_entry()
