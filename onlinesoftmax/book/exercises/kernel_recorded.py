"""What the recorded H200 data say about the timed CUDA exercises, for a reader without a GPU:
the recorded rows of the book's kernels of the same designs (softmax-teaching, softmax-fast) and,
once onlinesoftmax/bench/kernel_exercises.py has been run, of the exercises' own solutions
(suite kernel-exercises). Every line names where it came from; a missing recording says
"not recorded yet".
"""
from __future__ import annotations

from onlinesoftmax.book.exercises.kernel_tasks import SoftmaxRows

TIMED_SHAPE = SoftmaxRows.timed_shape

RECORDED_DESIGNS = {"three_pass_softmax": ("softmax_01_safe", "softmax-teaching"),
                    "online_softmax": ("softmax_02_online", "softmax-teaching"),
                    "row_in_registers": ("softmax_08_registers", "softmax-fast")}


def recorded_row(kernel: str, suite: str) -> tuple[dict | None, dict | None]:
    """(the recorded row of `kernel` at the timed shape in fp32, the file's meta): (None, None) if absent."""
    from onlinesoftmax.measure import results

    try:
        data = results.load_recorded(suite)
    except FileNotFoundError:
        return None, None
    for row in data["rows"]:
        if (row.get("kernel") == kernel and row.get("dtype") == "float32" and row.get("n_rows") == TIMED_SHAPE[0]
                and row.get("n_cols") == TIMED_SHAPE[1] and "fraction_of_copy" in row):
            return row, data["meta"]
    return None, None


def _recorded_lines(kernels) -> str:
    """One line per (kernel, suite, role) as recorded, each with its provenance; a plain 'not recorded yet'."""
    from onlinesoftmax.measure import results

    lines = []
    for kernel, suite, role in kernels:
        row, meta = recorded_row(kernel, suite)
        if row is None:
            lines.append(f"  {kernel} ({role}): not recorded yet")
        else:
            lines.append(f"  {kernel} ({role}): {row['ms'] * 1e3:.1f} us, {row['fraction_of_copy']:.2f} of the copy "
                         f"measured in the same run ({results.provenance(meta)})")
    return "\n".join(lines)


def recorded_expectation(name: str) -> str:
    """What the recorded H200 data say to expect at the timed shape of the copy-ceiling exercise."""
    return (f"What to expect at {TIMED_SHAPE[0]} x {TIMED_SHAPE[1]} fp32 on the recorded H200, the book's kernels, "
            "not yours:\n" + _recorded_lines([("softmax_02_online", "softmax-fast", "two reads, like the starter"),
                                               ("softmax_08_registers", "softmax-fast", "the row held in registers")]))


def recorded_solutions(names) -> str | None:
    """The recorded times of these exercises' own solutions (onlinesoftmax/bench/kernel_exercises.py),
    or None when the suite holds no row for one of them."""
    from onlinesoftmax.measure import results

    try:
        data = results.load_recorded("kernel-exercises")
    except FileNotFoundError:
        return None
    rows = {r["kernel"]: r for r in data["rows"] if r.get("which") == "solution"}
    if not all(n in rows for n in names):
        return None
    return "\n".join(f"  {n} (the solution): {rows[n]['ms'] * 1e3:.1f} us, {rows[n]['fraction_of_copy']:.2f} of the "
                     f"copy measured in the same run" for n in names) + f"\n  ({results.provenance(data['meta'])})"


def recorded_comparison(first: str, second: str) -> str:
    """The recorded times of the two exercises' solutions, else of the book's kernels of the same
    designs (no GPU here)."""
    solutions = recorded_solutions((first, second))
    if solutions:
        return (f"No GPU here: timing your kernels needs one. Recorded at {TIMED_SHAPE[0]} x {TIMED_SHAPE[1]} fp32, "
                "the book's solutions, not yours:\n" + solutions)
    known = [(name, RECORDED_DESIGNS.get(name)) for name in (first, second)]
    lines = _recorded_lines([(design[0], design[1], f"the design of {name}") for name, design in known if design])
    unknown = [name for name, design in known if not design]
    return (f"No GPU here: timing your kernels needs one. Recorded at {TIMED_SHAPE[0]} x {TIMED_SHAPE[1]} fp32, the "
            "book's kernels, not yours:\n" + lines + "".join(f"\n  {name}: no recorded kernel of its design" for name in unknown))
