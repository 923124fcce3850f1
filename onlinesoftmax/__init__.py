"""Online softmax: the book's kernels, their NumPy models, references and timer.

    import onlinesoftmax as osm
    y = osm.softmax(x)              # numpy x: the kernel's NumPy model; cupy x: the CUDA kernel
    lse = osm.logsumexp(x, axis=1)  # float32
    p, i = osm.softmax_topk(x, k=5) # the 5 largest probabilities of each row and their columns
    v, i = osm.topk_logits(x, k=5)  # the 5 largest logits (as torch.topk)
    o = osm.attention(q, k, v, causal=True)  # softmax(q k^T / sqrt(d)) v, never storing the scores
    dx = osm.softmax_backward(y, dy)  # y * (dy - sum(y * dy)): the gradient from the forward's output
    import onlinesoftmax.torch_ops  # torch.ops.onlinesoftmax.*: the same, as PyTorch operators with autograd

Inputs: NumPy arrays (the kernels' NumPy models), CuPy arrays (the kernels, on CuPy's current
stream) and torch tensors (CPU: the models; CUDA: the kernels on torch's current stream), with
results of the same kind. float64 and empty inputs are computed exactly (onlinesoftmax/exact.py).
    osm.reload()                    # after editing a kernel under kernels/: rebuild on the next call

The package's rooms: `runtime/` (build, launch plans, driver calls, device), `kernels/` (one
module per kernel family: plan builder, NumPy model, registration; `dispatch` is variant="auto"),
`measure/` (timer, results, benchmark helpers), `book/` (the chapters' helpers, widgets and
graders), `distributed/` (the merge across GPUs, on simulated or real ranks); beside them the registry, the float64 reference, the schedule simulator and the checks.
"""
from onlinesoftmax.kernels.softmax import teaching as softmax_teaching  # noqa: F401  (registers softmax_00 .. 02)
from onlinesoftmax.kernels.softmax import masked as softmax_masked  # noqa: F401  (softmax_03_online_masked)
from onlinesoftmax.kernels.softmax import fp16 as softmax_fp16  # noqa: F401  (softmax_04/05: fp16 with vector loads)
from onlinesoftmax.kernels.softmax import split_merge as softmax_split_merge  # noqa: F401  (softmax_06_split_merge)
from onlinesoftmax.kernels.logsumexp import online as logsumexp_online  # noqa: F401  (logsumexp_01_online, log_softmax_01_online)
from onlinesoftmax.kernels.logsumexp import log_softmax_registers  # noqa: F401  (log_softmax_02_registers: rows up to 32K read once)
from onlinesoftmax.kernels.logsumexp import state as logsumexp_state  # noqa: F401  (logsumexp_02_state: (m, l) per row, for merges across GPUs)
from onlinesoftmax.kernels.logsumexp import split as logsumexp_split  # noqa: F401  (logsumexp_03_split: few long rows over many blocks)
from onlinesoftmax.kernels.logsumexp import log_softmax_cached  # noqa: F401  (log_softmax_04/05: rows past 32K read once)
from onlinesoftmax.kernels.softmax import fast as softmax_fast  # noqa: F401  (softmax_07 .. 13: fp32/fp16/bf16, read once)
from onlinesoftmax.kernels.topk import softmax_topk  # noqa: F401  (softmax_topk_01 .. 04: the paper's four)
from onlinesoftmax.kernels.topk import moe as softmax_topk_moe  # noqa: F401  (softmax_topk_05_warp_rows: MoE gating)
from onlinesoftmax.kernels.topk import split as softmax_topk_split  # noqa: F401  (softmax_topk_06_split: few long rows, k <= 1024)
from onlinesoftmax.kernels.attention import blocked as attention_blocked  # noqa: F401  (attention_01_blocked, attention_02_decode_split)
from onlinesoftmax.kernels.attention import mma as attention_mma  # noqa: F401  (attention_03 .. 05: tensor cores, fp16/bf16)
from onlinesoftmax.kernels.attention import decode_mma as attention_decode_mma  # noqa: F401  (attention_06_decode_mma: grouped heads, fp16/bf16)
from onlinesoftmax.kernels.attention import paged as attention_paged  # noqa: F401  (attention_08_paged_decode: a paged KV cache)
from onlinesoftmax.kernels.attention import varlen as attention_varlen_kernels  # noqa: F401  (attention_09_varlen: packed sequences)
from onlinesoftmax.kernels.attention import wgmma as attention_wgmma_kernels  # noqa: F401  (attention_10_wgmma: Hopper's wgmma)
from onlinesoftmax.kernels.attention import fp32_pipelined as attention_fp32_kernels  # noqa: F401  (attention_13_fp32_pipelined)
from onlinesoftmax.kernels.attention import backward_blocked as attention_backward_kernels  # noqa: F401  (attention_backward_01_blocked)
from onlinesoftmax.kernels.attention import backward_mma as attention_backward_mma_kernels  # noqa: F401  (attention_backward_02_mma: tensor cores)
from onlinesoftmax.kernels.attention import backward_pipelined as attention_backward_pipelined_kernels  # noqa: F401  (attention_backward_03_pipelined)
from onlinesoftmax.kernels.attention import backward_wgmma as attention_backward_wgmma_kernels  # noqa: F401  (attention_backward_04_wgmma: Hopper)
from onlinesoftmax.kernels.softmax import backward as softmax_backward_kernels  # noqa: F401  (softmax_backward_01, log_softmax_backward_01)
from onlinesoftmax.kernels.cross_entropy import rows as cross_entropy_kernels  # noqa: F401  (cross_entropy_01_rows)
from onlinesoftmax.kernels.cross_entropy import cluster as cross_entropy_cluster  # noqa: F401  (cross_entropy_02_cluster)
from onlinesoftmax.kernels.cross_entropy import from_lse as cross_entropy_from_lse  # noqa: F401  (cross_entropy_03_from_lse)
from onlinesoftmax.kernels.sampling import rows as sampling_kernels  # noqa: F401  (sampling_01_rows)
from onlinesoftmax.kernels.sampling import split as sampling_split  # noqa: F401  (sampling_02_split)
from onlinesoftmax import reference
from onlinesoftmax.backward import attention_backward, log_softmax_backward, softmax_backward
from onlinesoftmax.api import log_softmax, logsumexp, softmax
from onlinesoftmax.topk import softmax_topk, topk_logits
from onlinesoftmax.attention_api import attention
from onlinesoftmax.loss import cross_entropy, cross_entropy_with_grad
from onlinesoftmax.sampling import sample
from onlinesoftmax.linear_loss import linear_cross_entropy, linear_cross_entropy_with_grad
from onlinesoftmax.registry import REGISTRY, variants
from onlinesoftmax.runtime.loader import reload
from onlinesoftmax.runtime import torch_bridge as _torch_bridge

def _autograd(function: str, x, dim, keepdim: bool = False, **options):
    """onlinesoftmax.<function>(x, dim) for an x that requires a gradient: through its operator
    (onlinesoftmax.torch_ops). The operators take the plain call (variant "auto", no out=, no mask);
    other options say so. For "cross_entropy", x is the logits, dim the targets and the options the
    loss's own; for "attention", q and (k, v)."""
    import numpy as np
    from onlinesoftmax import inputs, torch_ops

    if function == "cross_entropy":
        return torch_ops.cross_entropy(x, dim, *map(options.get, ("ignore_index", "label_smoothing", "z_loss",
                                                                   "softcap", "reduction")))
    if function == "attention":   # (its options checked by attention_api, as for arrays)
        return torch_ops.attention(x, *dim, bool(options["causal"]), options["scale"], options["causal_align"])
    variant = options.get("variant", "auto")
    if variant != "auto":   # an unknown variant is named as such, before the gradient's own rule
        inputs.resolve(variant, function, function)
    asked = {name: value for name, value in options.items()
             if value is not None and not (name == "variant" and value == "auto")
             and not (name == "mask_value" and value == float("-inf"))
             and not (name == "causal" and value is False) and not (name == "causal_align" and value == "bottom_right")}
    if asked:
        raise TypeError(f"{function}: gradients are computed for the plain call only (variant='auto', no out=, "
                        f"no mask); got {sorted(asked)} with a tensor that requires grad or carries a tangent. "
                        f"Pass x.detach() for a forward-only call")
    if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{function}: axis must be an int, got {type(dim).__name__} {dim!r}")
    operator = {"softmax": torch_ops.softmax, "log_softmax": torch_ops.log_softmax}.get(function)   # (the schema
    return operator(x, int(dim)) if operator is not None else torch_ops.logsumexp(x, int(dim), keepdim)   # wants an int)


_torch_bridge.autograd = _autograd
VARIANTS = ("auto",) + tuple(v.name for v in variants("softmax"))

__all__ = ["softmax", "logsumexp", "log_softmax", "softmax_backward", "log_softmax_backward", "attention_backward", "softmax_topk", "topk_logits", "attention", "cross_entropy", "cross_entropy_with_grad", "sample", "linear_cross_entropy", "linear_cross_entropy_with_grad", "reload", "reference", "REGISTRY", "VARIANTS", "variants"]
