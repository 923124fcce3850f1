"""CPU tier for logsumexp_03_split and log_softmax_03_split (a few long rows, each split over blocks): the
chunk plan, the NumPy models against the float64 reference and against the one-group-per-row kernels',
the special rows a chunk may hold, variant="auto"'s rules, and the kernels' own sources on the CPU
emulator (both launches, any thread order) against the reference, with broken copies rejected. The GPU
tier (tests/gpu/test_logsumexp_gpu.py) runs them on the device."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.logsumexp import online as lo
from onlinesoftmax.kernels.logsumexp import split

from test_logsumexp import log_softmax_compare, lse_compare


@pytest.mark.parametrize("n_rows, n_cols, dtype", [(10, 2**20, "float32"), (1, 300001, "bfloat16"), (3, 1, "float32"),
                                                    (100, 65536, "float16"), (131, 10**6, "float32"), (1, 64, "float32")])
def test_every_chunk_is_whole_and_non_empty(n_rows, n_cols, dtype):
    for n_chunks in (None, 1, 2, 7, 1024):
        c = split.chunks_for(n_rows, n_cols, dtype, n_chunks, sms=132)
        assert 1 <= c.n_chunks <= split.MAX_CHUNKS and c.chunk_elems % split.PIECE == 0
        assert (c.n_chunks - 1) * c.chunk_elems < n_cols <= c.n_chunks * c.chunk_elems, "every chunk holds elements"
        assert c.merge_threads >= max(32, c.n_chunks) and c.merge_threads & (c.merge_threads - 1) == 0
        assert 32 <= c.threads <= 1024 and c.threads & (c.threads - 1) == 0
    default = split.chunks_for(n_rows, n_cols, dtype, sms=132)
    assert default.chunk_elems * checks.np_dtype(dtype).itemsize >= min(split.MIN_CHUNK_BYTES,
                                                                         n_cols * checks.np_dtype(dtype).itemsize)


def test_the_split_fills_the_gpu():
    c = split.chunks_for(10, 2**20, "float32", sms=132)
    assert 10 * c.n_chunks >= 3 * 132, "ten rows of 2^20: several blocks per SM, not ten blocks"


def test_bad_chunk_counts_are_named():
    with pytest.raises(ValueError, match=r"n_chunks must be in 1 \.\. 1024, got 0"):
        split.chunks_for(1, 100, "float32", 0)
    with pytest.raises(TypeError, match="n_chunks must be an int"):
        split.chunks_for(1, 100, "float32", True)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", (1, 7, 1000, 4097, 65536, 100003))
def test_the_model_meets_the_reference(dtype, n_cols):
    x = checks.random_rows(np, 3, n_cols, dtype, seed=n_cols)
    for n_chunks in (None, 1, 3, 64):
        lse = split.simulate(x, n_chunks=n_chunks)
        passed, message = lse_compare(lse, x)
        assert passed, f"{dtype} N={n_cols} C={n_chunks}: {message}"
    one = split.simulate(x, n_chunks=1)
    if n_cols >= 1000:   # one chunk is logsumexp_01's row with the same lanes: the same bits
        assert np.array_equal(one, lo.simulate_logsumexp(x, group=split.chunks_for(3, n_cols, dtype, 1).threads))


def test_special_rows_survive_the_merge():
    """+inf, NaN, -inf and the maximum each in one chunk of many: the merge carries them."""
    x = np.full((5, 100000), -np.inf, np.float32)
    x[1, 70000] = np.inf                   # +inf in a late chunk: +inf
    x[2, 5] = np.inf
    x[2, 99999] = np.nan                   # +inf in the first chunk, NaN in the last: NaN
    x[3, 50000] = np.nan                   # NaN alone: NaN
    x[4] = np.random.default_rng(0).standard_normal(100000)
    x[4, 12345] = 80.0                     # the maximum in one chunk
    lse = split.simulate(x, n_chunks=40)
    assert lse[0] == -np.inf and lse[1] == np.inf and np.isnan(lse[2]) and np.isnan(lse[3])
    assert abs(lse[4] - reference.logsumexp(x[4:5].astype(np.float64))[0]) < 1e-5 * 80


def test_auto_splits_few_long_rows_only():
    assert split.choose(10, 2**20, "float32", sms=132).variant is split.SPLIT
    assert split.choose(1, 65536, "bfloat16", sms=132).variant is split.SPLIT            # 128 KiB
    assert split.choose(1, 65535, "bfloat16", sms=132).variant.name == "logsumexp_01_online"
    assert split.choose(132, 2**20, "float32", sms=132).variant.name == "logsumexp_01_online"   # a row per SM
    assert split.choose(4000, 32000, "float32", sms=132).variant.name == "logsumexp_01_online"
    x = checks.random_rows(np, 2, 70000, "float32", seed=4)
    assert np.array_equal(osm.logsumexp(x), split.simulate(x)), "auto on numpy runs the split model"
    assert np.array_equal(osm.logsumexp(x, variant="split"), split.simulate(x))


# ---- the kernel's own source on the CPU emulator ------------------------------------------------

@pytest.fixture(scope="module")
def emulated():
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    return emulator.Module(split.SPLIT.path, list(split.SPLIT.launched_entries))


def span(a):
    """A 2-D view with unit column stride (rows strided, starting anywhere) as the one contiguous run of
    memory from its first element to its last: what the kernel is given, its address a's own."""
    if a.flags.c_contiguous:
        return a
    base = a
    while base.base is not None:
        base = base.base
    first = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // a.itemsize
    run = base.reshape(-1).view(a.dtype)[first:first + (a.shape[0] - 1) * (a.strides[0] // a.itemsize) + a.shape[1]]
    assert run.__array_interface__["data"][0] == a.__array_interface__["data"][0] and a.strides[1] == a.itemsize
    return run


def emulate(module, x, n_chunks, schedule="fixed", seed=0):
    """Both launches on x (numpy, 2-D, unit column stride, any row stride and start): states into poisoned
    partials, then the merge into a poisoned LSE."""
    tag = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[x.dtype.name]
    c = split.chunks_for(x.shape[0], x.shape[1], x.dtype.name, n_chunks)
    states, merge = split.launches(x.shape[0], c)
    words = span(x) if x.dtype == np.float32 else span(x).view(np.uint16)
    stride = np.int64(x.strides[0] // x.itemsize)
    partials = np.full(2 * x.shape[0] * c.n_chunks, np.nan, np.float32)
    lse = checks.poisoned_like(x, "float32", (x.shape[0],))
    module.launch(f"logsumexp_03_split_states_{tag}", states.grid, states.block,
                  (words, partials, np.int32(x.shape[1]), stride, np.int32(c.n_chunks), np.int32(c.chunk_elems)),
                  schedule=schedule, seed=seed)
    assert not np.isnan(partials[0::2]).any(), "a chunk's state was never written"
    module.launch(f"logsumexp_03_split_merge_{tag}", merge.grid, merge.block,
                  (words, partials, lse, np.int32(x.shape[1]), stride, np.int32(c.n_chunks)), schedule=schedule, seed=seed)
    assert checks.unwritten(lse) == 0
    return lse


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_kernel_source_meets_the_reference(emulated, dtype):
    for n_rows, n_cols, n_chunks in ((2, 5000, 3), (1, 1000, 1), (3, 2049, 5), (1, 70, 2)):
        x = checks.random_rows(np, n_rows, n_cols, dtype, seed=n_cols)
        lse = emulate(emulated, x, n_chunks)
        passed, message = lse_compare(lse, x)
        assert passed, f"{dtype} {x.shape} C={n_chunks}: {message}"
        assert np.allclose(lse, split.simulate(x, n_chunks=n_chunks), rtol=1e-6, atol=1e-6)


def test_the_kernel_source_on_special_rows_views_and_any_order(emulated):
    x = np.full((4, 3000), -np.inf, np.float32)
    x[1, 2500] = np.inf
    x[2, 10], x[2, 2999] = np.inf, np.nan
    x[3] = np.random.default_rng(1).standard_normal(3000)
    lse = emulate(emulated, x, 4, schedule="random", seed=3)
    assert lse[0] == -np.inf and lse[1] == np.inf and np.isnan(lse[2]) and not np.isnan(lse[3])
    odd = checks.random_rows(np, 3, 2003, "float16", seed=2)   # rows after the first off 16 bytes: scalar heads
    passed, message = lse_compare(emulate(emulated, odd, 3), odd)
    assert passed, message


@pytest.mark.parametrize("change, why", [
    (("split_row_state(partials, row, n_chunks, scratch)", "split_row_state(partials, row, 1, scratch)"),
     "a merge that reads only the first chunk's state"),
    (("n_chunks, chunk_elems);", "n_chunks, chunk_elems / 2);"), "a states launch that reads half of each chunk"),
    (("", ""), None),   # the source as it is: passes
])
def test_the_emulated_check_rejects_a_broken_kernel(change, why):
    """The check above, on the kernel's source with one line changed: it must fail for each bug."""
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    source = split.SPLIT.path.read_text()
    assert change[0] in source
    module = emulator.Module(split.SPLIT.path, list(split.SPLIT.launched_entries), source=source.replace(*change))
    x = checks.random_rows(np, 2, 5000, "float32", seed=9)
    passed, _ = lse_compare(emulate(module, x, 3), x)
    assert passed == (why is None), why


# ---- log_softmax_03_split ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", (1, 1000, 65536, 100003))
def test_the_log_softmax_model_meets_the_reference(dtype, n_cols):
    x = checks.random_rows(np, 3, n_cols, dtype, seed=n_cols + 1)
    for n_chunks in (None, 1, 3, 64):
        y = split.simulate_log_softmax(x, n_chunks=n_chunks)
        passed, message = log_softmax_compare(y, x)
        assert passed, f"{dtype} N={n_cols} C={n_chunks}: {message}"


def test_log_softmax_special_rows_and_auto():
    x, nan_rows = checks.special_rows(np, 70000)
    y = split.simulate_log_softmax(x, n_chunks=9)
    assert (np.isnan(y).all(axis=1) == nan_rows).all() and not np.isnan(y[~nan_rows]).any()
    assert (y[~nan_rows][np.isneginf(x[~nan_rows])] == -np.inf).all()
    assert split.choose_log_softmax(10, 2**20, "float32", sms=132).variant is split.LOG_SOFTMAX_SPLIT
    assert split.choose_log_softmax(4000, 2**20, "float32", sms=132).variant.name == "log_softmax_01_online"
    assert split.choose_log_softmax(10, 4096, "float32", sms=132).variant.name == "log_softmax_02_registers"
    x = checks.random_rows(np, 2, 70000, "bfloat16", seed=5)
    assert np.array_equal(osm.log_softmax(x).view(np.uint16), split.simulate_log_softmax(x).view(np.uint16))


@pytest.fixture(scope="module")
def emulated_log_softmax():
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    v = split.LOG_SOFTMAX_SPLIT
    return emulator.Module(v.path, list(v.launched_entries))


def emulate_log_softmax(module, x, n_chunks, y=None, schedule="fixed", seed=0):
    """Both launches of log_softmax_03 on x (numpy, 2-D, unit column stride, any row stride and start) into
    a poisoned y (or the y given, which may be such a view too)."""
    tag = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[x.dtype.name]
    c = split.chunks_for(x.shape[0], x.shape[1], x.dtype.name, n_chunks)
    grid = (x.shape[0] * c.n_chunks,)
    words = (lambda a: span(a)) if x.dtype == np.float32 else (lambda a: span(a).view(np.uint16))
    y = checks.poisoned_like(x) if y is None else y
    stride = np.int64(x.strides[0] // x.itemsize)
    partials = np.full(2 * x.shape[0] * c.n_chunks, np.nan, np.float32)
    module.launch(f"log_softmax_03_split_states_{tag}", grid, (c.threads,),
                  (words(x), partials, np.int32(x.shape[1]), stride, np.int32(c.n_chunks), np.int32(c.chunk_elems)),
                  schedule=schedule, seed=seed)
    module.launch(f"log_softmax_03_split_output_{tag}", grid, (split.output_threads(c),),
                  (words(x), words(y), partials, np.int32(x.shape[1]), stride, np.int64(y.strides[0] // y.itemsize),
                   np.int32(c.n_chunks), np.int32(c.chunk_elems)), schedule=schedule, seed=seed)
    assert checks.unwritten(y) == 0, "log_softmax_03 left outputs unwritten"
    return y


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_log_softmax_source_meets_the_reference(emulated_log_softmax, dtype):
    for n_rows, n_cols, n_chunks in ((2, 5000, 3), (1, 1000, 1), (3, 2049, 5), (1, 70, 2), (2, 2003, 40)):
        x = checks.random_rows(np, n_rows, n_cols, dtype, seed=n_cols)
        y = emulate_log_softmax(emulated_log_softmax, x, n_chunks, schedule="random", seed=n_cols)
        passed, message = log_softmax_compare(y, x)
        assert passed, f"{dtype} {x.shape} C={n_chunks}: {message}"


def test_the_log_softmax_source_on_special_rows(emulated_log_softmax):
    x, nan_rows = checks.special_rows(np, 3000)
    y = emulate_log_softmax(emulated_log_softmax, x, 7)
    assert (np.isnan(y).all(axis=1) == nan_rows).all() and not np.isnan(y[~nan_rows]).any()
    passed, message = log_softmax_compare(y, x)
    assert passed, message


@pytest.mark.parametrize("change, why", [
    (("split_row_state(partials, c.row, n_chunks, scratch)", "split_row_state(partials, c.row, 1, scratch)"),
     "every block takes its row's first chunk state for the row's"),
    (("y + c.row * y_row_stride + c.start, c.length", "y + c.row * y_row_stride, c.length"),
     "every chunk written at the row's start"),
    (("", ""), None),   # the source as it is: passes
])
def test_the_emulated_log_softmax_check_rejects_a_broken_kernel(change, why):
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    v = split.LOG_SOFTMAX_SPLIT
    source = v.path.read_text()
    assert change[0] in source
    module = emulator.Module(v.path, list(v.launched_entries), source=source.replace(*change))
    x = checks.random_rows(np, 2, 5000, "float32", seed=9)
    y = checks.poisoned_like(x)
    try:
        emulate_log_softmax(module, x, 3, y=y)
        passed, _ = log_softmax_compare(y, x)
    except AssertionError:   # outputs left unwritten
        passed = False
    assert passed == (why is None), why


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_the_plans_launch_what_the_model_describes(dtype, monkeypatch):
    """Without a GPU (fake kernels and launches): each plan builds its file's two entries of x's dtype, with
    the chunk plan's grids, blocks and sizes, and runs them in order on one partials buffer."""
    import cupy

    from test_logsumexp import Addressed, install_fake_kernels

    built = install_fake_kernels(monkeypatch, split)
    monkeypatch.setattr(cupy, "empty", lambda n, dtype: Addressed(np.zeros(n, dtype)))
    x = checks.to_dtype(np.zeros((3, 70000), np.float32), dtype)
    c = split.chunks_for(3, 70000, dtype)
    tag = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    lse = np.zeros(3, np.float32)
    split.SPLIT.plan(split.SPLIT, x, lse)(Addressed(x), Addressed(lse))
    states, merge = built[-2:]
    assert (states.entry, merge.entry) == (f"logsumexp_03_split_states_{tag}", f"logsumexp_03_split_merge_{tag}")
    assert states.launches[0][:2] == ((3 * c.n_chunks,), (c.threads,)) and merge.launches[0][:2] == ((3,), (c.merge_threads,))
    assert states.launches[0][2][2:] == (70000, 70000, c.n_chunks, c.chunk_elems)
    assert states.launches[0][2][1] == merge.launches[0][2][1], "the merge reads the partials the states wrote"
    y = np.zeros_like(x)
    split.LOG_SOFTMAX_SPLIT.plan(split.LOG_SOFTMAX_SPLIT, x, y)(Addressed(x), Addressed(y))
    states, output = built[-2:]
    assert output.entry == f"log_softmax_03_split_output_{tag}"
    assert output.launches[0][:2] == ((3 * c.n_chunks,), (split.output_threads(c),))
    assert output.launches[0][2][1] == y.ctypes.data and output.launches[0][2][3:] == (70000, 70000, 70000, c.n_chunks,
                                                                                       c.chunk_elems)
    with pytest.raises(ValueError, match="float32 of shape"):
        split.SPLIT.plan(split.SPLIT, x, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="unit column stride"):
        split.LOG_SOFTMAX_SPLIT.plan(split.LOG_SOFTMAX_SPLIT, x, np.zeros((3, 70000), np.float64))


# ---- views off 16 bytes, a merge wider than a warp with its scratch checked, C = 1024 -------------

def _view(n_rows, n_cols, dtype, first, spare, seed):
    """Rows of n_cols starting `first` elements into rows of n_cols + first + spare: every row off 16 bytes
    (for first or spare not a multiple of the vector) and a row stride that is no multiple of 16 bytes."""
    return checks.random_rows(np, n_rows, n_cols + first + spare, dtype, seed=seed)[:, first:first + n_cols]


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_both_sources_on_views_off_16_bytes(emulated, emulated_log_softmax, dtype):
    """x a strided view starting anywhere (each chunk's scalar head differs), y of log_softmax at another
    16-byte phase than x (scalar stores) and strided: both kernels meet the reference, nothing between
    y's rows is written."""
    for first, spare, n_cols, n_chunks in ((1, 0, 3001, 5), (3, 6, 2003, 4)):
        x = _view(3, n_cols, dtype, first, spare, seed=first)
        passed, message = lse_compare(emulate(emulated, x, n_chunks, schedule="random", seed=first), x)
        assert passed, f"LSE {dtype} first={first}: {message}"
        y_base = checks.poisoned_like(np.zeros((3, n_cols + 5), np.float32), dtype)
        y = y_base[:, 2:2 + n_cols]
        emulate_log_softmax(emulated_log_softmax, x, n_chunks, y=y, schedule="random", seed=first)
        passed, message = log_softmax_compare(y, x)
        assert passed, f"log_softmax {dtype} first={first}: {message}"
        assert checks.unwritten(y_base) == 3 * 5, "written outside y's rows"


def test_the_merge_reuses_its_scratch_without_a_race(emulated):
    """+inf and NaN rows through a merge of C = 100 states (128 threads: split_row_state's reduction and
    row_lse's +inf re-read both use the shared scratch), with the race check live on that scratch (a
    function template's own static __shared__: the emulator must see it, tests/test_emulator_checks.py)."""
    states = np.tile(np.float32([0.0, 1.0]), 100)
    touched = emulated.launch("logsumexp_03_split_merge_f32", (1,), (128,), (np.zeros(6400, np.float32), states,
                              np.zeros(1, np.float32), np.int32(6400), np.int64(6400), np.int32(100)), stats=True)
    assert touched.shared_bytes == 4 * 8, "the merge's scratch is not seen by the checks"
    x = np.full((3, 64 * 100), -np.inf, np.float32)
    x[0, 6000] = np.inf
    x[1, 10], x[1, 6399] = np.inf, np.nan
    x[2] = np.random.default_rng(1).standard_normal(6400)
    lse = emulate(emulated, x, 100, schedule="random", seed=6)
    assert lse[0] == np.inf and np.isnan(lse[1]) and lse_compare(lse[2:], x[2:])[0]


def test_the_largest_chunk_count(emulated):
    """C = 1024 (the merge's 1024 threads, one state each) on a row off 16 bytes."""
    x = _view(1, 64 * 1023 + 7, "float16", 3, 0, seed=8)
    c = split.chunks_for(1, x.shape[1], "float16", 1024)
    assert (c.n_chunks, c.merge_threads) == (1024, 1024)
    lse = emulate(emulated, x, 1024)
    passed, message = lse_compare(lse, x)
    assert passed, message


def test_a_numpy_integer_chunk_count():
    assert split.chunks_for(3, 100000, "float32", np.int64(7), sms=132) == split.chunks_for(3, 100000, "float32", 7)
