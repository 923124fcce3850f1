"""CPU tier: combine is a commutative monoid (property-based), and the split-merge model.

The laws hold exactly for real numbers; in float64 they hold to a few ulps, which is what
the properties check (m exactly, l to a relative 1e-12). States include the identity
(-inf, 0) and maxima of huge magnitude.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.book.exercises import exercises_monoid as ex
from onlinesoftmax.kernels.softmax import split_merge as km
from onlinesoftmax import simulate as sim

IDENTITY = (-math.inf, 0.0)
REL_L = 1e-12

finite_m = st.one_of(st.floats(-50, 50), st.floats(-1e300, 1e300), st.sampled_from([-1e308, 1e308, 0.0]))
positive_l = st.floats(1e-3, 1e6)
nonempty = st.tuples(finite_m, positive_l)
states = st.one_of(nonempty, nonempty, nonempty, st.just(IDENTITY))  # identity about 1 in 4


def same_state(a, b, rel=REL_L) -> bool:
    """m exactly equal, l within a relative tolerance (both 0 for the identity)."""
    return a[0] == b[0] and math.isclose(a[1], b[1], rel_tol=rel, abs_tol=0.0)


@settings(max_examples=400, deadline=None)
@given(states, states)
def test_combine_commutes(a, b):
    assert reference.combine(a, b) == reference.combine(b, a)  # bit for bit: + and max commute


@settings(max_examples=400, deadline=None)
@given(states, states, states)
def test_combine_is_associative(a, b, c):
    left = reference.combine(reference.combine(a, b), c)
    right = reference.combine(a, reference.combine(b, c))
    assert same_state(left, right), (left, right)


@settings(max_examples=300, deadline=None)
@given(states)
def test_empty_state_is_the_identity(a):
    assert reference.combine(a, IDENTITY) == a
    assert reference.combine(IDENTITY, a) == a


@settings(max_examples=300, deadline=None)
@given(nonempty, nonempty)
def test_combine_adds_the_quantities_the_states_stand_for(a, b):
    """(m, l) stands for l e^m: in logs, combine is logaddexp of m + log l."""
    m, l = reference.combine(a, b)
    assert m == max(a[0], b[0]) and 1e-3 <= l
    with np.errstate(over="ignore"):  # logaddexp near 1e308 warns internally, yet returns a finite value
        expected = np.logaddexp(a[0] + math.log(a[1]), b[0] + math.log(b[1]))
    assert math.isclose(m + math.log(l), expected, rel_tol=1e-14, abs_tol=1e-12)


def unguarded_combine(a, b):
    (m1, l1), (m2, l2) = a, b
    m = max(m1, m2)
    with np.errstate(invalid="ignore"):
        return m, float(l1 * np.exp(m1 - m) + l2 * np.exp(m2 - m))


def test_without_the_guard_the_identity_is_lost():
    assert math.isnan(unguarded_combine(IDENTITY, IDENTITY)[1])  # e^(-inf - -inf) = e^NaN
    assert reference.combine(IDENTITY, IDENTITY) == IDENTITY
    assert unguarded_combine((1.0, 2.0), IDENTITY) == (1.0, 2.0)  # only the empty-empty case fails


# --- the float32 combine the kernels use (simulate.online_combine) ----------------------------

f32_m = st.one_of(st.floats(-80, 80, width=32), st.floats(-2.0**127, 2.0**127, width=32))
f32_states = st.one_of(st.tuples(f32_m, st.floats(1.0, 4096.0, width=32)), st.just(IDENTITY))


def combine32(a, b):
    m, l = sim.online_combine((np.float32(a[0]), np.float32(a[1])), (np.float32(b[0]), np.float32(b[1])))
    return np.float32(m), np.float32(l)


@settings(max_examples=300, deadline=None)
@given(f32_states, f32_states, f32_states)
def test_float32_combine_laws(a, b, c):
    with np.errstate(all="ignore"):
        assert combine32(a, b) == combine32(b, a)
        assert combine32(a, IDENTITY) == combine32(IDENTITY, a) == (np.float32(a[0]), np.float32(a[1]))
        left, right = combine32(combine32(a, b), c), combine32(a, combine32(b, c))
    assert left[0] == right[0]
    # float32 expf/multiply/add in two orders: a few ulps apart, not necessarily equal
    assert abs(float(left[1]) - float(right[1])) <= 8 * float(np.spacing(np.float32(max(left[1], right[1]))))


def test_reduction_trees_agree_to_a_few_ulps_but_not_bit_for_bit():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((16, 1000)) * 3).astype(np.float32)
    m64, l64 = reference.row_stats(x)
    results = {name: tree(x) for name, tree in km.TREES.items()}
    ulp = np.spacing(l64.astype(np.float32)).astype(np.float64)
    for name, (m, l) in results.items():
        assert (m == m64).all(), name  # the maximum is exact in any order
        assert (np.abs(l - l64) / ulp).max() <= (64 if name == "sequential" else 8), name
    distinct = {tuple(l.view(np.uint32)) for _, l in results.values()}
    assert len(distinct) > 1  # different groupings round differently


# --- softmax_06_split_merge's model -----------------------------------------------------------

def assert_softmax_close(y, x):
    passed, message = checks.compare(y, reference.softmax(x), reference.softmax_same_dtype(x), np.float32)
    assert passed, message


@pytest.mark.parametrize("n_cols", (1, 3, 33, 257, 4097, 65536))
@pytest.mark.parametrize("blocks_per_row", (None, 1, 2, 7, 64))
def test_split_merge_model(n_cols, blocks_per_row):
    x = checks.random_rows(np, 3, n_cols, seed=n_cols + 17)
    y = osm.api.run(osm.REGISTRY["softmax_06_split_merge"], x, blocks_per_row=blocks_per_row)
    assert_softmax_close(y, x)


def test_split_merge_model_with_empty_chunks_and_special_rows():
    x, nan_rows = checks.special_rows(np, 5)
    y = osm.api.run(osm.REGISTRY["softmax_06_split_merge"], x, blocks_per_row=8)  # chunks 5..7 are empty
    assert (np.isnan(y).all(axis=1) == nan_rows).all()
    assert not np.isnan(y[~nan_rows]).any()
    assert_softmax_close(y, x)


def test_split_merge_partials_merge_to_the_row_state():
    x = checks.random_rows(np, 4, 3000, seed=2)
    m_parts, l_parts = km.partial_states(x, blocks_per_row=5)
    assert m_parts.shape == (4, 5)
    m, l = km.merge_states(m_parts, l_parts)
    m64, l64 = reference.row_stats(x)
    assert (m == m64).all()
    np.testing.assert_allclose(l, l64, rtol=2e-6)


def test_split_geometry():
    assert km.split_geometry(4000, 4096) == (1, 4096)           # enough rows: one block per row
    assert km.split_geometry(1, 1 << 20) == (256, 4096)         # one long row: 256 chunks
    assert km.split_geometry(10, 1 << 20) == (103, 10181)
    assert km.split_geometry(1, 100) == (1, 100)
    assert km.split_geometry(2, 10, blocks_per_row=4) == (4, 3)  # honoured: the last chunk is 1 column
    for bad in (0, -1, 1025):
        with pytest.raises(ValueError):
            km.split_geometry(1, 100, blocks_per_row=bad)
    for bad in (True, False, 2.5, "4"):
        with pytest.raises(TypeError):
            km.split_geometry(1, 100, blocks_per_row=bad)
    launch = osm.REGISTRY["softmax_06_split_merge"].geometry(70000, 100)
    assert launch.grid == (1, 65535) and launch.block == (256,)


# --- the graders accept right answers and reject the deliberately wrong ones ---------------------

def test_graders(capsys):
    assert ex.check_merge_partials(ex.merge_partials_reference)

    def merge_unguarded(m, l):
        top = m.max(axis=1)
        return top, (l * np.exp(m - top[:, None])).sum(axis=1)

    assert not ex.check_merge_partials(merge_unguarded)
    split = osm.REGISTRY["softmax_06_split_merge"]
    assert ex.check_split_softmax(lambda x, blocks: osm.api.run(split, x, blocks_per_row=blocks))

    def per_chunk_softmax(x, blocks):  # each chunk normalized by its own sum: the bug a merge fixes
        chunk = -(-x.shape[1] // blocks)
        return np.concatenate([reference.softmax(x[:, i:i + chunk]) for i in range(0, x.shape[1], chunk)], axis=1)

    assert not ex.check_split_softmax(per_chunk_softmax)
    printed = capsys.readouterr().out
    assert "passed" in printed and "FAILED" in printed
