"""GPU tier, one GPU: logsumexp_02_state (the per-shard statistics kernel) against its NumPy model and
the float64 reference, and the vocab-parallel and split-cache decode functions on simulated ranks
over cupy (the kernels run; the collectives are local), against the unsharded reference with the
book's rule. Wrong merges must be rejected here too."""
import cupy as cp
import numpy as np
import pytest

from onlinesoftmax import checks, reference
from onlinesoftmax.distributed import decode, schedules, simulated, verify
from onlinesoftmax.distributed import vocab_parallel as vp
from onlinesoftmax.kernels.logsumexp import state as ls

pytestmark = pytest.mark.gpu

DTYPES = ("float32", "float16", "bfloat16")


def host(x):
    return x.view(cp.uint16).get().view(checks.np_dtype("bfloat16")) if x.dtype.name == "bfloat16" else x.get()


def planes_checked(x, targets=None, vocab_start=0):
    out = cp.full((2 if targets is None else 3, x.shape[0]), checks.POISON["float32"], dtype=cp.float32)
    ls.row_state_planes(x, targets, vocab_start, out=out)
    cp.cuda.Device().synchronize()
    assert not bool((out == checks.POISON["float32"]).any()), "planes left unwritten"
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", [1, 3, 33, 257, 4097, 65536, 131072])
def test_the_state_kernel_matches_its_model_and_the_reference(dtype, n_cols):
    wide = checks.random_rows(cp, 7, n_cols + 5, dtype, seed=n_cols)
    x = wide[:, 3:3 + n_cols]                                      # a shard view: strided rows, unaligned start
    targets = cp.asarray([0, 3, n_cols + 2, 2, -1, 10**9, 3 + n_cols // 2], dtype=cp.int64)
    got = planes_checked(x, targets, vocab_start=3)
    model = ls.simulate(host(x), targets.get(), vocab_start=3)
    assert cp.array_equal(got[0], cp.asarray(model[0])), "m is the maximum, exactly"
    assert cp.array_equal(got[2], cp.asarray(model[2])), "the target logit is copied, exactly"
    m, l = reference.row_stats(checks.as_float64(x))
    assert cp.allclose(got[1], l, rtol=4e-6 * max(1.0, np.log2(n_cols))), float(cp.abs(got[1] / l - 1).max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_state_kernel_on_the_special_rows(dtype):
    x, _ = checks.special_rows(cp, 1000, dtype)
    m, l = planes_checked(x)
    assert float(m[1]) == -np.inf and float(l[1]) == 0.0
    assert float(m[2]) == np.inf and np.isnan(float(l[2]))
    assert np.isnan(float(l[3]))


def logits_and_targets(n_rows, vocab, dtype, seed=0):
    x = cp.concatenate([checks.random_rows(cp, n_rows, vocab, dtype, seed=seed),
                        checks.special_rows(cp, vocab, dtype)[0]])
    targets = np.random.default_rng(seed).integers(0, vocab, x.shape[0])
    targets[:5] = np.linspace(0, vocab - 1, 5).astype(np.int64)
    targets[6] = vp.IGNORE_INDEX
    return x, cp.asarray(targets)


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("schedule", schedules.SCHEDULES)
def test_vocab_parallel_on_one_gpu(ranks, dtype, schedule):
    x, targets = logits_and_targets(10, 50257, dtype, seed=ranks)       # GPT-2's vocabulary: uneven shards
    shards = vp.shard_columns(x, ranks)
    starts = np.concatenate([[0], np.cumsum([s.shape[1] for s in shards])[:-1]])
    losses = simulated.run_ranks(lambda c, s: vp.cross_entropy(c, s, targets, schedule=schedule), ranks,
                                 [(s,) for s in shards])
    ok, message = verify.compare_loss(losses[0], x, targets)
    assert ok, message
    for op in ("softmax", "log_softmax"):
        pieces = simulated.run_ranks(lambda c, s: getattr(vp, op)(c, s, schedule=schedule), ranks, [(s,) for s in shards])
        for piece, start in zip(pieces, starts):
            ok, message = verify.compare_shard(op, piece, x, int(start))
            assert ok, message


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal, n_q", [(False, 1), (True, 4)])
def test_decode_over_a_split_cache_on_one_gpu(ranks, dtype, causal, n_q):
    rng = np.random.default_rng(ranks)
    make = lambda *shape: checks.on_device(cp, checks.to_dtype((rng.standard_normal(shape) * 2).astype(np.float32), dtype))
    q, k, v = make(2, 8, n_q, 128), make(2, 2, 6001, 128), make(2, 2, 6001, 128)
    for schedule in schedules.SCHEDULES:
        out, lse = simulated.run_ranks(lambda c, kk, vv: decode.decode_attention(
            c, q, kk, vv, causal=causal, schedule=schedule, return_lse=True), ranks, decode.split_sequence(k, v, ranks))[0]
        ok, message = verify.compare_decode(out, lse, q, k, v, causal=causal)
        assert ok, message


def test_a_merge_without_the_maximum_is_rejected_on_the_gpu(monkeypatch):
    x, targets = logits_and_targets(10, 32000, "bfloat16", seed=1)

    def merge_without_max(comm, record, n_scaled=0, schedule="allgather"):
        gathered = comm.all_gather(record)
        return cp.concatenate([gathered[:, 0].max(axis=0)[None], gathered[:, 1:].sum(axis=0)]).astype(cp.float32)

    monkeypatch.setattr(schedules, "merge", merge_without_max)
    losses = simulated.run_ranks(lambda c, s: vp.cross_entropy(c, s, targets), 2, [(s,) for s in vp.shard_columns(x, 2)])
    assert not verify.compare_loss(losses[0], x, targets)[0]
