"""CPU tier: the monoid across ranks, on simulated ranks (NumPy, the kernels' models).

Sharded results must pass the book's error rule against the unsharded float64 reference (verify.py)
for 2, 3, 4 and 8 ranks, even and uneven shards, the special rows, targets on every shard, three
dtypes and both schedules; bad configurations must raise clear errors on every rank; and wrong
merges must be rejected by the same checks."""
import numpy as np
import pytest

from onlinesoftmax import checks, reference
from onlinesoftmax.distributed import comm as comm_module, decode, schedules, simulated, verify
from onlinesoftmax.distributed import vocab_parallel as vp
from onlinesoftmax.kernels.logsumexp import state as ls

DTYPES = ("float32", "float16", "bfloat16")


def logits_and_targets(n_rows, vocab, dtype, seed=0):
    x = np.concatenate([checks.random_rows(np, n_rows, vocab, dtype, seed=seed), checks.special_rows(np, vocab, dtype)[0]])
    targets = np.random.default_rng(seed).integers(0, vocab, x.shape[0])
    targets[:5] = np.linspace(0, vocab - 1, 5).astype(np.int64)        # first, last and middle shards
    targets[6] = vp.IGNORE_INDEX
    return x, targets


def run_vocab(function, x, ranks, sizes=None, **kwargs):
    shards = vp.shard_columns(x, ranks, sizes)
    group = simulated.SimulatedGroup(ranks)
    results = group.run(lambda c, s: function(c, s, **kwargs), [(s,) for s in shards])
    return results, shards, group


def starts_of(shards):
    return np.concatenate([[0], np.cumsum([s.shape[-1] for s in shards])[:-1]])


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("schedule", schedules.SCHEDULES)
def test_vocab_parallel_matches_the_unsharded_reference(ranks, dtype, schedule):
    x, targets = logits_and_targets(9, 1000 + ranks + 1, dtype, seed=ranks)   # uneven shards
    losses, _, _ = run_vocab(lambda c, s, **k: vp.cross_entropy(c, s, targets, **k), x, ranks, schedule=schedule)
    assert all(np.array_equal(loss, losses[0], equal_nan=True) for loss in losses), "ranks disagree"
    ok, message = verify.compare_loss(losses[0], x, targets)
    assert ok, message
    lses, _, _ = run_vocab(vp.logsumexp, x, ranks, schedule=schedule)
    ok, message = verify.compare_lse(lses[0], x)
    assert ok, message
    for op in ("softmax", "log_softmax"):
        pieces, shards, _ = run_vocab(getattr(vp, op), x, ranks, schedule=schedule)
        for rank, (piece, start) in enumerate(zip(pieces, starts_of(shards))):
            ok, message = verify.compare_shard(op, piece, x, int(start))
            assert ok, f"rank {rank}: {message}"


@pytest.mark.parametrize("sizes", [(1, 998, 1, 1000), (257, 3, 1000, 740), (1999, 1)])
def test_uneven_shards_of_any_width(sizes):
    x, targets = logits_and_targets(5, sum(sizes), "float32", seed=1)
    losses, _, _ = run_vocab(lambda c, s: vp.cross_entropy(c, s, targets), x, len(sizes), sizes)
    ok, message = verify.compare_loss(losses[0], x, targets)
    assert ok, message


def test_leading_dimensions_and_one_rank_without_a_group():
    x, targets = logits_and_targets(11, 300, "bfloat16", seed=2)
    x3, t3 = x[:16].reshape(2, 8, 300), targets[:16].reshape(2, 8)
    losses, _, _ = run_vocab(lambda c, s: vp.cross_entropy(c, s, t3), x3, 3)
    assert losses[0].shape == (2, 8)
    ok, message = verify.compare_loss(losses[0].reshape(-1), x[:16], targets[:16])
    assert ok, message
    alone = vp.cross_entropy(None, x3, t3)                        # comm=None: the unsharded computation
    assert np.allclose(alone, losses[0], rtol=1e-6, atol=1e-6, equal_nan=True)
    assert np.array_equal(vp.logsumexp(None, x[:4]), ls.simulate(x[:4])[0] + np.log(ls.simulate(x[:4])[1]))


def test_the_two_schedules_agree_and_count_their_collectives():
    x, targets = logits_and_targets(20, 4001, "float32", seed=4)
    bytes_seen = {}
    for schedule in schedules.SCHEDULES:
        shards = vp.shard_columns(x, 2)
        layout = vp.VocabLayout(tuple(s.shape[1] for s in shards), x.shape[0], "float32")
        group = simulated.SimulatedGroup(2)
        losses = group.run(lambda c, s: vp.cross_entropy(c, s, targets, schedule=schedule, layout=layout),
                           [(s,) for s in shards])
        log = group.comms[0].log
        bytes_seen[schedule] = comm_module.bytes_per_row(log, x.shape[0])
        assert [c.kind for c in log] == (["all_gather"] if schedule == "allgather" else ["all_reduce", "all_reduce"])
        bytes_seen[schedule]["loss"] = losses[0]
    assert bytes_seen["allgather"]["payload_bytes_per_row"] == 12         # (m, l, target logit) in float32
    assert bytes_seen["megatron"]["payload_bytes_per_row"] == 4 + 8       # m, then (l, target logit)
    a, b = bytes_seen["allgather"]["loss"], bytes_seen["megatron"]["loss"]
    assert np.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal, n_q", [(False, 1), (True, 4)])
@pytest.mark.parametrize("schedule", schedules.SCHEDULES)
def test_decode_over_a_split_cache(ranks, dtype, causal, n_q, schedule):
    rng = np.random.default_rng(ranks + n_q)
    make = lambda *shape: checks.to_dtype((rng.standard_normal(shape) * 2).astype(np.float32), dtype)
    q, k, v = make(1, 4, n_q, 32), make(1, 2, 301, 32), make(1, 2, 301, 32)     # grouped-query heads
    pieces = decode.split_sequence(k, v, ranks)
    results = simulated.run_ranks(lambda c, kk, vv: decode.decode_attention(
        c, q, kk, vv, causal=causal, schedule=schedule, return_lse=True), ranks, pieces)
    out, lse = results[0]
    assert all(np.array_equal(o, out) for o, _ in results)
    ok, message = verify.compare_decode(out, lse, q, k, v, causal=causal)
    assert ok, message


def test_decode_uneven_pieces_and_the_causal_edge():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 12, 32)).astype(np.float32)
    k = rng.standard_normal((1, 1, 16, 32)).astype(np.float32)
    v = rng.standard_normal((1, 1, 16, 32)).astype(np.float32)
    # the last rank holds exactly n_q - 1 = 11 keys: query 0 sees only the first 5 keys of 16
    for sizes in ((5, 11), (1, 4, 11)):
        out, lse = simulated.run_ranks(lambda c, kk, vv: decode.decode_attention(c, q, kk, vv, causal=True,
                                                                                 return_lse=True),
                                       len(sizes), decode.split_sequence(k, v, len(sizes), sizes))[0]
        ok, message = verify.compare_decode(out, lse, q, k, v, causal=True)
        assert ok, message


# ---- the kernel's planes -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", [1, 3, 33, 257, 4097])
def test_state_planes_are_the_rows_state(dtype, n_cols):
    x = checks.random_rows(np, 6, n_cols, dtype, seed=n_cols)
    planes = ls.row_state_planes(x)
    m, l = reference.row_stats(checks.as_float64(x))
    assert planes.shape == (2, 6) and planes.dtype == np.float32
    assert np.array_equal(planes[0], m.astype(np.float32)), "m is the maximum, exactly"
    assert np.allclose(planes[1], l, rtol=1e-5)
    targets = np.array([0, n_cols - 1, n_cols, -1, 5, 10**9], dtype=np.int64)
    start = 2
    with_t = ls.row_state_planes(x[:, start:] if n_cols > start else x, targets, vocab_start=start if n_cols > start else 0)
    shard = x[:, start:] if n_cols > start else x
    s0 = start if n_cols > start else 0
    for row, t in enumerate(targets):
        inside = s0 <= t < s0 + shard.shape[1]
        want = float(checks.as_float64(shard[row:row + 1, t - s0])[0]) if inside else 0.0
        assert with_t[2, row] == want, (row, t)


def test_state_planes_of_the_special_rows():
    x, _ = checks.special_rows(np, 300)
    m, l = ls.row_state_planes(x)
    assert m[1] == -np.inf and l[1] == 0                      # all -inf: the empty state
    assert np.isnan(l[2]) and m[2] == np.inf                   # +inf: (+inf, NaN)
    assert np.isnan(l[3]) and np.isfinite(m[3])                # NaN: carried by l, never by m


# ---- what must fail ------------------------------------------------------------------------------

def test_bad_configurations_are_clear_errors():
    x, targets = logits_and_targets(4, 100, "float32")
    with pytest.raises(ValueError, match="at least 2 ranks"):
        simulated.SimulatedGroup(1)
    with pytest.raises(TypeError, match="must be an int"):
        simulated.SimulatedGroup(2.0)
    with pytest.raises(ValueError, match="cannot be split over 200 ranks"):
        vp.shard_columns(x, 200)
    with pytest.raises(ValueError, match="summing to 100"):
        vp.shard_columns(x, 2, sizes=(50, 49))
    shards = vp.shard_columns(x, 2)
    with pytest.raises(ValueError, match="schedule must be one of"):
        simulated.run_ranks(lambda c, s: vp.cross_entropy(c, s, targets, schedule="ring"), 2, [(s,) for s in shards])
    bad_targets = targets.copy()
    bad_targets[3] = 100
    with pytest.raises(ValueError, match="target 100 of token 3 is outside the vocabulary"):
        simulated.run_ranks(lambda c, s: vp.cross_entropy(c, s, bad_targets), 2, [(s,) for s in shards])
    with pytest.raises(ValueError, match="targets must have the logits' shape"):
        simulated.run_ranks(lambda c, s: vp.cross_entropy(c, s, targets[:3]), 2, [(s,) for s in shards])
    with pytest.raises(TypeError, match="integer"):
        vp.cross_entropy(None, x, targets.astype(np.float32))
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        vp.log_softmax(None, x.astype(np.float64))
    with pytest.raises(ValueError, match="the layout says rank 0 holds"):
        vp.cross_entropy(None, x, targets, layout=vp.VocabLayout((99,), x.shape[0], "float32"))


def test_mismatched_dtypes_and_rows_raise_on_every_rank():
    x, _ = logits_and_targets(4, 100, "float32")
    shards = vp.shard_columns(x, 3)
    mixed = [shards[0], checks.to_dtype(shards[1], "float16"), shards[2]]
    group = simulated.SimulatedGroup(3)
    errors = []

    def each(c, s):
        try:
            vp.log_softmax(c, s)
        except ValueError as error:
            errors.append((c.rank, str(error)))

    group.run(each, [(s,) for s in mixed])
    assert sorted(r for r, _ in errors) == [0, 1, 2]
    assert all("rank 1: float16" in e for _, e in errors)
    with pytest.raises(ValueError, match="the same rows"):
        simulated.run_ranks(vp.logsumexp, 2, [(shards[0],), (shards[1][:5],)])


def test_decode_bad_configurations():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 5, 32)).astype(np.float32)
    k = rng.standard_normal((1, 1, 40, 32)).astype(np.float32)
    with pytest.raises(ValueError, match="at least n_q - 1 = 4 keys"):
        simulated.run_ranks(lambda c, kk, vv: decode.decode_attention(c, q, kk, vv, causal=True), 2,
                            decode.split_sequence(k, k, 2, sizes=(37, 3)))
    with pytest.raises(ValueError, match="the same q"):
        simulated.run_ranks(lambda c, qq: decode.decode_attention(c, qq, k[:, :, :20], k[:, :, :20]), 2,
                            [(q,), (q[:, :, :4],)])
    with pytest.raises(ValueError, match="summing to 40"):
        decode.split_sequence(k, k, 2, sizes=(10, 10))


def test_a_rank_that_raises_or_skips_a_collective_stops_the_others():
    def rank_one_raises(c):
        if c.rank == 1:
            raise KeyError("rank one's own bug")
        c.all_reduce(np.zeros(3, np.float32), "sum")

    with pytest.raises(KeyError, match="rank one's own bug"):
        simulated.run_ranks(rank_one_raises, 3, [()] * 3)

    def rank_zero_skips(c):
        if c.rank != 0:
            c.all_reduce(np.zeros(3, np.float32), "sum")

    with pytest.raises(TimeoutError, match=r"ranks \[0\] never arrived"):
        simulated.SimulatedGroup(2, timeout_s=0.5).run(rank_zero_skips, [()] * 2)

    def different_collectives(c):
        buffer = np.zeros(3, np.float32)
        return c.all_gather(buffer) if c.rank == 0 else c.all_reduce(buffer, "max")

    with pytest.raises(ValueError, match="rank 0: all_gather.*rank 1: all_reduce\\(max\\)"):
        simulated.run_ranks(different_collectives, 2, [()] * 2)


# ---- wrong merges are rejected -------------------------------------------------------------------

def merge_without_max(comm, record, n_scaled=0, schedule="allgather"):
    """Deliberately wrong: l added as it is, never re-based on the common maximum."""
    gathered = comm.all_gather(record)
    return np.concatenate([gathered[:, 0].max(axis=0)[None], gathered[:, 1:].sum(axis=0)]).astype(np.float32)


def merge_with_the_wrong_sign(comm, record, n_scaled=0, schedule="allgather"):
    """Deliberately wrong: re-based with e^(M - m) instead of e^(m - M)."""
    gathered = comm.all_gather(record)
    m = gathered[:, 0]
    big = np.fmax.reduce(m, axis=0)
    with np.errstate(all="ignore"):
        w = np.exp(big - m)
        return np.concatenate([big[None], (w[:, None] * gathered[:, 1:]).sum(axis=0)]).astype(np.float32)


@pytest.mark.parametrize("wrong", [merge_without_max, merge_with_the_wrong_sign])
def test_wrong_merges_are_rejected(monkeypatch, wrong):
    x, targets = logits_and_targets(9, 2001, "float32", seed=8)
    monkeypatch.setattr(schedules, "merge", wrong)
    losses, _, _ = run_vocab(lambda c, s: vp.cross_entropy(c, s, targets), x, 2)
    assert not verify.compare_loss(losses[0], x, targets)[0]
    pieces, shards, _ = run_vocab(vp.softmax, x, 2)
    assert not all(verify.compare_shard("softmax", p, x, int(s))[0] for p, s in zip(pieces, starts_of(shards)))


def test_a_loss_without_the_target_logit_is_rejected():
    x, targets = logits_and_targets(9, 500, "bfloat16", seed=9)
    losses, _, _ = run_vocab(vp.logsumexp, x, 2)       # LSE alone: the target's logit forgotten
    assert not verify.compare_loss(losses[0], x, targets)[0]
    shifted = (targets + 1) % 500
    shifted[targets == vp.IGNORE_INDEX] = vp.IGNORE_INDEX
    wrong, _, _ = run_vocab(lambda c, s: vp.cross_entropy(c, s, shifted), x, 2)   # the neighbour's logit
    assert not verify.compare_loss(wrong[0], x, targets)[0]


def test_a_decode_merge_that_averages_the_pieces_is_rejected(monkeypatch):
    rng = np.random.default_rng(3)
    q = (rng.standard_normal((1, 2, 1, 32)) * 3).astype(np.float32)
    k = (rng.standard_normal((1, 2, 200, 32)) * 3).astype(np.float32)
    v = rng.standard_normal((1, 2, 200, 32)).astype(np.float32)
    monkeypatch.setattr(schedules, "merge", merge_without_max)    # every piece weighted 1: a plain average
    out, lse = simulated.run_ranks(lambda c, kk, vv: decode.decode_attention(c, q, kk, vv, return_lse=True), 2,
                                   decode.split_sequence(k, v, 2, sizes=(50, 150)))[0]
    assert not verify.compare_decode(out, lse, q, k, v)[0]
