"""softmax_topk and topk_logits against the float64 definition (reference.softmax_topk: softmax of the
row, then its k largest with ties toward the lower index), every kernel by name, on numpy (each
kernel's NumPy model) and on cupy (the kernel into poisoned outputs, GPU tier): every dtype, awkward
lengths, k from 1 to 1024, ties, -inf / +inf / NaN rows, views; the replays of the lists, threshold
and radix select against the exact selection; wrong answers the check must reject; bad arguments."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference, topk
from onlinesoftmax.kernels.topk import softmax_topk as kt
from onlinesoftmax.kernels.topk import moe
from onlinesoftmax.kernels.topk import split as sp
from onlinesoftmax.kernels.topk import keys as tk
from onlinesoftmax.kernels.topk import rows_model as rm

from test_logsumexp import Addressed

COLS = (1, 2, 3, 31, 33, 100, 257, 1000, 4097)
KS = (1, 2, 5, 16, 17, 32)
PROBABILITY_KERNELS = (kt.SAFE_UNFUSED, kt.SAFE_FUSED, kt.ONLINE_FUSED, sp.SPLIT)   # any N
NAMES = [v.name for v in PROBABILITY_KERNELS]


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def run(variant, x, k: int, renormalize: bool = False):
    """(probs, columns, lse): the model on numpy x; on cupy x the kernel, into poisoned outputs."""
    if isinstance(x, np.ndarray):
        return variant.simulate(x, k, renormalize)
    import cupy

    rows = x.shape[0]
    probs = checks.poisoned_like(x, shape=(rows, k))
    columns = cupy.full((rows, k), checks.COLUMN_POISON, dtype=cupy.int64)
    lse = checks.poisoned_like(x, dtype="float32", shape=(rows,))
    topk.run(variant, x, k, renormalize, probs, columns, lse)
    cupy.cuda.Device().synchronize()
    return probs, columns, lse


def selects_on(variant) -> str:
    return "probabilities" if variant is kt.SAFE_UNFUSED else "logits"


def assert_topk(variant, x, k, renormalize=False):
    probs, columns, lse = run(variant, x, k, renormalize)
    ok, message = checks.compare_topk(probs, columns, x, k, renormalize, selects_on(variant), lse=lse)
    assert ok, f"{variant.name} k={k} renormalize={renormalize}: {message}"


@pytest.mark.parametrize("n_cols", COLS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_matches_the_definition(xp, name, dtype, n_cols):
    variant = osm.REGISTRY[name]
    x = checks.random_rows(xp, 5, n_cols, dtype, seed=n_cols)
    for k in KS:
        if k <= n_cols:
            assert_topk(variant, x, k)
            assert_topk(variant, x, k, renormalize=True)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_warp_kernel_on_gating_shapes(xp, dtype):
    for n_rows, n_cols in ((1, 8), (9, 64), (17, 257), (3, 1024), (40, 512)):
        x = checks.random_rows(xp, n_rows, n_cols, dtype, seed=n_cols)
        for k in (1, 2, 5, 8):
            assert_topk(moe.WARP_ROWS, x, k)
            assert_topk(moe.WARP_ROWS, x, k, renormalize=True)


@pytest.mark.parametrize("name", NAMES + [moe.WARP_ROWS.name])
def test_ties_and_rows_with_inf_and_nan(xp, name):
    variant = osm.REGISTRY[name]
    ties = np.array([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0] * 6, [0.0] * 36, [-0.0, 0.0] * 18], np.float32)
    special, _ = checks.special_rows(np, 300)
    for x, ks in ((ties, (1, 4, 8)), (special, (1, 5, 8))):
        for k in ks:
            assert_topk(variant, checks.on_device(xp, x), k)
            assert_topk(variant, checks.on_device(xp, x), k, renormalize=True)
    all_neg_inf = checks.on_device(xp, np.full((2, 40), -np.inf, np.float32))
    probs, columns, lse = run(variant, all_neg_inf, 3)
    assert np.isnan(checks.host(probs)).all() and checks.host(columns).tolist() == [[0, 1, 2]] * 2
    assert (checks.host(lse) == -np.inf).all()


@pytest.mark.parametrize("name", NAMES)
def test_misaligned_and_strided_rows(xp, name):
    variant = osm.REGISTRY[name]
    for dtype in ("float32", "bfloat16"):
        base = checks.random_rows(xp, 6, 4200, dtype, seed=4)
        for view in (base[:, 3:4100], base[1::2, 1:], base[:, 5:2000]):
            assert_topk(variant, view, 7)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_split_kernel_takes_large_k(xp, dtype):
    for n_rows, n_cols, ks in ((3, 4097, (33, 50, 300, 1024)), (2, 20000, (50, 1000)), (2, 1024, (1024,)),
                               (4, 700, (64, 700))):
        x = checks.random_rows(xp, n_rows, n_cols, dtype, seed=n_cols)
        for k in ks:
            assert_topk(sp.SPLIT, x, k)
            assert_topk(sp.SPLIT, x, k, renormalize=True)


def test_the_split_kernel_over_many_chunks(xp):
    """Batch 1 and a vocabulary: many chunks per row, the head and tail in the first and last."""
    for n_cols in (32000, 151936):
        x = checks.random_rows(xp, 1, n_cols, "bfloat16", seed=n_cols)[:, 1:]
        shape = sp.split_shape(1, x.shape[1], 20, "bfloat16")
        assert shape.n_chunks >= 8
        for k in (1, 20, 50):
            assert_topk(sp.SPLIT, x, k)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_topk_logits_is_the_k_largest_logits(xp, dtype):
    x = checks.random_rows(xp, 7, 1000, dtype, seed=11)
    special, _ = checks.special_rows(np, 300, dtype)
    for rows in (x, checks.on_device(xp, special)):
        for k in (1, 5, 32):
            values, columns = osm.topk_logits(rows, k)
            x64 = np.asarray(checks.as_float64(checks.host(rows)))
            want = reference.topk_order(x64)[:, :k]
            np.testing.assert_array_equal(checks.host(columns), want)
            got = np.asarray(checks.as_float64(checks.host(values)))
            np.testing.assert_array_equal(got, np.take_along_axis(x64, want, axis=1))   # NaN == NaN here


def test_n_d_input_another_axis_and_auto(xp):
    x = checks.random_rows(xp, 6, 50, seed=3).reshape(2, 3, 50)
    probs, columns = osm.softmax_topk(x, 5)
    assert probs.shape == columns.shape == (2, 3, 5)
    moved = xp.ascontiguousarray(xp.moveaxis(x, -1, 1))
    probs_1, columns_1 = osm.softmax_topk(moved, 5, axis=1)
    assert probs_1.shape == columns_1.shape == (2, 5, 3), "k takes the place of the axis, as torch.topk(dim=1)"
    np.testing.assert_array_equal(checks.host(columns_1), checks.host(xp.moveaxis(columns, -1, 1)))
    values, columns_2 = osm.topk_logits(moved, 5, axis=1)
    assert values.shape == (2, 5, 3)
    np.testing.assert_array_equal(checks.host(columns_2), checks.host(xp.moveaxis(columns, -1, 1)))
    for shape, k in (((3, 100), 4), ((2, 50000), 20), ((600, 3000), 5), ((2, 3000), 200)):
        x = checks.random_rows(xp, *shape, seed=5)
        probs, columns, lse = osm.softmax_topk(x, k, return_lse=True)
        assert checks.compare_topk(probs, columns, x, k, lse=lse)[0]


# ---- the replays: lists, threshold, radix select (CPU) -------------------------------------------

def test_keys_sort_in_the_order_of_the_definition():
    rng = np.random.default_rng(0)
    x = rng.choice(np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, 1.0, -1.0, 2.5, 1e-42, -1e30], np.float32),
                   size=(20, 64))
    keys = tk.row_keys(x)
    by_keys = np.argsort(keys, axis=1)[:, ::-1]
    np.testing.assert_array_equal(by_keys, reference.topk_order(x))
    values = tk.key_values(keys)
    same = np.isnan(values) == np.isnan(x)
    assert same.all() and ((values == x) | np.isnan(x)).all()   # -0.0 comes back as 0.0 (equal)
    np.testing.assert_array_equal(tk.key_columns(keys), np.broadcast_to(np.arange(64), x.shape))
    assert (keys != tk.EMPTY).all() and tk.key_columns(np.array([0], tk.U64))[0] == -1


@pytest.mark.parametrize("n, k", [(5000, 5), (5000, 1), (10, 20), (4096, 1024), (3000, 2999), (3000, 3000),
                                  (100000, 50), (777, 300)])
def test_the_radix_select_leaves_exactly_k(n, k):
    rng = np.random.default_rng(n + k)
    v = rng.standard_normal(n).astype(np.float32)
    v[::7] = v[0]                                     # many equal values: the column digits decide
    keys = tk.make_keys(v, np.arange(n))
    threshold, passes = tk.radix_kth_key(keys, k)
    chosen = np.sort(keys[keys >= np.uint64(threshold)])[::-1]
    assert len(chosen) == min(n, k) and (chosen == np.sort(keys)[::-1][:k]).all() and 1 <= passes <= 8


def test_the_warp_bitonic_network_sorts():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**63, (50, 32), dtype=np.uint64)
    x[:10, ::3] = 0
    for k in (1, 2, 5, 17, 32):
        np.testing.assert_array_equal(rm.warp_kth_key(x, k), np.sort(x, axis=1)[:, ::-1][:, k - 1])


@pytest.mark.parametrize("n_cols", (1, 3, 33, 257, 1000, 4097, 20000))
@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_the_replayed_lists_hold_the_k_best(n_cols, dtype):
    """Every thread's list with the shared threshold, replayed step by step: the block's k best of the
    lists are the row's k best (the proof's claim), with and without the threshold."""
    x = checks.random_rows(np, 4, n_cols, dtype, seed=n_cols)
    view = checks.random_rows(np, 4, n_cols + 3, dtype, seed=n_cols)[:, 3:]   # other 16-byte phases
    for rows in (x, view):
        for k in (1, 5, 16, 32):
            if k <= n_cols:
                want = tk.top_keys(tk.row_keys(rows), k)
                for shared in (True, False):
                    got = rm.block_top(rm.thread_lists(rows, k, kt.bucket(k), shared=shared), k)
                    np.testing.assert_array_equal(got, want)


def test_the_models_with_replay_agree_with_the_exact_selection():
    x = checks.random_rows(np, 3, 5000, "bfloat16", seed=2)
    special, _ = checks.special_rows(np, 300)
    for rows in (x, special):
        for variant in (kt.SAFE_FUSED, kt.ONLINE_FUSED, kt.SAFE_UNFUSED, sp.SPLIT):
            for k in (1, 7, 32):
                fast = variant.simulate(rows, k, True)
                replayed = variant.simulate(rows, k, True, replay=True)
                np.testing.assert_array_equal(fast[1], replayed[1])
        values, columns = kt.simulate_topk_only(rows, 9, replay=True)
        np.testing.assert_array_equal(columns, reference.topk_order(rows)[:, :9])


@pytest.mark.parametrize("threads", (32, 64))
def test_the_replayed_lists_of_smaller_blocks_hold_the_k_best(threads):
    """The same claim for the 64- and 32-thread blocks block_threads gives many rows: every thread's
    list with the shared threshold of its one or two warps."""
    x = checks.random_rows(np, 3, 9000, "float32", seed=threads)
    view = checks.random_rows(np, 3, 9003, "bfloat16", seed=threads)[:, 3:]
    for rows in (x, view):
        for k in (1, 2, 5, 8):
            want = tk.top_keys(tk.row_keys(rows), k)
            got = rm.block_top(rm.thread_lists(rows, k, kt.bucket(k), threads), k)
            np.testing.assert_array_equal(got, want)


def test_block_threads_follow_the_shape_and_the_build():
    """128 threads a row for few rows, long rows and the lists of 16 and 32; 64 for a thousand rows or
    more; 32 for the list of 8 from 3000 rows. The plan launches that block with the build of that size."""
    bt = kt.block_threads
    assert bt(4000, 32768, 5) == 32 and bt(4000, 8192, 8) == 32 and bt(1024, 32768, 5) == 64
    assert bt(4000, 32768, 1) == bt(4000, 32768, 4) == 64 and bt(2000, 8192, 5) == 64
    assert bt(4000, 32768, 10) == bt(4000, 32768, 32) == 128 and bt(528, 32768, 5) == 128
    assert bt(4000, 131072, 5) == 128 and bt(10, 32768, 1) == 128
    assert kt.build_defines("float32", 5, 128) == kt.build_defines("float32", 5)
    assert "TOPK_THREADS=32" in kt.build_defines("float32", 5, 32) and "TOPK_MIN_BLOCKS_8=16" in kt.build_defines(
        "float32", 5, 32)
    assert "TOPK_THREADS=64" in kt.build_defines("bfloat16", 2, 64)
    launched = []

    def fake_launch(fn, grid, block, shared, cluster, types, fixed=None, **_):
        launched.append((fn, tuple(grid), tuple(block)))
        return lambda *values: None

    built = []
    original = (kt.get_kernel, kt.driver.prepare_launch)
    kt.get_kernel = lambda path, entry, defines=(): built.append((entry, tuple(defines))) or entry
    kt.driver.prepare_launch = fake_launch
    try:
        for variant in (kt.ONLINE_FUSED, kt.SAFE_FUSED, kt.SAFE_UNFUSED, kt.TOPK_ONLY):
            for shape, k, threads in (((4000, 4096), 5, 32), ((1024, 4096), 2, 64), ((100, 4096), 5, 128)):
                x = Addressed(np.zeros(shape, np.float32))
                before = len(launched)
                variant.plan(variant, x, np.zeros((shape[0], k), np.float32), k=k)
                new_launches, new_builds = launched[before:], built[before:]   # 02: its softmax and its select
                assert new_launches and all(grid == (shape[0],) and block == (threads,)
                                            for _, grid, block in new_launches), (variant.name, shape, new_launches)
                assert all((f"TOPK_THREADS={threads}" in defines) == (threads != 128)
                           for _, defines in new_builds), (variant.name, new_builds)
    finally:
        kt.get_kernel, kt.driver.prepare_launch = original


def test_the_threshold_is_what_keeps_pushes_rare():
    """The shared threshold: after the first steps few elements enter a list (fewer walks of a list
    per warp and element slot than with no threshold, where every element enters)."""
    x = np.random.default_rng(0).standard_normal((2, 32768)).astype(np.float32)
    with_threshold, without = rm.ListStats(), rm.ListStats()
    rm.thread_lists(x, 5, kt.bucket(5), stats=with_threshold)
    rm.thread_lists(x, 5, kt.bucket(5), stats=without, shared=False)
    assert without.pushed == without.elements and without.walks_per_slot == 1.0
    assert with_threshold.pushed < 0.2 * with_threshold.elements and with_threshold.walks_per_slot < 0.3


# ---- wrong answers the check rejects ---------------------------------------------------------------

def test_the_check_rejects_wrong_answers():
    x = checks.random_rows(np, 4, 2000, seed=9)
    probs, columns, lse = kt.simulate_online_fused(x, 5)
    assert checks.compare_topk(probs, columns, x, 5, lse=lse)[0]
    # columns of a list shorter than k: thread 0's slice (vectors 0 and 256 of its first step: columns
    # 0 .. 3 and 1024 .. 1027 of an aligned row) holds the row's 8 best, a list of 4 keeps half of them
    crowded = np.zeros((1, 4096), np.float32)
    assert rm.sim.row_heads(crowded)[0] == 0
    crowded[0, [0, 1, 2, 3, 1024, 1025, 1026, 1027]] = np.arange(10, 18)
    short = rm.block_top(rm.thread_lists(crowded, 8, 4), 8)
    good = rm.block_top(rm.thread_lists(crowded, 8, 8), 8)
    p_good, c_good, _ = kt.simulate_online_fused(crowded, 8)
    assert (tk.key_columns(good) == c_good).all() and not (tk.key_columns(short) == c_good).all()
    assert not checks.compare_topk(p_good, tk.key_columns(short), crowded, 8)[0]
    wrong = {"a column off by one": (probs, columns + 1), "swapped ranks": (probs[:, ::-1], columns[:, ::-1]),
             "probabilities over the wrong sum": (probs * np.float32(1.01), columns),
             "a column never written": (probs, np.where(np.arange(5) == 2, checks.COLUMN_POISON, columns)),
             "a probability never written": (np.where(np.arange(5) == 4, np.float32(checks.POISON["float32"]), probs),
                                             columns)}
    for what, (p, c) in wrong.items():
        assert not checks.compare_topk(p, c, x, 5)[0], what
    assert not checks.compare_topk(probs, columns, x, 5, lse=lse + np.float32(1e-3))[0]
    special, _ = checks.special_rows(np, 300)
    p_nan, c_nan, _ = kt.simulate_online_fused(special, 5)
    assert checks.compare_topk(p_nan, c_nan, special, 5)[0]
    assert not checks.compare_topk(np.nan_to_num(p_nan), c_nan, special, 5)[0], "NaN rows must stay NaN"
    # the unfused selection is judged by probabilities: the fused columns pass, a wrong set does not
    p_u, c_u, _ = kt.simulate_safe_unfused(special, 5)
    assert checks.compare_topk(p_u, c_u, special, 5, selects_on="probabilities")[0]
    assert not checks.compare_topk(p_u, c_u, special, 5)[0], "NaN rows of the unfused path return 0 .. k-1"
    assert not checks.compare_topk(probs, columns + 1, x, 5, selects_on="probabilities")[0]


def test_probabilities_flushed_to_zero_tie_and_larger_ones_do_not():
    """Selecting on stored probabilities: under fp32's smallest normal the hardware exponential returns 0,
    so columns whose probabilities are all stored as 0 tie (the H200 returned columns 0 and 1 beside a
    true 8e-45: the row below); a column whose probability is a normal number never swaps with them."""
    x = np.full((1, 31), 15.0, np.float32)
    x[0, 17], x[0, 30], x[0, 0] = 119.6, 18.1, 14.9      # p = 1, 8e-45, 3e-46: the last two stored as 0
    p = np.array([[1.0, 0.0]], np.float32)
    assert checks.compare_topk(p, np.array([[17, 0]]), x, 2, selects_on="probabilities")[0]
    assert checks.compare_topk(p, np.array([[17, 30]]), x, 2, selects_on="probabilities")[0]
    x[0, 30] = 119.6 - 80.0                              # p = e^-80 = 1.8e-35, a normal fp32 number
    assert not checks.compare_topk(p, np.array([[17, 0]]), x, 2, selects_on="probabilities")[0]


# ---- arguments, limits and the choice of kernel ---------------------------------------------------

@pytest.mark.parametrize("k, error, match", [
    (-1, ValueError, "0 .. N"), (2001, ValueError, "0 .. N"),
    (2.0, TypeError, "int"), (True, TypeError, "int"), (1025, ValueError, "at most 1024"),
])
def test_bad_k_is_a_clear_error(k, error, match):
    with pytest.raises(error, match=match):
        osm.softmax_topk(np.ones((2, 2000), np.float32), k)


def test_bad_input_and_kernel_limits_name_what_was_passed():
    with pytest.raises(TypeError, match="float32, float16, bfloat16 or float64, got int32"):
        osm.softmax_topk(np.ones((2, 10), np.int32), 2)
    with pytest.raises(ValueError, match="unknown variant"):
        osm.softmax_topk(np.ones((2, 10), np.float32), 2, variant="heap")
    with pytest.raises(TypeError, match="renormalize"):
        osm.softmax_topk(np.ones((2, 10), np.float32), 2, renormalize="yes")
    x = np.ones((2, 2000), np.float32)
    with pytest.raises(ValueError, match="at most 32.*got k = 33"):
        osm.softmax_topk(x, 33, variant="online_fused")
    with pytest.raises(ValueError, match="k in 1 .. 8"):
        osm.softmax_topk(x[:, :100], 9, variant="warp_rows")
    with pytest.raises(ValueError, match="at most 1024 elements"):
        osm.softmax_topk(np.ones((2, 1025), np.float32), 2, variant="warp_rows")
    with pytest.raises(ValueError, match="topk_logits"):
        osm.softmax_topk(x, 2, variant="topk_only")
    with pytest.raises(ValueError, match="at most 32"):
        osm.topk_logits(x, 40)
    with pytest.raises(ValueError, match="at most 1024.*got 1025"):
        osm.softmax_topk(np.ones((1, 2**20), np.float32), 1025, variant="split")
    with pytest.raises(ValueError, match="takes k in 1 .. 1024"):
        sp.split_shape(1, 2**20, 1025)


def test_auto_chooses_by_rows_length_k_and_dtype():
    def choose(*args, **kwargs):
        return topk.choose(*args, **kwargs).variant

    assert choose(4096, 256, 8, sms=132) is moe.WARP_ROWS and choose(1, 512, 2, sms=132) is moe.WARP_ROWS
    assert choose(4000, 32768, 5, sms=132) is kt.ONLINE_FUSED and choose(4000, 1000, 16, sms=132) is kt.ONLINE_FUSED
    assert choose(4000, 1000, 17, sms=132) is sp.SPLIT                 # above the list bucket of 16
    assert choose(8, 128256, 20, sms=132) is sp.SPLIT and choose(256, 262144, 20, "bfloat16", sms=132) is sp.SPLIT
    # 9 <= k <= 16 on long rows: the split kernel at any number of rows (the lists of 16 lost everywhere)
    assert choose(4000, 32768, 16, sms=132) is sp.SPLIT and choose(4000, 262144, 10, sms=132) is sp.SPLIT
    assert choose(4000, 4096, 16, sms=132) is kt.ONLINE_FUSED       # a 16 KiB row: no split
    # 2 <= k <= 8: a block per row from one and a half rows per SM (198 rows on 132 SMs), split below
    assert choose(256, 262144, 8, "bfloat16", sms=132) is kt.ONLINE_FUSED and choose(198, 128256, 5, sms=132) \
        is kt.ONLINE_FUSED
    assert choose(197, 128256, 5, sms=132) is sp.SPLIT and choose(64, 151936, 8, "bfloat16", sms=132) is sp.SPLIT
    # k = 1: below a quarter of a row per SM, or below 1.5 with rows of 192 KiB or more (a 128256 bf16
    # row of 250.5 KiB splits at 64 rows; the split was the faster there on the H200)
    assert choose(64, 128256, 1, "bfloat16", sms=132) is sp.SPLIT and choose(64, 48000, 1, sms=132) is kt.ONLINE_FUSED
    assert choose(64, 32000, 1, "bfloat16", sms=132) is kt.ONLINE_FUSED and choose(8, 128256, 1, sms=132) is sp.SPLIT
    assert choose(64, 151936, 1, "bfloat16", sms=132) is sp.SPLIT and choose(64, 32000, 1, sms=132) is kt.ONLINE_FUSED
    assert choose(256, 262144, 1, sms=132) is kt.ONLINE_FUSED and choose(197, 65536, 1, sms=132) is sp.SPLIT
    assert choose(4000, 32768, 33, sms=132) is sp.SPLIT and choose(64, 513, 50, sms=132) is sp.SPLIT
    assert choose(8, 4096, 5, sms=132) is kt.ONLINE_FUSED          # a short row: one block reads it
    assert choose(8, 8192, 5, "float32", sms=132) is sp.SPLIT and choose(8, 8192, 5, "bfloat16", sms=132) \
        is kt.ONLINE_FUSED                                          # 32 KiB rows split, 16 KiB do not


def test_the_split_rule():
    for n_rows, n_cols, k in ((1, 32000, 1), (1, 262144, 50), (256, 262144, 1024), (4000, 32768, 100),
                              (8, 151936, 20), (1, 2**20, 256), (1, 2**20, 1024), (3, 100, 3)):
        for dtype in ("float32", "bfloat16"):
            shape = sp.split_shape(n_rows, n_cols, k, dtype)
            step = shape.threads * sp.STEP                       # elements a block reads per step
            chunk = shape.subs * step
            assert shape.n_chunks * chunk >= n_cols - 8 and (shape.n_chunks - 1) * chunk < max(n_cols, 1)
            assert shape.n_chunks * k <= sp.MERGE_CAPACITY and shape.n_chunks <= sp.MAX_CHUNKS
            assert k <= shape.merge_threads <= 1024 and shape.merge_shared_bytes <= 227 * 1024
            assert shape.capacity == k + 2 * shape.threads * sp.SLOTS and shape.chunk_shared_bytes <= 100 * 1024
    one = sp.split_shape(1, 262144, 50)                                       # batch 1: a chunk per step
    assert one.subs == 1 and one.n_chunks == 262144 // (sp.THREADS * sp.STEP)
    many = sp.split_shape(256, 262144, 20)                                    # a full GPU: a few long chunks
    assert many.n_chunks * 256 >= sp.BLOCKS_PER_SM * 132 and many.n_chunks == 3 and many.subs == 22
    assert sp.split_shape(1, 2**20, 1024).n_chunks == 16                      # the merge holds 16 x 1024 keys
    assert sp.max_k(2**20) == 1024 and sp.max_k(262144) == 1024 and sp.max_k(500) == 500
    assert sp.merge_capacity(227 * 1024) == sp.MERGE_CAPACITY and sp.merge_capacity(99 * 1024) < 16384
    with pytest.raises(ValueError, match="got k = 1025"):
        sp.split_shape(1, 2**20, 1025)


def test_the_split_plan_owns_its_records_and_a_call_only_launches(monkeypatch):
    """Without a GPU (cupy, the kernels and the launches faked): the plan allocates the records once,
    both launches hold their address as a fixed argument, and each call of the runner launches the
    chunks kernel with x's address and the merge with the outputs' addresses, allocating nothing."""
    import sys
    import types

    allocated, prepared, calls = [], [], []
    fake_cupy = types.SimpleNamespace(
        uint64=np.uint64,
        cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(
            attributes={"MaxSharedMemoryPerBlockOptin": 227 * 1024})),
        empty=lambda n, dtype: allocated.append(Addressed(np.empty(n, dtype))) or allocated[-1])
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(sp, "get_kernel", lambda path, entry, defines=(): entry)

    def prepare_launch(fn, grid, block, shared, cluster, types_, fixed=None, **_):
        prepared.append((fn, dict(fixed)))
        return lambda *values: calls.append((fn, values))
    monkeypatch.setattr(sp.driver, "prepare_launch", prepare_launch)

    x = Addressed(np.zeros((2, 151936), np.float32))
    probs, columns, lse = (Addressed(np.zeros(shape, dtype)) for shape, dtype in
                           (((2, 20), np.float32), ((2, 20), np.int64), ((2,), np.float32)))
    run = sp.plan_split(sp.SPLIT, x, probs, k=20, columns=columns, lse=lse)
    assert len(allocated) == 1 and allocated[0].shape == (run.shape.record_keys(2),) and run.workspace == tuple(allocated)
    record = allocated[0].data.ptr
    (chunks, chunks_fixed), (merge, merge_fixed) = prepared
    assert chunks.startswith("softmax_topk_06_split_chunks") and chunks_fixed[1] == record
    assert merge.startswith("softmax_topk_06_split_merge") and merge_fixed[0] == record
    for _ in range(2):
        run(x, probs, columns=columns, lse=lse)
    assert len(allocated) == 1, "a call allocated"
    assert calls == [(chunks, (x.data.ptr,)), (merge, (probs.data.ptr, columns.data.ptr, lse.data.ptr))] * 2
    run.launches[0](x.data.ptr)                                       # the launches alone, as the host probe makes them
    run.launches[1](probs.data.ptr, columns.data.ptr, None)
    assert calls[-2:] == [(chunks, (x.data.ptr,)), (merge, (probs.data.ptr, columns.data.ptr, None))]


def test_flags_are_checked_as_booleans():
    x = np.zeros((2, 8), np.float32)
    for name in ("renormalize", "return_lse"):
        with pytest.raises(TypeError, match=f"{name} must be True or False, got 'yes'"):
            osm.softmax_topk(x, 2, **{name: "yes"})
