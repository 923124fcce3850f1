"""CPU tier: the grader of the wgmma backward page's exercise (where each value of dS^T is stored so
that dQ's instruction reads dS with the queries as rows) accepts the kernel's store and rejects the
wrong ones a reader writes: dS^T stored as it is held (keys as rows), the swizzle left out, the
chunks swizzled by the key, both warpgroups in one block, an offset past the tile, a float, a stub;
and the reference is the kernel's own expression."""
import re

import pytest

from onlinesoftmax.book.exercises import exercises_backward_wgmma as x
from onlinesoftmax.kernels.attention import backward_wgmma


def store(layout):
    """An answer from layout(key, query) -> offset."""
    return lambda *thread: layout(*x.key_and_query(*thread))


def swizzled(row, col):
    return row * 64 + (((col >> 3) ^ (row & 7)) << 3) + (col & 7)


def test_the_kernels_store_passes(capsys):
    assert x.check_ds_offset(x.ds_offset)
    assert capsys.readouterr().out.strip() == "ds_offset: passed"


WRONG = {
    "keys as rows": (store(lambda k, q: (k // 64) * 4096 + swizzled(k % 64, q)), "the value of key 0, query 1"),
    "no swizzle": (store(lambda k, q: (k // 64) * 4096 + q * 64 + k % 64), "the value of key 8, query 1"),
    "swizzled by the key": (store(lambda k, q: (k // 64) * 4096 + q * 64 + ((((k % 64) >> 3) ^ (k & 7)) << 3) + (k & 7)),
                            "should be dS of query"),
    "one block for both warpgroups": (store(lambda k, q: swizzled(q, k % 64)), "was already taken"),
    "past the tile": (store(lambda k, q: (k // 64) * 8192 + swizzled(q, k % 64)), "outside the 64 x 128 tile"),
    "a float": (lambda *thread: float(x.ds_offset(*thread)), "an offset is an integer"),
    "all zeros": (lambda *thread: 0, "was already taken"),
    "right for the first warpgroup only": (store(lambda k, q: swizzled(q, k % 64) + (k // 64) * 64),
                                           "was already taken"),
}


@pytest.mark.parametrize("name", WRONG)
def test_wrong_stores_are_rejected(name, capsys):
    answer, message = WRONG[name]
    assert not x.check_ds_offset(answer)
    out = capsys.readouterr().out
    assert "ds_offset: FAILED" in out and message in out, out


def test_a_stub_is_not_answered(capsys):
    assert not x.check_ds_offset(lambda *thread: None)
    assert "not answered yet" in capsys.readouterr().out


def test_the_reference_is_the_kernels_store():
    source = backward_wgmma.BACKWARD_WGMMA.path.read_text()
    assert "Elem* ds_block = dSs + group * BWD4_QUERIES * 64;" in source
    assert re.search(r"ds_block\[swizzled<64>\(column, row16 \+ g \+ 8 \* \(e >> 1\)\)\]", source)
    assert "const int column = 8 * j + 2 * t + (e & 1);" in source
