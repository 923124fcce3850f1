"""The gradients of softmax and log_softmax, from the forward's output:

    dx = onlinesoftmax.softmax_backward(y, dy)        # y = softmax(x):      y * (dy - sum(y * dy))
    dx = onlinesoftmax.log_softmax_backward(y, dy)    # y = log_softmax(x):  dy - e^y * sum(dy)

(torch's `_softmax_backward_data` and `_log_softmax_backward_data`). NumPy arrays run the kernels'
NumPy models, CuPy arrays the kernels (softmax_backward_01_rows, log_softmax_backward_01_rows), torch
tensors either on torch's stream; float64 and empty arrays are computed exactly (onlinesoftmax/exact.py).
dx has y's dtype and shape; y and dy must share shape, dtype and kind.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import exact
from onlinesoftmax.inputs import as_rows, check_array, check_length, describe, from_rows, normalize_axis
from onlinesoftmax.kernels.softmax import backward as kb
from onlinesoftmax.registry import REGISTRY
from onlinesoftmax.runtime import torch_bridge
from onlinesoftmax.runtime.plan import get_runner


def softmax_backward(y, dy, axis: int = -1):
    """dx = y * (dy - sum(y * dy)) along `axis`, for y = softmax(x) and dy the gradient of y."""
    return _backward("softmax_backward", y, dy, axis)


def log_softmax_backward(y, dy, axis: int = -1):
    """dx = dy - e^y * sum(dy) along `axis`, for y = log_softmax(x) and dy the gradient of y."""
    return _backward("log_softmax_backward", y, dy, axis)


def _backward(function: str, y, dy, axis):
    if torch_bridge.is_tensor(y) or torch_bridge.is_tensor(dy):
        return torch_bridge.call(softmax_backward if function == "softmax_backward" else log_softmax_backward,
                                 y, dy, axis)
    on_gpu = check_array(y, function, exact=True)
    if type(dy) is not type(y) or tuple(dy.shape) != tuple(y.shape) or dy.dtype != y.dtype:
        raise ValueError(f"{function}: dy must be an array of y's kind, shape and dtype ({describe(y)}), "
                         f"got {describe(dy)}")
    axis = normalize_axis(axis, y.ndim, function)
    if y.size == 0 or y.dtype == np.float64:
        return exact.backward(function, y, dy, axis)
    check_length(y, axis, function)
    y_rows, _ = as_rows(y, axis)
    dy_rows, _ = as_rows(dy, axis)
    if y_rows.shape[0] >= 2**31:
        raise ValueError(f"{function}: at most 2^31 - 1 rows (the kernels count rows in 32 bits), got {y_rows.shape[0]}")
    chosen = REGISTRY[f"{function}_01_rows"]
    if not on_gpu:   # the model sums in the kernel's order: 16-byte vectors when y, dy and a fresh dx all allow them
        vectors = kb.vectors_fit(y_rows, dy_rows) and y_rows.shape[1] * y_rows.itemsize % 16 == 0
        return from_rows(chosen.simulate(y_rows, dy_rows, vectors=vectors), y.shape, axis, False)
    import cupy

    dx = cupy.empty(y_rows.shape, dtype=y.dtype)
    options = {"dy": dy_rows}
    get_runner(chosen, y_rows, dx, options)(y_rows, dx, **options)
    return from_rows(dx, y.shape, axis, False)


def attention_backward(dout, q, k, v, out, lse, *, causal: bool = False, scale=None, deterministic: bool = False,
                       variant: str = "auto"):
    """(dq, dk, dv) of attention(q, k, v, causal=, scale=) = out with LSE lse (its return_lse), for the
    upstream gradient dout: P recomputed from lse, never stored. Shapes as attention's: q, out, dout
    (batch, heads, n_q, d); k, v (batch, kv_heads, n_k, d), d = 64 or 128; lse float32 (batch, heads,
    n_q). Gradients in q's dtype. float64 (lse float64, any d) and empty arrays are computed exactly
    (onlinesoftmax.exact, the array's own module). variant "auto" runs, for float16 and bfloat16,
    attention_backward_04_wgmma (Hopper's warpgroup instruction) on compute capability 9.0 and
    attention_backward_02_mma (tensor cores) on 8.0 or newer, else attention_backward_01_blocked (fp32 on
    CUDA cores); "mma", "pipelined" (attention_backward_03_pipelined: 128 keys a block, the next query
    tile copied during this one), "wgmma" or "blocked" chooses one. dq is gathered by fp32 atomics (its last bits may
    differ from run to run); deterministic=True runs attention_backward_01_blocked's second pass
    instead (the same bits every run, on CUDA cores)."""
    from onlinesoftmax import attention_api
    from onlinesoftmax.kernels.attention import backward_blocked as kab
    from onlinesoftmax.kernels.attention import backward_mma as kbm
    from onlinesoftmax.kernels.attention import backward_pipelined as kbp
    from onlinesoftmax.kernels.attention import backward_wgmma as kbw
    from onlinesoftmax.runtime import device

    arrays = (dout, q, k, v, out, lse)
    if any(map(torch_bridge.is_tensor, arrays)):
        return torch_bridge.call(attention_backward, *arrays, causal=causal, scale=scale, deterministic=deterministic,
                                 variant=variant)
    batch, heads, kv_heads, n_q, n_k, d, scale = attention_api.check_inputs(q, k, v, scale, exact_ok=True)
    exactly = q.dtype == np.float64 or min(batch, heads, n_q, n_k) == 0   # no kernel: computed in float64
    lse_dtype = np.dtype(np.float64 if q.dtype == np.float64 else np.float32)   # attention's return_lse
    for name, a, shape, dtype in (("dout", dout, q.shape, q.dtype), ("out", out, q.shape, q.dtype),
                                  ("lse", lse, q.shape[:3], lse_dtype)):
        if type(a) is not type(q) or tuple(a.shape) != tuple(shape) or a.dtype != dtype:
            raise ValueError(f"attention_backward: {name} must be an array of q's kind with shape {tuple(shape)} and "
                             f"dtype {dtype}, got {describe(a)}")
    if d not in kab.SUPPORTED_D and not exactly:
        raise ValueError(f"attention_backward: head dimension d = {d} is not supported; supported: {kab.SUPPORTED_D} "
                         f"(and any d > 0 in float64)")
    for name, flag in (("causal", causal), ("deterministic", deterministic)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"attention_backward: {name} must be True or False, got {flag!r}")
    if exactly:
        if variant != "auto":
            raise ValueError(f"attention_backward: variant {variant!r} has no kernel for {q.dtype.name} or empty "
                             f"arrays; variant 'auto' computes them exactly")
        return exact.attention_backward(dout, q, k, v, out, lse, causal=bool(causal), scale=scale)
    on_gpu = not isinstance(q, np.ndarray)
    tensor_cores = q.dtype.name in kbm.DTYPES and not deterministic and \
        (not on_gpu or device.compute_capability() >= kbm.BACKWARD_MMA.min_cc)
    shorts = {"mma": kbm, kbm.NAME: kbm, "pipelined": kbp, kbp.NAME: kbp, "wgmma": kbw, kbw.NAME: kbw}
    hopper = on_gpu and device.compute_capability() == 90
    if variant == "auto":
        chosen = (kbw if hopper else kbm) if tensor_cores else kab
    elif variant in shorts:
        chosen = shorts[variant]
        short = next(name for name, module in shorts.items() if module is chosen)
        if q.dtype.name not in kbm.DTYPES or deterministic:
            raise ValueError(f"attention_backward: variant {short!r} takes float16 or bfloat16 and deterministic=False, "
                             f"got {q.dtype.name}, deterministic={deterministic} (variant 'blocked' takes every dtype)")
        if on_gpu and device.compute_capability() < kbm.BACKWARD_MMA.min_cc:
            raise RuntimeError(f"attention_backward: variant {short!r} needs compute capability 8.0")
        if on_gpu and chosen is kbw and not hopper:
            raise RuntimeError("attention_backward: variant 'wgmma' needs compute capability 9.0 (sm_90a: H100, H200), "
                               f"this GPU has {device.compute_capability() / 10:.1f}; variant 'mma' runs on 8.0 and newer")
        device.check_shared_room("attention_backward", short, d, chosen.shared_bytes(d), "mma")
    elif variant in ("blocked", kab.NAME):
        chosen = kab
    else:
        raise ValueError(f"attention_backward: variant must be 'auto', 'mma', 'pipelined', 'wgmma' or 'blocked', "
                         f"got {variant!r}")
    if not on_gpu:
        return chosen.simulate(dout, q, k, v, out, lse, causal=bool(causal), scale=scale)
    import cupy

    given = (dout, q, k, v, out, lse)
    dout, q, k, v, out, lse = (a if a.flags.c_contiguous else cupy.ascontiguousarray(a) for a in given)
    dq, dk, dv = cupy.empty_like(q), cupy.empty_like(k), cupy.empty_like(v)
    options = {"q": q, "k": k, "v": v, "out": out, "lse": lse, "dk": dk, "dv": dv, "causal": bool(causal),
               "scale": scale, "deterministic": bool(deterministic)}
    get_runner(REGISTRY[chosen.NAME], dout, dq, options)(dout, dq, **options)
    return dq, dk, dv
