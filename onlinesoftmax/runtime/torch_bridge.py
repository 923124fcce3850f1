"""Torch tensors through the public functions: viewed in without a copy, computed on torch's stream,
viewed back out as tensors.

A CUDA tensor is viewed as a CuPy array (through `__cuda_array_interface__`; bfloat16 through its
16-bit words) and the kernels launch on **torch's current stream** of that device (a CuPy
`ExternalStream` over it, made once per stream): what the caller queued on that stream before the
call is seen by the kernels, what it queues after sees their results. The arrays the function
returns are viewed back as tensors (DLPack), sharing their memory; an `out=` tensor comes back as
itself. A CPU tensor runs the NumPy models and comes back as a CPU tensor.

torch is never imported here: a tensor can only be passed where torch is loaded already.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

# The public functions' way to autograd, for a tensor that requires a gradient: onlinesoftmax._autograd (through
# the operators of torch_ops), set by the package's __init__ (the library below them never imports them).
autograd = None
_streams: dict = {}               # (device, stream address) -> cupy.cuda.ExternalStream over it
_calls = threading.local()        # .given: the running call's {id(array): (array, the tensor it views)}
_streams_lock = threading.Lock()


def is_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def stream_address_function():
    """torch's call for the address of its current stream on a device (0: the legacy default stream):
    the one C call where torch has it, else the public path (which builds a Stream object)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)


def wants_operator(x) -> bool:
    """A tensor that requires a gradient (grad mode on) or carries a forward-mode tangent, or any tensor
    while torch.compile traces or a torch.func transform (vmap, grad, jvp) is active: softmax,
    log_softmax, logsumexp and cross_entropy then go through their operators (`autograd` above), whose
    rules those transforms call."""
    import torch

    return (x.requires_grad and torch.is_grad_enabled()) or has_tangent(x) or transforming()


def transforming_or_dual() -> bool:
    """transforming(), or a forward_ad.dual_level() is open (a tensor may carry a tangent): the public
    functions' fast path for plain CUDA tensors steps aside for the operator."""
    import torch.autograd.forward_ad as forward_ad

    return forward_ad.__dict__["_current_level"] >= 0 or transforming()


def has_tangent(x) -> bool:
    """x is a dual tensor of torch.autograd.forward_ad (inside a dual_level, with a tangent). Below the
    autograd keys (an operator's implementation, a dispatch mode) no tensor is dual: not asked there."""
    import torch
    import torch.autograd.forward_ad as forward_ad

    if forward_ad.__dict__["_current_level"] < 0 or \
            torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.AutogradOther):
        return False
    return forward_ad.unpack_dual(x).tangent is not None


def transforming() -> bool:
    """torch.compile is tracing, or a torch.func transform is active (its tensors have no storage)."""
    import torch

    return torch.compiler.is_compiling() or torch._C._functorch.maybe_current_level() is not None


def external_stream(device_index: int, address: int):
    """A CuPy stream object over torch's stream (made once per stream, kept: torch owns the stream)."""
    key = (device_index, address)
    stream = _streams.get(key)
    if stream is None:
        import cupy

        with _streams_lock:
            stream = _streams.get(key)
            if stream is None:
                stream = _streams[key] = cupy.cuda.ExternalStream(address, device_index)
    return stream


def to_array(t):
    """A tensor as a NumPy (CPU) or CuPy (CUDA) array over the same memory."""
    import torch

    t = t.detach()
    if t.layout != torch.strided:
        raise TypeError(f"onlinesoftmax takes dense (strided) tensors, got a {t.layout} one; convert with t.to_dense()")
    if t.dtype.is_floating_point and t.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"onlinesoftmax takes float32, float16, bfloat16 or float64 tensors, got {t.dtype}; "
                        "convert with t.float()")
    bf16 = t.dtype == torch.bfloat16
    if t.device.type == "cpu":
        if bf16:
            from onlinesoftmax.checks import np_dtype
            return t.view(torch.int16).numpy().view(np_dtype("bfloat16"))
        return t.numpy()
    if t.device.type != "cuda":
        raise TypeError(f"onlinesoftmax takes CPU or CUDA tensors, got a tensor on {t.device}")
    import cupy

    if bf16:
        from onlinesoftmax.checks import np_dtype
        return cupy.asarray(t.view(torch.int16)).view(np_dtype("bfloat16"))
    return cupy.asarray(t)


def to_tensor(a):
    """A NumPy or CuPy array (of the function's result) as a tensor over the same memory."""
    import torch

    if isinstance(a, np.ndarray):
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a if a.flags.writeable else a.copy())
    if a.dtype.name == "bfloat16":
        import cupy
        return torch.from_dlpack(a.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def call(function, *args, **kwargs):
    """function(*args, **kwargs) with every tensor among the arguments viewed as an array, the launches
    on torch's current stream, and the arrays returned viewed as tensors (an out= tensor as itself, its
    version counter bumped). A tensor that requires a gradient (with grad mode on) is refused: these
    functions have no autograd rule here, and a result without one would drop the gradient silently."""
    import torch

    tensors = [a for a in (*args, *kwargs.values()) if is_tensor(a)]
    if any(map(has_tangent, tensors)):
        raise NotImplementedError(f"{function.__name__} has no forward-mode AD rule: called on a dual tensor "
                                  "(torch.autograd.forward_ad), its result would silently drop the tangent. "
                                  "softmax, log_softmax and logsumexp have one (onlinesoftmax.torch_ops)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError(f"{function.__name__} computes no gradient: called on a tensor that requires one, its "
                           "result would silently cut the graph. Call it under torch.no_grad() or on x.detach(); "
                           "softmax, log_softmax, logsumexp, cross_entropy, linear_cross_entropy and attention "
                           "(variant='auto', no return_lse) have gradients (onlinesoftmax.torch_ops)")
    for name in ("out", "mask", "valid_lengths"):   # an array beside tensors: refused, never written or read silently
        value = kwargs.get(name)
        if value is not None and not is_tensor(value) and hasattr(value, "shape") and hasattr(value, "dtype"):
            raise TypeError(f"{function.__name__}: {name} must be a torch tensor as x is, got {type(value).__module__}."
                            f"{type(value).__name__} of shape {tuple(value.shape)}")
    out = kwargs.get("out")
    if is_tensor(out):
        torch.autograd.graph.increment_version(out)   # written in place: autograd must see it, as after torch's out=
    where = {str(t.device) for t in tensors}
    if len(where) > 1:
        raise ValueError(f"{function.__name__}: all tensors must be on one device, got tensors on {sorted(where)}")
    first = tensors[0]
    given = {}                   # id(array) -> (array, the tensor it views): an out= tensor comes back as itself
    outer, _calls.given = getattr(_calls, "given", None), given   # (tensor_behind: errors name the tensor)

    def convert(a):
        if not is_tensor(a):
            return a
        array = to_array(a)
        given[id(array)] = (array, a)   # the array is kept alive, so its id names it until the call ends
        return array

    def back(result):
        if isinstance(result, tuple):
            return tuple(back(r) for r in result)
        viewed = given.get(id(result))
        if viewed is not None and viewed[0] is result:
            return viewed[1]
        return to_tensor(result) if hasattr(result, "dtype") and hasattr(result, "shape") else result

    try:
        if first.device.type != "cuda":
            return back(function(*map(convert, args), **{k: convert(v) for k, v in kwargs.items()}))
        import cupy

        index = first.device.index if first.device.index is not None else cupy.cuda.runtime.getDevice()
        with cupy.cuda.Device(index), external_stream(index, stream_address_function()(index)):
            return back(function(*map(convert, args), **{k: convert(v) for k, v in kwargs.items()}))
    finally:   # `back` calls itself, a cycle through `given` that only the garbage collector would free:
        given.clear()   # the arguments' arrays and tensors go when the call ends, not some calls later
        _calls.given = outer


def tensor_behind(a):
    """The torch tensor that the array `a` views, when `a` is an argument of a call running in this thread
    (an error message then names what the caller passed); else None."""
    viewed = (getattr(_calls, "given", None) or {}).get(id(a))
    return viewed[1] if viewed is not None and viewed[0] is a else None
