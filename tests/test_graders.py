"""Every grader of the book's exercises rejects wrong answers with a message that says what is
wrong, and accepts the right ones (onlinesoftmax/book/exercises/grading.py and the exercises' modules):
stubs, incomplete tuples, wrong shapes and types, and wrong values, each with its message. The
graders of chapters 01, 02, 03 and 06 have their own files (test_exercises_*.py); the test at the
end checks that no check_* function of the exercise modules is left without wrong answers."""
import ast
from pathlib import Path

import numpy as np
import pytest

from onlinesoftmax import merge, reference
from onlinesoftmax.book.exercises import exercises_attention as ea
from onlinesoftmax.book.exercises import exercises_gradients as eg
from onlinesoftmax.book.exercises import exercises_logsumexp as el
from onlinesoftmax.book.exercises import exercises_monoid as em
from onlinesoftmax.book.exercises import exercises_topk as et
from onlinesoftmax.book.exercises import grading
from onlinesoftmax.kernels.softmax import split_merge as km


def merge_partials_right(m, l):
    return em.merge_partials_reference(m, l)


def split_softmax_right(x, blocks):
    return em.solution_split_softmax(x, blocks)


def logsumexp_right(x):
    return reference.logsumexp(x)


def split_logsumexp_right(x, blocks_per_row=8):
    with np.errstate(divide="ignore", invalid="ignore"):
        m, l = km.merge_states(*km.partial_states(x, blocks_per_row))
        return m + np.log(l)


def split_visible_sizes_only(x, blocks_per_row=8):
    """Right on the rows of the visible cases' widths, zeros elsewhere: the hidden cases must catch it."""
    visible = {case.args[0].shape[1] for case in el.split_cases()}
    return split_logsumexp_right(x, blocks_per_row) if x.shape[1] in visible else np.zeros(x.shape[0], np.float32)


def visible_widths_only(solution):
    """An answer right on the visible cases' row widths and zeros elsewhere (a lookup of what it was shown)."""
    visible = {case.args[0].shape[1] for case in eg.softmax_backward_cases()}
    return lambda y, dy: solution(y, dy) if y.shape[1] in visible else np.zeros_like(y)


def split_merging_copies(x, blocks_per_row=8):
    km.partial_states(x, blocks_per_row)
    m, l = km.partial_states(x[:, ::-1].copy(), blocks_per_row)   # the row reversed: other chunk states
    with np.errstate(all="ignore"):
        m, l = km.merge_states(m, l)
        return m + np.log(l)


def split_without_rescaling(x, blocks_per_row=8):
    m, l = km.partial_states(x, blocks_per_row)
    km.merge_states(m, l)
    with np.errstate(all="ignore"):
        return m.max(1) + np.log(l.sum(1))   # adds the chunks' l as if they shared one maximum


def probabilities_right(scores, lse):
    return np.exp(scores - lse[:, None])


def fa2_no_final_division(scores, values, tiles):
    o, lse = ea.solution_fa2_row(scores, values, tiles)
    return o * np.exp(lse - scores.max()) if np.isfinite(lse) else o, lse     # o left unnormalized


def fa2_started_at_minus_1e30(scores, values, tiles):
    """The running maximum started at a large finite negative number instead of -inf."""
    m, l, o = -1e30, 0.0, np.zeros(values.shape[1])
    for t in tiles:
        s, v = scores[t], values[t]
        m_new = max(m, s.max()) if len(s) else m
        p = np.exp(s - m_new)
        o = o * np.exp(m - m_new) + p @ v
        l = l * np.exp(m - m_new) + p.sum()
        m = m_new
    return (o / l if l > 0 else o), (m + np.log(l) if l > 0 else -np.inf)


def fa2_two_passes(scores, values, tiles):
    """The row's maximum over the tiles first, then a second walk for the sums: not the online pass."""
    m = max((scores[t].max() for t in tiles if len(scores[t])), default=-np.inf)
    l, o = 0.0, np.zeros(values.shape[1])
    for t in tiles:
        p = np.exp(scores[t] - m) if np.isfinite(m) else np.zeros(len(scores[t]))
        l, o = l + p.sum(), o + p @ values[t]
    return (o / l if l > 0 else o), (m + np.log(l) if l > 0 else -np.inf)


def merge_topk_nan_last(a, b, k):
    """NaN sorted last (a lexsort on -values), where the exercise puts it first."""
    (m_a, l_a, va, ca), (m_b, l_b, vb, cb) = a, b
    m, l = reference.combine((m_a, l_a), (m_b, l_b))
    v, c = np.concatenate([va, vb]).astype(np.float64), np.concatenate([ca, cb]).astype(np.int64)
    keep = np.lexsort((c, -v))[:k]
    return m, l, v[keep], c[keep]


def decode_splits_four_resident(batch, heads, kv_heads, n_q, n_k, sms):
    """Four resident blocks an SM always (a block of 2 query rows fits only 3)."""
    import math

    rows_per_kv = heads // kv_heads * n_q
    per_block = next((r for r in (1, 2, 4) if r >= rows_per_kv), 4)
    blocks = batch * kv_heads * math.ceil(rows_per_kv / per_block)
    resident = 4 * sms

    def fill(s):
        return blocks * s / (resident * math.ceil(blocks * s / resident))
    counts = range(1, math.ceil(n_k / 256) + 1)
    splits = next((s for s in counts if fill(s) >= 0.95), max(counts, key=fill))
    keys = 32 * math.ceil(math.ceil(n_k / splits) / 32)
    return math.ceil(n_k / keys), keys


def fa2_nan_for_a_blind_row(scores, values, tiles):
    tiles = list(tiles)
    if np.isneginf(scores).all():
        return np.full(values.shape[1], np.nan), -np.inf
    return ea.solution_fa2_row(scores, values, tiles)


def logsumexp_started_at_minus_1e30(x):
    """The online state started at (-1e30, 0) instead of (-inf, 0), as many kernels write it."""
    x = np.asarray(x, np.float64)
    m, l = np.full(x.shape[0], -1e30), np.zeros(x.shape[0])
    for j in range(x.shape[1]):
        with np.errstate(invalid="ignore"):
            m_new = np.maximum(m, x[:, j])
            l = l * np.exp(m - m_new) + np.exp(x[:, j] - m_new)
        m = m_new
    return (m + np.log(l)).astype(np.float32)


def split_softmax_started_at_minus_1e30(x, blocks):
    """Each chunk's state started at -1e30: a row below it keeps -1e30 as its maximum."""
    x = np.asarray(x, np.float64)
    m = np.maximum(x.max(axis=1, keepdims=True), -1e30)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - m)
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32) + 0 * blocks


def merge_with_a_floor(a, b):
    """m = max(m_a, m_b, -1e30): blocks below the floor lose their mass."""
    m = max(a[0], b[0], -1e30)
    if a[1] + b[1] == 0:
        return -np.inf, 0.0, np.zeros_like(a[2])
    wa, wb = np.exp(a[0] - m), np.exp(b[0] - m)
    return m, a[1] * wa + b[1] * wb, a[2] * wa + b[2] * wb


GRADERS = {   # grader, a right answer, wrong answers with the message each must produce
    "merge_partials": (em.check_merge_partials, merge_partials_right, [
        (lambda m, l: (m.max(1),), "expected 2 values (m, l), got 1"),
        (lambda m, l: None, "not answered yet"),
        (lambda m, l: (m.max(1)[:, None], l.sum(1)), "extra axis of length 1"),
        (lambda m, l: (m.max(1), l.sum(1)), "l["),            # forgets the rescaling: values differ
        (lambda m, l: (m.max(1), (l * np.exp(m - m.max(1))).sum(1)), "raised ValueError"),   # no [:, None]
        (lambda m, l: ("m", "l"), "should be a numpy or cupy array"),
        (lambda m, l: (m.max(1), l.sum(1)[:1]), "l has shape (1,), expected (2,)"),
        (lambda m, l: (*em.merge_partials_reference(m, l), 0.0), "expected 2 values (m, l), got 3"),
    ]),
    "split_softmax": (em.check_split_softmax, split_softmax_right, [
        (lambda x, b: reference.softmax(x).T, "transposed"),
        (lambda x, b: reference.softmax(x)[:, :-1], "has shape"),
        (lambda x, b: np.exp(x) / np.exp(x).sum(1, keepdims=True) + 0 * b, "softmax["),   # overflow on big rows
        (lambda x, b: reference.softmax(x).astype(np.float16), "has dtype float16"),  # rounded to fp16
        (lambda x, b: None, "not answered yet"),
        (lambda x, b: (reference.softmax(x), b), "expected 1 value (softmax), got 2"),
        (split_softmax_started_at_minus_1e30, "FAILED on rows below -1e30"),
    ]),
    "logsumexp_rows": (el.check_logsumexp_rows, logsumexp_right, [
        (lambda x: reference.logsumexp(x)[:, None], "extra axis of length 1"),
        (lambda x: np.log(np.exp(x.astype(np.float64)).sum(1)), "lse[0] is inf"),
        (lambda x: x.max(1), "lse[0]"),
        (lambda x: reference.logsumexp(x)[None, :], "has shape (1, 1)"),
        (lambda x: None, "not answered yet"),
        (lambda x: (reference.logsumexp(x), reference.logsumexp(x)), "expected 1 value (lse), got 2"),
        (lambda x: [float(v) for v in reference.logsumexp(x)], "lse should be a numpy or cupy array or a number, got list"),
        (lambda x: np.array([str(v) for v in reference.logsumexp(x)]), "lse should hold numbers, got dtype <U"),
        (logsumexp_started_at_minus_1e30, "FAILED on rows below -1e30"),
    ]),
    "split_logsumexp": (el.check_split_logsumexp, split_logsumexp_right, [
        (lambda x, blocks_per_row=8: reference.logsumexp(x), "km.partial_states was never called"),  # no split
        (lambda x, blocks_per_row=8: split_logsumexp_right(x, 8), "called with blocks_per_row=[8], not the 1"),
        (lambda x, blocks_per_row=8: (km.partial_states(x, blocks_per_row), reference.logsumexp(x))[1],
         "km.merge_states never merged"),                  # launch 1 run, its states thrown away
        (split_merging_copies, "km.merge_states never merged"),   # launch 2 given states it made itself
        (split_without_rescaling, "lse[0] is 4.0986"),
        (lambda x, blocks_per_row=8: km.merge_states(*km.partial_states(x, blocks_per_row))[0], "lse[0] is 3,"),  # m, no log l
        (lambda x, blocks_per_row=8: None, "not answered yet"),
        (lambda x, blocks_per_row=8: 0 * split_logsumexp_right(x, blocks_per_row), "lse[0] is 0,"),   # all zeros
        (split_visible_sizes_only, "(a hidden case, seed"),   # right on the visible rows only
    ]),
    "merge_attention": (el.check_merge_attention, merge.merge, [
        (lambda a, b: merge.merge(a, b)[:2], "expected 3 values (m, l, u), got 2"),   # leaves out u
        (lambda a, b: (max(a[0], b[0]), a[1] + b[1], a[2] + b[2]), "l is"),            # no rescaling
        (lambda a, b: None, "not answered yet"),
        (lambda a, b: (*merge.merge(a, b)[:2], merge.merge(a, b)[2][:, None]), "u has shape (1, 1), expected (1,) (an extra axis of length 1"),
        (lambda a, b: merge.merge(a, b)[2], "expected 3 values (m, l, u) as a tuple, got one ndarray"),
        (merge_with_a_floor, "FAILED on two blocks below -1e30"),
    ]),
    "probabilities_from_lse": (el.check_probabilities_from_lse, probabilities_right, [
        (lambda s, lse: np.exp(s - lse), "raised ValueError"),
        (lambda s, lse: np.exp(s - lse[:, None]).T, "transposed"),
        (lambda s, lse: np.exp(s - s.max(1, keepdims=True)), "P[0, "),   # forgets the sum
        (lambda s, lse: None, "not answered yet"),
        (lambda s, lse: np.exp(s - lse[:, None])[:, :-1], "P has shape (1, 2), expected (1, 3)"),
    ]),
    "merge_topk": (et.check_merge_topk, et.solution_merge_topk, [
        (lambda a, b, k: None, "not answered yet"),
        (lambda a, b, k: et.solution_merge_topk(a, b, k)[2:], "expected 4 values (m, l, values, columns), got 2"),
        (lambda a, b, k: et.solution_merge_topk(a, b, k)[:3], "expected 4 values (m, l, values, columns), got 3"),
        (lambda a, b, k: et.solution_merge_topk(a, b, k + 1), "values has shape (3,), expected (2,)"),   # not cut to k
        (lambda a, b, k: (*et.solution_merge_topk(a, b, k)[:3], et.solution_merge_topk(a, b, k)[3][:, None]),
         "columns has shape (2, 1), expected (2,) (an extra axis of length 1"),
        (lambda a, b, k: (max(a[0], b[0]), a[1] + b[1], *et.solution_merge_topk(a, b, k)[2:]), "l is"),
        (merge_topk_nan_last, "FAILED on NaN in both parts"),
    ]),
    "attention_memory": (ea.check_attention_memory, ea.solution_attention_memory, [
        (lambda b, h, n, e: None, "not answered yet"),
        (lambda b, h, n, e: b * h * n * n * e, "expected 2 values (score bytes, lse bytes) as a tuple, got one int"),
        (lambda b, h, n, e: (b * h * n * n * e,), "expected 2 values (score bytes, lse bytes), got 1"),
        (lambda b, h, n, e: (h * n * n * e, h * n * 4), "FAILED on the exercise: 4 sequences"),   # forgets the batch
        (lambda b, h, n, e: (b * h * n * n * e, b * h * n * e), "lse bytes is"),                      # LSE in the score dtype
    ]),
    "fa2_row": (ea.check_fa2_row, ea.solution_fa2_row, [
        (lambda s, v, t: None, "not answered yet"),
        (lambda s, v, t: ea.solution_fa2_row(s, v, t)[0], "expected 2 values (o, lse) as a tuple, got one ndarray"),
        (lambda s, v, t: (ea.solution_fa2_row(s, v, t)[0][None, :], 0.0), "o has shape (1, 1), expected (1,)"),
        (lambda s, v, t: (ea.solution_fa2_row(s, v, t)[0], ea.solution_fa2_row(s, v, t)[1], 0.0),
         "expected 2 values (o, lse), got 3"),
        (fa2_no_final_division, "FAILED on the worked example"),
        (fa2_nan_for_a_blind_row, "FAILED on every score -inf (a query that sees no key): o[0] is nan, expected 0"),
        (fa2_started_at_minus_1e30, "FAILED on scores near -1e306"),
        (fa2_two_passes, "walked the tiles more than once"),
        (lambda s, v, t: fa2_two_passes(s, v, list(t)), "walked the tiles more than once"),   # over a copy of them
        (lambda s, v, t: fa2_two_passes(np.asarray(s), v, t), "walked the tiles more than once"),   # scores unwatched
    ]),
    "decode_splits": (ea.check_decode_splits, ea.solution_decode_splits, [
        (lambda *shape: None, "not answered yet"),
        (lambda *shape: 17, "expected 2 values (splits, keys per split) as a tuple, got one int"),
        (lambda b, h, kv, nq, nk, sms: (1, nk), "splits is 1, expected 16"),
        (lambda b, h, kv, nq, nk, sms: (max(1, -(-nk // 256)), 256), "splits is 128, expected 16"),   # never looks at the SMs
        (decode_splits_four_resident, "FAILED on batch 1, heads 16, kv heads 8, 1 query"),
        (lambda b, h, kv, nq, nk, sms: ea.solution_decode_splits(b, h, kv, nq, nk, 132),
         "(a hidden case, seed"),                                                          # the SM count ignored
    ]),
    "softmax_backward": (eg.check_softmax_backward, eg.solution_softmax_backward, [
        (lambda y, dy: None, "not answered yet"),
        (lambda y, dy: dy * y, "dx[0, 0] is 0, expected -0.0598920245"),                  # forgets the rowsum
        (lambda y, dy: y * (dy - dy.sum(1, keepdims=True)), "dx[0, 0] is -0.0900305732"),  # sum of dy, not of y dy
        (lambda y, dy: y * (dy - (y * dy).sum(0, keepdims=True)), "dx[0, 0] is 0,"),      # sums down the columns
        (lambda y, dy: y * (dy - (y * dy).sum(1)), "raised ValueError"),                  # no keepdims
        (lambda y, dy: eg.solution_softmax_backward(y, dy).astype(np.float32), "has dtype float32"),
        (eg.jacobian_softmax_backward, "did it build the 2048 x 2048 Jacobian?"),         # right values, N x N memory
        (lambda y, dy: np.zeros_like(y), "dx[0, 0] is 0, expected -0.0598920245"),        # all zeros
        (visible_widths_only(eg.solution_softmax_backward), "(a hidden case, seed"),      # a lookup of the visible widths
        (lambda y, dy: np.where(y < 1e-13, 0.0, eg.solution_softmax_backward(y, dy)),
         "(a hidden case, seed"),                                                          # small probabilities dropped
    ]),
    "log_softmax_backward": (eg.check_log_softmax_backward, eg.solution_log_softmax_backward, [
        (lambda z, dy: None, "not answered yet"),
        (lambda z, dy: dy - z * dy.sum(1, keepdims=True), "dx[0, 0] is 2.40760596"),     # z where e^z belongs
        (lambda z, dy: dy - np.exp(z) * dy, "dx[0, 0] is 0, expected -0.0900305732"),    # forgets the rowsum
        (lambda z, dy: eg.solution_softmax_backward(np.exp(z), dy), "dx[0, 0] is -0.0598920245"),   # softmax's rule
        (lambda z, dy: dy - np.exp(z - z.max(1, keepdims=True)) * dy.sum(1, keepdims=True),
         "dx[0, 0] is -0.135335283"),                                                      # e^z re-based on the max
        (lambda z, dy: dy - np.exp(z) * dy.sum(1), "raised ValueError"),                  # no keepdims
        (eg.jacobian_log_softmax_backward, "did it build the 2048 x 2048 Jacobian?"),
        (lambda z, dy: np.zeros_like(z), "dx[0, 0] is 0, expected -0.0900305732"),        # all zeros
        (visible_widths_only(eg.solution_log_softmax_backward), "(a hidden case, seed"),
        (lambda z, dy: dy - np.where(np.exp(z) < 1e-11, 0.0, np.exp(z)) * dy.sum(1, keepdims=True),
         "(a hidden case, seed"),                                                          # small probabilities dropped
    ]),
}
GRADED_ELSEWHERE = {"check_overflow_logit", "check_stream_state", "check_stream_argmax", "check_torch_dispatch",
                    "check_copy_fraction",     # tests/test_exercises_{overflow,stream,profile}.py
                    "check_c_owner", "check_p_fragment", "check_swizzle",             # tests/test_exercises_mma.py
                    "check_shard_statistics", "check_merge_records", "check_fix_merge",
                    "check_exchanged_bytes",   # tests/test_exercises_distributed.py
                    "check_cross_entropy_grad",   # tests/test_cross_entropy.py
                    "check_gumbel_pick", "check_nucleus_threshold",   # tests/test_sampling.py
                    "check_combine_picks",   # tests/test_sampling_split.py
                    "check_gather_keys",   # tests/test_attention_paged.py
                    "check_row_backward", "check_causal_backward",   # tests/test_attention_backward.py
                    "check_k_step_descriptor", "check_stage_parities",   # tests/test_exercises_wgmma.py
                    "check_ds_offset"}   # tests/test_exercises_backward_wgmma.py


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
        y = em.solution_split_softmax(x, blocks)
        if x.shape == (5, 1000):
            y[3, 7] += 0.01
        return y
    assert not em.check_split_softmax(off_in_one_row)
    out = capsys.readouterr().out
    assert "softmax[3, 7]" in out and "yours:" in out and "expected:" in out and "input row 3:" in out


def test_an_answer_that_changes_its_inputs_fails(capsys):
    def destructive(m, l):
        result = em.merge_partials_reference(m, l)
        m[...] = 0.0   # writes into its input
        return result
    assert not em.check_merge_partials(destructive)
    assert "changed its argument 1 in place" in capsys.readouterr().out
    assert em.check_merge_partials(merge_partials_right)


def test_form_and_mismatch_helpers():
    assert grading.form_problem((np.zeros(3),), (np.zeros(3),), ("a",)) is None
    assert "tuple" in grading.form_problem(np.zeros(3), (np.zeros(3), np.zeros(3)), ("a", "b"))
    assert grading.first_mismatch(np.array([1.0, np.nan]), np.array([1.0, np.nan]), grading.Tolerance()) is None
    assert grading.first_mismatch(np.array([1.0, 2.0]), np.array([1.0, np.nan]), grading.Tolerance()) == (1,)
    assert grading.first_mismatch(np.array([np.inf]), np.array([-np.inf]), grading.Tolerance()) == (0,)


def test_every_grader_of_the_exercise_modules_has_wrong_answers():
    book = Path(em.__file__).parent
    checks = {node.name for path in book.glob("exercises_*.py") for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")}
    covered = {GRADERS[name][0].__name__ for name in GRADERS} | GRADED_ELSEWHERE
    assert checks <= covered, f"graders without deliberately wrong answers: {sorted(checks - covered)}"
    assert all(len(wrong) >= 3 for _, _, wrong in GRADERS.values())


def test_the_log_sum_exp_grader_takes_either_convention_from_a_cupy_answer_too():
    """torch's +inf for a row holding +inf is accepted as the state's NaN; it was only when the answer
    was a NumPy array. A stand-in for cupy.ndarray (no GPU here): not an ndarray, read with .get()."""
    class DeviceArray:
        def __init__(self, a):
            self._a = np.asarray(a)
            self.shape, self.dtype = self._a.shape, self._a.dtype

        def get(self):
            return self._a.copy()

    assert el.check_logsumexp_rows(lambda x: DeviceArray(reference.logsumexp(x)), quiet=True)
    assert el.check_logsumexp_rows(lambda x: DeviceArray(el.state_logsumexp(x)), quiet=True)
    assert not el.check_logsumexp_rows(lambda x: DeviceArray(reference.logsumexp(x) + 1e-3), quiet=True)


def test_the_split_log_sum_exp_grader_passes_its_chunk_count_by_position():
    """A right answer whose second parameter has another name than the stub's raised TypeError."""
    assert el.check_split_logsumexp(lambda x, chunks: split_logsumexp_right(x, chunks), quiet=True)


def test_the_fa2_grader_takes_one_pass_in_any_form():
    """Reading a tile's scores twice in one step, walking the tiles from the end, reading the scores
    through np.asarray, or looking the tiles over before the loop are one pass; only a tile read again
    after others is a second (the last of these was rejected)."""
    def twice_a_step(scores, values, tiles):
        m, l, o = -np.inf, 0.0, np.zeros(values.shape[1])
        for tile in tiles:
            m_new = max(m, scores[tile].max())
            base = 0.0 if m_new == -np.inf else m_new
            alpha, p = np.exp(m - base), np.exp(scores[tile] - base)
            l, o, m = alpha * l + p.sum(), alpha * o + p @ values[tile], m_new
        return (np.zeros(values.shape[1]), -np.inf) if l == 0 else (o / l, m + np.log(l))
    for answer in (twice_a_step, lambda s, v, t: ea.solution_fa2_row(s, v, list(reversed(t))),
                   lambda s, v, t: ea.solution_fa2_row(np.asarray(s), v, t),
                   lambda s, v, t: ea.solution_fa2_row(s, v, t) if all(isinstance(x, slice) for x in t) else None):
        assert ea.check_fa2_row(answer, quiet=True)
