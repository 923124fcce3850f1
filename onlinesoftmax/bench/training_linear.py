"""The linear cross-entropy rows of suite `training`: the loss of a classifier head from hidden states,
forward and backward, against torch's linear + cross_entropy (which stores the logits).

At 8192 tokens, hidden 4096, vocabularies 128256 and 262144, bf16, each call is a forward and a
backward on the same tensors (device time, timer.time_gpu), and the peak memory a call adds above what
was allocated before it (torch.cuda.max_memory_allocated; `peak_extra_bytes`), and that peak less the
gradients of h and W every path returns (`peak_beyond_grads_bytes`), beside the size of the logits:
  KERNEL (linear sum)        onlinesoftmax.linear_cross_entropy(h, W, t).backward()
  KERNEL (linear recompute)  the same with weight_grad="recompute"
  torch_linear_cross_entropy                F.cross_entropy(h @ W.T, t).backward()
  liger_fused_linear_cross_entropy          Liger-Kernel's liger_fused_linear_cross_entropy(h, W, t).backward(),
                                    where it imports (else a row with its reason)
  torch_products (3)                        torch's three products alone: h @ W.T, then a gradient of the
                                    logits' shape times W and, transposed, times h (no loss, no memory
                                    row): the floor of any path that makes the logits once; a path that
                                    makes them twice adds one product (`one_product_ms`)
  torch_products (recompute shapes)         the recomputing path's products at the shapes it runs them,
                                    each timed alone on random operands and multiplied by its count
                                    (`parts`: name, shape, count, ms each): the token pass's logits
                                    (chunk x H by H x V) and d hidden (chunk x V by V x H) per token
                                    chunk, the vocabulary pass's logits (T x H by H x block) and
                                    d weight (block x T by T x H) per block; `ms` is their sum, what
                                    the path's products alone take at those shapes
KERNEL is the loss kernel the chunks run on this GPU (loss.kernel_name_for). Targets: peak memory
beyond the gradients <= 2 % of the logits, time <= 1.0x torch's.
"""
from __future__ import annotations

import onlinesoftmax as osm
from onlinesoftmax import linear_loss, loss
from onlinesoftmax.measure import timer

LINEAR_SHAPES = ((8192, 4096, 128256), (8192, 4096, 262144))


def linear_shape(tokens: int, hidden: int, vocab: int) -> list[dict]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(vocab)
    h = torch.randn(tokens, hidden, device="cuda", generator=g, dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(vocab, hidden, device="cuda", generator=g) / hidden ** 0.5).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, vocab, (tokens,), device="cuda", generator=g)
    here = {"op": "linear_cross_entropy", "dtype": "bfloat16", "tokens": tokens, "hidden": hidden, "vocab": vocab,
            "logits_bytes": tokens * vocab * 2}
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy as liger
        liger_why = None
    except Exception as error:   # not installed, or its Triton kernels do not load here
        liger, liger_why = None, f"{type(error).__name__}: {error}"
    kernel = loss.kernel_name_for(vocab, "bfloat16", True)
    calls = {f"{kernel} (linear sum)": lambda: osm.linear_cross_entropy(h, w, t).backward(),
             f"{kernel} (linear recompute)":
                 lambda: osm.linear_cross_entropy(h, w, t, weight_grad="recompute").backward(),
             "torch_linear_cross_entropy": lambda: torch.nn.functional.cross_entropy(h @ w.T, t).backward()}
    if liger is not None:
        calls["liger_fused_linear_cross_entropy"] = lambda: liger(h, w, t).backward()
    rows, timed = [], {}
    with torch.no_grad():   # the products' floor: a gradient of the logits' shape, made once, outside the timing
        dlogits = torch.randn(tokens, vocab, device="cuda", generator=g, dtype=torch.bfloat16)
        wd, hd = w.detach(), h.detach()
        one = timer.time_gpu(lambda: hd @ wd.T, [()], warmup=2, reps=10)
        three = timer.time_gpu(lambda: (hd @ wd.T, dlogits @ wd, dlogits.T @ hd), [()], warmup=2, reps=10)
        del dlogits
        torch.cuda.empty_cache()
    rows.append({"kernel": "torch_products (3)", "method": "device", "correct": None, **three, **here,
                 "one_product_ms": one["ms"]})
    rows.append(recompute_products(tokens, hidden, vocab, here))
    if liger is None:
        rows.append({"kernel": "liger_fused_linear_cross_entropy", "correct": None, "error": liger_why, **here})
    for name, fn in calls.items():
        h.grad = w.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        grads = h.grad.nbytes + w.grad.nbytes
        timing = timer.time_gpu(fn, [()], warmup=2, reps=10)
        timed[name] = timing["ms"]
        rows.append({"kernel": name, "method": "device", "correct": None, **timing, **here,
                     "peak_extra_bytes": peak, "peak_fraction_of_logits": peak / here["logits_bytes"],
                     "peak_beyond_grads_bytes": peak - grads,
                     "peak_beyond_grads_fraction_of_logits": (peak - grads) / here["logits_bytes"]})
    for row in rows:
        if row["kernel"].startswith(kernel):   # ours: the kernel and the module around it
            row.update(variant=kernel, modules=["onlinesoftmax/linear_loss.py"])
        if "ms" in row and "peak_extra_bytes" in row:
            row["vs_torch"] = timed["torch_linear_cross_entropy"] / row["ms"]
    print(f"linear cross-entropy {tokens}x{hidden}x{vocab}: " + "  ".join(
        f"{k} {v:.1f} ms" for k, v in timed.items()), flush=True)
    return rows


def recompute_products(tokens: int, hidden: int, vocab: int, here: dict) -> dict:
    """The row `torch_products (recompute shapes)`: the recomputing path's four kinds of product at its
    default chunk and block (linear_loss.default_chunk, default_vocab_chunk), each timed alone, times its
    count. Their sum beside the path's measured time says how much of it the product shapes explain."""
    import torch

    chunk = min(tokens, linear_loss.default_chunk(tokens, hidden, "recompute"))
    block = min(vocab, linear_loss.default_vocab_chunk(vocab, 2))
    n_chunks, n_blocks = -(-tokens // chunk), -(-vocab // block)
    # (name, a's shape, b's shape, count); a shape marked "T" is a transposed view of a contiguous
    # tensor, as the path passes it (W.T, a block of W.T, the block's gradient transposed)
    shapes = (("token logits", (chunk, hidden), (hidden, vocab, "T"), n_chunks),
              ("token d hidden", (chunk, vocab), (vocab, hidden), n_chunks),
              ("block logits", (tokens, hidden), (hidden, block, "T"), n_blocks),
              ("block d weight", (block, tokens, "T"), (tokens, hidden), n_blocks))

    def operand(shape):
        if shape[-1] == "T":
            return torch.randn(shape[1], shape[0], device="cuda", dtype=torch.bfloat16).T
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    parts, total = [], 0.0
    with torch.no_grad():
        for name, a_shape, b_shape, count in shapes:
            a, b = operand(a_shape), operand(b_shape)
            ms = timer.time_gpu(lambda: a @ b, [()], warmup=2, reps=10)["ms"]
            parts.append({"name": name, "a": list(a_shape), "b": list(b_shape), "count": count, "ms_each": ms})
            total += count * ms
            del a, b
        torch.cuda.empty_cache()
    return {"kernel": "torch_products (recompute shapes)", "method": "device", "correct": None, "ms": total,
            **here, "chunk": chunk, "vocab_chunk": block, "parts": parts}


def linear_rows(shapes=LINEAR_SHAPES) -> list[dict]:
    import torch

    rows = []
    for shape in shapes:
        rows += linear_shape(*shape)
        torch.cuda.empty_cache()
    return rows
