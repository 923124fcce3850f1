"""Public entry points: a cupy array runs the real kernel, a numpy array its NumPy model."""
from __future__ import annotations

import numpy as np

from onlinesoftmax.runtime import device
from onlinesoftmax.registry import REGISTRY, Variant, resolve


def check_input(x, variant: Variant):
    """Validate `x` for `variant`; return (x as a 2-D array with unit column stride, on_gpu).

    Raises TypeError for the wrong kind of object or dtype, ValueError for the wrong
    shape, an empty array, too many columns, or an array on another device.
    """
    on_gpu = device.is_cupy_array(x)
    if not on_gpu and not isinstance(x, np.ndarray):
        raise TypeError(f"expected a numpy or cupy ndarray, got {type(x).__module__}.{type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array (rows x N), got shape {x.shape}")
    n_rows, n_cols = x.shape
    if n_rows == 0 or n_cols == 0:
        raise ValueError(f"expected a non-empty array, got shape {x.shape}")
    if x.dtype.name not in variant.dtypes:
        raise TypeError(f"{variant.name} takes {', '.join(variant.dtypes)}, got {x.dtype.name}")
    if n_cols > variant.max_cols:
        raise ValueError(f"{variant.name} supports at most {variant.max_cols} columns, got {n_cols}")
    if on_gpu:
        import cupy

        if x.device.id != cupy.cuda.Device().id:
            raise ValueError(f"x is on GPU {x.device.id}, but the current device is {cupy.cuda.Device().id}")
        if x.strides[1] != x.itemsize or x.strides[0] % x.itemsize or x.strides[0] < 0:
            x = cupy.ascontiguousarray(x)  # the kernels take strided rows, not strided columns
    return x, on_gpu


def check_out(out, x, shape=None):
    """`out` must be a same-kind, same-dtype array of `shape` (default x's) with unit last stride."""
    if out is None:
        return None
    shape = x.shape if shape is None else shape
    if type(out) is not type(x) or out.shape != shape or out.dtype != x.dtype:
        raise ValueError(f"out must be a {type(x).__name__} of shape {shape} and dtype {x.dtype}")
    if out.strides[-1] != out.itemsize:
        raise ValueError("out must have unit stride along the last axis")
    if out.ndim == 2 and out.shape[0] > 1 and out.strides[0] < out.shape[1] * out.itemsize:
        raise ValueError("out's rows overlap (row stride smaller than a row): each element needs its own place")
    if device.is_cupy_array(out) and out.device.id != x.device.id:
        raise ValueError(f"out is on GPU {out.device.id}, x on GPU {x.device.id}")
    xp = __import__("cupy") if device.is_cupy_array(out) else np
    if xp.may_share_memory(out, x):
        raise ValueError("out overlaps x: the kernels read x after writing out (pass a separate array)")
    return out


def run(variant: Variant, x, out=None, **options):
    """Run one registered variant on a validated 2-D input."""
    x, on_gpu = check_input(x, variant)
    # Row reductions (logsumexp) write one value per row; the rest one per element.
    shape = x.shape[:1] if "one_value_per_row" in variant.features else x.shape
    out = check_out(out, x, shape)
    if not on_gpu:
        result = variant.simulate(x, **options)
        if out is not None:
            out[...] = result
            return out
        return result
    import cupy

    from onlinesoftmax.runtime.plan import get_runner

    y = out if out is not None else cupy.empty(shape, dtype=x.dtype)
    get_runner(variant, x, y, options)(x, y, **options)
    return y


def softmax(x, variant: str = "online", *, out=None, mask=None, valid_lengths=None,
            mask_value: float = -np.inf):
    """Softmax over the last axis of a 2-D array, same dtype back.

    `variant` is a registry key (`onlinesoftmax.VARIANTS`) or its short name
    ("naive", "safe", "online", ...), or "fast": the fastest kernel for the shape and
    dtype (`softmax_fast.choose`; fp32, fp16, bf16; no mask). cupy input runs the CUDA
    kernel; numpy input runs the kernel's NumPy model (same thread partition and
    reduction order).

    Masks (fused into softmax_03_online_masked; "online" dispatches there when one is
    given): `mask` is None, "causal" (row i keeps columns j <= i, like torch's
    is_causal) or an additive float array of shape (rows, N) or (N,); `valid_lengths`
    keeps columns j < valid_lengths[i] of row i. Removed columns take `mask_value`
    (-inf: a fully masked row is NaN, as in torch; -1e6: it is uniform).
    """
    if variant == "fast":  # dispatch by (rows, N, dtype): softmax_fast.choose
        from onlinesoftmax.kernels import softmax_fast

        if mask is not None or valid_lengths is not None:
            raise ValueError('variant="fast" takes no mask or valid_lengths (the fast kernels are '
                             'unmasked); use variant="online" for a masked softmax')
        return softmax_fast.softmax_fast(x, out=out)
    chosen = resolve(variant, "softmax")
    if isinstance(mask_value, bool) or not isinstance(mask_value, (int, float, np.integer, np.floating)):
        raise TypeError(f"mask_value must be a number, got {type(mask_value).__name__}")
    if mask is None and valid_lengths is None:
        if mask_value != -np.inf:
            raise ValueError("mask_value only applies with mask= or valid_lengths=")
        return run(chosen, x, out=out)
    from onlinesoftmax.kernels import softmax_masked

    if chosen.name == "softmax_02_online":
        chosen = softmax_masked.MASKED
    if "mask" not in chosen.features:
        supporting = ", ".join(v.name for v in REGISTRY.values() if "mask" in v.features)
        raise ValueError(f"{chosen.name} does not take a mask or valid_lengths; "
                         f"use variant=\"online\" or one of: {supporting}")
    x, _ = check_input(x, chosen)
    options = softmax_masked.prepare(x, mask, valid_lengths, mask_value)
    return run(chosen, x, out=out, **options)


def logsumexp(x, variant: str = "online", *, out=None):
    """log sum_j e^(x_ij) for each row of a 2-D array: shape (rows,), dtype of x.

    A row of all -inf gives -inf; a row holding NaN or +inf gives NaN. cupy input runs
    the CUDA kernel (`logsumexp_01_online`), numpy input its NumPy model.
    """
    return run(resolve(variant, "logsumexp"), x, out=out)


def log_softmax(x, variant: str = "online", *, out=None):
    """x - logsumexp(x) over the last axis of a 2-D array, same dtype back.

    float16 input runs the fp16 build of the variant (`<name>_fp16`: fp32 arithmetic,
    fp16 output). A row of all -inf gives NaN (as torch). cupy input runs the kernel,
    numpy input its NumPy model.
    """
    chosen = resolve(variant, "log_softmax")
    dtype = getattr(getattr(x, "dtype", None), "name", None)
    if dtype == "float16" and dtype not in chosen.dtypes and f"{chosen.name}_fp16" in REGISTRY:
        chosen = resolve(f"{chosen.name}_fp16", "log_softmax")
    return run(chosen, x, out=out)
