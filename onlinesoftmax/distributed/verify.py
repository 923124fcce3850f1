"""The book's error rule for sharded results: against the float64 reference of the unsharded input,
at most twice the error of a same-dtype computation of the whole row, plus two ulps.

Each function returns (passed, message) and works on numpy or cupy arrays (the reference runs
where the data is). The tests, the torchrun self-check and the benchmark's gate use these.

- compare_shard(op, y, x, start): y is one rank's columns [start, start + width) of op(x) over
  whole rows, op "softmax" or "log_softmax" (checks.EPS of x's dtype at the largest |reference|);
- compare_loss(loss, x, targets) and compare_lse(lse, x): float32, with four float32 ulps of slack;
- compare_decode(out, lse, q, k, v): attention against attention_blocked.reference, the baseline
  the whole score matrix in float32 rounded once to q's dtype.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks, reference
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.reference import array_module

EPS32 = 2.0**-23
IGNORE_INDEX = -100


def _largest(ref) -> float:
    xp = array_module(ref)
    finite = xp.abs(ref[xp.isfinite(ref)])
    return float(finite.max()) if finite.size else 0.0


def _errors(y64, ref, base):
    err = checks.max_abs_error(y64, ref)
    base_err = checks.max_abs_error(base, ref)
    return err, (base_err if np.isfinite(base_err) else 0.0)


def compare_shard(op: str, y, x, start: int) -> tuple[bool, str]:
    """One rank's columns of softmax / log_softmax of the whole rows of x (2-D)."""
    if op not in ("softmax", "log_softmax"):
        raise ValueError(f"compare_shard: op must be 'softmax' or 'log_softmax', got {op!r}")
    dtype = x.dtype.name
    if y.dtype.name != dtype:
        return False, f"{op}: the shard is {y.dtype.name}, the logits {dtype}"
    x64 = checks.as_float64(x)
    x32 = x64.astype(array_module(x64).float32)
    cols = slice(start, start + y.shape[-1])
    if op == "softmax":
        ref, base = reference.softmax(x64), checks.rounded_to(reference.softmax_same_dtype(x32), dtype)
    else:
        ref, base = reference.log_softmax(x64), checks.rounded_to(reference.log_softmax_same_dtype(x32), dtype)
    ref, base = ref[:, cols], base[:, cols]
    err, base_err = _errors(checks.as_float64(y), ref, base)
    scale = _largest(ref) if op == "softmax" else max(_largest(ref), 1.0)
    tol = 2.0 * base_err + 2.0 * checks.EPS[dtype] * scale
    return bool(err <= tol), f"{op} {dtype} columns {start}..: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def _lse_rule(y, ref, base, what: str, lse_scale: float):
    err, base_err = _errors(array_module(y).asarray(y, dtype=np.float64), ref, base)
    tol = 2.0 * base_err + 2.0 * EPS32 * max(lse_scale, _largest(ref), 1.0) + 4 * EPS32
    return bool(err <= tol), f"{what}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def compare_lse(lse, x) -> tuple[bool, str]:
    """log-sum-exp of each whole row of x (2-D), float32. The ranks' states (logsumexp_02_state) cannot
    tell +inf from +inf with NaN, so a row holding +inf gives NaN here (the single-GPU logsumexp gives
    +inf, as torch)."""
    x64 = checks.as_float64(x)
    ref = reference.logsumexp(x64)
    ref = array_module(x64).where(ref == np.inf, np.nan, ref)
    base = reference.logsumexp_same_dtype(x64.astype(array_module(x64).float32)).astype(np.float64)
    return _lse_rule(lse, ref, base, f"logsumexp {x.dtype.name}", _largest(ref))


def compare_loss(loss, x, targets, ignore_index: int = IGNORE_INDEX) -> tuple[bool, str]:
    """Cross-entropy per token of whole rows x (2-D) and targets (rows,); ignored tokens have loss 0."""
    xp = array_module(x)
    if loss.dtype != np.float32 or tuple(loss.shape) != tuple(targets.shape):
        return False, f"loss: expected float32 of shape {tuple(targets.shape)}, got {loss.dtype} {tuple(loss.shape)}"
    x64 = checks.as_float64(x)
    t = xp.asarray(targets, dtype=xp.int64)
    ignored = t == ignore_index
    safe = xp.where(ignored, 0, t)
    rows = xp.arange(x.shape[0])
    lse_ref = reference.logsumexp(x64)
    with np.errstate(invalid="ignore"):
        # -log_softmax at the target, as torch's cross_entropy: NaN for a row holding +inf
        ref = xp.where(ignored, 0.0, -reference.log_softmax(x64)[rows, safe])
        x32 = x64.astype(xp.float32)
        base = xp.where(ignored, 0.0, (reference.logsumexp_same_dtype(x32) - x32[rows, safe]).astype(xp.float64))
    return _lse_rule(loss, ref, base, f"cross-entropy {x.dtype.name}", _largest(lse_ref))


def _attention_float32(q, k, v, causal: bool, scale):
    """The same-dtype baseline: scores, softmax and output in float32 over the whole cache."""
    xp = array_module(q)
    batch, heads, n_q, d = q.shape
    group = heads // k.shape[1]
    q32, k32, v32 = (checks.as_float64(a).astype(xp.float32) for a in (q, k, v))
    k32, v32 = xp.repeat(k32, group, axis=1), xp.repeat(v32, group, axis=1)
    s = xp.matmul(q32, k32.swapaxes(-1, -2)) * xp.float32(1.0 / np.sqrt(d) if scale is None else scale)
    if causal:
        n_k = k.shape[2]
        s = xp.where(xp.asarray(np.arange(n_k)[None, :] < ab.visible_limit(n_q, n_k)[:, None]), s, -xp.inf)
    with np.errstate(all="ignore"):
        m = s.max(axis=-1, keepdims=True)
        e = xp.exp(s - xp.where(xp.isfinite(m), m, 0))
        l = e.sum(axis=-1, keepdims=True)
        out = xp.where(l != 0, xp.matmul(e, v32) / xp.where(l != 0, l, 1), 0)
        lse = xp.where(l[..., 0] != 0, m[..., 0] + xp.log(xp.where(l[..., 0] != 0, l[..., 0], 1)), -xp.inf)
    return checks.rounded_to(out.astype(xp.float32), q.dtype.name), lse.astype(xp.float64)


def compare_decode(out, lse, q, k, v, causal: bool = False, scale=None) -> tuple[bool, str]:
    """Attention output (q's dtype) and LSE (float32) over the whole cache k, v."""
    ref, ref_lse = ab.reference(q, k, v, causal=causal, scale=scale)
    base, base_lse = _attention_float32(q, k, v, causal, scale)
    dtype = q.dtype.name
    if out.dtype.name != dtype or tuple(out.shape) != tuple(q.shape):
        return False, f"decode: expected {dtype} of shape {tuple(q.shape)}, got {out.dtype.name} {tuple(out.shape)}"
    err, base_err = _errors(checks.as_float64(out), ref, base)
    tol = checks.tolerance(base_err, ref, dtype)
    ok_lse, lse_message = _lse_rule(lse, ref_lse, base_lse, "LSE", _largest(ref_lse))
    message = f"decode {dtype}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}; {lse_message}"
    return bool(err <= tol) and ok_lse, message
