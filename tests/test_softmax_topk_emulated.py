"""CPU tier: softmax_topk_06_split's own CUDA source run by the CPU emulator (kernels/emulator/,
through softmax_topk_split.emulate: every thread a fiber, barriers, shuffles and atomics by CUDA's
rules, shared memory poisoned) against the float64 definition: chunks of one step and of many (the
candidate buffer filled, selected and refilled), ascending rows (every element a candidate), ties,
-inf / NaN / +inf rows, misaligned and strided rows, k from 1 to 300, random interleavings of the
warps. The model's replay of the same buffer is checked against the exact selection, and broken
kernels must be rejected. Needs g++ (required under CI=true)."""
import contextlib

import numpy as np
import pytest

from onlinesoftmax import checks
from onlinesoftmax.kernels.topk import split as sp
from onlinesoftmax.kernels.topk import keys as tk
from onlinesoftmax.runtime import emulator
from onlinesoftmax.runtime.loader import KERNELS_DIR


pytestmark = pytest.mark.usefixtures("needs_emulator")   # tests/conftest.py


def rows_to_check(dtype: str):
    """Random rows, the same sorted ascending (each step's elements all beat the floor so far) and
    descending, as a view that starts 3 elements in (a scalar head, 16-byte loads after it)."""
    x = checks.random_rows(np, 2, 9003, dtype, seed=7)
    ascending, descending = np.sort(x, axis=1), np.sort(x, axis=1)[:, ::-1]
    return np.concatenate([x, ascending, descending])[:, 3:]


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("sms", (1, 132), ids=("one_chunk_per_row", "a_chunk_per_step"))
def test_the_kernel_source_on_the_emulator(dtype, sms):
    x = rows_to_check(dtype)
    for k in (1, 5, 33, 300):
        shape = sp.split_shape(x.shape[0], x.shape[1], k, dtype, sms)
        assert (shape.subs > 1) == (sms == 1)
        for renormalize in (False, True) if k in (5, 33) else (False,):
            # k = 5 with the emulator's per-access checks (races, bounds, alignment); the other k check
            # the selection's numbers without them (5x faster); renormalizing is one division at the
            # end of the merge, checked at two k
            with contextlib.nullcontext() if k == 5 else emulator.uninstrumented():
                probs, columns, lse = sp.emulate(x, k, renormalize, sms=sms, seed=k)
            ok, message = checks.compare_topk(probs, columns, x, k, renormalize, lse=lse)
            assert ok, f"{dtype} k={k} sms={sms} renormalize={renormalize}: {message}"


def test_ties_and_special_rows_on_the_emulator():
    ties = np.array([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0] * 700, [0.0] * 4200, [-0.0, 0.0] * 2100], np.float32)
    special, _ = checks.special_rows(np, 300)
    for x, ks in ((ties, (1, 4, 40)), (special, (1, 5, 8))):
        for k in ks:
            for sms in (1, 132):
                with contextlib.nullcontext() if k == ks[1] else emulator.uninstrumented():   # one k checked per access
                    probs, columns, lse = sp.emulate(x, k, sms=sms, seed=3)
                ok, message = checks.compare_topk(probs, columns, x, k, lse=lse)
                assert ok, f"k={k} sms={sms}: {message}"


def test_the_replayed_buffer_selects_the_exact_k_best():
    """The model with every selection replayed digit by digit (a chunk per row: the buffer fills and
    is selected many times) gives the exact selection's columns."""
    x = rows_to_check("float32")
    for k in (1, 5, 33, 300):
        shape = sp.split_shape(x.shape[0], x.shape[1], k, "float32", 1)
        passes = []
        sp.records(x, shape, replay=True, passes=passes)
        assert len(passes) > x.shape[0] * shape.n_chunks          # selections while reading, not only the last
        exact = sp.simulate_split(x, k, sms=1)
        replayed = sp.simulate_split(x, k, replay=True, sms=1)
        np.testing.assert_array_equal(exact[1], replayed[1])
        np.testing.assert_array_equal(replayed[1], tk.key_columns(tk.top_keys(tk.row_keys(x), k)))


SOURCE = (KERNELS_DIR / "topk" / "softmax_topk_06_split.cu").read_text()
MUTANTS = [   # (text, its replacement, what the kernel then lacks, k)
    ("thr_value = key_value(warp_kth_key(best_key, k));", "thr_value = key_value(warp_kth_key(best_key, 1));",
     "a floor at the warp's k-th best", 20),
    ("j = k <= 32 ? k : (k + warps - 1) / warps;", "j = k <= 32 ? k : 1;",
     "ceil(k / warps) elements of each warp above the floor for k > 32", 50),
    ("if (t == 0) appended[(step + 2) % 3] = 0;", "if (t == 0) appended[step % 3] = 0;",
     "a counter left alone while it is read", 300),
    ("            held = k;\n", "            held = 0;\n", "the chosen keys kept after a selection", 300),
]


@pytest.mark.parametrize("old, new, why, k", MUTANTS, ids=[m[2].replace(" ", "_") for m in MUTANTS])
def test_a_broken_kernel_is_rejected(old, new, why, k):
    assert old in SOURCE, "the mutant's text is gone from softmax_topk_06_split.cu: update MUTANTS"
    x = rows_to_check("float32")
    try:
        probs, columns, lse = sp.emulate(x, k, sms=1, seed=2, source=SOURCE.replace(old, new, 1))
    except emulator.EmulatorFault:                    # caught by the emulator (a build error fails the test)
        return
    assert not checks.compare_topk(probs, columns, x, k, lse=lse)[0], f"a kernel without {why} passed"
