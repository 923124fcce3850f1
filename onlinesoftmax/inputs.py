"""What the caller passed: the checks and layout steps every public function starts with.

Each raises a TypeError or ValueError naming the function, what was passed and what is accepted.
`as_rows` gives the 2-D (rows, N) view the kernels run on; `resolve` finds a registered variant
by its name or short name.
"""
from __future__ import annotations

import math

import numpy as np

from onlinesoftmax.registry import DTYPES, MAX_COLS, REGISTRY, Variant, variants
from onlinesoftmax.runtime import device, torch_bridge

try:
    import cupy as _cupy
    current_device = _cupy.cuda.runtime.getDevice
except Exception:  # pragma: no cover - the models run without CuPy
    _cupy = current_device = None


def describe(x) -> str:
    tensor = torch_bridge.tensor_behind(x)   # an array viewing the caller's tensor: the tensor is named
    if tensor is not None:
        return f"a torch.Tensor of shape {tuple(tensor.shape)} and dtype {tensor.dtype} on {tensor.device}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"a {type(x).__module__.split('.')[0]}.{type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"a {type(x).__module__}.{type(x).__name__}" if type(x).__module__ != "builtins" else f"a {type(x).__name__}"


def check_same_kind(named: dict, function: str, together: str) -> None:
    """Every array in `named` ({name: array}) numpy or cupy, and all of one kind; TypeError naming each
    otherwise (`together`: how the message names them as a group)."""
    for name, a in named.items():
        if not (isinstance(a, np.ndarray) or device.is_cupy_array(a)):
            raise TypeError(f"{function}: {name} must be a numpy or cupy array (or a torch tensor), got {describe(a)}")
    if len({type(a) for a in named.values()}) != 1:
        raise TypeError(f"{function}: {together} must all be numpy or all cupy, got "
                        + ", ".join(f"{n}: {describe(a)}" for n, a in named.items()))


def check_flags_and_scale(function: str, scale, d: int, **flags) -> float:
    """Each of `flags` a bool (TypeError naming it otherwise); the scale: 1/sqrt(d) for None, else a
    number (TypeError otherwise: a Python or NumPy int or float) that is finite (ValueError otherwise).
    Returns the scale as a float."""
    for name, flag in flags.items():
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{function}: {name} must be True or False, got {flag!r}")
    if scale is None:
        return float(1.0 / np.sqrt(d))
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"{function}: scale must be a number or None, got {scale!r}")
    if not np.isfinite(scale):
        raise ValueError(f"{function}: scale must be finite, got {scale!r}")
    return float(scale)


def check_array(x, function: str, *, exact: bool = False):
    """x must be a numpy or cupy array of float32, float16 or bfloat16 with at least one dimension and
    an element; with `exact` (the functions that compute those exactly: onlinesoftmax/exact.py) also
    float64, and empty."""
    on_gpu = device.is_cupy_array(x)
    if not on_gpu and not isinstance(x, np.ndarray):
        raise TypeError(f"{function} takes a numpy or cupy array, got {describe(x)}; "
                        f"convert with numpy.asarray(x, dtype=numpy.float32) or cupy.asarray(...)")
    if x.ndim == 0:
        raise ValueError(f"{function} needs at least one axis, got a 0-d array; use x.reshape(1)")
    if x.dtype.name not in DTYPES and not (exact and x.dtype.name == "float64"):
        hint = ("float64 is not computed here (the kernels work in float32): convert with x.astype('float32')"
                if x.dtype.name == "float64" else "convert with x.astype('float32')")
        accepted = "float32, float16, bfloat16 or float64" if exact else "float32, float16 or bfloat16"
        raise TypeError(f"{function} takes {accepted}, got {x.dtype.name}; {hint}")
    if x.size == 0 and not exact:
        raise ValueError(f"{function} needs a non-empty array, got shape {tuple(x.shape)}")
    if on_gpu and x.device.id != current_device():
        raise ValueError(f"x is on GPU {x.device.id}, but the current device is {current_device()}: "
                         f"call inside `with cupy.cuda.Device({x.device.id}):`")
    return on_gpu


def normalize_axis(axis, ndim: int, function: str) -> int:
    if isinstance(axis, str):
        raise TypeError(f"{function}: axis must be an int, got the string {axis!r}; "
                        f"a kernel is chosen by keyword: {function}(x, variant={axis!r})")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{function}: axis must be an int, got {type(axis).__name__} {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{function}: axis {axis} is out of range for an array of {ndim} dimension(s)")
    return int(axis) % ndim


def check_length(x, axis: int, function: str) -> None:
    """Column indices are 32-bit in the kernels: rows stop 2^16 short of 2^31 elements."""
    if x.shape[axis] > MAX_COLS:
        raise ValueError(f"{function}: rows of at most {MAX_COLS} elements, got {x.shape[axis]} along axis {axis}")


def as_rows(x, axis: int):
    """x as a 2-D (rows, N) array over `axis` with unit column stride, and whether it is a view.

    The last axis of an array whose leading axes merge is a view (no copy); another axis is
    moved last by a copy, as are views with a column stride."""
    xp = _cupy if device.is_cupy_array(x) else np
    if axis != x.ndim - 1:
        x = xp.ascontiguousarray(xp.moveaxis(x, axis, -1))
        return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), False
    n_cols = x.shape[-1]
    if n_cols == 0:   # (reshape cannot infer the rows of an empty axis)
        return x.reshape(math.prod(x.shape[:-1]), 0), False
    if x.ndim == 2 and x.strides[1] == x.itemsize and x.strides[0] >= 0 and x.strides[0] % x.itemsize == 0:
        return x, True
    if x.ndim != 2 and x.flags.c_contiguous:
        return x.reshape(-1, n_cols), True
    return xp.ascontiguousarray(x).reshape(-1, n_cols), False


def resolve(variant, family: str, function: str) -> Variant:
    """A registry key or a short alias ("online") of `family` -> the Variant."""
    if isinstance(variant, str):
        if variant in REGISTRY and REGISTRY[variant].family == family:
            return REGISTRY[variant]
        matches = [v for v in variants(family) if v.short == variant]
        if len(matches) == 1:
            return matches[0]
    known = sorted({v.name for v in variants(family)} | {v.short for v in variants(family) if v.short})
    raise ValueError(f"{function}: unknown variant {variant!r}; known: 'auto', " + ", ".join(map(repr, known)))


def check_variant_accepts(variant: Variant, x, asked: str, function: str, on_gpu: bool) -> None:
    if x.dtype.name not in variant.dtypes:
        raise TypeError(f"{function}: variant {asked!r} takes {', '.join(variant.dtypes)}, got {x.dtype.name}; "
                        "variant='auto' takes float32, float16 and bfloat16")
    if x.shape[1] > variant.max_cols:
        raise ValueError(f"{function}: variant {asked!r} takes rows of at most {variant.max_cols} elements, "
                         f"got {x.shape[1]}; variant='auto' takes any length")
    if on_gpu and device.compute_capability() < variant.min_cc:
        raise RuntimeError(f"{function}: variant {asked!r} needs compute capability {variant.min_cc / 10:.1f}, "
                           f"this GPU has {device.compute_capability() / 10:.1f}; variant='auto' picks one it can run")


def check_out(out, like, shape, dtype, function: str):
    """`out` must be an array of x's kind with the result's shape and dtype, rows of unit stride that
    do not overlap each other or x. Returns it as 2-D rows (or 1-D for one value per row)."""
    if type(out) is not type(like) or tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        kind = "torch.Tensor" if torch_bridge.tensor_behind(like) is not None else type(like).__name__
        raise ValueError(f"{function}: out must be a {kind} of shape {tuple(shape)} and dtype "
                         f"{np.dtype(dtype).name}, got {describe(out)}")
    if out.size == 0:   # nothing is written: any strides will do (NumPy gives empty arrays strides of 0)
        return out
    if out.ndim and out.strides[-1] != out.itemsize:
        raise ValueError(f"{function}: out must have unit stride along its last axis")
    if out.ndim > 2 and not out.flags.c_contiguous:
        raise ValueError(f"{function}: an out of more than two dimensions must be C-contiguous")
    if out.ndim == 2 and out.shape[0] > 1 and out.strides[0] < out.shape[1] * out.itemsize:
        raise ValueError(f"{function}: out's rows overlap (row stride smaller than a row): each element needs its own place")
    if device.is_cupy_array(out) and out.device.id != like.device.id:
        raise ValueError(f"{function}: out is on GPU {out.device.id}, x on GPU {like.device.id}")
    xp = _cupy if device.is_cupy_array(out) else np
    if xp.may_share_memory(out, like):
        raise ValueError(f"{function}: out overlaps x; the kernels read x after writing out (pass a separate array)")
    return out


def from_rows(result, x_shape, axis: int, per_row: bool):
    """(rows, N) or (rows,) result -> the caller's shape, the reduced axis removed for per-row results."""
    moved = tuple(s for i, s in enumerate(x_shape) if i != axis)
    if per_row:
        return result.reshape(moved)
    xp = _cupy if device.is_cupy_array(result) else np
    result = result.reshape(moved + (x_shape[axis],))
    return result if axis == len(x_shape) - 1 else xp.moveaxis(result, -1, axis)
