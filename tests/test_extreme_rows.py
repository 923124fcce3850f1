"""The extreme-row matrix (extremes.extreme_rows): rows near +-1e10, near finfo.max, all finfo.min, finfo.min
with one finfo.max, -1e30 + noise, one +inf, all -inf but one, one NaN, +inf and NaN, in every dtype, through
every softmax, log_softmax, logsumexp and softmax + top-k kernel: on numpy (the kernels' NumPy models, CPU
tier) and on cupy (the kernels, GPU tier, where torch on the same tensors is a second referee).

Each row is judged against its own float64 reference with the book's rule (checks.compare_*): error at most
twice a same-dtype baseline's plus two ulps of the row's largest output, NaN exactly where the reference has
NaN, +-inf exactly where it has +-inf. The reference follows torch and scipy (checked here against scipy):
softmax and log_softmax give NaN rows for +inf or NaN, logsumexp gives +inf for +inf without NaN."""
import numpy as np
import pytest
import scipy.special

import onlinesoftmax as osm
from onlinesoftmax import api, checks, reference
from onlinesoftmax import extremes
from onlinesoftmax.kernels.softmax import fast_models as models
from onlinesoftmax.registry import REGISTRY

from test_logsumexp import log_softmax_compare, lse_compare
from test_softmax_topk import selects_on

COLS_CPU = (1, 7, 33, 1000, 4097)
COLS_GPU = (1, 7, 33, 1000, 4097, 32768, 131072)
SOFTMAX = [v for v in osm.variants("softmax") if not v.name.endswith("_unguarded") and v.name != "softmax_00_naive"]
LOG_SOFTMAX = osm.variants("log_softmax")
TOPK = [v for v in osm.variants("softmax_topk") if v.name != "softmax_topk_01_topk_only"]


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def cols(xp, variant=None):
    limit = variant.max_cols if variant is not None else 1 << 40
    return [n for n in (COLS_CPU if xp is np else COLS_GPU) if n <= limit]


def host(a):
    return checks.host(a)


def each_row(compare, y, x):
    """compare(y_row, x_row) row by row: a row's tolerance comes from its own values."""
    for r, name in enumerate(extremes.EXTREME_ROWS):
        passed, message = compare(y[r:r + 1], x[r:r + 1])
        if not passed:
            return False, f"row {name!r}: {message}"
    return True, "every row"


def torch_tensor(x):
    """The same bits as a torch tensor on the GPU (None where torch is missing)."""
    torch = pytest.importorskip("torch")
    import cupy

    if x.dtype.name == "bfloat16":
        return torch.as_tensor(cupy.ascontiguousarray(x).view(cupy.uint16), device="cuda").view(torch.bfloat16)
    return torch.as_tensor(cupy.ascontiguousarray(x), device="cuda")


def same_pattern(ours, theirs) -> bool:
    """NaN, +inf and -inf in the same places."""
    a, b = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return all(np.array_equal(f(a), f(b)) for f in (np.isnan, np.isposinf, np.isneginf))


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_reference_follows_scipy_on_extreme_rows(dtype):
    x64 = checks.as_float64(extremes.extreme_rows(np, 257, dtype))
    with np.errstate(all="ignore"):
        assert same_pattern(reference.softmax(x64), scipy.special.softmax(x64, axis=1))
        # scipy's log_softmax of a row holding +inf is -inf beside a NaN; torch's (and ours) is NaN throughout
        finite_max = ~np.isposinf(x64).any(axis=1)
        assert same_pattern(reference.log_softmax(x64)[finite_max], scipy.special.log_softmax(x64, axis=1)[finite_max])
        assert np.isnan(reference.log_softmax(x64)[~finite_max]).all()
        assert same_pattern(reference.logsumexp(x64), scipy.special.logsumexp(x64, axis=1))
    lse = reference.logsumexp(x64)
    assert lse[extremes.EXTREME_ROWS.index("one +inf")] == np.inf
    assert np.isnan(lse[extremes.EXTREME_ROWS.index("+inf and NaN")])


@pytest.mark.parametrize("variant", SOFTMAX, ids=lambda v: v.name)
def test_softmax_on_extreme_rows(xp, variant):
    for dtype in variant.dtypes:
        for n_cols in cols(xp, variant):
            x = extremes.extreme_rows(xp, n_cols, dtype)
            y = checks.run_checked(lambda x, out: api.run(variant, x, out=out), x)
            passed, message = each_row(checks.compare_softmax, y, x)
            assert passed, f"{variant.name} {dtype} N={n_cols}: {message}"


@pytest.mark.parametrize("variant", LOG_SOFTMAX, ids=lambda v: v.name)
def test_log_softmax_on_extreme_rows(xp, variant):
    for dtype in variant.dtypes:
        for n_cols in cols(xp, variant):
            x = extremes.extreme_rows(xp, n_cols, dtype)
            y = checks.run_checked(lambda x, out: api.run(variant, x, out=out), x)
            passed, message = each_row(lambda a, b: log_softmax_compare(host(a), host(b)), y, x)
            assert passed, f"{variant.name} {dtype} N={n_cols}: {message}"


@pytest.mark.parametrize("variant", ("auto", *(v.name for v in osm.variants("logsumexp"))))
@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_logsumexp_on_extreme_rows(xp, dtype, variant):
    """Through variant="auto" and each logsumexp kernel by name (logsumexp_03_split cuts the rows into
    chunks: a +inf, a NaN or the maximum lands in one chunk and the merge must carry it)."""
    for n_cols in cols(xp):
        x = extremes.extreme_rows(xp, n_cols, dtype)
        lse = checks.run_checked(lambda x, out: osm.logsumexp(x, out=out, variant=variant), x, shape=(x.shape[0],),
                                 dtype="float32")
        passed, message = each_row(lambda a, b: lse_compare(host(a), host(b)), lse, x)
        assert passed, f"logsumexp {variant} {dtype} N={n_cols}: {message}"
        assert host(lse)[extremes.EXTREME_ROWS.index("one +inf")] == np.inf, "+inf without NaN gives +inf"


@pytest.mark.parametrize("variant", TOPK, ids=lambda v: v.name)
def test_softmax_topk_on_extreme_rows(xp, variant):
    for dtype in variant.dtypes:
        for n_cols in cols(xp, variant):
            k = min(5, n_cols)
            x = extremes.extreme_rows(xp, n_cols, dtype)
            try:
                probs, columns, lse = osm.softmax_topk(x, k, variant=variant.name, return_lse=True)
            except ValueError:   # a kernel that does not take this N or k (its plan says which)
                continue
            passed, message = checks.compare_topk(probs, columns, x, k, selects_on=selects_on(variant), lse=lse)
            assert passed, f"{variant.name} {dtype} N={n_cols}: {message}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_extreme_rows_agree_with_torch(dtype):
    """On the GPU, the public functions against torch on the same tensors: values within the book's rule
    (torch's error counts as a baseline), NaN and +-inf in the same places."""
    import cupy
    torch = pytest.importorskip("torch")

    for n_cols in COLS_GPU:
        x = extremes.extreme_rows(cupy, n_cols, dtype)
        t = torch_tensor(x)
        for ours, theirs in ((osm.softmax(x), torch.softmax(t.float(), dim=1).to(t.dtype)),
                             (osm.log_softmax(x), torch.log_softmax(t.float(), dim=1).to(t.dtype)),
                             (osm.logsumexp(x), torch.logsumexp(t.float(), dim=1))):
            cupy.cuda.get_current_stream().synchronize()
            a = checks.as_float64(host(ours))
            b = theirs.double().cpu().numpy()
            assert same_pattern(a, b), f"{dtype} N={n_cols}: NaN/inf pattern differs from torch"


def folded_softmax(x):
    """The wrong answer of the 16-bit kernels before: 2^(fma(x, log2e, -m log2e)), m log2e rounded first."""
    x32 = models.as_float32(x)
    with np.errstate(all="ignore"):
        m = x32.max(axis=1, keepdims=True)
        m_log2e = (m * models.LOG2E).astype(np.float32)
        e = np.exp2((x32.astype(np.float64) * np.float64(models.LOG2E) - m_log2e).astype(np.float32))
        return models.to_storage(e / e.sum(axis=1, keepdims=True, dtype=np.float32), x.dtype.name)


def test_the_extreme_rows_reject_the_folded_exponent():
    x = extremes.extreme_rows(np, 1000, "bfloat16")
    assert not each_row(checks.compare_softmax, folded_softmax(x), x)[0]
    assert each_row(checks.compare_softmax, osm.softmax(x), x)[0]


def test_the_extreme_rows_reject_nan_for_plus_inf():
    x = extremes.extreme_rows(np, 1000, "float32")
    m, l = reference.row_stats(checks.as_float64(x))
    with np.errstate(all="ignore"):
        state_lse = (m + np.log(l)).astype(np.float32)   # m + log l: NaN for +inf
    assert not each_row(lse_compare, state_lse, x)[0]


def test_the_extreme_rows_reject_an_all_zero_softmax():
    x = extremes.extreme_rows(np, 33, "float16")
    wrong = np.zeros_like(x)
    assert not each_row(checks.compare_softmax, wrong, x)[0]


def test_every_extreme_row_is_what_its_name_says():
    for dtype in checks.DTYPES:
        x = checks.as_float64(extremes.extreme_rows(np, 64, dtype))
        named = dict(zip(extremes.EXTREME_ROWS, x))
        assert np.isfinite(x[:6]).all(), f"{dtype}: the magnitude rows must be finite in their dtype"
        assert (named["all finfo.min"] == -extremes.FINFO_MAX[dtype]).all()
        assert np.isposinf(named["one +inf"]).sum() == 1 and not np.isnan(named["one +inf"]).any()
        assert np.isneginf(named["all -inf but one"]).sum() == 63
        assert np.isnan(named["one NaN"]).sum() == 1
        assert np.isnan(named["+inf and NaN"]).any() and np.isposinf(named["+inf and NaN"]).any()
        assert np.abs(named["near +1e10"]).min() > (5e4 if dtype == "float16" else 9e9)
