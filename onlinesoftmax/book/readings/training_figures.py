"""The static counterpart of chapter 12's widget: how much memory the loss of a language model's last
layer holds at once, torch's linear then cross_entropy against onlinesoftmax.linear_cross_entropy,
for the vocabularies, token counts and chunk sizes of the widget's controls. The bytes are counted
from the shapes (bf16 hidden states, weight and logits; hidden size HIDDEN), not measured.
"""
from __future__ import annotations

from onlinesoftmax.book.readings.figures import color
from onlinesoftmax.book.widgets.interactive import Figure, select
from onlinesoftmax.linear_loss import default_vocab_chunk

HIDDEN = 4096
VOCABULARIES = (32000, 128256, 151936, 262144)
TOKENS = (1024, 8192, 32768)
CHUNKS = (64, 128, 256, 512, 1024, 2048, 4096)
GIB = 2.0 ** 30


def held_bytes(tokens: int, vocabulary: int, chunk: int | None, weight_grad: str = "sum") -> float:
    """Bytes the loss holds at once beyond its inputs and the gradients it returns. chunk None: torch's
    path at its backward's peak, three tensors the size of the logits (bf16): the log-probabilities
    it saved, their gradient and the logits' gradient; else the chunked path: one chunk's logits (bf16, their
    gradient written over them) and, with weight_grad "sum", the float32 sum of the weight's gradient;
    with "recompute" the larger of the token pass (a chunk's logits) and the vocabulary pass (every
    token's logits of one block of default_vocab_chunk entries, their gradient written over them)."""
    if chunk is None:
        return 3.0 * tokens * vocabulary * 2
    token_pass = min(chunk, tokens) * vocabulary * 2
    if weight_grad == "recompute":
        return max(token_pass, tokens * default_vocab_chunk(vocabulary) * 2.0)
    return token_pass + vocabulary * HIDDEN * 4.0


def linear_loss_memory_figure(vocabularies=VOCABULARIES, tokens=TOKENS, chunks=CHUNKS) -> Figure:
    fig = Figure("linear-loss-memory", "Memory the loss holds at once",
                 [select("vocabulary", "vocabulary", list(vocabularies), 128256),
                  select("tokens", "tokens", list(tokens), 8192)],
                 caption=f"counted from the shapes: bf16, hidden size {HIDDEN}; the float32 sum of the weight's "
                         "gradient is the floor of the summing path; the recomputing path makes the logits twice "
                         "instead")
    panel = fig.panel("bytes", x="tokens per chunk", y="GiB held at once", x_scale="log2", width=420, height=220,
                      y_zero=True)
    for vocabulary in vocabularies:
        for n in tokens:
            when = {"vocabulary": vocabulary, "tokens": n}
            xs = [c for c in chunks if c <= n]
            fig.series(panel, "torch: log-probabilities and two gradients (its peak)", xs,
                       [held_bytes(n, vocabulary, None) / GIB] * len(xs), color=color("torch"), when=when)
            fig.series(panel, "linear_cross_entropy: a chunk's logits and the float32 sum of dW", xs,
                       [held_bytes(n, vocabulary, c) / GIB for c in xs], color=color("cross_entropy_01_rows"),
                       mark="line", when=when)
            fig.series(panel, "linear_cross_entropy, weight_grad='recompute': a chunk's or a vocabulary block's "
                       "logits", xs, [held_bytes(n, vocabulary, c, "recompute") / GIB for c in xs],
                       color=color("cross_entropy_01_rows"), mark="line", dash=True, when=when)
            fig.note(f"{n:,} tokens x {vocabulary:,}: all the logits {2 * n * vocabulary / GIB:.2f} GiB; "
                     f"the float32 sum of dW {vocabulary * HIDDEN * 4 / GIB:.2f} GiB", when=when)
    return fig


def chunk_table(tokens: int, vocabulary: int) -> list[list]:
    """Rows (chunk, GiB held by the summing path, by torch's, by the recomputing path) for the widget."""
    return [[c, held_bytes(tokens, vocabulary, c) / GIB, held_bytes(tokens, vocabulary, None) / GIB,
             held_bytes(tokens, vocabulary, c, "recompute") / GIB] for c in CHUNKS if c <= tokens]

