"""GPU tier for sampling_01_rows: the kernel's tokens against its NumPy model (the same Philox noise, the
same thresholds: a token may differ only where two keys are within float32 rounding of each other),
at edge and vocabulary sizes, every dtype and filter, per-row parameters, extreme rows, poisoned
outputs; draws of the kernel against the float64 distribution (chi-square, fixed significance);
concurrent callers on two streams and two threads (no shared scratch: each gets its own tokens);
torch tensors, torch's generator and stream; bad parameters before any launch."""
import threading

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.sampling import rows as ks
from onlinesoftmax.sampling_checks import compare_draws, compare_with_model

pytestmark = pytest.mark.gpu

SIZES = (1, 2, 3, 31, 33, 257, 1000, 4097, 32000, 128256, 262144)
CASES = [{}, {"temperature": 0.0}, {"temperature": 0.6}, {"top_k": 50}, {"top_p": 0.9}, {"min_p": 0.05},
         {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.02}, {"top_k": 1}, {"top_p": 0.01}]


def logits(n_rows, n_cols, dtype, seed=0, scale=3.0):
    x = np.random.default_rng(seed).normal(0, scale, (n_rows, n_cols)).astype(np.float32)
    return checks.from_float32(cp.asarray(x), dtype)


def agrees_with_the_model(x, tokens, seed, offset, case) -> tuple[bool, str]:
    return compare_with_model(x, tokens, seed, offset, **case)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", SIZES)
def test_edge_and_vocabulary_sizes(dtype, n_cols):
    n_rows = 4 if n_cols > 100000 else 33
    x = logits(n_rows, n_cols, dtype, seed=n_cols)
    for case in CASES:
        tokens = osm.sample(x, generator=n_cols, **case)
        passed, message = agrees_with_the_model(x, tokens, n_cols, 0, case)
        assert passed, f"{case}: {message}"


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_per_row_parameters_and_strided_rows(dtype):
    wide = logits(64, 5003, dtype, seed=3)
    x = wide[:, 1:4001]                                     # rows off 16 bytes, strided
    rng = np.random.default_rng(4)
    case = {"temperature": cp.asarray(rng.uniform(0, 2, 64).astype(np.float32)),
            "top_k": cp.asarray(rng.integers(-1, 4100, 64).astype(np.int32)),
            "top_p": cp.asarray(rng.uniform(0.05, 1, 64).astype(np.float32)),
            "min_p": cp.asarray(rng.uniform(0, 0.3, 64).astype(np.float32))}
    tokens = osm.sample(x, generator=9, **case)
    passed, message = agrees_with_the_model(x, tokens, 9, 0, case)
    assert passed, message


def test_extreme_rows():
    x = np.zeros((8, 3000), np.float32)
    x[0, 5] = np.nan
    x[1, 7] = np.inf
    x[2] = -np.inf
    x[3] = -np.inf
    x[3, [10, 2500]] = 1.0
    x[4, 17] = 3e38
    x[5] = 1e30
    x[6, ::2] = -3e38
    x[7] = 1e-3 * np.arange(3000)
    for dtype in checks.DTYPES:
        d = checks.from_float32(cp.asarray(x), dtype)
        for case in CASES:
            tokens = osm.sample(d, generator=1, **case)
            assert cp.asnumpy(tokens)[:3].tolist() == [-1, -1, -1], case
            passed, message = agrees_with_the_model(d, tokens, 1, 0, case)
            assert passed, f"{dtype} {case}: {message}"


@pytest.mark.parametrize("case", [{}, {"temperature": 0.5}, {"top_k": 3}, {"top_p": 0.7}, {"min_p": 0.2},
                                  {"temperature": 0.8, "top_k": 6, "top_p": 0.9, "min_p": 0.05}],
                         ids=lambda c: ",".join(c) or "plain")
@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_draws_fit_the_float64_distribution(case, dtype):
    row = np.random.default_rng(20261204).normal(0, 1.5, (1, 16)).astype(np.float32)
    x = checks.from_float32(cp.asarray(np.repeat(row, 200_000, axis=0)), dtype)
    tokens = osm.sample(x, generator=np.random.default_rng(int(cp.random.randint(1 << 30))), **case)
    passed, message = compare_draws(tokens, ks.distribution(checks.host(x[:1]), **case)[0])
    assert passed, message


def test_wrong_filters_are_caught_on_the_gpu_draws():
    row = np.random.default_rng(20261204).normal(0, 1.5, (1, 16)).astype(np.float32)
    x = cp.asarray(np.repeat(row, 200_000, axis=0))
    tokens = osm.sample(x, top_p=0.9, generator=5)
    assert not compare_draws(tokens, ks.distribution(row, top_p=0.7)[0])[0]
    assert not compare_draws(tokens, ks.distribution(row)[0])[0]


def test_two_streams_and_two_threads_get_their_own_tokens():
    x = logits(512, 32000, "bfloat16", seed=5)
    alone = [cp.asnumpy(osm.sample(x, top_p=0.9, generator=seed)) for seed in (1, 2)]
    got = [None, None]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]

    def run(i):
        with streams[i]:
            for _ in range(20):
                t = osm.sample(x, top_p=0.9, generator=i + 1)
            streams[i].synchronize()
            got[i] = cp.asnumpy(t)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert np.array_equal(got[0], alone[0]) and np.array_equal(got[1], alone[1])


def test_torch_tensors_generator_and_stream():
    torch = pytest.importorskip("torch")
    x = torch.randn(16, 32000, device="cuda", dtype=torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(7)
    a = osm.sample(x, top_p=0.9, generator=g)
    b = osm.sample(x, top_p=0.9, generator=g)
    g.manual_seed(7)
    assert torch.equal(a, osm.sample(x, top_p=0.9, generator=g)) and not torch.equal(a, b)
    assert a.dtype == torch.int64 and a.device == x.device and a.shape == (16,)
    temps = torch.full((16,), 0.0, device="cuda")
    assert torch.equal(osm.sample(x, temperature=temps), x.float().argmax(dim=1))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x * 1
        t = osm.sample(y, temperature=0.0)
    side.synchronize()
    assert torch.equal(t, x.float().argmax(dim=1))


def test_bad_parameters_leave_the_context_healthy():
    x = logits(4, 100, "float32")
    with pytest.raises(ValueError, match=r"top_p must be a number in \(0, 1\], got 0.0 \(row 2\)"):
        osm.sample(x, top_p=cp.asarray([0.5, 0.5, 0.0, 0.5], cp.float32))
    with pytest.raises(ValueError, match="one value per row"):
        osm.sample(x, top_k=cp.ones(3, cp.int32))
    with pytest.raises(ValueError, match="array of the logits' kind"):
        osm.sample(x, top_k=np.ones(4, np.int32))
    assert osm.sample(x, temperature=0.0).shape == (4,)
