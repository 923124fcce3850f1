"""softmax_topk: the k largest probabilities of softmax(x) along an axis, and their indices.

    probs, indices = onlinesoftmax.softmax_topk(x, k)                 # numpy x: model; cupy x: kernel
    probs, indices, lse = onlinesoftmax.softmax_topk(x, k, return_lse=True)
    values, indices = onlinesoftmax.topk_logits(x, k)                 # the k largest logits (no softmax)

TopK(softmax(x)) picks the same columns as TopK(x) (e^x is increasing), so one read of the logits
gives both the selection and the normalizer. Conventions (tested against softmax followed by a
top-k on the same row):
- probabilities in x's dtype (float32, float16, bfloat16), indices int64, sorted by probability,
  equal logits toward the lower index; the LSE is float32;
- renormalize=True divides by the sum of the k kept (MoE gating, top-k sampling), so they sum to 1;
- a row of all -inf gives NaN probabilities (softmax of it is NaN, as torch) and indices 0 .. k-1;
  a row holding NaN or +inf gives NaN probabilities, and NaN ranks above every number (as
  torch.topk ranks it), so its NaN columns come first (+inf next). torch.topk of the NaN
  probabilities would return whichever columns it meets first; softmax_topk_02_safe_unfused,
  which selects on the probabilities as torch does, returns columns 0 .. k-1 there.
- k from 1 to min(N, 1024).

A repeated call with the same layout of x, k, axis, options and stream is one dictionary lookup,
two allocations (three with return_lse: the kernels skip a null LSE) and the launch (as the api's
functions: the plan and the checks were made on the first call).

variant="auto" (`choose`): a warp per row for short rows (softmax_topk_05_warp_rows), a block per
row with register lists when there are enough rows to fill the GPU and k <= 8, or short rows and
k <= 16 (softmax_topk_04_online_fused), the row split over blocks for few long rows and for larger
k (softmax_topk_06_split).
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import api, exact
from onlinesoftmax.inputs import describe
from onlinesoftmax.kernels.dispatch import Choice
from onlinesoftmax.kernels.topk import softmax_topk as kt
from onlinesoftmax.kernels.topk import moe
from onlinesoftmax.kernels.topk import split
from onlinesoftmax.runtime import device, torch_bridge
from onlinesoftmax.registry import DTYPE_ITEMSIZE
from onlinesoftmax.runtime.plan import fast_path_cache, get_runner

AUTO = ("auto",)
MAX_K = split.MAX_K
AUTO_WARP_MAX_COLS = 512      # rows up to this length (k <= 8) go to softmax_topk_05_warp_rows
# Split a row over blocks when a block per row would leave SMs idle: rows of at least
# SPLIT_MIN_ROW_BYTES and fewer than SPLIT_BELOW_ROWS_PER_SM rows per SM (1.5: 198 rows on an H200).
# From the H200 probe of the streaming split kernel (logs/h200/2026-12-03-topk-split-probe.log): at 256
# rows of a vocabulary the block per row (softmax_topk_04) was ahead for k = 1; at 64 rows the split
# kernel was ahead for rows of 151936 and 262144 and behind for 32000. For k = 1 the split therefore
# needs a row of SPLIT_K1_MIN_ROW_BYTES below 1.5 rows per SM, or fewer than SPLIT_BELOW_ROWS_PER_SM_K1
# (a quarter of a row per SM). The bound lies between the 64-row shapes of the H200 recording
# (data/h200/2026-12-04-softmax-topk.json): rows of 125 KiB (32000 fp32) went to the block per row
# (17.4 against 21.0 us), rows of 250.5 KiB (128256 bf16) to the split (34.9 against 44.2 us). With 9 <= k <= 16 (the lists of 16) the split kernel was ahead on every
# long row measured, at 4000 rows too (4000 x 32768, k = 16: 295 against 472 us; 4000 x 262144,
# k = 10 and 15: 1.4-1.6 against 3.7 ms), so long rows always split there.
SPLIT_BELOW_ROWS_PER_SM = 1.5
SPLIT_BELOW_ROWS_PER_SM_K1 = 0.25
SPLIT_K1_MIN_ROW_BYTES = 196608
SPLIT_MIN_ROW_BYTES = 32768
SPLIT_FROM_K = 9
AUTO_LIST_MAX_K = 16
_fast_path = fast_path_cache("softmax_topk fast path",   # _call_key(...) -> (runner, rows, outputs' leading shape or None)
                             "softmax_topk, topk_logits: a repeated call's plan")


def check_k(k, n_cols: int, function: str = "softmax_topk", exact: bool = False) -> int:
    """k as an int in 0 .. N (as torch.topk); above MAX_K only where the exact path computes it."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{function}: k must be an int, got {describe(k) if hasattr(k, 'shape') else f'{type(k).__name__} {k!r}'}")
    if not 0 <= k <= n_cols:
        raise ValueError(f"{function}: k must lie in 0 .. N = {n_cols} (the row length), got {k}")
    if k > MAX_K and not exact:
        raise ValueError(f"{function}: k of at most {MAX_K} (the split kernel's radix select and merge), got {k}; "
                         "torch.topk takes any k")
    return int(k)


def choose(n_rows: int, n_cols: int, k: int, dtype: str = "float32", sms: int | None = None) -> Choice:
    """variant="auto": the kernel for n_rows rows of n_cols elements of `dtype`, k kept, on `sms` SMs
    (None: the current device's; 132 without a GPU), with the reason (dispatch.Choice, as every
    chooser of the package returns)."""
    sms = device.sm_count() if sms is None else sms
    if n_cols <= AUTO_WARP_MAX_COLS and k <= moe.MAX_K:
        return Choice(moe.WARP_ROWS, f"rows of <= {AUTO_WARP_MAX_COLS}: a warp per row")
    row_bytes = n_cols * DTYPE_ITEMSIZE[dtype]
    if k > AUTO_LIST_MAX_K:
        return Choice(split.SPLIT, f"k > {AUTO_LIST_MAX_K}: candidates selected in a merge, not kept in lists")
    if row_bytes < SPLIT_MIN_ROW_BYTES:
        return Choice(kt.ONLINE_FUSED, "short rows: a block per row, one pass")
    if k >= SPLIT_FROM_K:           # the lists of 16 lost on every long row measured
        return Choice(split.SPLIT, f"long rows with k >= {SPLIT_FROM_K}: split over blocks")
    rows_per_sm = n_rows / sms
    if k == 1:
        few_long_rows = rows_per_sm < SPLIT_BELOW_ROWS_PER_SM_K1 or \
            (rows_per_sm < SPLIT_BELOW_ROWS_PER_SM and row_bytes >= SPLIT_K1_MIN_ROW_BYTES)
    else:
        few_long_rows = rows_per_sm < SPLIT_BELOW_ROWS_PER_SM
    if few_long_rows:
        return Choice(split.SPLIT, "few long rows: each split over blocks so that every SM works")
    return Choice(kt.ONLINE_FUSED, "many long rows: a block per row, one pass")


def _check_variant(chosen, k: int, n_cols: int, dtype: str) -> None:
    """The limits of a kernel asked for by name, said before anything runs."""
    if chosen is kt.TOPK_ONLY:
        raise ValueError(f"softmax_topk: {chosen.name} returns the k largest logits, not probabilities: "
                         "call onlinesoftmax.topk_logits(x, k)")
    if chosen is moe.WARP_ROWS:
        moe.check_shape(chosen, k, n_cols)
    elif chosen is split.SPLIT:
        split.split_shape(1, n_cols, k, dtype)        # raises for a k the split cannot hold
    else:
        kt.check_k(chosen, k)


def run(chosen, rows, k: int, renormalize: bool, probs, indices, lse=None) -> None:
    """Launch `chosen` on 2-D cupy rows into the given outputs (probs (rows, k) in x's dtype, indices
    (rows, k) int64, lse (rows,) float32 or None) through its cached plan: softmax_topk's GPU path, and
    the tests' and benchmarks' way to run a kernel into outputs they poisoned first. Returns the runner."""
    options = {"k": k, "renormalize": renormalize, "columns": indices, "lse": lse}
    runner = get_runner(chosen, rows, probs, options)
    runner(rows, probs, **options)
    return runner


def _call_key(x, k, axis, renormalize, return_lse, variant):
    """What a repeated call of softmax_topk is found by (None: no fast path for these arguments):
    x's layout (shape, strides, dtype, 16-byte phase, device), the arguments as written, the stream."""
    if type(k) is not int or type(axis) is not int or type(renormalize) is not bool or \
            type(return_lse) is not bool or type(variant) is not str:
        return None
    return (x.shape, x.strides, x.dtype, x.data.ptr & 15, x.data.device_id, k, axis, renormalize, return_lse,
            variant, api.current_stream().ptr)


def _outputs(rows: int, k: int, dtype, lse: bool = True):
    """probs, indices and (when asked for: the kernels skip a null one) the LSE of `rows` rows."""
    return (api.new_cupy_array((rows, k), dtype), api.new_cupy_array((rows, k), np.int64),
            api.new_cupy_array((rows,), np.float32) if lse else None)


def softmax_topk(x, k: int, axis: int = -1, *, renormalize: bool = False, return_lse: bool = False,
                 variant: str = "auto"):
    """(probs, indices[, lse]) of the k largest softmax probabilities of each row along `axis`.

    probs and indices have x's shape with `axis` replaced by k, where `axis` was (as torch.topk's dim);
    lse has x's shape without `axis`. float64 x (any k up to N), an empty x or k = 0 are computed
    exactly (exact.topk), as torch.topk shapes them."""
    if type(x) is not api.CUPY_ARRAY and torch_bridge.is_tensor(x):
        return torch_bridge.call(softmax_topk, x, k, axis, renormalize=renormalize, return_lse=return_lse,
                                 variant=variant)
    key = None
    if type(x) is api.CUPY_ARRAY:
        key = _call_key(x, k, axis, renormalize, return_lse, variant)
        hit = None if key is None else _fast_path.get(key)
        if hit is not None and api.current_device() == x.data.device_id:
            runner, n_rows, lead = hit
            probs, indices, lse = _outputs(n_rows, k, x.dtype, return_lse)
            runner(x, probs, columns=indices, lse=lse)        # the runner reads only the addresses
            if lead is not None:
                probs, indices = probs.reshape(lead + (k,)), indices.reshape(lead + (k,))
                lse = None if lse is None else lse.reshape(lead)
            return (probs, indices, lse) if return_lse else (probs, indices)
    on_gpu = api.check_array(x, "softmax_topk", exact=True)
    axis = api.normalize_axis(axis, x.ndim, "softmax_topk")
    api.check_length(x, axis, "softmax_topk")
    k = check_k(k, x.shape[axis], exact=x.dtype == np.float64)
    for name, flag in (("renormalize", renormalize), ("return_lse", return_lse)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"softmax_topk: {name} must be True or False, got {flag!r}")
    if x.dtype == np.float64 or x.size == 0 or k == 0:   # no kernel: exactly, as torch shapes it
        if variant not in AUTO:
            raise TypeError(f"softmax_topk: variant {variant!r} runs a kernel, which takes float32, float16 and "
                            f"bfloat16, an element and k >= 1; got {x.dtype.name} of shape {tuple(x.shape)}, k = {k}: "
                            "variant='auto' computes it exactly")
        results = exact.topk(x, k, axis, probabilities=True, renormalize=bool(renormalize),
                             return_lse=bool(return_lse))
        return results if return_lse else results[:2]
    rows, view = api.as_rows(x, axis)
    if variant not in AUTO:
        chosen = api.resolve(variant, "softmax_topk", "softmax_topk")
        _check_variant(chosen, k, rows.shape[1], rows.dtype.name)
    else:
        chosen = choose(rows.shape[0], rows.shape[1], k, rows.dtype.name).variant
    lead = tuple(s for i, s in enumerate(x.shape) if i != axis)
    if not on_gpu:
        probs, indices, lse = chosen.simulate(rows, k, bool(renormalize))
    else:
        probs, indices, lse = _outputs(rows.shape[0], k, rows.dtype, return_lse)
        runner = run(chosen, rows, k, bool(renormalize), probs, indices, lse)
        if key is not None and view:   # rows is x itself or a view of it (no copy): its address is x's
            _fast_path.put(key, (runner, rows.shape[0], None if lead == (rows.shape[0],) else lead))
    probs, indices = _in_place_of(probs.reshape(lead + (k,)), axis), _in_place_of(indices.reshape(lead + (k,)), axis)
    return (probs, indices, lse.reshape(lead)) if return_lse else (probs, indices)


def _in_place_of(result, axis: int):
    """A (..., k) result with its k axis moved to `axis` (normalized), where the row's axis was."""
    if axis == result.ndim - 1:
        return result
    order = list(range(result.ndim - 1))
    order.insert(axis, result.ndim - 1)
    return result.transpose(order)


def topk_logits(x, k: int, axis: int = -1):
    """(values, indices) of the k largest logits of each row along `axis`, as torch.topk(x, k) (sorted,
    ties to the lower index, NaN first): softmax_topk_01_topk_only, the baseline of the fused kernels.
    values in x's dtype, indices int64; k <= 32 (the kernel's register lists); k replaces `axis` where it was.
    float64 x, an empty x or k = 0 are computed exactly (exact.topk), as torch.topk returns them."""
    if torch_bridge.is_tensor(x):
        return torch_bridge.call(topk_logits, x, k, axis)
    on_gpu = api.check_array(x, "topk_logits", exact=True)
    axis = api.normalize_axis(axis, x.ndim, "topk_logits")
    api.check_length(x, axis, "topk_logits")
    if x.dtype != np.float64 and not isinstance(k, (bool, np.bool_)) and isinstance(k, (int, np.integer)) and k > 32:
        raise ValueError(f"topk_logits keeps at most 32 logits a row (its kernel's register lists), got k = {k}; "
                         "softmax_topk(x, k) takes k up to 1024 (the same columns, as probabilities), float64 x any k")
    k = check_k(k, x.shape[axis], "topk_logits", exact=x.dtype == np.float64)
    if x.dtype == np.float64 or x.size == 0 or k == 0:   # no kernel: exactly, as torch shapes it
        return exact.topk(x, k, axis, probabilities=False)
    kt.check_k(kt.TOPK_ONLY, k)
    rows, _ = api.as_rows(x, axis)
    lead = tuple(s for i, s in enumerate(x.shape) if i != axis)
    if not on_gpu:
        values, indices = kt.simulate_topk_only(rows, k)
    else:
        import cupy

        values = cupy.empty((rows.shape[0], k), dtype=rows.dtype)
        indices = cupy.empty((rows.shape[0], k), dtype=cupy.int64)
        options = {"k": k, "columns": indices}
        get_runner(kt.TOPK_ONLY, rows, values, options)(rows, values, **options)
    return _in_place_of(values.reshape(lead + (k,)), axis), _in_place_of(indices.reshape(lead + (k,)), axis)
