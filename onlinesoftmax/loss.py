"""Cross-entropy from logits, with the LSE computed online and the gradient in the same kernel:

    loss = onlinesoftmax.cross_entropy(logits, targets)                     # torch's F.cross_entropy
    loss, lse, dlogits = onlinesoftmax.cross_entropy_with_grad(logits, targets)   # and its gradient
    loss, lse, dlogits = onlinesoftmax.cross_entropy_with_grad(logits, targets, in_place=True)

logits (..., V) with the classes on the last axis (torch's cross_entropy takes them on axis 1 when
there are more than two), float32, float16 or bfloat16 (float64: the float64 reference); targets of
logits' shape without the last axis, integers, each in [0, V) or ignore_index. Options as torch's:
ignore_index (-100), label_smoothing (0), reduction ("mean" over the counted rows, "sum", "none");
and z_loss (the weight of lse^2 added to each row's loss, PaLM's z-loss) and softcap (logits
soft-capped as c tanh(x / c) first, Gemma 2's; None for none). The LSE per row (float32) is what the
z-loss and a later backward need. The gradient is that of the reduced loss (of the sum of the rows
for "none"), in logits' dtype; in_place=True writes it over the logits and returns them.
check_targets=False skips the check of the targets (below): a target outside [0, V) then counts
as ignore_index, and a caller in a loop (linear_cross_entropy's chunks: it checks all its targets
once) never waits for the GPU.

NumPy arrays run the kernel's NumPy model, CuPy arrays the kernels (cross_entropy_02_cluster for the gradient
on a GPU with thread-block clusters, else cross_entropy_01_rows: kernel_for), torch
tensors either on torch's current stream (a tensor that needs a gradient goes to the autograd
operator torch.ops.onlinesoftmax.cross_entropy). On a GPU a call is three launches: the targets
checked and counted on the device, the row kernel, the loss reduced on the device; the host reads
one flag (one synchronization) and an out-of-range target is a ValueError naming it, not a device
fault. The operator reads the flag in its backward instead (cross_entropy_with_grad_deferred): its
forward never waits for the GPU.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.inputs import check_array, check_length, describe
from onlinesoftmax.kernels.cross_entropy import rows as kce
from onlinesoftmax.reference import array_module
from onlinesoftmax.registry import REGISTRY
from onlinesoftmax.runtime import torch_bridge
from onlinesoftmax.runtime.plan import get_runner

REDUCTIONS = ("mean", "sum", "none")


def cross_entropy(logits, targets, *, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap=None, reduction: str = "mean", return_lse: bool = False, check_targets: bool = True):
    """The cross-entropy loss of `logits` against `targets` (see the module doc); with return_lse, (loss, lse)."""
    if not isinstance(return_lse, (bool, np.bool_)):
        raise TypeError(f"cross_entropy: return_lse must be True or False, got {return_lse!r}")
    if torch_bridge.is_tensor(logits) or torch_bridge.is_tensor(targets):
        _one_kind("cross_entropy", logits, targets)
        check_options("cross_entropy", ignore_index, label_smoothing, z_loss, softcap, reduction, check_targets)
        if torch_bridge.wants_operator(logits):   # the operator torch.ops.onlinesoftmax.cross_entropy
            loss, lse = torch_bridge.autograd("cross_entropy", logits, targets, ignore_index=ignore_index,
                                              label_smoothing=float(label_smoothing), z_loss=float(z_loss),
                                              softcap=float(softcap or 0.0), reduction=reduction)
            return (loss, lse) if return_lse else loss
        return torch_bridge.call(cross_entropy, logits, targets, ignore_index=ignore_index,
                                 label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap,
                                 reduction=reduction, return_lse=return_lse, check_targets=check_targets)
    loss, lse, _, _ = _run("cross_entropy", logits, targets, ignore_index, label_smoothing, z_loss, softcap,
                           reduction, grad=False, in_place=False, check_targets=check_targets)
    return (loss, lse) if return_lse else loss


def cross_entropy_with_grad(logits, targets, *, ignore_index: int = -100, label_smoothing: float = 0.0,
                            z_loss: float = 0.0, softcap=None, reduction: str = "mean", in_place: bool = False,
                            check_targets: bool = True, grad_scale=None):
    """(loss, lse, dlogits): the loss, the LSE per row and the gradient of the loss, one kernel.
    grad_scale, a positive number, multiplies the gradient in place of the reduction's scale (1 / the
    counted rows for a mean, 1 for a sum): for rows that are a chunk of a larger batch."""
    if torch_bridge.is_tensor(logits) or torch_bridge.is_tensor(targets):
        _one_kind("cross_entropy_with_grad", logits, targets)
        return torch_bridge.call(cross_entropy_with_grad, logits, targets, ignore_index=ignore_index,
                                 label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap,
                                 reduction=reduction, in_place=in_place, check_targets=check_targets,
                                 grad_scale=grad_scale)
    if not isinstance(in_place, (bool, np.bool_)):
        raise TypeError(f"cross_entropy_with_grad: in_place must be True or False, got {in_place!r}")
    if grad_scale is not None and (isinstance(grad_scale, (bool, np.bool_))
                                   or not isinstance(grad_scale, (int, float, np.floating, np.integer))
                                   or not 0 < float(grad_scale) < np.inf):
        raise ValueError(f"cross_entropy_with_grad: grad_scale must be None or a positive number, got {grad_scale!r}")
    return _run("cross_entropy_with_grad", logits, targets, ignore_index, label_smoothing, z_loss, softcap,
                reduction, grad=True, in_place=bool(in_place), check_targets=check_targets,
                grad_scale=None if grad_scale is None else float(grad_scale))[:3]


def cross_entropy_with_grad_deferred(logits, targets, *, ignore_index: int = -100, label_smoothing: float = 0.0,
                                     z_loss: float = 0.0, softcap=None, reduction: str = "mean"):
    """(loss, lse, dlogits, bad) for the autograd operator, which must not wait for the GPU in its forward:
    a target outside [0, V) that is not ignore_index makes its row's loss NaN (so the loss is NaN, never
    a silently smaller one) and its gradient row zero, and `bad`, a 0-d int64 on the logits' side, is 1
    if any target did (else 0). The operator's backward reads it with the upstream gradient's test (one
    synchronization) and raises check_target_range's ValueError."""
    if torch_bridge.is_tensor(logits) or torch_bridge.is_tensor(targets):
        return torch_bridge.call(cross_entropy_with_grad_deferred, logits, targets, ignore_index=ignore_index,
                                 label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap, reduction=reduction)
    return _run("cross_entropy_with_grad", logits, targets, ignore_index, label_smoothing, z_loss, softcap,
                reduction, grad=True, in_place=False, check_targets=False, deferred=True)


def _one_kind(function, logits, targets):
    if torch_bridge.is_tensor(logits) != torch_bridge.is_tensor(targets) or \
            (not torch_bridge.is_tensor(logits) and type(logits) is not type(targets)):   # (a Parameter is a tensor)
        raise ValueError(f"{function}: logits and targets must be arrays of one kind (both torch tensors, or both "
                         f"NumPy or CuPy arrays), got {describe(logits)} and {describe(targets)}")


def check_options(function, ignore_index, label_smoothing, z_loss, softcap, reduction, check_targets):
    """The options alone (before any array is looked at, on every path: the operator's too)."""
    for name, value, low, high in (("label_smoothing", label_smoothing, 0.0, 1.0), ("z_loss", z_loss, 0.0, np.inf)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.floating, np.integer)) \
                or not low <= float(value) <= high:
            raise ValueError(f"{function}: {name} must be a number in [{low}, {high}], got {value!r}")
    if softcap is not None and (isinstance(softcap, (bool, np.bool_))
                                or not isinstance(softcap, (int, float, np.floating, np.integer))
                                or not 0 < float(softcap) < np.inf):
        raise ValueError(f"{function}: softcap must be None or a positive number, got {softcap!r}")
    if isinstance(ignore_index, (bool, np.bool_)) or not isinstance(ignore_index, (int, np.integer)) \
            or not -2**63 <= int(ignore_index) < 2**63:
        raise TypeError(f"{function}: ignore_index must be an int (64-bit), got {ignore_index!r}")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"{function}: reduction must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    if not isinstance(check_targets, (bool, np.bool_)):
        raise TypeError(f"{function}: check_targets must be True or False, got {check_targets!r}")


def _check(function, logits, targets, ignore_index, label_smoothing, z_loss, softcap, reduction, check_targets):
    check_options(function, ignore_index, label_smoothing, z_loss, softcap, reduction, check_targets)
    on_gpu = check_array(logits, function, exact=True)
    if logits.shape[-1] == 0:
        raise ValueError(f"{function}: the logits need at least one class on their last axis, got shape "
                         f"{tuple(logits.shape)}")
    check_length(logits, logits.ndim - 1, function)
    if type(targets) is not type(logits) or tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"{function}: targets must be an array of the logits' kind with shape "
                         f"{tuple(logits.shape[:-1])} (the logits' without the class axis), got {describe(targets)}")
    if targets.dtype.kind not in "iu":
        raise TypeError(f"{function}: targets must be integers (class indices), got {targets.dtype}")
    return on_gpu, array_module(logits)


def check_target_range(targets, n_classes: int, ignore_index: int, function: str, unit: str = "row") -> None:
    """A ValueError naming the first target outside [0, n_classes) that is not ignore_index (NumPy, CuPy
    or torch; one synchronization on a GPU): a wrong target is an error, never a device fault."""
    flat = targets.reshape(-1)
    bad = ((flat < 0) | (flat >= n_classes)) & (flat != ignore_index)
    if bool(bad.any()):
        at = int(bad.nonzero()[0][0])
        raise ValueError(f"{function}: target {int(flat[at])} of {unit} {at} is outside [0, {n_classes}) "
                         f"and is not ignore_index ({ignore_index})")


def kernel_for(x, grad: bool):
    """The kernel of a call: cross_entropy_02_cluster for a gradient on a GPU with clusters, when a row
    fits its 16 chunks (it reads the logits once where 01 reads them twice, and its per-element work is
    specialized to the call's options); else cross_entropy_01_rows."""
    return REGISTRY[kernel_name_for(x.shape[1], x.dtype.name, grad)]


def kernel_name_for(n_cols: int, dtype: str, grad: bool) -> str:
    """kernel_for's choice by name, for rows of n_cols logits of `dtype` ("float32", "bfloat16", ...)."""
    from onlinesoftmax.kernels.cross_entropy import cluster
    from onlinesoftmax.runtime import device

    if grad and device.compute_capability() >= 90 and cluster.fits(n_cols, dtype):
        return "cross_entropy_02_cluster"
    return "cross_entropy_01_rows"


def _run(function, logits, targets, ignore_index, label_smoothing, z_loss, softcap, reduction, grad, in_place,
         check_targets, deferred=False, grad_scale=None):
    """(loss, lse, dx, bad): bad (deferred only, else None) a 0-d int64, 1 if a target was outside [0, V)."""
    on_gpu, xp = _check(function, logits, targets, ignore_index, label_smoothing, z_loss, softcap, reduction,
                        check_targets)
    n_classes = logits.shape[-1]
    x = logits.reshape(-1, n_classes)
    if in_place and (not logits.flags.c_contiguous or logits.dtype == np.float64):
        raise ValueError(f"{function}: in_place=True needs C-contiguous float32, float16 or bfloat16 logits, got "
                         f"{describe(logits)}{'' if logits.flags.c_contiguous else ' (not contiguous)'}")
    t = xp.ascontiguousarray(targets.reshape(-1).astype(np.int64, copy=False))
    options = {"ignore_index": int(ignore_index), "label_smoothing": float(label_smoothing), "z_loss": float(z_loss),
               "softcap": float(softcap or 0.0)}
    if on_gpu and logits.dtype != np.float64 and x.shape[0] > 0:
        return _run_kernels(function, logits, x, targets, t, options, reduction, grad, in_place, check_targets,
                            deferred, grad_scale)
    if check_targets:
        check_target_range(targets, n_classes, ignore_index, function)
    # outside [0, V): unchecked, the row counts as ignored; deferred, its loss is NaN (below) as well
    outside = ((t < 0) | (t >= n_classes)) & (t != ignore_index)
    t = xp.where(outside, np.int64(ignore_index), t)
    counted = (t != ignore_index).sum()
    # the gradient's scale: 1 / the counted rows for a mean; over none, 1 (every row's gradient is 0
    # then, as torch's; the loss is NaN, below)
    wide = np.float64 if logits.dtype == np.float64 else np.float32   # (float64: the exact path's own scale)
    scale = wide(grad_scale) if grad_scale is not None else \
        (1.0 / xp.maximum(counted, 1).astype(wide)).astype(wide) if reduction == "mean" else wide(1.0)
    if logits.dtype == np.float64 or x.shape[0] == 0:   # exactly, in float64 (no rows: empty results)
        rows, lse, dx = kce.reference(x, t, **options)
        dx = (dx * scale).astype(logits.dtype, copy=False) if grad else None
        lse = lse.astype(np.float32 if logits.dtype != np.float64 else np.float64, copy=False)
    else:
        rows, lse, dx = REGISTRY["cross_entropy_01_rows"].simulate(x, t, scale if grad else None, **options)
        if grad and in_place:
            x[...] = dx
    shape = logits.shape[:-1]
    if deferred:
        rows = xp.where(outside, rows.dtype.type(np.nan), rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = rows.reshape(shape) if reduction == "none" else \
            rows.sum(dtype=rows.dtype) if reduction == "sum" else rows.sum(dtype=rows.dtype) / counted
    loss = xp.asarray(loss, dtype=np.float32 if logits.dtype != np.float64 else np.float64)   # 0-d, not a scalar
    bad = xp.asarray(outside.any(), dtype=np.int64) if deferred else None
    return loss, lse.reshape(shape), (logits if in_place else dx.reshape(logits.shape)) if grad else None, bad


def _run_kernels(function, logits, x, targets, t, options, reduction, grad, in_place, check_targets, deferred,
                 scale=None):
    """_run on a GPU: the targets checked on the device (cross_entropy_01_rows_targets), the row kernel,
    the loss reduced on the device (cross_entropy_01_rows_reduce): three launches and, when the
    targets are checked, one synchronization."""
    import cupy

    n_classes, ignore_index = x.shape[1], options["ignore_index"]
    clean, counts, grad_scale = kce.targets_on_device(t, n_classes, ignore_index, reduction == "mean")
    if scale is not None:   # the caller's scale in place of the reduction's
        grad_scale = cupy.full(1, scale, np.float32)
    if check_targets and counts[1].get():   # (one synchronization) the error names the first outside
        check_target_range(targets, n_classes, ignore_index, function)
    x = x if x.flags.c_contiguous or x.strides[-1] == x.itemsize else cupy.ascontiguousarray(x)
    rows, lse = cupy.empty(x.shape[0], np.float32), cupy.empty(x.shape[0], np.float32)
    dx = (x if in_place else cupy.empty(x.shape, x.dtype)) if grad else None
    launch = {"targets": clean, "lse": lse, "dx": dx, "grad_scale": grad_scale if grad else None}
    get_runner(kernel_for(x, grad), x, rows, {**options, **launch})(x, rows, **launch)
    loss = kce.reduce_on_device(rows, t, n_classes, ignore_index, reduction, counts, mark_outside=deferred)
    shape = logits.shape[:-1]
    return (loss.reshape(shape) if reduction == "none" else loss, lse.reshape(shape),
            (logits if in_place else dx.reshape(logits.shape)) if grad else None, counts[1] if deferred else None)
