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
