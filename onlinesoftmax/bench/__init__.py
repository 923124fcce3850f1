"""The benchmark suites: one command records any of them on a GPU machine.

    python -m onlinesoftmax.bench                      # list the suites
    python -m onlinesoftmax.bench softmax-fast         # record data/<gpu>/<date>-softmax-fast.json
    python -m onlinesoftmax.bench softmax-fast --quick # a few shapes (printed; some suites also record them)

Each suite is a module of this package (SUITES says which, with the arguments and environment it
runs under); every module measures device time with measure.timer, checks each output of ours
against the float64 reference before timing it, and writes one file with its provenance through
measure.results. The same modules import as libraries (the book and the tests read their shapes).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Suite:
    module: str                         # onlinesoftmax.bench.<module>
    about: str
    argv: tuple[str, ...] = ()          # fixed arguments after the module's name
    env: dict = field(default_factory=dict)
    quick: bool = True                  # the module takes --quick


SUITES = {
    "first-kernel": Suite("first_kernel", "the first page's vector_add against the copy, and shared-memory reads "
                          "by stride (bank conflicts)", quick=False),
    "softmax-teaching": Suite("softmax_teaching", "softmax_00..02 vs N at batch 4000 and 10, with cupy and torch", quick=False),
    "online-variants": Suite("online_variants", "the online kernel's variants (chapter 03)", quick=False),
    "paper-figures": Suite("paper_figures", "the shapes of Milakov and Gimelshein's figures", quick=False),
    "teaching-accuracy": Suite("teaching_accuracy", "errors of the teaching kernels against float64, and the fold's time"),
    "guards-gpu": Suite("guards_gpu", "the -inf guard's cost (kernels rebuilt without it)", quick=False),
    "split-merge": Suite("split_merge", "softmax_06_split_merge against the one-block kernels", quick=False),
    "logsumexp": Suite("logsumexp", "logsumexp and log_softmax against torch"),
    "softmax-fast": Suite("softmax_fast", "the fast ladder and softmax(auto) against torch, cupy and the copy"),
    "softmax-fast-attempts": Suite("softmax_fast_attempts", "the attempts of chapter 06's appendix", quick=False),
    "softmax-fast-cooperative": Suite("softmax_fast_cooperative", "softmax_12/13 against 10/11 on long rows", quick=False),
    "api-overhead": Suite("api_overhead", "what a call costs the host, and end-to-end time through the API"),
    "softmax-topk": Suite("softmax_topk", "fused softmax + top-k against torch's softmax -> topk"),
    "softmax-topk-host": Suite("softmax_topk", "one softmax_topk call's host cost", argv=("--case", "host"), quick=False),
    "attention-decode": Suite("attention", "decode kernels against torch SDPA's backends", env={"BENCH_ATTENTION": "decode"}),
    "attention-prefill": Suite("attention", "attention_01_blocked (fp32) against torch's three kernels",
                               env={"BENCH_ATTENTION": "prefill"}),
    "attention-prefill-mma": Suite("attention_prefill_mma", "the tensor-core ladder against torch SDPA's backends"),
    "ncu-attention-mma": Suite("ncu_attention_mma", "Nsight Compute's counters of the tensor-core ladder", quick=False),
    "ncu-cross-entropy": Suite("ncu_cross_entropy", "Nsight Compute's counters of the cross-entropy kernels and a copy",
                               quick=False),
    "ncu-dram": Suite("ncu_dram", "DRAM bytes the fast kernels move, from Nsight Compute", quick=False),
    "ncu-sampling": Suite("ncu_sampling", "Nsight Compute's counters of sampling_01_rows at 64 and 134 MB of logits", quick=False),
    "kernel-exercises": Suite("kernel_exercises", "the CUDA exercises' official solutions, timed"),
    "torch-ops": Suite("torch_ops", "the kernels through PyTorch (operator, public call, direct) and the backward kernels"),
    "training": Suite("training", "cross-entropy from logits, forward and backward, against torch and Liger"),
    "training-attention": Suite("training", "the attention backward alone: ours against torch SDPA's FLASH and cuDNN",
                                argv=("--only", "attention"), quick=False),
    "training-cross-entropy": Suite("training", "cross-entropy from logits alone: ours (direct, in place, autograd) "
                                    "against torch and Liger", argv=("--only", "cross_entropy"), quick=False),
    "training-linear": Suite("training", "linear cross-entropy alone: ours (sum, recompute) against torch's linear + "
                             "cross_entropy and Liger's fused one, with peak memory", argv=("--only", "linear"),
                             quick=False),
    "serving": Suite("serving", "sampling one token per row against torch's sort path and FlashInfer; paged decode; "
                     "packed-prompt prefill against torch's nested tensors"),
    "peers": Suite("peers", "softmax, log_softmax and logsumexp through the API against torch eager, torch.compile, "
                   "Liger and Quack on the same tensors, with the copy"),
    "multi-gpu": Suite("multi_gpu", "the distributed softmax and decode over NCCL (two or more GPUs)"),
}
