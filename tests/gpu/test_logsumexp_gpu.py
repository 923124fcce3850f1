"""GPU tier for logsumexp_01_online, logsumexp_03_split, log_softmax_01_online, log_softmax_02_registers and log_softmax_03_split in float32,
float16 and bfloat16: edge matrix, special rows, views, every lane-group size, poisoned outputs,
agreement with the NumPy models, bad input. log_softmax_02 holds rows of up to 32K: the edge
matrix's longer rows check that its plan refuses them.

The kernels are launched through their plans (runtime/plan.py's get_runner, what the API calls),
so these tests hold whatever the public functions route. Every output is judged against the
float64 reference: the LSE (float32 for every input dtype) with the float32 rule, log_softmax with
the rule of x's dtype (twice the error of float32 math rounded once to the dtype, plus two ulps).
"""
import threading

import numpy as np
import cupy as cp
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference, simulate as sim
from onlinesoftmax.kernels.logsumexp import online as kl
from onlinesoftmax.runtime.loader import get_kernel, resources_from_device
from onlinesoftmax.runtime.plan import get_runner

pytestmark = pytest.mark.gpu

EPS32 = float(np.finfo(np.float32).eps)
DTYPES = checks.DTYPES
LSE = osm.REGISTRY["logsumexp_01_online"]
LOG_SOFTMAX = osm.REGISTRY["log_softmax_01_online"]
LOG_SOFTMAX_02 = osm.REGISTRY["log_softmax_02_registers"]
SPLIT = osm.REGISTRY["logsumexp_03_split"]
LOG_SOFTMAX_03 = osm.REGISTRY["log_softmax_03_split"]
LOG_SOFTMAX_04 = osm.REGISTRY["log_softmax_04_shared"]
LOG_SOFTMAX_05 = osm.REGISTRY["log_softmax_05_cluster"]
LOG_SOFTMAXES = pytest.mark.parametrize("variant", (LOG_SOFTMAX, LOG_SOFTMAX_02, LOG_SOFTMAX_04, LOG_SOFTMAX_05),
                                        ids=lambda v: v.name)


def gpu_rows(n_rows, n_cols, dtype="float32", seed=0, **kwargs):
    return checks.random_rows(cp, n_rows, n_cols, dtype, seed=seed, **kwargs)


def to_dtype(x32, dtype):
    """A float32 cupy array rounded to `dtype` (bf16 through its bits)."""
    return checks.from_float32(x32, dtype)


def rows_of(x):
    """x as the kernels take it: unit column stride, non-negative row stride (a copy otherwise,
    as the API makes); 16-bit arrays are copied as their bits."""
    if x.strides[1] == x.itemsize and x.strides[0] >= 0 and x.strides[0] % x.itemsize == 0:
        return x
    if x.itemsize == 2:
        return cp.ascontiguousarray(x.view(cp.uint16)).view(x.dtype)
    return cp.ascontiguousarray(x)


def to_host(x):
    """cupy -> numpy, bf16 through its bits."""
    if x.dtype.name == "bfloat16":
        return x.view(cp.uint16).get().view(checks.np_dtype("bfloat16"))
    return x.get()


def lse_checked(x, out=None, variant=LSE, **options):
    """LSE on a poisoned float32 output; synchronize (surfaces CUDA errors); nothing left unwritten."""
    x = rows_of(x)
    out = cp.empty(x.shape[0], cp.float32) if out is None else out
    out.fill(checks.POISON["float32"])
    get_runner(variant, x, out, options)(x, out, **options)
    cp.cuda.Device().synchronize()
    assert out.dtype == cp.float32 and checks.unwritten(out) == 0, "LSE left outputs unwritten"
    return out


def log_softmax_checked(x, out=None, variant=LOG_SOFTMAX, **options):
    """log_softmax on a poisoned output of x's dtype (a poison no log-probability can be); an `out`
    passed in must come poisoned (checks.poisoned_like)."""
    x = rows_of(x)
    out = checks.poisoned_like(x) if out is None else out
    assert checks.unwritten(out) == out.size, "pass a poisoned out"
    get_runner(variant, x, out, options)(x, out, **options)
    cp.cuda.Device().synchronize()
    assert out.dtype == x.dtype and checks.unwritten(out) == 0, "log_softmax left outputs unwritten"
    return out


def assert_lse_close(y, x):
    """checks.tolerance in float32, plus 4 fp32 eps: log l carries l's relative error (each exp2f is
    good to ~2 ulp). The baseline: the LSE in float32 of x (which float32 holds exactly)."""
    x64 = checks.as_float64(rows_of(x))
    ref = reference.logsumexp(x64)
    err = checks.max_abs_error(y, ref)
    base_err = checks.max_abs_error(reference.logsumexp_same_dtype(x64.astype(cp.float32)), ref)
    tol = checks.tolerance(base_err if np.isfinite(base_err) else 0.0, ref, np.float32) + 4 * EPS32
    assert err <= tol, f"logsumexp {x.dtype} {x.shape}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def rounded(y32, dtype):
    """float32 values rounded once to `dtype`, as float64."""
    if dtype == "float16":
        return y32.astype(cp.float16).astype(cp.float64)
    if dtype == "bfloat16":   # NaN kept apart: round_to_bf16's bit trick carries NaN 0x7fffffff into the sign
        return cp.where(cp.isnan(y32), cp.nan, checks.round_to_bf16(y32).astype(cp.float64))
    return y32.astype(cp.float64)


def assert_log_softmax_close(y, x):
    dtype = x.dtype.name
    assert y.dtype == x.dtype
    x64 = checks.as_float64(rows_of(x))
    ref = reference.log_softmax(x64)
    err = checks.max_abs_error(checks.as_float64(y), ref)
    base_err = checks.max_abs_error(rounded(reference.log_softmax_same_dtype(x64.astype(cp.float32)), dtype), ref)
    base_err = base_err if np.isfinite(base_err) else 0.0
    finite = cp.abs(ref[cp.isfinite(ref)])
    scale = max(float(finite.max()) if finite.size else 1.0, 1.0)
    tol = 2.0 * base_err + 2.0 * checks.EPS[dtype] * scale
    assert err <= tol, f"log_softmax {dtype} {x.shape}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
def test_logsumexp_edge_matrix(n_rows, n_cols, dtype):
    x = gpu_rows(n_rows, n_cols, dtype, seed=n_rows * 7919 + n_cols)
    assert_lse_close(lse_checked(x), x)


@LOG_SOFTMAXES
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS + (513, 1024, 1025, 32000, 32768))
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
def test_log_softmax_edge_matrix(variant, dtype, n_rows, n_cols):
    x = gpu_rows(n_rows, n_cols, dtype, seed=n_rows * 7919 + n_cols + 1)
    if n_cols > variant.max_cols:
        with pytest.raises(ValueError, match="at most"):
            log_softmax_checked(x, variant=variant)
        return
    assert_log_softmax_close(log_softmax_checked(x, variant=variant), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
def test_rows_of_a_million(n_cols, dtype):
    x = gpu_rows(3, n_cols, dtype, seed=n_cols)
    assert_lse_close(lse_checked(x), x)
    assert_log_softmax_close(log_softmax_checked(x), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", (1, 3, 100, 257, 4097, 65536))
def test_special_rows(n_cols, dtype):
    """Rows of all -inf, with NaN, with +inf, with some -inf; log_softmax_02 where the row fits."""
    x, nan_rows = checks.special_rows(cp, n_cols, dtype)
    lse = lse_checked(x).get()
    assert lse[1] == -np.inf, "a row of all -inf has LSE -inf (log 0), not NaN"
    assert lse[2] == np.inf, "a row holding +inf has LSE +inf, as torch and scipy"
    assert (np.isnan(lse) == (np.arange(len(nan_rows)) == 3)).all(), "NaN exactly for the row holding NaN"
    assert_lse_close(cp.asarray(lse), x)
    for variant in (LOG_SOFTMAX, LOG_SOFTMAX_03, LOG_SOFTMAX_04, LOG_SOFTMAX_05) + ((LOG_SOFTMAX_02,) if n_cols <= LOG_SOFTMAX_02.max_cols else ()):
        y = log_softmax_checked(x, variant=variant)
        y_host, x_host = checks.as_float64(y).get(), checks.as_float64(x).get()
        assert (np.isnan(y_host).all(axis=1) == nan_rows).all(), f"{variant.name}: all -inf, +inf and NaN rows must be NaN"
        assert not np.isnan(y_host[~nan_rows]).any(), f"{variant.name}: unexpected NaN"
        assert (y_host[~nan_rows][np.isneginf(x_host[~nan_rows])] == -np.inf).all(), variant.name
        assert_log_softmax_close(y, x)


@pytest.mark.parametrize("group", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
def test_every_group_size(group):
    for n_cols in (1, 5, 33, 1000, 4097, 65536):
        x32 = gpu_rows(7, n_cols, seed=group + n_cols)
        for dtype in DTYPES:
            x = to_dtype(x32, dtype)
            assert_lse_close(lse_checked(x, group=group), x)
            assert_log_softmax_close(log_softmax_checked(x, group=group), x)


@pytest.mark.parametrize("n_cols", (1001, 1024, 4096))
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_and_strided_views(dtype, n_cols):
    """Views whose rows are off 16 bytes or N % V != 0 take the scalar builds (log_softmax_02's
    scalar rows past 512 columns its block builds)."""
    base = gpu_rows(9, n_cols, dtype, seed=5)
    views = (base[:, 1:], base[:, 3:-2], base[:, 7:], base[::2], base[1::3, 5:], base[:, ::2],
             base.T[:500].T, base[::-1], base[:, 1:2], base[:, :512], base[:, 8:])
    for view in views:
        for variant in (LOG_SOFTMAX, LOG_SOFTMAX_02, LOG_SOFTMAX_04, LOG_SOFTMAX_05):
            assert_log_softmax_close(log_softmax_checked(view, variant=variant), view)
        assert_lse_close(lse_checked(view), view)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_rows, n_cols", [(1, 1), (3, 4097), (10, 2**20), (7, 300001), (131, 65536), (1, 2**24)])
def test_split_on_few_long_rows(n_rows, n_cols, dtype):
    """logsumexp_03_split at its own chunk count, one chunk, a few, and as many as the row allows."""
    x = gpu_rows(n_rows, n_cols, dtype, seed=n_rows + n_cols)
    for n_chunks in (None, 1, 5, min(1024, -(-n_cols // 64))):
        assert_lse_close(lse_checked(x, variant=SPLIT, n_chunks=n_chunks), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", (3, 4097, 200003))
def test_split_on_special_rows_and_views(dtype, n_cols):
    """+inf, NaN and all -inf rows with the special value in some chunk of many; views off 16 bytes."""
    x, nan_rows = checks.special_rows(cp, n_cols, dtype)
    for n_chunks in (None, 3, min(1024, -(-n_cols // 64))):
        lse = lse_checked(x, variant=SPLIT, n_chunks=n_chunks).get()
        assert lse[1] == -np.inf and lse[2] == np.inf
        assert (np.isnan(lse) == (np.arange(len(nan_rows)) == 3)).all(), "NaN exactly for the row holding NaN"
        assert_lse_close(cp.asarray(lse), x)
    base = gpu_rows(5, n_cols + 9, dtype, seed=n_cols)
    for view in (base[:, 1:n_cols + 1], base[::2, 3:n_cols + 3], base[::-1, :n_cols]):
        assert_lse_close(lse_checked(view, variant=SPLIT, n_chunks=7), view)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_rows, n_cols", [(1, 1), (3, 4097), (10, 2**20), (7, 300001), (1, 2**24)])
def test_log_softmax_split_on_few_long_rows(n_rows, n_cols, dtype):
    """log_softmax_03_split at its own chunk count, one, a few and as many as the row allows; views off 16
    bytes, an output at another 16-byte phase than x, and once as two ordinary launches (no PDL)."""
    x = gpu_rows(n_rows, n_cols, dtype, seed=n_rows + n_cols + 2)
    for n_chunks in (None, 1, 5, min(1024, -(-n_cols // 64))):
        assert_log_softmax_close(log_softmax_checked(x, variant=LOG_SOFTMAX_03, n_chunks=n_chunks), x)
    if n_cols > 4:
        view = gpu_rows(n_rows, n_cols + 3, dtype, seed=4)[:, 1:n_cols + 1]
        out = checks.poisoned_like(gpu_rows(n_rows, n_cols + 3, dtype, seed=5))[:, 2:n_cols + 2]
        assert_log_softmax_close(log_softmax_checked(view, out=out, variant=LOG_SOFTMAX_03, n_chunks=7), view)
    y = checks.poisoned_like(x)
    osm.api.run(LOG_SOFTMAX_03, x, out=y, programmatic=False)
    assert_log_softmax_close(y, x)


def test_the_splits_on_two_threads_and_two_streams():
    """Each call takes its own partials buffer on its caller's stream: two threads, each on a stream of its
    own, calling the split kernels in a loop, get what a call alone gets, bit for bit; and on torch's side
    stream (where torch is), the launches go on that stream."""
    xs = [gpu_rows(8, 300001, "bfloat16", seed=s) for s in (1, 2)]
    alone = [(osm.logsumexp(x).get(), checks.as_float64(osm.log_softmax(x)).get()) for x in xs]
    got = [None, None]

    def work(i):
        with cp.cuda.Stream(non_blocking=True) as stream:
            for _ in range(10):
                lse, y = osm.logsumexp(xs[i]), osm.log_softmax(xs[i])
            stream.synchronize()
            got[i] = (lse.get(), checks.as_float64(y).get())
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(2):
        assert np.array_equal(got[i][0], alone[i][0]) and np.array_equal(got[i][1], alone[i][1])
    torch = pytest.importorskip("torch")
    side = torch.cuda.Stream()
    t = torch.as_tensor(checks.as_float64(xs[0]), device="cuda").to(torch.bfloat16)
    side.wait_stream(torch.cuda.current_stream())   # t is made on torch's default stream: the side stream waits
    with torch.cuda.stream(side):
        lse = osm.logsumexp(t)
    side.synchronize()
    assert np.array_equal(lse.cpu().numpy(), alone[0][0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_auto_splits_ten_rows_of_a_million_and_matches_the_model(dtype):
    x = gpu_rows(10, 2**20, dtype, seed=3)
    lse = osm.logsumexp(x)
    assert_lse_close(lse, x)
    model = SPLIT.simulate(to_host(x))
    assert np.abs(lse.get() - model).max() <= 4 * EPS32 * max(1.0, np.abs(model).max())
    y = osm.log_softmax(x)
    assert_log_softmax_close(y, x)
    y_model = checks.as_float64(LOG_SOFTMAX_03.simulate(to_host(x)))
    assert (np.abs(checks.as_float64(y).get() - y_model) <= np.abs(y_model) * checks.EPS[dtype] + 1e-5).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_output_with_another_alignment_than_the_input(dtype):
    """y's rows start at other 16-byte phases than x's: the kernel must fall back to scalar stores."""
    x_base = gpu_rows(5, 2051, dtype, seed=6)
    for x_view, shift in ((x_base[:, :2048], 1), (x_base[:, 1:2049], 0), (x_base[:, 3:2051], 2)):
        out = checks.poisoned_like(x_base)[:, shift:shift + 2048]
        assert_log_softmax_close(log_softmax_checked(x_view, out=out), x_view)
    lse_base = cp.empty(6, cp.float32)
    x = x_base[:, :2048]
    assert_lse_close(lse_checked(x, out=lse_base[1:]), x)  # a misaligned LSE output is fine (scalar writes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_rows(dtype):
    x = gpu_rows(100_003, 5, dtype, seed=12)
    assert_lse_close(lse_checked(x), x)
    assert_log_softmax_close(log_softmax_checked(x), x)
    assert_log_softmax_close(log_softmax_checked(x, variant=LOG_SOFTMAX_02), x)
    x = gpu_rows(16_387, 256, dtype, seed=13)   # many rows of 256: the shape the registers exist for
    assert_log_softmax_close(log_softmax_checked(x, variant=LOG_SOFTMAX_02), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_kernels_match_their_models(dtype):
    """The models follow the kernels' schedule; told the GPU array's row phases, they agree to ~ulps:
    the LSE to 4 fp32 eps, log_softmax to one ulp of x's dtype (fp32: 4 eps)."""
    for n_cols in (3, 1000, 4097):
        x = gpu_rows(7, n_cols + 2, dtype, seed=n_cols)[:, 1:-1]  # misaligned rows
        phases = sim.row_heads(x)
        host = to_host(x)
        lse_gpu, lse_model = lse_checked(x).get(), kl.simulate_logsumexp(host, phases=phases)
        assert lse_model.dtype == np.float32
        assert np.abs(lse_gpu - lse_model).max() <= 4 * EPS32 * max(1.0, np.abs(lse_model).max())
        y_gpu = checks.as_float64(log_softmax_checked(x)).get()
        y_model = kl.simulate_log_softmax(host, phases=phases)
        assert y_model.dtype == host.dtype
        y_model = checks.as_float64(y_model)
        if dtype == "float32":
            assert np.abs(y_gpu - y_model).max() <= 4 * EPS32 * max(1.0, np.abs(y_model).max())
        else:
            ulp = np.abs(y_model) * checks.EPS[dtype]   # one ulp of the dtype at each value (at most)
            assert (np.abs(y_gpu - y_model) <= ulp + 1e-7).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_softmax_02_matches_its_model(dtype):
    """log_softmax_02's model follows its layout (lane groups, blocks, the scalar builds): the kernel
    agrees with it to 4 fp32 eps (fp32) or one ulp of the dtype."""
    for n_cols, cut in ((3, 0), (256, 0), (1000, 0), (1000, 1), (4097, 0), (32000, 0), (600, 1)):
        base = gpu_rows(7, n_cols + cut, dtype, seed=n_cols)
        x = base[:, cut:] if cut else base   # cut: misaligned rows, the scalar builds
        host = to_host(x)
        y_gpu = checks.as_float64(log_softmax_checked(x, variant=LOG_SOFTMAX_02)).get()
        y_model = checks.as_float64(LOG_SOFTMAX_02.simulate(host, vec=1 if cut else None))
        if dtype == "float32":
            assert np.abs(y_gpu - y_model).max() <= 4 * EPS32 * max(1.0, np.abs(y_model).max()), n_cols
        else:
            assert (np.abs(y_gpu - y_model) <= np.abs(y_model) * checks.EPS[dtype] + 1e-7).all(), n_cols


def test_16_bit_entries_compute_in_float32():
    """fp16 / bf16 input: the LSE equals the fp32 entry's on the widened input to a few fp32 eps
    (only the vector schedule differs), far below a 16-bit ulp."""
    x32 = gpu_rows(9, 3000, seed=2)
    for dtype in ("float16", "bfloat16"):
        x = to_dtype(x32, dtype)
        widened = checks.as_float64(x).astype(cp.float32)
        a, b = lse_checked(x).get(), lse_checked(widened).get()
        assert np.abs(a - b).max() <= 4 * EPS32 * max(1.0, np.abs(b).max()), dtype


def test_public_functions_on_cupy_take_every_dtype():
    """The API routes all three dtypes to the one variant: log_softmax in x's dtype, the LSE float32."""
    x32 = gpu_rows(4, 300, seed=3)
    for dtype in DTYPES:
        x = to_dtype(x32, dtype)
        lse, y = osm.logsumexp(x), osm.log_softmax(x)
        assert lse.dtype == cp.float32 and lse.shape == (4,), dtype
        assert y.dtype == x.dtype and y.shape == x.shape, dtype
        assert_lse_close(lse, x)
        assert_log_softmax_close(y, x)
    from onlinesoftmax.kernels import dispatch   # auto: registers up to 32K, two passes past it
    assert dispatch.choose_log_softmax(4, 300).variant is LOG_SOFTMAX_02
    x = gpu_rows(2, 40000, seed=4)
    assert dispatch.choose_log_softmax(*x.shape).variant is LOG_SOFTMAX
    assert_log_softmax_close(osm.log_softmax(x), x)


def test_bad_gpu_input_then_a_healthy_context():
    with pytest.raises(TypeError, match="int64"):
        osm.logsumexp(cp.ones((2, 8), dtype=cp.int64))
    with pytest.raises(TypeError, match="int32"):
        osm.log_softmax(cp.ones((2, 8), dtype=cp.int32))
    # float64 and no rows are computed exactly, without a kernel (onlinesoftmax/exact.py)
    assert cp.allclose(osm.logsumexp(cp.ones((2, 8), dtype=cp.float64)), 1 + np.log(8), rtol=1e-15)
    assert osm.log_softmax(cp.ones((0, 4), dtype=cp.float32)).shape == (0, 4)
    with pytest.raises(ValueError):
        osm.logsumexp(cp.ones((2, 8), cp.float32), out=cp.empty((2, 8), cp.float32))
    with pytest.raises(ValueError):
        osm.api.run(LSE, cp.ones((2, 8), cp.float32), group=48)
    x16 = cp.ones((2, 8), cp.float16)
    with pytest.raises(TypeError, match="float32"):   # the LSE is never written in 16 bits
        LSE.plan(LSE, x16, cp.empty(2, cp.float16))
    with pytest.raises(TypeError):                    # nor log_softmax in another dtype than x's
        LOG_SOFTMAX.plan(LOG_SOFTMAX, x16, cp.empty((2, 8), cp.float32))
    with pytest.raises(TypeError):
        LOG_SOFTMAX_02.plan(LOG_SOFTMAX_02, x16, cp.empty((2, 8), cp.float32))
    with pytest.raises(ValueError, match="32768"):
        LOG_SOFTMAX_02.plan(LOG_SOFTMAX_02, cp.ones((2, 40000), cp.float32), cp.empty((2, 40000), cp.float32))
    for dtype in DTYPES:
        x = gpu_rows(2, 8, dtype)
        assert_lse_close(lse_checked(x), x)
        assert_log_softmax_close(log_softmax_checked(x), x)
        assert_log_softmax_close(log_softmax_checked(x, variant=LOG_SOFTMAX_02), x)


def test_compiled_resources_are_reported():
    """Every entry of the files: no local memory, registers within what its block size allows (64 for
    1024-thread blocks; log_softmax_02's 128-thread groups up to 255)."""
    for variant in (LSE, LOG_SOFTMAX, LOG_SOFTMAX_02):
        for entry in variant.launched_entries:
            report = resources_from_device(get_kernel(variant.path, entry, variant.defines))
            layout = entry.rsplit("_", 1)[-1]   # log_softmax_02: g<G> (128-thread blocks) or t<T>
            threads = 1024 if variant is not LOG_SOFTMAX_02 else 128 if layout[0] == "g" else int(layout[1:])
            assert 0 < report.registers <= min(255, 65536 // threads) and report.stack_bytes == 0, (entry, report)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_rows, n_cols", [(3, 32769), (64, 50257), (2, 70001), (5, 131072), (2, 300001)])
def test_log_softmax_shared_past_registers_and_past_its_cache(n_rows, n_cols, dtype):
    """log_softmax_04_shared on rows past 32K: cached whole, and longer than its cache (the rest read again),
    at its own cache size, a small one and none; the values agree with its NumPy model."""
    x = gpu_rows(n_rows, n_cols, dtype, seed=n_rows * 31 + n_cols)
    for cache in (None, 1024, 0):
        assert_log_softmax_close(log_softmax_checked(x, variant=LOG_SOFTMAX_04, cache_elems=cache), x)
    y_model = checks.as_float64(LOG_SOFTMAX_04.simulate(to_host(x)))
    y_gpu = checks.as_float64(log_softmax_checked(x, variant=LOG_SOFTMAX_04)).get()
    assert np.abs(y_gpu - y_model).max() <= 4 * checks.EPS[dtype] * max(1.0, np.abs(y_model).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_rows, n_cols", [(1, 1), (3, 4097), (8, 151936), (2, 1048576), (130, 65536)])
def test_log_softmax_cluster_sizes_and_caches(n_rows, n_cols, dtype):
    """log_softmax_05_cluster at its own cluster size and at 1, 2 and 16 blocks a row, caches whole, small
    and none; the values agree with its NumPy model."""
    x = gpu_rows(n_rows, n_cols, dtype, seed=n_rows * 37 + n_cols)
    for n_chunks in (None, 1, 2, 16):
        for cache in (None, 1024, 0):
            assert_log_softmax_close(log_softmax_checked(x, variant=LOG_SOFTMAX_05, n_chunks=n_chunks,
                                                         cache_elems=cache), x)
    y_model = checks.as_float64(LOG_SOFTMAX_05.simulate(to_host(x)))
    y_gpu = checks.as_float64(log_softmax_checked(x, variant=LOG_SOFTMAX_05)).get()
    assert np.abs(y_gpu - y_model).max() <= 4 * checks.EPS[dtype] * max(1.0, np.abs(y_model).max())
