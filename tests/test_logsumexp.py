"""CPU tier: the log-sum-exp kernels' NumPy models, the API, the (m, l, u) merge and the graders."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, merge, reference
from onlinesoftmax.book import exercises_logsumexp as ex
from onlinesoftmax.kernels import logsumexp_online as kl

EPS32 = float(np.finfo(np.float32).eps)
LSE = osm.REGISTRY["logsumexp_01_online"]
LOG_SOFTMAX = {"float32": osm.REGISTRY["log_softmax_01_online"], "float16": osm.REGISTRY["log_softmax_01_online_fp16"]}


def lse_compare(y, x):
    """checks.tolerance, plus 4 fp32 eps: log l carries l's relative error (each e^x is good to ~2 ulp)."""
    ref = reference.logsumexp(x)
    err = checks.max_abs_error(y, ref)
    base_err = checks.max_abs_error(reference.logsumexp_same_dtype(x), ref)
    tol = checks.tolerance(base_err if np.isfinite(base_err) else 0.0, ref, np.float32) + 4 * EPS32
    return err <= tol, f"error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def log_softmax_compare(y, x):
    return checks.compare(y, reference.log_softmax(x), reference.log_softmax_same_dtype(x), x.dtype)


def rows_for(n_cols):
    return 7 if n_cols <= 4097 else 2


@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
def test_logsumexp_model_on_the_edge_sizes(n_cols):
    x = checks.random_rows(np, rows_for(n_cols), n_cols, seed=n_cols)
    y = osm.logsumexp(x)
    assert y.shape == (x.shape[0],) and y.dtype == np.float32
    passed, message = lse_compare(y, x)
    assert passed, f"N={n_cols}: {message}"


@pytest.mark.parametrize("dtype", ("float32", "float16"))
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
def test_log_softmax_models_on_the_edge_sizes(dtype, n_cols):
    x = checks.random_rows(np, rows_for(n_cols), n_cols, dtype=dtype, seed=n_cols + 1)
    y = osm.log_softmax(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    passed, message = log_softmax_compare(y, x)
    assert passed, f"{dtype} N={n_cols}: {message}"


def test_a_row_of_a_million():
    x = checks.random_rows(np, 1, checks.HUGE_COLS[1], seed=3)
    passed, message = lse_compare(osm.logsumexp(x), x)
    assert passed, message
    passed, message = log_softmax_compare(osm.log_softmax(x), x)
    assert passed, message


def test_lse_near_zero_is_accurate_in_absolute_terms():
    """Rows shifted so LSE ~ 0.3: the error is then log l's alone, which must stay within a few eps."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 65536)) * 2
    x = (x - reference.logsumexp(x)[:, None] + 0.3).astype(np.float32)
    assert np.abs(osm.logsumexp(x) - reference.logsumexp(x)).max() <= 4 * EPS32


@pytest.mark.parametrize("n_cols", (1, 2, 3, 31, 100, 257, 4097))
def test_special_rows(n_cols):
    x, nan_rows = checks.special_rows(np, n_cols)
    lse = osm.logsumexp(x)
    assert lse[1] == -np.inf, "a row of all -inf has LSE -inf (log 0), not NaN"
    assert (np.isnan(lse) == (nan_rows & (np.arange(6) != 1))).all()
    assert lse_compare(lse, x)[0]
    for dtype in ("float32", "float16"):
        xd = x.astype(dtype)
        y = osm.log_softmax(xd)
        assert (np.isnan(y).all(axis=1) == nan_rows).all(), "all -inf, +inf and NaN rows are NaN"
        assert not np.isnan(y[~nan_rows]).any(), "unexpected NaN"
        assert (y[~nan_rows][np.isneginf(xd[~nan_rows])] == -np.inf).all(), "a -inf logit has log-probability -inf"
        passed, message = log_softmax_compare(y, xd)
        assert passed, f"{dtype}: {message}"


@pytest.mark.parametrize("group", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
def test_every_group_size(group):
    """Any lane count gives the same answer: the group reduction is the monoid at work."""
    for n_cols in (1, 5, 33, 1000, 4097):
        x = checks.random_rows(np, 3, n_cols, seed=group + n_cols)
        assert lse_compare(osm.api.run(LSE, x, group=group), x)[0], (group, n_cols)
        for dtype, variant in LOG_SOFTMAX.items():
            xd = x.astype(dtype)
            assert log_softmax_compare(osm.api.run(variant, xd, group=group), xd)[0], (dtype, group, n_cols)


def test_row_phases_follow_the_addresses():
    base = np.zeros((4, 1003), np.float32)
    phases = kl.row_phases(base[:, 1:])
    start = (base.ctypes.data + 4) % 16
    expected = [((16 - (start + r * 1003 * 4) % 16) % 16) // 4 for r in range(4)]
    assert list(phases) == expected and len(set(phases)) > 1
    halves = np.zeros((3, 77), np.float16)
    assert all(0 <= p < 8 for p in kl.row_phases(halves[:, 3:]))


@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_misaligned_and_strided_views(dtype):
    base = checks.random_rows(np, 9, 1001, dtype=dtype, seed=5)
    for view in (base[:, 1:], base[:, 3:-2], base[::2], base[1::3, 5:], base[:, ::2], base[::-1]):
        passed, message = log_softmax_compare(osm.log_softmax(view), view)
        assert passed, message
        if dtype == "float32":
            assert lse_compare(osm.logsumexp(view), view)[0]


def test_model_phases_change_the_partition_not_the_answer():
    x = checks.random_rows(np, 5, 1000, seed=8)
    answers = [kl.simulate_logsumexp(x, phases=np.full(5, p)) for p in range(4)]
    for y in answers:
        assert lse_compare(y, x)[0]
    assert max(np.abs(a - answers[0]).max() for a in answers) <= 4 * EPS32 * np.abs(answers[0]).max()


def test_group_size_and_launch_geometry():
    assert [kl.group_size(n, 4) for n in (1, 100, 256, 1000, 4096, 16384, 65536, 1 << 20)] == \
        [4, 4, 8, 32, 128, 512, 1024, 1024]
    assert kl.group_size(4096, 8) == 64
    assert LSE.geometry(4000, 100).grid == (63,) and LSE.geometry(4000, 100).block == (256,)
    assert LSE.geometry(10, 1 << 20).grid == (10,) and LSE.geometry(10, 1 << 20).block == (1024,)
    for bad in (0, 3, 2048, 1.0):
        with pytest.raises(ValueError):
            osm.api.run(LSE, np.ones((2, 8), np.float32), group=bad)


def test_api_out_and_errors():
    x = checks.random_rows(np, 4, 33)
    out = checks.poisoned_like(np.empty(4, np.float32))
    assert osm.logsumexp(x, out=out) is out and checks.unwritten(out) == 0
    with pytest.raises(ValueError, match="out must be"):
        osm.logsumexp(x, out=np.empty((4, 33), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        osm.log_softmax(x, out=np.empty(4, np.float32))
    y = checks.poisoned_like(x)
    assert osm.log_softmax(x, out=y) is y and checks.unwritten(y) == 0
    with pytest.raises(TypeError):
        osm.logsumexp(x.astype(np.float64))
    with pytest.raises(TypeError):
        osm.logsumexp(x.astype(np.float16))  # the LSE kernel is fp32 only
    with pytest.raises(TypeError):
        osm.log_softmax(x.astype(np.float64))
    with pytest.raises(TypeError):
        osm.log_softmax(np.ones((2, 3), np.int32))
    with pytest.raises(ValueError):
        osm.logsumexp(np.ones(5, np.float32))
    with pytest.raises(ValueError):
        osm.log_softmax(np.ones((0, 5), np.float32))
    with pytest.raises(ValueError, match="unknown logsumexp variant"):
        osm.logsumexp(x, "fastest")
    assert osm.log_softmax(x.astype(np.float16)).dtype == np.float16  # dispatched to the fp16 build
    np.testing.assert_array_equal(osm.log_softmax(x.astype(np.float16), "online_fp16"),
                                  osm.log_softmax(x.astype(np.float16)))


# --- the (m, l, u) merge and blocked attention ---------------------------------------------------

def test_worked_example():
    a = merge.block_state([1.0, 2.0], [[10.0], [0.0]])
    b = merge.block_state([3.0], [[-10.0]])
    assert a[0] == 2.0 and abs(a[1] - 1.367879) < 5e-7 and abs(a[2][0] - 3.678794) < 5e-7
    assert b == (3.0, 1.0, pytest.approx(np.array([-10.0])))
    m, l, u = merge.merge(a, b)
    assert m == 3.0 and abs(l - 1.503215) < 5e-7 and abs(u[0] - -8.646647) < 5e-7
    direct = reference.softmax(np.array([1.0, 2.0, 3.0])) @ np.array([10.0, 0.0, -10.0])
    assert abs(u[0] / l - direct) < 1e-15 and abs(direct - -5.752104) < 5e-7


def test_merge_with_masked_blocks():
    empty = (-np.inf, 0.0, np.zeros(3))
    assert merge.block_state(np.full(4, -np.inf), np.ones((4, 3)))[:2] == (-np.inf, 0.0)
    m, l, u = merge.merge(empty, empty)
    assert m == -np.inf and l == 0.0 and not np.isnan(u).any()
    a = merge.block_state(np.array([0.5, -1.0]), np.eye(2, 3))
    assert merge.merge(a, empty)[1] == a[1] and merge.merge(empty, a)[1] == a[1]


@pytest.mark.parametrize("n_keys, d, block", [(1, 8, 4), (7, 8, 3), (1000, 64, 64), (4097, 128, 128)])
def test_blocked_attention_equals_softmax_qk_v(n_keys, d, block):
    rng = np.random.default_rng(n_keys)
    q, K, V = rng.standard_normal(d), rng.standard_normal((n_keys, d)) * 2, rng.standard_normal((n_keys, 16))
    ref = merge.attention_reference(q, K, V)
    for loop in (merge.attention_blocked, merge.attention_blocked_running_max):
        assert np.abs(loop(q, K, V, block) - ref).max() < 1e-14


# --- the graders accept right answers and reject the deliberately wrong ones ---------------------

def test_graders(capsys):
    assert ex.check_logsumexp_rows(reference.logsumexp)
    assert ex.check_logsumexp_rows(osm.logsumexp)
    assert not ex.check_logsumexp_rows(lambda x: np.log(np.exp(x.astype(np.float64)).sum(axis=1)))
    assert ex.check_merge_attention(merge.merge)

    def unguarded(a, b):
        (m_a, l_a, u_a), (m_b, l_b, u_b) = a, b
        m = max(m_a, m_b)
        alpha, beta = np.exp(m_a - m), np.exp(m_b - m)
        return m, alpha * l_a + beta * l_b, alpha * u_a + beta * u_b

    assert not ex.check_merge_attention(unguarded)
    assert ex.check_probabilities_from_lse(lambda s, lse: np.exp(s - lse[:, None]))
    assert not ex.check_probabilities_from_lse(lambda s, lse: np.exp(s - s.max(axis=1, keepdims=True)))
    printed = capsys.readouterr().out
    assert "passed" in printed and "FAILED" in printed
