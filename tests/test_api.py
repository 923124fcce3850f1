"""CPU tier: the public API on numpy input (NumPy models) and its errors."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference


def test_variants_are_listed_in_story_order():
    assert osm.VARIANTS[:3] == ("softmax_00_naive", "softmax_01_safe", "softmax_02_online")
    assert list(osm.VARIANTS) == sorted(osm.VARIANTS)


@pytest.mark.parametrize("short, name", [("naive", "softmax_00_naive"), ("safe", "softmax_01_safe"),
                                         ("online", "softmax_02_online")])
def test_short_names_resolve_to_the_same_kernel(short, name):
    x = checks.random_rows(np, 3, 50, max_offset=5)
    np.testing.assert_array_equal(osm.softmax(x, short), osm.softmax(x, name))


def test_same_dtype_back_and_out_is_filled():
    x = checks.random_rows(np, 4, 33)
    out = checks.poisoned_like(x)
    y = osm.softmax(x, out=out)
    assert y is out and y.dtype == np.float32 and checks.unwritten(y) == 0


@pytest.mark.parametrize("bad, error", [
    (np.ones(5, np.float32), ValueError),            # 1-D
    (np.ones((2, 3, 4), np.float32), ValueError),    # 3-D
    (np.ones((0, 4), np.float32), ValueError),       # empty
    (np.ones((4, 0), np.float32), ValueError),       # empty
    (np.ones((2, 4), np.int32), TypeError),          # integer dtype
    (np.ones((2, 4), np.float64), TypeError),        # not a kernel dtype
    ([[1.0, 2.0]], TypeError),                       # not an array
])
def test_bad_input_is_a_clear_error(bad, error):
    with pytest.raises(error):
        osm.softmax(bad)


def test_unknown_variant_and_bad_out():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="unknown softmax variant"):
        osm.softmax(x, "fastest-ever")
    with pytest.raises(ValueError, match="out must be"):
        osm.softmax(x, out=np.empty((2, 5), np.float32))


def test_non_contiguous_views_give_the_same_answer():
    base = checks.random_rows(np, 6, 101, seed=4)
    for view in (base[:, 1:], base[::2], base[:, ::2]):
        passed, message = checks.compare(osm.softmax(view), reference.softmax(view),
                                         reference.softmax_same_dtype(view), np.float32)
        assert passed, message


def test_out_that_would_give_a_wrong_answer_is_rejected():
    x = checks.random_rows(np, 4, 16)
    with pytest.raises(ValueError, match="overlaps x"):
        osm.softmax(x, out=x)
    big = np.empty((4, 32), np.float32)
    with pytest.raises(ValueError, match="overlaps x"):
        osm.softmax(big[:, :16], out=big[:, 8:24])
    shared_rows = np.lib.stride_tricks.as_strided(np.empty(16, np.float32), shape=(4, 16), strides=(0, 4))
    with pytest.raises(ValueError, match="rows overlap"):
        osm.softmax(x, out=shared_rows)
    good = np.empty((4, 40), np.float32)[:, 3:19]  # strided rows, unaligned start: fine
    assert osm.softmax(x, out=good) is good and checks.unwritten(good) == 0


def test_n_cols_beyond_the_int32_index_range_is_refused():
    from onlinesoftmax.registry import MAX_COLS

    too_long = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(1, MAX_COLS + 1), strides=(0, 0))
    with pytest.raises(ValueError, match="at most"):
        osm.softmax(too_long)


def test_mask_value_needs_a_mask_and_a_number():
    x = checks.random_rows(np, 2, 8)
    with pytest.raises(ValueError, match="only applies"):
        osm.softmax(x, mask_value=-1e6)
    with pytest.raises(TypeError, match="must be a number"):
        osm.softmax(x, mask="causal", mask_value="a")
    assert np.isfinite(osm.softmax(x, mask="causal", mask_value=-1e6)).all()
