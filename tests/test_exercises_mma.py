"""CPU tier: the graders of chapter 09's exercises accept right answers and reject wrong ones."""
from pathlib import Path

import numpy as np
import pytest

from onlinesoftmax.book.exercises import exercises_mma as x
from onlinesoftmax.kernels.attention import mma_fragments as mf
from onlinesoftmax.runtime import emulator


def test_c_owner():
    assert x.check_c_owner(lambda r, c: (4 * (r % 8) + c // 2, 2 * (r // 8) + c % 2))
    assert not x.check_c_owner(lambda r, c: None)                                   # the stub
    assert not x.check_c_owner(lambda r, c: (4 * r + c // 2, c % 2))                # rows 8 .. 15 forgotten
    assert not x.check_c_owner(lambda r, c: (4 * (r % 8) + c % 4, 2 * (r // 8) + c // 4))   # columns spread wrong


def test_p_fragment():
    assert x.check_p_fragment(mf.p_fragment)
    assert not x.check_p_fragment(lambda s, kk: None)
    assert not x.check_p_fragment(lambda s, kk: mf.p_fragment(s, kk)[:, [0, 2, 1, 3]])   # row-major register order
    assert not x.check_p_fragment(lambda s, kk: mf.p_fragment(s, kk)[..., ::-1])         # halves swapped


def test_swizzle():
    assert x.check_swizzle(mf.swizzled)
    rotate = lambda r, c, d: r * d + ((((c >> 3) + r) % (d // 8)) << 3) + (c & 7)      # another conflict-free layout
    assert x.check_swizzle(rotate)
    assert not x.check_swizzle(lambda r, c, d: None)
    assert not x.check_swizzle(mf.plain)                                               # 8-way conflicts
    assert not x.check_swizzle(lambda r, c, d: r * d + (c ^ (r & 7)))                 # breaks 16-byte chunks
    assert not x.check_swizzle(lambda r, c, d: r * d + ((((c >> 3) ^ (r & 1))) << 3) + (c & 7))   # 2 rows only


@pytest.mark.skipif(not emulator.available(), reason="no C++ compiler for the CPU emulator")
def test_the_kernel_exercise(tmp_path):
    solution = x.EXERCISES_DIR / "solutions" / f"{x.KERNEL_EXERCISE}.cu"
    starter = x.EXERCISES_DIR / "starters" / f"{x.KERNEL_EXERCISE}.cu"
    assert x.grade_kernel(solution)
    assert not x.grade_kernel(starter)
    copy = x.start_kernel(tmp_path)
    assert copy == tmp_path / starter.name and copy.read_text() == starter.read_text()
    broken = tmp_path / "broken.cu"
    broken.write_text(solution.read_text().replace("u32 a[4];", "u32 a[4] = 0;", 1))
    assert not x.grade_kernel(broken)                                                  # a compile error is reported
