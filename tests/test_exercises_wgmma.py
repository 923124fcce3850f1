"""CPU tier: the grader of the Hopper page's descriptor exercise accepts the kernels' descriptor (and
one with any leading offset, which a K-major operand does not read) and rejects the wrong ones a
reader writes: the 64-column blocks forgotten, the 8-row groups 512 bytes apart, no swizzle bits, the
byte offset of k0 given in elements, a start that ignores k0, bits set outside the four fields, a stub, something not an integer."""
from onlinesoftmax.book.exercises import exercises_wgmma as x
from onlinesoftmax.kernels.attention import wgmma_layout as wl


def right(base, rows, k0):
    return wl.k_major_descriptor(base, rows, k0)


def test_the_kernels_descriptor_passes_and_the_leading_offset_is_free():
    assert x.check_k_step_descriptor(right)
    assert x.check_k_step_descriptor(lambda b, r, k0: right(b, r, k0) | (77 << 16))


WRONG = {
    "blocks forgotten": lambda b, r, k0: wl.descriptor(b + 2 * k0, 0, 1024),
    "groups 512 apart": lambda b, r, k0: wl.descriptor(b + (k0 // 64) * r * 128 + 2 * (k0 % 64), 0, 512),
    "no swizzle": lambda b, r, k0: right(b, r, k0) & ~(3 << 62),
    "k0 in elements": lambda b, r, k0: wl.descriptor(b + (k0 // 64) * r * 128 + (k0 % 64), 0, 1024),
    "k0 ignored": lambda b, r, k0: wl.descriptor(b, 0, 1024),
    "not an integer": lambda b, r, k0: float(right(b, r, k0)),
    "base-offset bits set": lambda b, r, k0: right(b, r, k0) | (5 << 49),
    "a bit between the fields": lambda b, r, k0: right(b, r, k0) | (1 << 15),
}


def test_wrong_descriptors_are_rejected():
    for name, fn in WRONG.items():
        assert not x.check_k_step_descriptor(fn, quiet=True), name
        assert x.descriptor_problem(fn, seed=3) is not None, name
    assert not x.check_k_step_descriptor(lambda b, r, k0: None)


def test_every_grading_reaches_past_the_first_block():
    """Seed 404 drew 12 cases with k0 < 64, where a descriptor that forgets the 64-column blocks reads
    the right elements: the grader passed it (about one grading in 600). Every grading now has a case
    with k0 >= 64."""
    for seed in (404, 555, 603, 1451, 2184):
        assert x.descriptor_problem(WRONG["blocks forgotten"], seed=seed) is not None, seed
        assert x.descriptor_problem(right, seed=seed) is None, seed


def test_the_message_says_which_element_was_read():
    problem = x.descriptor_problem(WRONG["k0 ignored"], seed=1)
    assert "base 0, rows 64, k0 16" in problem and "reads element (0, 0) of the tile, not (0, 16)" in problem


def test_the_parities_grader_rejects_the_off_by_one_phases():
    assert x.check_stage_parities(x.stage_and_parities)
    assert not x.check_stage_parities(lambda j, s: None)
    wrong = {
        "the empty parity of the same use": lambda j, s: (j % s, (j // s) & 1, None if j < s else (j // s) & 1),
        "the full parity by tile, not by use": lambda j, s: (j % s, j & 1, None if j < s else ((j // s) - 1) & 1),
        "waiting on empty the first time": lambda j, s: (j % s, (j // s) & 1, ((j // s) - 1) & 1),
        "a list, not a tuple": lambda j, s: list(x.stage_and_parities(j, s)),
    }
    for name, fn in wrong.items():
        assert not x.check_stage_parities(fn, quiet=True), name
