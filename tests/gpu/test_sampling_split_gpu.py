"""GPU tier for sampling_02_split (a row's chunks over blocks, a launch per pass): exactly
sampling_01_rows' tokens (both kernels' sums are exact, so not a token may differ) over batch 1 to 64,
vocabularies of 1 to 262,144, every dtype and filter, per-row parameters, strided rows, extreme rows;
against the NumPy model too; draws against the float64 distribution; two threads on two streams (each
runner its own workspace); a long loop of calls that switch filters (the arrival counters must be back
at zero after every call); torch tensors on torch's stream; tokens poisoned before each launch."""
import threading

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.sampling import rows as ks
from onlinesoftmax.sampling_checks import compare_draws, compare_with_model

pytestmark = pytest.mark.gpu

CASES = [{}, {"temperature": 0.0}, {"temperature": 0.6}, {"top_k": 50}, {"top_p": 0.9}, {"min_p": 0.05},
         {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.02}, {"top_k": 1}, {"top_p": 0.01}]


def logits(n_rows, n_cols, dtype, seed=0, scale=3.0):
    x = np.random.default_rng(seed).normal(0, scale, (n_rows, n_cols)).astype(np.float32)
    return checks.from_float32(cp.asarray(x), dtype)


def both(x, seed, **case):
    return [cp.asnumpy(osm.sample(x, generator=seed, variant=v, **case)) for v in ("rows", "split")]


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_rows, n_cols", [(1, 1), (1, 4095), (1, 4097), (1, 32000), (1, 262144), (2, 128256),
                                            (7, 50257), (32, 262144), (64, 32000), (3, 100003)])
def test_the_rows_kernels_tokens(dtype, n_rows, n_cols):
    x = logits(n_rows, n_cols, dtype, seed=n_cols + n_rows)
    for case in CASES:
        rows, split = both(x, n_cols, **case)
        assert np.array_equal(rows, split), case
    tokens = osm.sample(x, generator=3, variant="split", top_p=0.9)
    assert compare_with_model(x, tokens, 3, 0, top_p=0.9)[0]


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_per_row_parameters_and_strided_rows(dtype):
    wide = logits(16, 60003, dtype, seed=3)
    x = wide[:, 1:50001]                                    # rows off 16 bytes, strided
    rng = np.random.default_rng(4)
    case = {"temperature": cp.asarray(rng.uniform(0, 2, 16).astype(np.float32)),
            "top_k": cp.asarray(rng.integers(-1, 50100, 16).astype(np.int32)),
            "top_p": cp.asarray(rng.uniform(0.05, 1, 16).astype(np.float32)),
            "min_p": cp.asarray(rng.uniform(0, 0.3, 16).astype(np.float32))}
    rows, split = both(x, 9, **case)
    assert np.array_equal(rows, split)
    assert compare_with_model(x, cp.asarray(split), 9, 0, **case)[0]


def test_extreme_rows():
    x = np.zeros((8, 30000), np.float32)
    x[0, 5] = np.nan
    x[1, 29000] = np.inf
    x[2] = -np.inf
    x[3] = -np.inf
    x[3, [10, 25000]] = 1.0                                # tied, in different chunks
    x[4, 17] = 3e38
    x[5] = 1e30
    x[6, ::2] = -3e38
    x[7] = 1e-3 * np.arange(30000)
    for dtype in checks.DTYPES:
        d = checks.from_float32(cp.asarray(x), dtype)
        for case in CASES:
            rows, split = both(d, 1, **case)
            assert split[:3].tolist() == [-1, -1, -1] and np.array_equal(rows, split), (dtype, case)


@pytest.mark.parametrize("case", [{}, {"top_k": 3}, {"top_p": 0.7}, {"temperature": 0.8, "top_k": 6, "top_p": 0.9,
                                                                     "min_p": 0.05}], ids=lambda c: ",".join(c) or "plain")
def test_draws_fit_the_float64_distribution(case):
    row = np.random.default_rng(20261206).normal(0, 1.5, (1, 16)).astype(np.float32)
    x = cp.asarray(np.repeat(row, 50_000, axis=0))             # four calls of 50,000 rows (at most 65,535)
    rng = np.random.default_rng(int(cp.random.randint(1 << 30)))
    tokens = cp.concatenate([osm.sample(x, generator=rng, variant="split", **case) for _ in range(4)])
    passed, message = compare_draws(tokens, ks.distribution(row, **case)[0])
    assert passed, message


def test_two_streams_and_two_threads_get_their_own_tokens():
    x = logits(2, 262144, "bfloat16", seed=5)
    alone = [cp.asnumpy(osm.sample(x, top_p=0.9, generator=seed, variant="split")) for seed in (1, 2)]
    got = [None, None]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]

    def run(i):
        with streams[i]:
            for _ in range(30):
                t = osm.sample(x, top_p=0.9, generator=i + 1, variant="split")
            streams[i].synchronize()
            got[i] = cp.asnumpy(t)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert np.array_equal(got[0], alone[0]) and np.array_equal(got[1], alone[1])


def test_a_long_loop_switching_filters_keeps_the_counters_at_zero():
    from onlinesoftmax.runtime.plan import get_runner

    x = logits(3, 70000, "float32", seed=6)
    want = {i: both(x, i, **CASES[i % len(CASES)])[0] for i in range(len(CASES))}
    runner = get_runner(osm.REGISTRY["sampling_02_split"], x, cp.empty(3, cp.int64), dict.fromkeys(ks.PARAMS))
    for step in range(300):
        i = step % len(CASES)
        tokens = cp.full(3, -9, cp.int64)                      # poisoned: every row must be written again
        runner(x, tokens, seed=i, offset=0, **{**ks.OFF, **CASES[i]})
        assert np.array_equal(cp.asnumpy(tokens), want[i]), (step, CASES[i])


def test_too_many_rows_for_the_split_is_an_error():
    x = cp.zeros((65536, 4), cp.float32)
    with pytest.raises(ValueError, match="variant 'split' takes at most 65535 rows"):
        osm.sample(x, variant="split")
    assert int(osm.sample(x[:65535], variant="split", temperature=0.0).max()) == 0
    assert osm.sample(x, variant="rows").shape == (65536,)


def test_torch_tensors_on_torchs_stream():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 131072, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())   # x is made on torch's default stream: the side stream waits
    with torch.cuda.stream(side):
        y = x * 1
        t = osm.sample(y, top_k=20, top_p=0.9, generator=4, variant="split")
    side.synchronize()
    assert torch.equal(t, osm.sample(x, top_k=20, top_p=0.9, generator=4, variant="rows"))


def test_auto_tells_choose_whether_a_select_runs(monkeypatch):
    """sample(variant="auto") passes selects=True for top-k or top-p (scalars in range, or any per-row
    array) and False for plain sampling, min-p or a top-k that keeps every token."""
    from onlinesoftmax.kernels.sampling import split

    seen, choose = [], split.choose
    monkeypatch.setattr(split, "choose", lambda *a, **k: seen.append(k.get("selects")) or choose(*a, **k))
    x = logits(4, 70000, "bfloat16")
    for case in ({}, {"min_p": 0.1}, {"top_k": 70000}, {"top_k": 50}, {"top_p": 0.9},
                 {"top_p": cp.full(4, 1.0, cp.float32)}):
        osm.sample(x, generator=1, **case)
    assert seen == [False, False, False, True, True, True]
