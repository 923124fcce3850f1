"""CPU tier: the numbers chapters 1 and 2 quote, from the float64 reference and from every
teaching kernel's NumPy model, and the overflow behaviour chapter 1 describes."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax import book

TEACHING = ("softmax_00_naive", "softmax_01_safe", "softmax_02_online")
SAFE = ("softmax_01_safe", "softmax_02_online")
LN_FLT_MAX = float(np.log(np.finfo(np.float32).max))   # 88.7228...

X153 = [1.0, 5.0, 3.0]
P153 = [0.0159, 0.8668, 0.1173]                          # quoted to 4 decimals
X123 = [1.0, 2.0, 3.0]
P123 = [0.09003, 0.24473, 0.66524]                       # quoted to 5 decimals


def test_reference_on_1_5_3():
    m, l = reference.row_stats(np.array(X153))
    assert m[0] == 5.0
    assert l[0] == pytest.approx(np.exp(-4) + 1 + np.exp(-2), rel=1e-15)
    assert abs(l[0] - 1.1536) < 1e-4
    assert np.allclose(reference.softmax(np.array(X153)), P153, rtol=0, atol=5e-5)


def test_online_steps_on_1_5_3():
    steps = reference.online_steps(X153)
    assert [s["m"] for s in steps] == [-np.inf, 1.0, 5.0, 5.0]
    assert [s["rescale"] for s in steps[1:]] == pytest.approx([0.0, np.exp(-4), 1.0], rel=1e-15)
    assert [s["l"] for s in steps[1:]] == pytest.approx(
        [1.0, 1 + np.exp(-4), 1 + np.exp(-4) + np.exp(-2)], rel=1e-15)
    assert steps[-1]["l"] == pytest.approx(reference.row_stats(np.array(X153))[1][0], rel=1e-15)


def test_online_steps_on_1_2_3():
    steps = reference.online_steps(X123)
    assert round(steps[2]["l"], 6) == 1.367879
    assert round(steps[3]["l"], 6) == 1.503215
    p = np.exp(np.array(X123) - steps[-1]["m"]) / steps[-1]["l"]
    assert np.allclose(p, P123, rtol=0, atol=5e-6)
    assert np.allclose(p, reference.softmax(np.array(X123)), rtol=1e-15)


def test_online_steps_match_the_definition_at_every_prefix():
    x = np.array([2.0, -1.0, 7.0, 7.0, 0.5, 9.0, -np.inf, 3.0])
    for step in reference.online_steps(x)[1:]:
        m, l = reference.row_stats(x[: step["n"]])
        assert step["m"] == m[0] and step["l"] == pytest.approx(l[0], rel=1e-14)


def test_combine_of_two_parts_is_the_whole_state():
    left = [float(v[0]) for v in reference.row_stats(np.array([1.0, 5.0]))]
    right = [float(v[0]) for v in reference.row_stats(np.array([3.0]))]
    for a, b in ((left, right), (right, left)):
        m, l = reference.combine(tuple(a), tuple(b))
        assert m == 5.0 and l == pytest.approx(1 + np.exp(-4) + np.exp(-2), rel=1e-15)


@pytest.mark.parametrize("variant", TEACHING)
@pytest.mark.parametrize("row, expected, decimals", [(X153, P153, 4), (X123, P123, 5)])
def test_models_reproduce_the_worked_examples(variant, row, expected, decimals):
    x = np.array([row], dtype=np.float32)
    y = osm.softmax(x, variant=variant)
    assert y.dtype == np.float32
    assert np.allclose(y[0], expected, rtol=0, atol=0.5 * 10.0**-decimals)
    passed, message = checks.compare(y, reference.softmax(x), reference.softmax_same_dtype(x),
                                      np.float32)
    assert passed, message


@pytest.mark.parametrize("variant", SAFE)
@pytest.mark.parametrize("offset", (100.0, 1000.0, -1000.0))
def test_safe_models_are_shift_invariant(variant, offset):
    x = np.array([X153], dtype=np.float32) + np.float32(offset)
    y = osm.softmax(x, variant=variant)
    assert np.isfinite(y).all()
    assert np.allclose(y[0], P153, rtol=0, atol=5e-5)


def test_naive_model_overflows_past_ln_flt_max_and_safe_ones_do_not():
    below = np.float32(88.72)                             # e^88.72 < FLT_MAX
    above = np.nextafter(np.float32(LN_FLT_MAX), np.float32(np.inf))
    assert below < LN_FLT_MAX < above
    for top in (below, above, np.float32(89.0), np.float32(1000.0)):
        x = np.array([[top, 0.0, top - 30]], dtype=np.float32)   # the sum stays below FLT_MAX
        ref = reference.softmax(x)
        naive = osm.softmax(x, variant="softmax_00_naive")
        if top < LN_FLT_MAX:
            assert np.allclose(naive, ref, rtol=1e-5, atol=1e-7)
        else:
            assert np.isnan(naive[0, 0]) and naive[0, 1] == 0.0   # inf/inf and 1/inf
        for variant in SAFE:
            y = osm.softmax(x, variant=variant)
            assert np.isfinite(y).all() and np.allclose(y, ref, rtol=1e-5, atol=1e-7)


def test_naive_model_sum_overflows_before_any_single_term():
    """Three terms of e^88 are finite, their fp32 sum is not: the output is silent zeros."""
    x = np.full((1, 3), 88.0, dtype=np.float32)
    assert np.isfinite(np.exp(np.float32(88.0)))
    naive = osm.softmax(x, variant="softmax_00_naive")
    assert (naive == 0.0).all()
    for variant in SAFE:
        assert np.allclose(osm.softmax(x, variant=variant), 1 / 3, rtol=1e-6)


def test_access_model_fields_quoted_in_chapter_2():
    counts = {name: (osm.REGISTRY[name].reads_per_element, osm.REGISTRY[name].writes_per_element)
              for name in TEACHING}
    assert counts == {"softmax_00_naive": (2, 1), "softmax_01_safe": (3, 1),
                      "softmax_02_online": (2, 1)}


def test_html_table_escapes_cells():
    html = book.html_table(["a<b"], [["x & y"]], caption="c").data
    assert "a&lt;b" in html and "x &amp; y" in html and "<caption>c</caption>" in html
