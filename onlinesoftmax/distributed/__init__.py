"""The monoid across GPUs: softmax, log-softmax and cross-entropy over a vocabulary split across
ranks, and decoding attention over a KV cache split across ranks.

Each rank reduces its piece of a row to a state, (m, l) from the logsumexp_02_state kernel or
(O, LSE) from the split-K decode kernel; the states are merged across ranks with the chapter 04
combine, by one of two schedules (`schedules`); nothing of size V or n_k ever crosses between GPUs.

The rooms:
- `comm`: the interface (all_reduce max / sum, all_gather) and what each collective cost;
- `simulated`: R ranks as threads of one process, on NumPy arrays or one GPU (CI, one-GPU readers);
- `torch_comm`: one process per GPU, torch.distributed with NCCL (gloo on CPUs), under torchrun;
- `schedules`: "megatron" (all-reduce MAX, then all-reduce SUM) and "allgather" (one all-gather,
  then the local combine);
- `vocab_parallel`: softmax, log_softmax, logsumexp, cross_entropy per rank;
- `decode`: decode_attention per rank;
- `verify`: the book's error rule for sharded results against the unsharded float64 reference;
- `check`: the self-check a torchrun job runs on real ranks.

    from onlinesoftmax.distributed import simulated, vocab_parallel as vp
    shards = vp.shard_columns(logits, 4)
    losses = simulated.run_ranks(vp.cross_entropy, 4, [(s, targets) for s in shards])
"""
