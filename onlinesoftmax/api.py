"""The public functions, in the conventions of torch and scipy: softmax, log_softmax, logsumexp.

A cupy array runs a CUDA kernel; a numpy array runs that kernel's NumPy model (same partition
of the row, same reduction order), so the book runs on a machine without a GPU. Any number of
leading dimensions, any axis, float32 / float16 / bfloat16 (math in float32; softmax and
log_softmax return the input dtype, logsumexp returns float32).

A repeated call with the same layout (shape, strides, dtype, alignment, device, stream) is one
dictionary lookup, no file, device query, import or validation: validation happens on the first.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import exact
from onlinesoftmax.kernels import dispatch
from onlinesoftmax.kernels.logsumexp import split as logsumexp_split
from onlinesoftmax.inputs import (as_rows, check_array, check_length, check_out, check_variant_accepts,  # noqa: F401
                                  describe, from_rows, normalize_axis, resolve)
from onlinesoftmax.registry import REGISTRY, Variant
from onlinesoftmax.runtime import device
from onlinesoftmax.runtime import driver, torch_bridge
from onlinesoftmax.runtime.plan import extent, fast_path_cache, get_runner

try:  # cupy imports without a GPU; the hot path compares types, so it needs the class itself
    import cupy as _cupy
    CUPY_ARRAY = _cupy.ndarray
    new_cupy_array, current_device = _cupy.ndarray, _cupy.cuda.runtime.getDevice   # public: the other call sites use them
    current_stream = _cupy.cuda.get_current_stream
except Exception:  # pragma: no cover - cupy is a requirement
    _cupy = CUPY_ARRAY = None

AUTO = ("auto", "fast")   # "fast": the earlier name of "auto", still accepted
NEG_INF = -np.inf
_fast_path = fast_path_cache("softmax fast path",   # _call_key(...) -> (runner, shape, dtype, x/out extents, masked, pointers)
                             "softmax, log_softmax, logsumexp: a repeated call's plan")


# ---- running a variant -----------------------------------------------------------------------

def run(variant: Variant, x, out=None, **options):
    """Run one registered variant on a 2-D (rows, N) array: the kernel on cupy input, its model on numpy
    (tests, benchmarks and chapters reach a kernel by name through it)."""
    on_gpu = check_array(x, variant.name)
    if x.ndim != 2:
        raise ValueError(f"{variant.name} runs on 2-D (rows, N) arrays, got shape {tuple(x.shape)}")
    check_length(x, 1, variant.name)
    rows, _ = as_rows(x, 1)
    check_variant_accepts(variant, rows, variant.name, variant.name, on_gpu)
    per_row = "one_value_per_row" in variant.features
    shape, dtype = (rows.shape[:1], np.float32) if per_row else (rows.shape, rows.dtype)
    if out is not None:
        check_out(out, rows, shape, dtype, variant.name)
    if not on_gpu:
        result = variant.simulate(rows, **options)
        if out is not None:
            out[...] = result
            return out
        return result
    y = out if out is not None else _cupy.empty(shape, dtype=dtype)
    with device.nvtx_range(variant.name):   # a named range for profilers (about 1 us; not on the auto fast path)
        get_runner(variant, rows, y, options)(rows, y, **options)
    return y


def _call(function: str, family: str, x, axis, variant, out, options: dict, auto, key=None, given=()):
    """The slow path: validate, choose, plan, run. `auto` is what variant="auto" runs: a registry name,
    the name of a rule of kernels/dispatch.py that picks one (its choose_masked when a mask is given),
    or such a rule itself (a function of rows, N, dtype returning a Choice). With `key` (the call's fast-path key, _call_key),
    remember the runner under it when a repeat of the call can skip all of this: x used in place
    (no copy), and every array option (`given`: the caller's mask, lengths) passed to the kernel as
    the caller's own memory."""
    on_gpu = check_array(x, function, exact=True)
    axis = normalize_axis(axis, x.ndim, function)
    if x.size == 0 or x.dtype == np.float64:
        return _exact(function, x, axis, variant, out, options, given)
    check_length(x, axis, function)
    rows, is_view = as_rows(x, axis)
    per_row = family == "logsumexp"
    out_dtype = np.dtype(np.float32) if per_row else x.dtype
    out_shape = tuple(s for i, s in enumerate(x.shape) if i != axis) if per_row else tuple(x.shape)
    if variant in AUTO:
        chooser = auto if callable(auto) else getattr(dispatch, "choose_masked" if options else auto, None)
        chosen = REGISTRY[auto] if not callable(auto) and auto in REGISTRY else chooser(*rows.shape, rows.dtype).variant
        asked = "auto"
    else:
        chosen = resolve(variant, family, function)
        asked = variant
        if options and chosen.name == "softmax_02_online":   # the online kernel with its mask fused in
            chosen = REGISTRY["softmax_03_online_masked"]
    check_variant_accepts(chosen, rows, asked, function, on_gpu)
    if not on_gpu:
        result = from_rows(chosen.simulate(rows, **options), x.shape, axis, per_row)
        if out is not None:
            check_out(out, x, out_shape, out_dtype, function)[...] = result
            return out
        return result
    direct = axis == x.ndim - 1
    if out is not None:
        check_out(out, x, out_shape, out_dtype, function)
        if not direct:
            raise ValueError(f"{function}: out= takes only axis=-1 (the last axis) results")
        y = out.reshape(rows.shape[:1] if per_row else rows.shape)
        if not device.is_cupy_array(y) or y.data.ptr != out.data.ptr:
            raise ValueError(f"{function}: out must be viewable as (rows, N) without a copy")
    else:
        y = _cupy.empty(rows.shape[:1] if per_row else rows.shape, dtype=out_dtype)
    runner = get_runner(chosen, rows, y, options)
    runner(rows, y, **options)
    if key is not None and direct and is_view and (out is not None or y.flags.c_contiguous) \
            and _passed_as_given(options, given, x):
        _remember(key, runner, out_shape, out_dtype, x, out, options)
    return out if out is not None else from_rows(y, x.shape, axis, per_row)


def _exact(function: str, x, axis: int, variant, out, options: dict, given=()):
    """float64 or empty x: onlinesoftmax/exact.py, with variant "auto" (a mask's options and the caller's mask)."""
    if variant not in AUTO and x.dtype == np.float64:
        raise TypeError(f"{function}: variant {variant!r} takes float32, float16 and bfloat16, got float64; "
                        "variant='auto' computes it exactly")
    if variant not in AUTO:
        raise ValueError(f"{function}: variant {variant!r} launches a kernel, which needs at least one element, "
                         f"got shape {tuple(x.shape)}; variant='auto' returns the empty result")
    result = exact.masked_softmax(x, options, *given[:1]) if options else exact.compute(function, x, axis)
    if out is None:
        return result
    check_out(out, x, result.shape, result.dtype, function)[...] = result
    return out


# ---- the fast path: a repeated call is one lookup, one allocation, one launch ------------------

def _layout(a) -> tuple:   # plan.layout and the device
    return (a.shape, a.strides, a.dtype, a.data.ptr & 15, a.data.device_id)


def _call_key(function: str, x, axis, variant, out=None, mask=None, valid_lengths=None, mask_value=-np.inf,
              causal=False, causal_align="bottom_right"):
    """What a repeated call is found by (None: no fast path): the function, x's layout (shape, strides,
    dtype, 16-byte phase, device), axis and variant as written, the stream, the layouts of out, mask,
    lengths, the causal mask's alignment."""
    key = (function, x.shape, x.strides, x.dtype, x.data.ptr & 15, x.data.device_id, axis, current_stream().ptr)
    if variant == "auto" and out is None and mask is None and valid_lengths is None and mask_value == NEG_INF \
            and causal is False:
        return key   # the most common call: nothing else to look at
    if type(causal) is not bool or type(causal_align) is not str:
        return None
    if type(variant) is not str or type(mask_value) not in (float, int) or \
            (out is not None and type(out) is not CUPY_ARRAY) or \
            (valid_lengths is not None and type(valid_lengths) is not CUPY_ARRAY):
        return None
    if mask is None:
        mask_key = None
    elif type(mask) is CUPY_ARRAY:
        mask_key = _layout(mask)
    else:
        return None
    return key + (variant, None if out is None else _layout(out), mask_key,
                  None if valid_lengths is None else _layout(valid_lengths), mask_value, causal and causal_align)


def _passed_as_given(options: dict, given, x) -> bool:
    """Did the kernel get the caller's own mask / lengths arrays (no conversion, same GPU as x)? Lengths
    the caller did not pass come from a bottom-right causal mask and x's shape alone: kept and reused."""
    for name, array in zip(("mask", "valid_lengths"), given):
        used = options.get(name)
        if used is None or (array is None and name == "valid_lengths"):
            continue
        if type(array) is not CUPY_ARRAY or used.data.ptr != array.data.ptr or \
                array.data.device_id != x.data.device_id:
            return False
    return True


def _remember(key, runner, shape, dtype, x, out, options) -> None:
    extents = None if out is None else (*extent(x), *extent(out))
    masked = options.get("mask") is not None or options.get("valid_lengths") is not None
    _fast_path.put(key, (runner, shape, dtype, extents, masked and (options.get("valid_lengths"),),
                         getattr(runner, "pointers", None)))


def _fast(key, x, out=None, mask=None, valid_lengths=None):
    """A repeated call: one lookup, one allocation (none with out=), one launch; None on a miss."""
    hit = _fast_path.get(key)
    if hit is None or current_device() != x.data.device_id:
        return None
    runner, shape, dtype, extents, masked, pointers = hit
    if out is None:
        y = new_cupy_array(shape, dtype)
    else:
        x_low, x_high, out_low, out_high = extents
        if x.data.ptr + x_low < out.data.ptr + out_high and out.data.ptr + out_low < x.data.ptr + x_high:
            return None   # out overlaps x: the slow path says so
        y = out
    if masked:   # (the lengths the first call used, for lengths derived from the shape)
        runner(x, y, mask=mask if type(mask) is CUPY_ARRAY else None,
               valid_lengths=masked[0] if valid_lengths is None else valid_lengths)
    elif pointers is not None:
        pointers(x.data.ptr, y.data.ptr)
    else:
        runner(x, y)
    return y


def _plain(function: str, x, axis):
    """f(x) or f(x, axis), all else default: _call_key's short key, one allocation and the launch of
    x's and y's addresses (runner.pointers) written out (a Python call costs ~0.1 us); None on a miss."""
    data = x.data
    hit = _fast_path.get((function, x.shape, x.strides, x.dtype, data.ptr & 15, data.device_id, axis,
                          current_stream().ptr))
    if hit is None or hit[5] is None or current_device() != data.device_id:
        return None
    y = new_cupy_array(hit[1], hit[2])
    hit[5](data.ptr, y.data.ptr)
    return y




# ---- the public functions ----------------------------------------------------------------------

def softmax(x, axis: int = -1, *, variant: str = "auto", out=None, mask=None, valid_lengths=None,
            causal: bool = False, causal_align: str = "bottom_right", mask_value: float = -np.inf):
    """softmax(x) = e^x / sum e^x along `axis` (default the last), in x's dtype.

    x: numpy (the kernel's NumPy model runs) or cupy (the kernel runs) array of float32, float16
    or bfloat16, any number of dimensions. `axis` other than the last is computed on a copy with
    that axis moved last. variant: "auto" (the fastest kernel for the shape, dtype, mask and GPU),
    or a kernel's registry name or short name (`onlinesoftmax.VARIANTS`) to run that one.

    Masks (along the last axis; fused into the kernel, never materialized): `mask` is None or an
    additive float array of shape (N,), (q, N) or x's shape; `causal=True` keeps, in row i of each
    (q, N) matrix of x (shape (..., q, N)), the columns j <= i + N - q: the diagonal aligned
    bottom-right as in attention(causal=True) and FlashAttention, the last query seeing every key
    (causal_align="top_left": j <= i, torch's is_causal; the same on a square matrix);
    `valid_lengths` (x's shape without its last axis) keeps columns j < valid_lengths[...] of each
    row. Removed columns take `mask_value` (-inf: a fully masked row is NaN, as in torch; -1e6:
    uniform).
    """
    key = None
    plain = out is None and mask is None and valid_lengths is None and causal is False and variant == "auto" \
        and mask_value == NEG_INF and causal_align == "bottom_right"
    if type(x) is CUPY_ARRAY:
        y = _plain("softmax", x, axis) if plain else None
        if y is None:
            key = _call_key("softmax", x, axis, variant, out, mask, valid_lengths, mask_value, causal, causal_align)
            y = None if key is None else _fast(key, x, out, mask, valid_lengths)
        if y is not None:
            return y
    elif type(x) is _tensor_type and plain and not x.requires_grad and not _tracing() \
            and (y := _tensor_plain("softmax", x, axis)) is not None:
        return y
    elif torch_bridge.is_tensor(x):
        return _from_torch(softmax, "softmax", x, axis, plain, variant=variant, out=out, mask=mask,
                           valid_lengths=valid_lengths, causal=causal, causal_align=causal_align,
                           mask_value=mask_value)
    options = _mask_options(x, axis, variant, mask, valid_lengths, mask_value, causal, causal_align)
    return _call("softmax", "softmax", x, axis, variant, out, options, "choose", key, (mask, valid_lengths))


def log_softmax(x, axis: int = -1, *, variant: str = "auto", out=None):
    """log softmax(x) = x - logsumexp(x) along `axis`, in x's dtype (numpy: model, cupy: kernel).

    A row of all -inf gives NaN (as torch). float32, float16, bfloat16; any number of dimensions."""
    key = None
    plain = out is None and variant == "auto"
    if type(x) is CUPY_ARRAY:
        y = _plain("log_softmax", x, axis) if plain else None
        if y is None:
            key = _call_key("log_softmax", x, axis, variant, out)
            y = None if key is None else _fast(key, x, out)
        if y is not None:
            return y
    elif type(x) is _tensor_type and plain and not x.requires_grad and not _tracing() \
            and (y := _tensor_plain("log_softmax", x, axis)) is not None:
        return y
    elif torch_bridge.is_tensor(x):
        return _from_torch(log_softmax, "log_softmax", x, axis, plain, variant=variant, out=out)
    return _call("log_softmax", "log_softmax", x, axis, variant, out, {}, logsumexp_split.choose_log_softmax, key)


def logsumexp(x, axis: int = -1, *, keepdims: bool = False, variant: str = "auto", out=None):
    """log sum e^x along `axis`, in float32 for float32, float16 and bfloat16 x (like flash-attention's
    saved LSE; float64 x gives float64).

    The axis is removed from the shape (kept with length 1 with keepdims=True, as numpy's keepdims and
    torch's keepdim). A row of all -inf gives -inf, an empty row -inf, a row holding +inf and no NaN
    +inf (as torch), a row holding NaN NaN. numpy input runs the model, cupy input the kernel."""
    if keepdims is not False and keepdims is not np.False_:
        return _keepdims(x, axis, keepdims, variant, out)
    key = None
    plain = out is None and variant == "auto"
    if type(x) is CUPY_ARRAY:
        y = _plain("logsumexp", x, axis) if plain else None
        if y is None:
            key = _call_key("logsumexp", x, axis, variant, out)
            y = None if key is None else _fast(key, x, out)
        if y is not None:
            return y
    elif type(x) is _tensor_type and plain and not x.requires_grad and not _tracing() \
            and (y := _tensor_plain("logsumexp", x, axis)) is not None:
        return y
    elif torch_bridge.is_tensor(x):
        return _from_torch(logsumexp, "logsumexp", x, axis, plain, variant=variant, out=out)
    return _call("logsumexp", "logsumexp", x, axis, variant, out, {}, logsumexp_split.choose, key)


def _keepdims(x, axis, keepdims, variant, out):
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"logsumexp: keepdims must be True or False, got {keepdims!r}")
    if torch_bridge.is_tensor(x):
        if torch_bridge.wants_operator(x):
            return torch_bridge.autograd("logsumexp", x, axis, True, variant=variant, out=out)
        return torch_bridge.call(_keepdims, x, axis, keepdims, variant, out=out)   # (out= by name: its version bumped)
    check_array(x, "logsumexp", exact=True)
    axis = normalize_axis(axis, x.ndim, "logsumexp")
    kept = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    if out is not None and (type(out) is not type(x) or tuple(out.shape) != kept):
        raise ValueError(f"logsumexp: with keepdims=True, out must be a {type(x).__name__} of shape {kept}, got {describe(out)}")
    squeezed = None if out is None else out.reshape(tuple(s for i, s in enumerate(out.shape) if i != axis))
    result = logsumexp(x, axis, variant=variant, out=squeezed)
    return out if out is not None else result.reshape(result.shape[:axis] + (1,) + result.shape[axis:])


_tensor_type = None            # torch.Tensor, once a tensor was passed (torch is never imported here)
_tensor_stream = _tensor_device = None   # torch's C calls: the current stream's address, the current device
_tracing = None                # torch_bridge.transforming_or_dual: torch.compile, torch.func or forward_ad, to the operator


def _tensor_plain(function: str, x, axis):
    """A repeat of f(x) or f(x, axis) on a CUDA tensor: one lookup, torch allocates y, the plan's launch
    of x's and y's addresses (on torch's current stream, part of the key); None on a miss."""
    index = x.get_device()
    hit = _fast_path.get(("torch", function, x.shape, x.stride(), x.dtype, x.data_ptr() & 15, index, axis,
                          _tensor_stream(index)))
    if hit is None or _tensor_device() != index:
        return None
    y = x.new_empty(hit[1], dtype=hit[2])
    hit[0](x.data_ptr(), y.data_ptr())
    return y


def _from_torch(public, function: str, x, axis, plain: bool, **options):
    """A torch tensor: the autograd operator when a gradient is asked for; else through the torch bridge
    (zero-copy views, torch's current stream), and a plain call on a CUDA tensor is remembered for
    _tensor_plain."""
    global _tensor_type, _tensor_stream, _tensor_device, _tracing
    import torch

    if torch_bridge.wants_operator(x):
        return torch_bridge.autograd(function, x, axis, **options)   # the operator (torch.compile traces it)
    if not plain or not x.is_cuda:
        return torch_bridge.call(public, x, axis, **options)
    if _tensor_type is None:
        _tensor_stream = torch_bridge.stream_address_function()
        _tensor_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
        _tracing = torch_bridge.transforming_or_dual
        _tensor_type = torch.Tensor
    index = x.get_device()
    stream = _tensor_stream(index)
    y = torch_bridge.call(public, x, axis)
    a = torch_bridge.to_array(x)
    learned = _fast_path.get((function, a.shape, a.strides, a.dtype, a.data.ptr & 15, a.data.device_id, axis, stream))
    if learned is not None and learned[5] is not None and driver.has_driver_bindings():
        # the plain launch of x's and y's addresses, on the stream it was prepared with (without
        # cuda-bindings a launch goes to CuPy's current stream at call time: not torch's, out here)
        _fast_path.put(("torch", function, x.shape, x.stride(), x.dtype, x.data_ptr() & 15, index, axis, stream),
                       (learned[5], tuple(y.shape), y.dtype))
    return y


def _mask_options(x, axis, variant, mask, valid_lengths, mask_value, causal=False, causal_align="bottom_right") -> dict:
    """The masked kernel's options from softmax's mask arguments ({} without a mask)."""
    if isinstance(mask_value, bool) or not isinstance(mask_value, (int, float, np.integer, np.floating)):
        raise TypeError(f"softmax: mask_value must be a number, got {type(mask_value).__name__}")
    from onlinesoftmax import masks

    masks.check(mask, causal, causal_align)
    for name, value in (("mask", mask), ("valid_lengths", valid_lengths)):   # (a tensor x comes here as an array)
        if torch_bridge.is_tensor(value):
            raise TypeError(f"softmax: {name} must be an array of x's kind ({type(x).__name__}), got a torch tensor")
    if mask is None and valid_lengths is None and not causal:
        if mask_value != -np.inf:
            raise ValueError("softmax: mask_value only applies with mask=, valid_lengths= or causal=True")
        return {}
    check_array(x, "softmax with a mask", exact=True)   # (float64 and empty x: exact.masked_softmax)
    if normalize_axis(axis, x.ndim, "softmax") != x.ndim - 1:
        raise ValueError(f"softmax: masks apply along the last axis, got axis={axis}; "
                         "move the masked axis last (numpy.moveaxis) first")
    if variant not in AUTO:
        chosen = resolve(variant, "softmax", "softmax")
        if "mask" not in chosen.features and chosen.name != "softmax_02_online":
            supporting = ", ".join(repr(v.short or v.name) for v in REGISTRY.values() if "mask" in v.features)
            raise ValueError(f"softmax: variant {variant!r} takes no mask or valid_lengths; "
                             f"use variant='auto' or one of: {supporting}")
    if x.shape[-1] == 0:   # rows of no column: nothing to mask (exact.masked_softmax returns the empty result)
        return {"mask": None}
    rows, _ = as_rows(x, x.ndim - 1)
    return masks.options(rows, mask, valid_lengths, mask_value, shape=x.shape, causal=bool(causal),
                         causal_align=causal_align)
