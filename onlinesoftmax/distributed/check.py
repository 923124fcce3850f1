"""The self-check on real ranks: every function of this package against the unsharded float64 reference.

    torchrun --standalone --nproc-per-node 2 -m onlinesoftmax.distributed.check                 # NCCL, 2 GPUs
    torchrun --standalone --nproc-per-node 2 -m onlinesoftmax.distributed.check --backend gloo   # CPUs

Every rank makes the same whole inputs from one seed, keeps its own shard, runs the per-rank
functions with both schedules, and checks its own part with verify.py: vocab-parallel
cross-entropy (targets on every shard, an ignored token), logsumexp, softmax and log-softmax over
uneven shards and the special rows (-inf, all -inf, +inf, NaN), in float32, float16 and bfloat16;
decode over a cache split unevenly, causal and not, with grouped-query heads. Then what must fail
does: logits of different dtypes on different ranks raise the same error on every rank, and a
merge that forgets the maximum (sums l without re-basing it) is rejected by the check. Rank 0
prints "N passed, M failed"; the exit status is 1 on any failure.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.distributed import decode, schedules, verify
from onlinesoftmax.distributed import vocab_parallel as vp

DTYPES = ("float32", "float16", "bfloat16")


def vocab_inputs(xp, dtype: str, vocab: int, seed: int):
    """Random rows plus the special rows (host, then the rank's device), targets on every shard."""
    x = np.concatenate([checks.random_rows(np, 9, vocab, dtype, seed=seed), checks.special_rows(np, vocab, dtype)[0]])
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, vocab, x.shape[0])
    targets[: min(len(targets), 6)] = np.linspace(0, vocab - 1, 6).astype(np.int64)[: len(targets)]  # every shard
    targets[7] = vp.IGNORE_INDEX
    return checks.on_device(xp, x), xp.asarray(targets)


def decode_inputs(xp, dtype: str, n_q: int, n_k: int, seed: int):
    rng = np.random.default_rng(seed)
    make = lambda *shape: checks.on_device(xp, checks.to_dtype(rng.standard_normal(shape).astype(np.float32), dtype))
    return make(2, 8, n_q, 64), make(2, 2, n_k, 64), make(2, 2, n_k, 64)


def wrong_merge_without_max(comm, planes):
    """Deliberately wrong: gathers the (m, l) records and adds the l's as they are, never re-basing them."""
    gathered = comm.all_gather(planes)
    xp = np if isinstance(planes, np.ndarray) else __import__("cupy")
    return xp.stack([gathered[:, 0].max(axis=0), gathered[:, 1].sum(axis=0)])


def run_checks(comm, xp, say) -> tuple[int, int]:
    """(passed, failed) on this rank."""
    passed = failed = 0

    def record(ok: bool, what: str, message: str = "") -> None:
        nonlocal passed, failed
        passed, failed = passed + ok, failed + (not ok)
        if not ok or comm.rank == 0:
            say(f"{'PASS' if ok else 'FAIL'} rank {comm.rank}: {what} {message}")

    sizes = vp.split_sizes(1001 + comm.size, comm.size)   # uneven for 2 ranks: 502 / 501 (1003 columns)
    vocab = sum(sizes)
    for dtype in DTYPES:
        x, targets = vocab_inputs(xp, dtype, vocab, seed=7)
        mine = vp.shard_columns(x, comm.size, sizes)[comm.rank]
        start = vp.VocabLayout(sizes, x.shape[0], dtype).start(comm.rank)
        for schedule in schedules.SCHEDULES:
            loss = vp.cross_entropy(comm, mine, targets, schedule=schedule)
            ok, message = verify.compare_loss(loss, x, targets)
            record(ok, f"cross_entropy {schedule}", message)
            lse = vp.logsumexp(comm, mine, schedule=schedule)
            ok, message = verify.compare_lse(lse, x)
            record(ok, f"logsumexp {schedule}", message)
            for op in ("softmax", "log_softmax"):
                ok, message = verify.compare_shard(op, getattr(vp, op)(comm, mine, schedule=schedule), x, start)
                record(ok, f"{op} {schedule}", message)
        for causal, n_q in ((False, 1), (True, 3)):
            q, k, v = decode_inputs(xp, dtype, n_q, 1000 + comm.size, seed=11)
            k_mine, v_mine = decode.split_sequence(k, v, comm.size)[comm.rank]
            for schedule in schedules.SCHEDULES:
                out, lse = decode.decode_attention(comm, q, k_mine, v_mine, causal=causal, schedule=schedule,
                                                   return_lse=True)
                ok, message = verify.compare_decode(out, lse, q, k, v, causal=causal)
                record(ok, f"decode n_q={n_q} causal={causal} {schedule}", message)

    # what must fail does
    dtype = "float16" if comm.rank == comm.size - 1 else "bfloat16"     # the last rank passes another dtype
    x, targets = vocab_inputs(xp, dtype, vocab, seed=3)
    mine = vp.shard_columns(x, comm.size, sizes)[comm.rank]
    try:
        vp.cross_entropy(comm, mine, targets)
        record(False, "mismatched dtypes across ranks", "raised nothing")
    except ValueError as error:
        record("one dtype" in str(error), "mismatched dtypes across ranks raise", str(error)[:80])
    x, _ = vocab_inputs(xp, "float32", vocab, seed=5)
    mine = vp.shard_columns(x, comm.size, sizes)[comm.rank]
    from onlinesoftmax.kernels.logsumexp.state import row_state_planes

    wrong = wrong_merge_without_max(comm, row_state_planes(mine))
    ok, message = verify.compare_lse(schedules.lse_of(wrong), x)
    record(not ok, "a merge without the maximum is rejected", message)
    return passed, failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="default: nccl when CuPy sees a GPU, else gloo")
    parser.add_argument("--wrong-merge", action="store_true",
                        help="run every check with the merge that forgets the maximum: the job must fail "
                             "(the test that proves this check can fail)")
    args = parser.parse_args(argv)
    from onlinesoftmax.distributed.torch_comm import TorchComm

    if args.wrong_merge:
        def fold_without_max(gathered, n_scaled):   # l and u added as they are, never re-based
            xp = np if isinstance(gathered, np.ndarray) else __import__("cupy")
            return xp.concatenate([gathered[:, 0].max(axis=0)[None], gathered[:, 1:].sum(axis=0)]).astype(xp.float32)
        schedules.fold = fold_without_max

    comm = TorchComm.from_env(args.backend)
    xp = np if comm.backend == "gloo" else __import__("cupy")
    say = lambda text: print(text, flush=True)
    if comm.rank == 0:
        say(f"onlinesoftmax.distributed.check: {comm.size} ranks, backend {comm.backend}")
    passed, failed = run_checks(comm, xp, say)
    totals = comm.all_reduce(xp.asarray([passed, failed], dtype=xp.int64), "sum")
    totals = totals.get() if xp is not np else totals
    if comm.rank == 0:
        say(f"{int(totals[0])} passed, {int(totals[1])} failed")
    comm.close()
    return 1 if int(totals[1]) else 0


if __name__ == "__main__":
    sys.exit(main())
