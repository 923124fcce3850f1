"""GPU tier for the fast kernels softmax_07 .. softmax_13 and the "fast" dispatcher (fp32, fp16, bf16)."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import api, checks
from onlinesoftmax.kernels import dispatch
from onlinesoftmax.kernels.softmax import fast as kf
from onlinesoftmax.kernels.softmax import fast_configs as configs
from onlinesoftmax import checks
from onlinesoftmax.runtime import driver

pytestmark = pytest.mark.gpu

FAST = tuple(v.name for v in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS)
CLUSTERED = ("softmax_10_cluster", "softmax_12_pipelined")


def run_checked(name, x, **options):
    """Poisoned output, synchronize (surfaces CUDA errors), nothing left unwritten."""
    out = checks.poisoned_like(x)
    if name == "fast":
        y = osm.softmax(x, variant="fast", out=out)
    else:
        y = api.run(osm.REGISTRY[name], x, out=out, **options)
    cp.cuda.Device().synchronize()
    assert y is out
    assert checks.unwritten(y) == 0, f"{name}: outputs left unwritten"
    return y


def assert_close(name, y, x):
    passed, message = checks.compare_softmax(y, x)
    assert passed, f"{name} {x.shape}: {message}"


def fits(name, n_cols):
    return name == "fast" or n_cols <= osm.REGISTRY[name].max_cols


def test_cluster_launch_works_on_hopper():
    """Reported first: whether softmax_10 can run (else the dispatcher uses softmax_11)."""
    print("cluster launch:", driver.cluster_status())
    if int(cp.cuda.Device().compute_capability) >= 90:
        assert driver.cluster_launch_works(), driver.cluster_status()


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS)
@pytest.mark.parametrize("n_rows", checks.EDGE_ROWS)
@pytest.mark.parametrize("name", FAST + ("fast",))
def test_edge_matrix(name, n_rows, n_cols, dtype):
    if not fits(name, n_cols):
        pytest.skip(f"{name} holds at most {osm.REGISTRY[name].max_cols} columns")
    if name in CLUSTERED and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=n_rows * 7919 + n_cols)
    assert_close(name, run_checked(name, x), x)


@pytest.mark.parametrize("n_cols", checks.HUGE_COLS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", ("softmax_09_shared", "softmax_10_cluster", "softmax_11_split", "softmax_12_pipelined",
                                  "softmax_13_cooperative", "fast"))
def test_rows_of_a_million(name, dtype, n_cols):
    if name in CLUSTERED and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    x = checks.random_rows(cp, 3, n_cols, dtype, seed=n_cols)
    assert_close(name, run_checked(name, x), x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", (1, 3, 8, 100, 257, 1024, 4097, 32768, 65536))
@pytest.mark.parametrize("name", FAST + ("fast",))
def test_special_rows(name, n_cols, dtype):
    """-inf entries, an all -inf row (NaN), +inf (NaN row), NaN (NaN row), as torch."""
    if not fits(name, n_cols):
        pytest.skip("row too long for this kernel")
    if name in CLUSTERED and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    x, nan_rows = checks.special_rows(cp, n_cols, dtype)
    y = run_checked(name, x)
    y64 = checks.as_float64(y)
    assert (cp.isnan(y64).all(axis=1).get() == nan_rows).all(), "NaN rows differ from torch's convention"
    assert not bool(cp.isnan(y64[~cp.asarray(nan_rows)]).any()), "unexpected NaN"
    assert_close(name, y, x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", FAST + ("fast",))
def test_misaligned_and_strided_views(name, dtype):
    """Views that start at an odd element, skip rows, or stride columns: right, never wrong."""
    if name in CLUSTERED and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    for n_cols in (1001, 1024, 8192):
        base = checks.random_rows(cp, 9, n_cols + 8, dtype, seed=n_cols)
        views = (base[:, 1:n_cols + 1], base[::2, :n_cols], base[1::3, 3:n_cols - 2], base[:, : 2 * (n_cols // 2):2],
                 base[:, 8:])
        for view in views:
            if not fits(name, view.shape[1]):
                continue
            y = run_checked(name, view)
            assert_close(name, y, view)
    # a misaligned `out` view (rows start 4 bytes past 16-byte alignment)
    x = checks.random_rows(cp, 5, 1024, dtype, seed=3)
    big = checks.poisoned_like(checks.random_rows(cp, 5, 1025, dtype, seed=4))
    out = big[:, 1:]
    y = osm.softmax(x, variant=name, out=out) if name == "fast" else api.run(osm.REGISTRY[name], x, out=out)
    cp.cuda.Device().synchronize()
    assert checks.unwritten(y) == 0
    assert_close(name, y, x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", FAST)
def test_scalar_path_on_aligned_rows(name, dtype):
    """The V = 1 builds, forced on aligned data, agree with the reference too."""
    if name in CLUSTERED and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    for n_cols in (5, 256, 1000, 4096, 30000, 100000):
        if not fits(name, n_cols):
            continue
        x = checks.random_rows(cp, 7, n_cols, dtype, seed=n_cols + 1)
        assert_close(name, run_checked(name, x, vec=1), x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_chunks", (1, 2, 4, 8, 16))
def test_cluster_sizes_and_partial_cache(n_chunks, dtype):
    if not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    for n_rows, n_cols in ((3, 70001 if dtype == "float32" else 70000), (5, 4096), (2, 100)):
        x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=n_chunks)
        assert_close("softmax_10_cluster", run_checked("softmax_10_cluster", x, n_chunks=n_chunks), x)
        # only a part of each chunk cached: the rest is read twice
        y = run_checked("softmax_10_cluster", x, n_chunks=n_chunks, cache_elems=512)
        assert_close("softmax_10_cluster", y, x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_chunks", (1, 2, 4, 8, 16))
def test_pipelined_rows_per_cluster_and_partial_cache(n_chunks, dtype):
    """softmax_12: few resident clusters, so each loops over many rows (both state parities,
    a last round where some clusters idle), a partial cache, and rows shorter than the cluster."""
    if not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    name = "softmax_12_pipelined"
    for n_rows, n_cols in ((13, 70000), (7, 4096), (5, 96)):
        x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=n_chunks + n_cols)
        for options in ({}, {"max_clusters": 3}, {"max_clusters": 1, "cache_elems": 512}):
            y = run_checked(name, x, n_chunks=n_chunks, **options)
            assert_close(name, y, x)
            cache = {k: v for k, v in options.items() if k == "cache_elems"}
            z = run_checked("softmax_10_cluster", x, n_chunks=n_chunks, **cache)  # same partition and order
            assert bool((y == z).all()), f"softmax_12 != softmax_10 at {x.shape} {options}"


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_cooperative_groups_loop_and_chunk_counts(dtype):
    """softmax_13: one or three groups looping over many rows, more chunks than threads (the fold merge),
    empty chunks past the row's end, a single chunk; the group count changes no bit of the result."""
    name = "softmax_13_cooperative"
    for n_rows, n_cols in ((13, 70000), (7, 4096), (5, 96), (3, 300001)):
        host = checks.to_dtype(checks.random_rows(np, n_rows, n_cols, seed=n_rows + n_cols), dtype)
        x = checks.on_device(cp, host)
        reference = run_checked(name, x)
        assert_close(name, reference, x)
        for options in ({"max_groups": 1}, {"max_groups": 3}, {"prefetch": False}, {"prefetch": False, "max_groups": 2}):
            y = run_checked(name, x, **options)
            assert bool((y == reference).all()), f"{name}: {options} changed the result at {x.shape}"
        buffers = configs.coop_buffers(kf._vec_for(x, x, None))
        for n_chunks in (1, 5, 700):
            if buffers * -(-n_cols // n_chunks) * x.itemsize > configs.SHARED_LIMIT_BYTES:
                continue
            y = run_checked(name, x, n_chunks=n_chunks, max_groups=2)
            assert_close(name, y, x)
            model = api.run(osm.REGISTRY[name], host, n_chunks=n_chunks)
            np.testing.assert_allclose(checks.as_float64(y).get(), checks.as_float64(model), rtol=8 * checks.EPS[dtype], atol=1e-30)


def test_cooperative_refuses_chunks_that_do_not_fit():
    x = checks.random_rows(cp, 2, 1 << 20, "float32", seed=1)
    with pytest.raises(ValueError, match="shared memory"):
        api.run(osm.REGISTRY["softmax_13_cooperative"], x, n_chunks=2)
    assert_close("softmax_13_cooperative", run_checked("softmax_13_cooperative", x), x)  # context still healthy


@pytest.mark.parametrize("name", ("softmax_10_cluster", "softmax_12_pipelined", "softmax_13_cooperative"))
def test_shared_memory_limit_is_never_lowered_between_shapes(name):
    """A large-chunk shape, a small-chunk shape of the same kernel, the large one again: the second
    must not lower the kernel's shared-memory limit under the first's cached launch configuration
    (found on the H200: softmax_12 failed with CUDA_ERROR_INVALID_VALUE at 10 x 1M in a benchmark)."""
    if name in CLUSTERED and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    options = {"n_chunks": 4} if name != "softmax_12_pipelined" else {"n_chunks": 4, "max_clusters": 2}
    big = checks.random_rows(cp, 3, 4 * 24000, "float32", seed=1)      # ~94 KB chunks (x 2 buffers for 13)
    small = checks.random_rows(cp, 5, 4 * 4096, "float32", seed=2)     # 16 KB chunks
    for x in (big, small, big, small, big):
        assert_close(name, run_checked(name, x, **options), x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_shared_with_partial_cache_and_split_chunk_counts(dtype):
    x = checks.random_rows(cp, 4, 300000, dtype, seed=9)
    for cache in (0, 1024, 100000):
        assert_close("softmax_09_shared", run_checked("softmax_09_shared", x, cache_elems=cache), x)
    for n_chunks in (1, 3, 64, 1000):
        assert_close("softmax_11_split", run_checked("softmax_11_split", x, n_chunks=n_chunks), x)
        # the output launch is a programmatic dependent launch: the same bits as an ordinary launch
        plain = run_checked("softmax_11_split", x, n_chunks=n_chunks, programmatic=False)
        assert bool((plain == run_checked("softmax_11_split", x, n_chunks=n_chunks)).all())


def test_split_dependent_launch_back_to_back():
    """Many stats/output pairs queued without a host sync: every output waits for its own stats."""
    name = "softmax_11_split"
    xs = [checks.random_rows(cp, 2, 1 << 20, "float32", seed=s) for s in range(6)]
    outs = [checks.poisoned_like(x) for x in xs]
    for x, out in zip(xs, outs):
        api.run(osm.REGISTRY[name], x, out=out)
    cp.cuda.Device().synchronize()
    for x, out in zip(xs, outs):
        assert checks.unwritten(out) == 0
        assert_close(name, out, x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", FAST)
def test_gpu_kernels_match_their_models(name, dtype):
    """The NumPy model follows the kernel's partition: same NaN pattern, values within an ulp or two."""
    if name in CLUSTERED and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())
    for n_cols in (33, 1000, 4096, 20000):
        if not fits(name, n_cols):
            continue
        host = checks.to_dtype(checks.random_rows(np, 5, n_cols, seed=n_cols), dtype)
        host[1, 3] = np.nan
        gpu = checks.as_float64(run_checked(name, checks.on_device(cp, host))).get()
        model = checks.as_float64(osm.softmax(host, variant=name))
        assert (np.isnan(gpu) == np.isnan(model)).all()
        finite = ~np.isnan(model)
        np.testing.assert_allclose(gpu[finite], model[finite], rtol=8 * checks.EPS[dtype], atol=1e-30)


@pytest.mark.parametrize("name", FAST + ("fast",))
def test_bad_gpu_input(name):
    def call(x, **kw):
        return osm.softmax(x, variant="fast", **kw) if name == "fast" else osm.softmax(x, variant=name, **kw)

    with pytest.raises(TypeError):
        call(cp.ones((2, 8), dtype=cp.int32))
    x3 = checks.random_rows(cp, 6, 40, "float32").reshape(2, 3, 40)    # leading axes are rows
    cp.testing.assert_array_equal(call(x3), call(x3.reshape(6, 40)).reshape(2, 3, 40))
    if name == "fast":   # the chooser computes float64 and empty arrays exactly, as torch does
        assert call(cp.ones((2, 8), dtype=cp.float64)).dtype == cp.float64
        assert call(cp.ones((0, 4), dtype=cp.float32)).shape == (0, 4)
    else:                # a named kernel takes neither, and says so
        with pytest.raises(TypeError, match="got float64"):
            call(cp.ones((2, 8), dtype=cp.float64))
        with pytest.raises(ValueError, match="at least one element"):
            call(cp.ones((0, 4), dtype=cp.float32))
    with pytest.raises(ValueError):
        call(cp.ones((2, 8), dtype=cp.float32), out=cp.ones((2, 8), dtype=cp.float16))
    if name != "fast" and osm.REGISTRY[name].max_cols < 2**31 - 1:
        with pytest.raises(ValueError, match="at most"):
            call(cp.ones((2, osm.REGISTRY[name].max_cols + 1), dtype=cp.float32))
    if name not in ("fast", "softmax_02_online", "softmax_03_online_masked"):
        with pytest.raises(ValueError, match="takes no mask"):
            call(cp.ones((2, 8), dtype=cp.float32), causal=True)
    x = checks.random_rows(cp, 2, 8, "float32")
    assert_close(name, run_checked(name, x), x)  # the context is still healthy


def test_dispatch_runs_the_chosen_kernel():
    """auto runs what dispatch.choose names, bit for bit, and that output passes the reference check
    (the rows of 24K-32K that go back to the registers included)."""
    shapes = ((4000, 256), (4000, 4096), (64, 65536), (1, 1 << 20), (10, 1 << 20), (1024, 32000), (512, 32768),
              (64, 24576), (8, 32000))
    for dtype in ("float32", "bfloat16"):
        for n_rows, n_cols in shapes:
            choice = dispatch.choose(n_rows, n_cols, dtype)
            x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=n_cols)
            y = run_checked("fast", x)
            z = run_checked(choice.variant.name, x)
            assert bool((y.view(cp.uint16 if dtype != "float32" else cp.float32) ==
                         z.view(cp.uint16 if dtype != "float32" else cp.float32)).all()), \
                f"fast != {choice.variant.name} at {n_rows}x{n_cols} {dtype}"
            assert_close(choice.variant.name, y, x)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("function", ("softmax", "log_softmax", "logsumexp"))
def test_a_plain_repeated_call_answers_each_new_input(function, dtype, monkeypatch):
    """f(x) with every other argument at its default: after the first call, each call is the plan's
    pointer launch (api._plain) on the arrays of that call. New inputs of the same layout, each
    against float64; the slow path ran once; an output array from an earlier call is left alone."""
    slow = []
    real_call = api._call
    monkeypatch.setattr(api, "_call", lambda *args: slow.append(args[0]) or real_call(*args))
    call = getattr(osm, function)
    reference_of = {"softmax": osm.reference.softmax, "log_softmax": osm.reference.log_softmax,
                    "logsumexp": osm.reference.logsumexp}[function]
    outputs = []
    for seed in range(4):
        x = checks.random_rows(cp, 37, 3000, dtype, seed=seed)
        y = call(x)
        cp.cuda.Device().synchronize()
        ref = reference_of(checks.as_float64(x))
        y64 = checks.as_float64(y)
        assert not bool(cp.isnan(y64).any())
        tolerance = 4 * checks.EPS[dtype] * (float(cp.abs(ref).max()) + 1)
        assert float(cp.abs(y64 - ref).max()) <= tolerance, (function, dtype, seed)
        outputs.append((y, y64.copy()))
    assert slow == [function], "only the first call may take the slow path"
    for y, first in outputs:   # every call got its own output, none was overwritten by a later one
        assert bool((checks.as_float64(y) == first).all())


def test_compiled_resources_have_no_local_memory():
    for variant in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS:
        table = kf.resources_table(variant)
        assert table, variant.name
        for entry, report in table.items():
            assert report.registers > 0 and report.stack_bytes == 0, (entry, report)


# ---- rows at any start: the 16-byte builds of softmax_09 .. 12 on odd N and rows off 16 bytes -------------

ANY_START = ("softmax_09_shared", "softmax_10_cluster", "softmax_11_split", "softmax_12_pipelined")
ODD_COLS = (1, 3, 31, 33, 50257, 100003, 262147)
ANY_START_OPTIONS = {
    "softmax_09_shared": ({}, {"cache_elems": 512}, {"cache_elems": 0}),
    "softmax_10_cluster": ({}, {"n_chunks": 2}, {"n_chunks": 16, "cache_elems": 512}),
    "softmax_11_split": ({}, {"n_chunks": 3}, {"n_chunks": 64}),
    "softmax_12_pipelined": ({}, {"max_clusters": 1}, {"n_chunks": 4, "max_clusters": 2, "cache_elems": 512}),
}


def same_phase_layouts(n_rows, n_cols, dtype, seed):
    """(label, x, out, out's allocation) with x's and out's rows in the same phase, so the 16-byte builds run:
    contiguous odd-N rows (the phase moves from row to row), x[:, 1:] of rows N + 1 wide, x[1:, :] and
    x[1:, 2:] of rows N + 3 wide; each out is the same view of a poisoned array shaped like x's."""
    x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=seed)
    out = checks.poisoned_like(x)
    layouts = [("contiguous", x, out, out)]
    for extra, cut in ((1, (slice(None), slice(1, None))), (3, (slice(1, None), slice(0, n_cols))),
                       (3, (slice(1, None), slice(2, n_cols + 2)))):
        base = checks.random_rows(cp, n_rows + 1, n_cols + extra, dtype, seed=seed + extra)
        poisoned = checks.poisoned_like(base)
        view, out_view = base[cut][:n_rows], poisoned[cut][:n_rows]
        assert view.shape == (n_rows, n_cols)
        layouts.append((f"rows {n_cols + extra} wide, [{cut[0].start}:, {cut[1].start}:]", view, out_view, poisoned))
    return layouts


def skip_without_clusters(name):
    from onlinesoftmax.runtime import driver

    if name in ("softmax_10_cluster", "softmax_12_pipelined") and not driver.cluster_launch_works():
        pytest.skip(driver.cluster_status())


def bits_of(y):
    """The raw bits of a (possibly strided) result, for bit-for-bit comparisons and copies in every dtype."""
    return y.view(cp.uint16 if y.itemsize == 2 else cp.uint32)


def repoison(allocation):
    bits_of(allocation)[...] = bits_of(checks.poisoned_like(allocation))


def close_to_reference(y, x) -> tuple[bool, str]:
    """checks.compare, except that fp32 may also be within 4 ulps of the largest output. A 16-byte build adds a
    thread's terms to its running l one at a time in fp32 (row_chunk.cuh), 1 + small + small ..., so a short row
    that one element dominates can lose up to ~4 ulps of its largest output where the scalar build (one element
    per thread) loses 1: measured on the H200 at N = 33 (3.99 ulps in softmax_09 .. 12 alike, every thread's
    (m, l) within 1.1 ulps of exact). Aligned rows take the same arithmetic; checks.compare allows 2 ulps + twice
    the baseline's error."""
    from onlinesoftmax import reference

    passed, message = checks.compare_softmax(y, x)
    if passed or x.dtype.name != "float32":
        return passed, message
    ref = reference.softmax(checks.as_float64(x))
    err = checks.max_abs_error(checks.as_float64(y), ref)
    scale = float(cp.abs(ref[cp.isfinite(ref)]).max())
    return bool(err <= 4 * checks.EPS["float32"] * scale), message + f" (4 ulps: {4 * checks.EPS['float32'] * scale:.3e})"


def run_into(name, x, out, **options):
    y = api.run(osm.REGISTRY[name], x, out=out, **options)
    cp.cuda.Device().synchronize()
    assert y is out
    return y


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", ODD_COLS)
@pytest.mark.parametrize("name", ANY_START)
def test_rows_at_any_start_take_the_16_byte_build(name, n_cols, dtype):
    """Odd N, rows off 16 bytes whose phase may change from row to row, x and out in the same phase: the
    16-byte build runs (head, vectors, tail per row), writes every element of out and nothing around it,
    and matches the float64 reference; with chunk counts, partial caches and few persistent clusters."""
    skip_without_clusters(name)
    for label, x, out, allocation in same_phase_layouts(5, n_cols, dtype, seed=n_cols):
        assert kf._vec_for(x, out, None, any_start=True) == configs.vector_width(dtype), label
        for options in ANY_START_OPTIONS[name]:
            repoison(allocation)
            y = run_into(name, x, out, **options)
            assert checks.unwritten(y) == 0, f"{name} {label} {options}: outputs left unwritten"
            assert checks.unwritten(allocation) == allocation.size - y.size, f"{name} {label} {options}: wrote outside out"
            passed, message = close_to_reference(y, x)
            assert passed, f"{name} {x.shape} {label} {options}: {message}"


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_pipelined_rows_at_any_start_equal_the_cluster_kernel(dtype):
    """softmax_12 on rows whose heads differ from row to row (so a chunk's vector count changes between the
    rows a cluster loops over, and the refill copies the next row's count): the same bits as softmax_10."""
    skip_without_clusters("softmax_12_pipelined")
    for n_cols in (33, 4097, 50257, 100003):
        for label, x, out, _ in same_phase_layouts(9, n_cols, dtype, seed=n_cols + 5):
            for n_chunks in (1, 2, 4, 16):
                for options in ({}, {"max_clusters": 1}, {"max_clusters": 2, "cache_elems": 512}):
                    repoison(out)
                    y = bits_of(run_into("softmax_12_pipelined", x, out, n_chunks=n_chunks, **options)).copy()
                    assert checks.unwritten(out) == 0
                    cache = {k: v for k, v in options.items() if k == "cache_elems"}
                    repoison(out)
                    z = bits_of(run_into("softmax_10_cluster", x, out, n_chunks=n_chunks, **cache))
                    assert bool((y == z).all()), f"softmax_12 != softmax_10 at {x.shape} {label} C={n_chunks} {options}"


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", ANY_START)
def test_rows_at_any_start_match_their_models(name, dtype):
    """The NumPy models split rows where the kernels do (from the arrays' addresses): host rows laid out in
    the same phases as the device rows give the same values within an ulp or two."""
    skip_without_clusters(name)
    for n_cols in (3, 33, 4097, 50257):
        host = checks.to_dtype(checks.random_rows(np, 5, n_cols + 1, seed=n_cols), dtype)
        host[1, 3] = np.nan
        raw = np.zeros(host.nbytes + 16, dtype=np.uint8)      # host rows at the device rows' phases
        skip = (-raw.ctypes.data) % 16
        host_base = raw[skip:skip + host.nbytes].view(host.dtype).reshape(host.shape)
        host_base[...] = host
        device_base = checks.on_device(cp, host_base)
        out_base = checks.poisoned_like(device_base)
        for cut in ((slice(None), slice(1, None)), (slice(None), slice(0, n_cols))):
            host_x, x, out = host_base[cut], device_base[cut], out_base[cut]
            assert host_x.ctypes.data % 16 == x.data.ptr % 16
            assert kf._vec_for(x, out, None, any_start=True) > 1
            y = run_into(name, x, out)
            assert checks.unwritten(y) == 0
            gpu = checks.as_float64(y).get()
            model = checks.as_float64(api.run(osm.REGISTRY[name], host_x))
            assert (np.isnan(gpu) == np.isnan(model)).all()
            finite = ~np.isnan(model)
            np.testing.assert_allclose(gpu[finite], model[finite], rtol=8 * checks.EPS[dtype], atol=1e-30)


NEG_INF_BITS = {"float32": 0xFF800000, "float16": 0xFC00, "bfloat16": 0xFF80}


def one_hot_positions(n_cols, vec):
    """Columns that walk over a row's head, its last vectors and tail, and the edges of the chunks the
    plans cut (any row's head is < vec, so edges of its vector part lie within vec of k * chunk)."""
    from onlinesoftmax.kernels.softmax import fast_configs as configs

    cols = set(range(min(n_cols, 2 * vec + 2))) | set(range(max(0, n_cols - 2 * vec - 2), n_cols))
    for n_chunks in (2, 3, 4, 16, 64):
        chunk = configs.chunk_elems_for(n_cols, n_chunks, vec)
        for k in range(1, min(n_chunks, 4)):
            cols |= {c for c in range(k * chunk - vec - 1, k * chunk + 2 * vec + 1) if 0 <= c < n_cols}
    return sorted(cols)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", ANY_START)
def test_one_hot_rows_at_any_start_are_exact(name, dtype):
    """Rows of -inf with a single 0 that walks over heads, chunk edges and tails, in every phase: the output
    is exactly 1 there and 0 elsewhere (an element counted twice in (m, l) gives 0.5, one missed NaN, one
    written twice or by the wrong thread a wrong place)."""
    skip_without_clusters(name)
    vec = configs.vector_width(dtype)
    for n_cols in (3, 33, 4097, 50257):
        cols = np.repeat(one_hot_positions(n_cols, vec), vec)   # vec rows per column: every phase meets it
        for label, x, out, allocation in same_phase_layouts(len(cols), n_cols, dtype, seed=1):
            bits = bits_of(x)
            bits[...] = NEG_INF_BITS[dtype]
            bits[cp.arange(len(cols)), cp.asarray(cols)] = 0
            expected = np.zeros(x.shape)
            expected[np.arange(len(cols)), cols] = 1.0
            for options in ANY_START_OPTIONS[name]:
                repoison(allocation)
                y = checks.as_float64(run_into(name, x, out, **options)).get()
                wrong = np.argwhere(y != expected)
                assert not len(wrong), (f"{name} N={n_cols} {label} {options}: {len(wrong)} wrong, first at "
                                        f"{wrong[:3].tolist()} = {[y[tuple(w)] for w in wrong[:3]]}")
