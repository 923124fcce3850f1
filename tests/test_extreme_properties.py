"""Property-based tests (hypothesis) on the kernels' NumPy models: rows of any float32 value, +-inf and NaN
included, through softmax, log_softmax and logsumexp, against the float64 reference with the book's rule
(each row its own tolerance) and its NaN / +-inf pattern. The extreme-row matrix (test_extreme_rows.py)
holds the named cases; this file looks for the ones nobody named."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax import extremes

from test_extreme_rows import same_pattern
from test_logsumexp import log_softmax_compare, lse_compare

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def rows(dtype):
    """(rows, N) float32 arrays rounded to dtype: any finite value of the dtype, with some +-inf and NaN."""
    big = extremes.FINFO_MAX[dtype]
    element = st.one_of(st.floats(-big, big, width=32), st.sampled_from([np.inf, -np.inf, np.nan]),
                        st.floats(-30, 30, width=32))
    shape = st.tuples(st.integers(1, 4), st.integers(1, 300))
    return arrays(np.float32, shape, elements=element).map(lambda x: checks.to_dtype(x, dtype))


def each_row(compare, y, x):
    for r in range(x.shape[0]):
        passed, message = compare(y[r:r + 1], x[r:r + 1])
        if not passed:
            return False, f"row {r} {x[r].tolist()[:8]}...: {message}"
    return True, ""


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_softmax_model_on_any_row(dtype):
    @SETTINGS
    @given(rows(dtype))
    def check(x):
        y = osm.softmax(x)
        passed, message = each_row(checks.compare_softmax, y, x)
        assert passed, message
    check()


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_log_softmax_and_logsumexp_models_on_any_row(dtype):
    @SETTINGS
    @given(rows(dtype))
    def check(x):
        passed, message = each_row(log_softmax_compare, osm.log_softmax(x), x)
        assert passed, message
        lse = osm.logsumexp(x)
        passed, message = each_row(lse_compare, lse, x)
        assert passed, message
        from onlinesoftmax import reference
        assert same_pattern(lse, reference.logsumexp(checks.as_float64(x)))
    check()
