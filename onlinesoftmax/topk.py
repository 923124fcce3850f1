"""softmax_topk: the k largest probabilities of softmax(x) along an axis, and their indices.

    probs, indices = onlinesoftmax.softmax_topk(x, k)                 # numpy x: model; cupy x: kernel
    probs, indices, lse = onlinesoftmax.softmax_topk(x, k, return_lse=True)

TopK(softmax(x)) picks the same columns as TopK(x) (e^x is increasing), so one read of the logits
gives both the selection and the normalizer. Conventions (tested against softmax followed by a
top-k on the same row):
- probabilities in x's dtype (float32, float16, bfloat16), indices int64, sorted by probability,
  equal logits toward the lower index; the LSE is float32;
- renormalize=True divides by the sum of the k kept (MoE gating, top-k sampling), so they sum to 1;
- a row of all -inf gives NaN probabilities (softmax of it is NaN, as torch) and indices 0 .. k-1;
  a row holding NaN or +inf gives NaN probabilities, and NaN ranks above every number (as
  torch.topk ranks it), so its NaN columns come first.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import api
from onlinesoftmax.kernels import softmax_topk as kt
from onlinesoftmax.runtime.plan import get_runner

AUTO = ("auto",)
AUTO_WARP_MAX_COLS = 512     # rows up to this length go to softmax_topk_02_warp_rows (k <= 8)


def _check_k(k, n_cols: int) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"softmax_topk: k must be an int, got {type(k).__name__} {k!r}")
    if not 1 <= k <= n_cols:
        raise ValueError(f"softmax_topk: k must lie in 1 .. N = {n_cols} (the row length), got {k}")
    if k > kt.MAX_K:
        raise ValueError(f"softmax_topk: k of at most {kt.MAX_K} for now, got {k}")
    return int(k)


def choose(n_cols: int, k: int):
    """variant="auto": a warp per row for short rows (N <= AUTO_WARP_MAX_COLS, k <= 8), else a block."""
    return kt.WARP_ROWS if n_cols <= AUTO_WARP_MAX_COLS and k <= kt.WARP_MAX_K else kt.ONLINE_FUSED


def softmax_topk(x, k: int, axis: int = -1, *, renormalize: bool = False, return_lse: bool = False,
                 variant: str = "auto"):
    """(probs, indices[, lse]) of the k largest softmax probabilities of each row along `axis`.

    probs and indices have x's shape with `axis` replaced by k (moved last when axis is not the
    last); lse has x's shape without `axis`."""
    on_gpu = api.check_array(x, "softmax_topk")
    axis = api.normalize_axis(axis, x.ndim, "softmax_topk")
    api.check_length(x, axis, "softmax_topk")
    k = _check_k(k, x.shape[axis])
    if not isinstance(renormalize, (bool, np.bool_)):
        raise TypeError(f"softmax_topk: renormalize must be True or False, got {renormalize!r}")
    if variant not in AUTO:
        chosen = api.resolve(variant, "softmax_topk", "softmax_topk")
    else:
        chosen = choose(x.shape[axis], k)
    if chosen is kt.WARP_ROWS and (k > kt.WARP_MAX_K or x.shape[axis] > kt.WARP_MAX_COLS):
        raise ValueError(f"softmax_topk: {kt.WARP_ROWS.name} takes k <= {kt.WARP_MAX_K} and rows of at most "
                         f"{kt.WARP_MAX_COLS} elements, got k = {k}, N = {x.shape[axis]}; variant='auto' chooses for you")
    rows, _ = api.as_rows(x, axis)
    lead = tuple(s for i, s in enumerate(x.shape) if i != axis)
    if not on_gpu:
        probs, indices, lse = chosen.simulate(rows, k, renormalize)
    else:
        import cupy

        probs = cupy.empty((rows.shape[0], k), dtype=rows.dtype)
        indices = cupy.empty((rows.shape[0], k), dtype=cupy.int64)
        lse = cupy.empty(rows.shape[0], dtype=cupy.float32)
        options = {"k": k, "renormalize": bool(renormalize), "columns": indices, "lse": lse}
        get_runner(chosen, rows, probs, options)(rows, probs, **options)
    probs, indices, lse = probs.reshape(lead + (k,)), indices.reshape(lead + (k,)), lse.reshape(lead)
    return (probs, indices, lse) if return_lse else (probs, indices)
