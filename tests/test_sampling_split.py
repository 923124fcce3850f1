"""CPU tier for sampling_02_split (a row's chunks over blocks, a launch per pass): its own CUDA source on
the CPU emulator draws exactly sampling_01_rows' model tokens over dtypes, chunk sizes that cut
vectors, per-row parameters, strided rows and extreme rows, in both block orders; the workspace
starts poisoned; the arrival counters are back at zero after every call; a last block chosen wrongly
(the first to arrive), a histogram of one chunk and top-k's whole bin weighed by top-p are wrong
answers the comparison catches. Also the host rule:
chunking and the passes a call launches. Needs g++."""
import numpy as np
import pytest

from onlinesoftmax import checks
from onlinesoftmax.kernels.sampling import rows as ks
from onlinesoftmax.kernels.sampling import split

SEED = 20261206
CASES = {"plain": {}, "top-k": {"top_k": 5}, "top-p": {"top_p": 0.8}, "min-p": {"min_p": 0.2},
         "all": {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05}, "greedy": {"temperature": 0.0}}


def test_chunking_fills_the_gpu_and_keeps_chunks_long():
    assert split.chunking(1, 262144, 132) == (64, 4096)          # 264 blocks wanted; 4,096 tokens at least
    assert split.chunking(32, 262144, 132) == (9, 29184)
    assert split.chunking(1, 32000, 132) == (8, 4096)
    assert split.chunking(512, 262144, 132) == (1, 262144)
    assert split.chunking(1, 7, 132) == (1, 256)
    for rows, n in ((1, 1), (3, 4097), (2, 100003), (64, 128256)):
        chunks, chunk = split.chunking(rows, n, 132)
        assert chunk % split.CHUNK_ALIGN == 0 and (chunks - 1) * chunk < n <= chunks * chunk


def test_the_workspace_sizes_are_the_kernels():
    """The host allocates each row's histogram and gathered tokens by split.BINS and split.CANDIDATES:
    they must be the sizes the kernels index by (a smaller buffer would be written past its end)."""
    from onlinesoftmax.runtime import loader

    header = (loader.REPO_ROOT / "kernels" / "common" / "sampling_bins.cuh").read_text()
    assert f"#define BINS {split.BINS}\n" in header and f"#define CANDIDATES {split.CANDIDATES}\n" in header


def test_a_call_launches_the_passes_its_parameters_need():
    n = 1000
    assert split.passes(0, 1.0, 0.0, 1.0, n) == [0, 3]
    assert split.passes(5, 1.0, 0.3, 1.0, n) == [0, 1, 2, 3]
    assert split.passes(n, 0.9, 0.0, 1.0, n) == [0, 1, 3]                      # top_k >= n is off
    assert split.passes(0, 1.0, 0.0, 0.0, n) == [0]                            # greedy: the maximum is the token
    assert split.passes(np.zeros(2), np.ones(2), 0.0, np.ones(2), n) == [0, 1, 2, 3]


@pytest.fixture(scope="module")
def module():
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    return emulator.Module(split.SAMPLING_SPLIT.path, list(split.SAMPLING_SPLIT.launched_entries))


def emulate(module, x, chunk, seed=SEED, offset=0, n=None, block=None, schedule=None, **params):
    """Every pass of one call on the emulator, the workspace poisoned but for zeroed states; returns
    the tokens and the states after the call."""
    n_rows, n = x.shape[0], n or x.shape[1]
    n_chunks = -(-n // chunk)
    tokens = np.full(n_rows, -7, np.int64)
    arrays = [None if np.isscalar(params.get(name, 0)) else np.ascontiguousarray(params[name],
              np.int32 if name == "top_k" else np.float32) for name in ks.PARAMS]
    scalars = [ks.OFF[name] if a is not None else params.get(name, ks.OFF[name]) for name, a in zip(ks.PARAMS, arrays)]
    states = np.zeros((n_rows, split.STATE_WORDS), np.uint64)
    counts = np.zeros((n_rows, split.BINS), np.uint32)
    masses = np.zeros((n_rows, split.BINS), np.uint64)
    cand_s = np.full((n_rows, split.CANDIDATES), np.nan, np.float32)
    cand_index = np.full((n_rows, split.CANDIDATES), -3, np.int32)
    keys = np.full((n_rows, n_chunks), np.nan, np.float32)
    indices = np.full((n_rows, n_chunks), -5, np.int32)
    words = x if x.dtype == np.float32 else x.view(np.uint16)
    extra = {} if schedule is None else {"schedule": "random", "seed": schedule}
    values = {name: a if a is not None else s for name, a, s in zip(ks.PARAMS, arrays, scalars)}
    for p in split.passes(values["top_k"], values["top_p"], values["min_p"], values["temperature"], n):
        module.launch(split.SAMPLING_SPLIT.dtype_entry(x.dtype.name), (n_chunks, n_rows),
                      (block or ks.block_threads(chunk),),
                      (words, tokens, *arrays, np.float32(scalars[0]), np.int32(scalars[1]), np.float32(scalars[2]),
                       np.float32(scalars[3]), np.int32(n), np.int64(x.strides[0] // x.itemsize),
                       np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32), np.uint32(offset & 0xFFFFFFFF),
                       np.uint32(offset >> 32), states, counts, masses, cand_s, cand_index, keys, indices,
                       np.int32(chunk), np.int32(p)), **extra)
    assert not counts.any() and not masses.any(), "the histograms are back at zero"
    return tokens, states


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n, chunk", ((7, 3), (300, 64), (1001, 256), (1001, 37)))
def test_the_split_source_draws_the_rows_models_tokens(module, dtype, n, chunk):
    x = checks.to_dtype(np.random.default_rng(n + chunk).normal(0, 2, (4, n)), dtype)
    for name, case in CASES.items():
        tokens, states = emulate(module, x, chunk, **case)
        assert np.array_equal(tokens, ks.simulate(x, SEED, 0, **case)), name
        assert (states.view(np.uint32)[:, [7, 8]] == 0).all(), "the counters are back at zero"


def test_per_row_parameters_strided_rows_and_both_block_orders(module):
    rng = np.random.default_rng(2)
    wide = rng.normal(0, 3, (8, 700)).astype(np.float32)
    params = {"temperature": np.array([1, 0.5, 0, 2, 1, 1, 0.7, 1.3]), "top_k": np.array([0, 5, 1, 700, -1, 40, 3, 2]),
              "top_p": np.array([1, 0.5, 0.9, 0.3, 1, 0.95, 0.01, 1]), "min_p": np.array([0, 0, 0.5, 0.1, 0.9, 0, 0, 1])}
    want = ks.simulate(wide[:, :647], 99, 2**33 + 5, **params)
    for chunk, block, schedule in ((100, None, None), (64, 32, 3), (256, 1024, 4)):
        tokens, _ = emulate(module, wide, chunk, seed=99, offset=2**33 + 5, n=647, block=block, schedule=schedule,
                            **params)
        assert np.array_equal(tokens, want), (chunk, block, schedule)


def test_extreme_rows(module):
    x = np.zeros((9, 300), np.float32)
    x[0, 5] = np.nan
    x[1, 7] = np.inf
    x[2] = -np.inf
    x[3] = -np.inf
    x[3, [10, 250]] = 1.0                                  # two finite tokens, tied, in different chunks
    x[4, 17] = 3e38
    x[5] = np.float32(1e30)
    x[6, ::2] = -3e38
    x[7] = 1e-3 * np.arange(300)
    x[8, 99] = 1.0
    x[8, 1::3] = -0.0
    for case in (*CASES.values(), {"top_k": 2}, {"top_k": 250, "top_p": 0.5}):
        tokens, _ = emulate(module, x, 64, **case)
        assert np.array_equal(tokens, ks.simulate(x, SEED, 0, **case)), case
        assert tokens[:3].tolist() == [-1, -1, -1] and tokens[3] in (10, 250)


@pytest.mark.parametrize("change, why", [
    (("*flag = before == n_chunks - 1;", "*flag = before == 0u;"), "the first block to arrive decides"),
    (("if (bs.count[b] != 0u) atomicAdd(row_count + b, bs.count[b]);",
      "if (bs.count[b] != 0u && chunk == 0) atomicAdd(row_count + b, bs.count[b]);"),
     "the row's counts from its first chunk only"),
    (("if (ordered_bits(bs.s[i]) >= floor) mine += fixed_weight(bs.s[i], m);", "mine += fixed_weight(bs.s[i], m);"),
     "top-p over top-k weighs all of top-k's bin"),
])
def test_wrong_kernels_draw_other_tokens(change, why):
    from onlinesoftmax.runtime import emulator

    if not emulator.available():
        pytest.skip("the CPU emulator needs g++")
    source = split.SAMPLING_SPLIT.path.read_text()
    assert change[0] in source
    wrong = emulator.Module(split.SAMPLING_SPLIT.path, list(split.SAMPLING_SPLIT.launched_entries),
                            source=source.replace(*change))
    x = np.random.default_rng(5).normal(0, 2, (8, 1000)).astype(np.float32)
    x[3:, 10:] = -0.005                                    # rows 3..7: top-k's 10 tokens and 990 lower ones, one bin
    x[3:, :10] = -1e-4 * np.arange(10)
    same = True
    for case in (CASES["plain"], CASES["top-p"], CASES["top-k"], {"top_k": 10, "top_p": 0.5}):
        try:
            tokens, _ = emulate(wrong, x, 128, **case)
        except emulator.EmulatorError:
            same = False
            break
        same &= np.array_equal(tokens, ks.simulate(x, SEED, 0, **case))
    assert not same, why


def test_the_api_refuses_more_rows_than_the_split_grid_holds():
    import onlinesoftmax as osm

    with pytest.raises(ValueError, match="variant 'split' takes at most 65535 rows"):
        osm.sample(np.zeros((65536, 4), np.float32), variant="split")
    assert osm.sample(np.zeros((65535, 4), np.float32), variant="split", temperature=0.0).max() == 0
    assert osm.sample(np.zeros((65536, 4), np.float32), variant="rows").shape == (65536,)
    with pytest.raises(ValueError, match="unknown variant 'cluster'"):
        osm.sample(np.zeros((2, 4), np.float32), variant="cluster")


def _ties_by_isclose(keys, indices):
    best = keys.max(axis=1)
    tied = np.isclose(keys, best[:, None], rtol=1e-12, atol=0)
    return best, np.where(tied, indices, np.iinfo(np.int64).max).min(axis=1)


def test_the_combine_grader_passes_the_answer_and_rejects_wrong_ones():
    from onlinesoftmax.book.exercises import exercises_sampling as es

    assert es.check_combine_picks(es.combine_picks, quiet=True)
    by_position = lambda k, i: (k.max(axis=1), np.take_along_axis(i, k.argmax(axis=1)[:, None], 1)[:, 0])  # noqa: E731
    wrong = {"the stub": lambda k, i: None,
             "the first block holding the largest key, in the order given": by_position,
             "the largest index on a tie": lambda k, i: (k.max(axis=1), np.where(k == k.max(axis=1)[:, None], i,
                                                                                   -1).max(axis=1)),
             "the lowest index of any block": lambda k, i: (k.max(axis=1), i.min(axis=1)),
             "all zeros": lambda k, i: (np.zeros(len(k)), np.zeros(len(k), np.int64)),
             "the largest key of the first block only": lambda k, i: (k[:, 0], i[:, 0]),
             "indices as floats": lambda k, i: tuple(np.asarray(v, np.float64) for v in es.combine_picks(k, i)),
             "right on the visible shapes only": lambda k, i: es.combine_picks(k, i)
             if k.shape in ((1, 3), (1, 2), (6, 9)) else (k.max(axis=1), np.full(len(k), -1)),
             "the first block left out": lambda k, i: es.combine_picks(k[:, 1:], i[:, 1:]),
             "keys compared in float32": lambda k, i: (k.max(axis=1), es.combine_picks(k.astype(np.float32), i)[1]),
             "keys within np.isclose taken as tied": _ties_by_isclose,
             "indices as uint16": lambda k, i: (es.combine_picks(k, i)[0], es.combine_picks(k, i)[1].astype(np.uint16))}
    for name, fn in wrong.items():
        assert not es.check_combine_picks(fn, quiet=True), name


def test_auto_takes_the_split_kernel_for_a_few_long_rows_and_fewer_when_a_select_runs():
    from onlinesoftmax.kernels.sampling.split import SELECT_MAX_ROWS, choose

    def name(*args, **kw):
        return choose(*args, **kw).variant.name

    assert name(1, 262144, 132) == name(66, 262144, 132) == "sampling_02_split"
    assert name(67, 262144, 132) == name(1, 4096, 132) == name(256, 32000, 132) == "sampling_01_rows"
    # top-k or top-p: the split kernel's extra launches against sampling_01_rows' extra reads
    assert name(SELECT_MAX_ROWS, 262144, 132, selects=True) == name(1, 32000, 132, selects=True) == "sampling_02_split"
    assert name(SELECT_MAX_ROWS + 1, 262144, 132, selects=True) == name(66, 262144, 132, selects=True) == \
        name(1, 4096, 132, selects=True) == "sampling_01_rows"
    assert name(32, 262144, 132) == "sampling_02_split"    # plain or min-p at 32 rows: still split


@pytest.mark.parametrize("index", range(6))
def test_the_split_source_through_each_path_of_its_filters(module, index):
    """The row's histogram summed over chunks, top-k's bin gathered from every chunk, top-p's pending
    bin gathered by the sampling pass, and the last block's radix selects over the whole row where a
    bin holds more than 2048 tokens: rows built to take each path draw the model's tokens (a test per
    filter case, so that the cases run side by side)."""
    from onlinesoftmax.sampling_checks import FILTER_PATH_CASES as cases, filter_path_rows

    assert len(cases) == 6, "a filter case without its chunk and schedule here"
    x = filter_path_rows()
    case, chunk, schedule = cases[index], (1024, 768, 4096, 512, 1280, 2048)[index], (None, 1, 2, None, 3, 4)[index]
    tokens, _ = emulate(module, x, chunk, schedule=schedule, **case)
    assert np.array_equal(tokens, ks.simulate(x, SEED, 0, **case)), case
