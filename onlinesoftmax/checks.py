"""The checking tools, one module: the edge matrix, input makers in every dtype, one poison table,
the error-based tolerance and the comparisons built on it.

Used by the CPU and GPU test tiers, the benchmarks' correctness gate and the chapters' graders.
The rule everywhere: an output passes when its error against the float64 reference is at most
twice the error of a same-dtype baseline, plus two ulps (flash-attention's rule). Inputs are made
on the host in float32 and rounded once to the dtype (bfloat16 through ml_dtypes), or made on the
GPU when they are large. Outputs are poisoned with a finite value that no probability can take and
every dtype can hold, so an element the kernel never wrote cannot pass.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import reference
from onlinesoftmax.reference import array_module
from onlinesoftmax.registry import DTYPES

EDGE_COLS = (1, 2, 3, 31, 33, 100, 255, 256, 257, 1000, 4096, 4097, 65536)
EDGE_ROWS = (1, 7, 4000)
HUGE_COLS = (1_048_576, 1_000_003)   # "a few rows of 1M"
LONG_PEAKED_COLS = (262_145, 1_048_577)   # long rows, one past a power of two
PEAKS = (12.0, 13.0, 14.0, 15.0)          # how far the peak stands above the row's other maxima
EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# finite in each dtype and > 1: an unwritten element cannot pass as NaN or as a probability
POISON = {"float32": 1.2345e30, "float16": 4321.0, "bfloat16": 1.0e30}


# ---- dtypes -------------------------------------------------------------------------------------

def np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def to_dtype(x32: np.ndarray, name: str) -> np.ndarray:
    return np.asarray(x32, dtype=np.float32).astype(np_dtype(name))


def on_device(xp, host: np.ndarray):
    """numpy -> xp (cupy or numpy); bf16 travels as its 16-bit words and is viewed back."""
    if xp is np:
        return host
    if host.dtype.name == "bfloat16":
        return xp.asarray(host.view(np.uint16)).view(host.dtype)
    return xp.asarray(host)


def round_to_bf16(x32):
    """fp32 -> the nearest bf16 (ties to even), as fp32 values (NaN stays NaN); numpy or cupy."""
    xp = array_module(x32)
    x32 = xp.ascontiguousarray(x32, dtype=xp.float32)
    bits = x32.view(xp.uint32)
    rounded = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(xp.uint32).view(xp.float32)
    return xp.where(xp.isnan(x32), x32, rounded)


def rounded_to(values32, dtype: str):
    """float32 values rounded to `dtype` (as float64): what a kernel that stores `dtype` can return;
    numpy or cupy."""
    xp = array_module(values32)
    if dtype == "float16":
        values32 = values32.astype(xp.float16).astype(xp.float32)
    elif dtype == "bfloat16":
        values32 = round_to_bf16(values32)
    return values32.astype(xp.float64)


def from_float32(x32, dtype: str):
    """fp32 (numpy or cupy) -> dtype, rounding to nearest even."""
    xp = array_module(x32)
    if dtype == "bfloat16":
        bits = (round_to_bf16(x32).view(xp.uint32) >> 16).astype(xp.uint16)
        return bits.view(np_dtype("bfloat16"))
    return x32.astype(dtype)


def as_float64(y):
    xp = array_module(y)
    if y.dtype.name == "bfloat16":  # widen through the bits: works with or without bf16 kernels
        bits = y.view(xp.uint16).astype(xp.uint32) << 16
        return bits.view(xp.float32).astype(xp.float64)
    return y.astype(xp.float64)


# ---- inputs -------------------------------------------------------------------------------------

def _host_rows(n_rows: int, n_cols: int, seed: int, outliers: bool, max_offset: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    offset = rng.uniform(-max_offset, max_offset, size=(n_rows, 1))
    scale = rng.choice([0.1, 1.0, 8.0], size=(n_rows, 1))
    x = offset + scale * rng.standard_normal((n_rows, n_cols))
    if outliers and n_cols > 4:
        hits = rng.random((n_rows, n_cols)) < 0.002
        x = np.where(hits, x + rng.uniform(10, 20, size=x.shape) * scale, x)
    return x.astype(np.float32)


def random_rows(xp, n_rows: int, n_cols: int, dtype="float32", seed: int = 0, outliers: bool = True,
                max_offset: float = 30.0):
    """Rows with a random offset and scale each, plus a few large outliers, in `dtype`.

    Large inputs are made where they live (cupy's generator on the GPU): the host would spend
    seconds on a 4000 x 65536 tensor."""
    if xp is np or n_rows * n_cols < 2**22:
        return on_device(xp, to_dtype(_host_rows(n_rows, n_cols, seed, outliers, max_offset), dtype))
    rng = xp.random.default_rng(seed)
    offset = rng.uniform(-max_offset, max_offset, size=(n_rows, 1)).astype(xp.float32)
    scale = xp.asarray(np.random.default_rng(seed).choice([0.1, 1.0, 8.0], size=(n_rows, 1)), dtype=xp.float32)
    x = offset + scale * rng.standard_normal((n_rows, n_cols), dtype=xp.float32)
    if outliers:
        hits = rng.random((n_rows, n_cols), dtype=xp.float32) < 0.002
        x = xp.where(hits, x + 15 * scale, x)
    return from_float32(x, dtype)


def peaked_rows(xp, n_cols: int, peaks=PEAKS, seed: int = 0):
    """Long peaked rows, the shape of a confident next-token distribution: standard normal logits
    and, in row r, one logit `peaks[r]` above the row's largest other logit, at a random column.
    The peak's probability is close to 1 and the other N - 1 terms are each far below one ulp of it,
    so a sum that adds them one at a time to the peak's term rounds most of them away (the
    teaching kernels' accuracy check, chapter 04). float32, made on the host."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(peaks), n_cols))
    columns = rng.integers(0, n_cols, size=len(peaks))
    rows = np.arange(len(peaks))
    x[rows, columns] = x.max(axis=1) + np.asarray(peaks, dtype=np.float64)
    return on_device(xp, x.astype(np.float32))


def special_rows(xp, n_cols: int, dtype="float32", seed: int = 1):
    """Rows with -inf entries, all -inf, one +inf, one NaN, and a normal row.

    Returns (x, nan_rows): the rows whose every output must be NaN.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, n_cols)) * 3
    x[0, rng.random(n_cols) < 0.5] = -np.inf            # some -inf (at least one finite kept below)
    x[0, rng.integers(n_cols)] = 1.0
    x[1, :] = -np.inf                                   # fully masked: NaN, as torch
    x[2, rng.integers(n_cols)] = np.inf                 # +inf: NaN row
    x[3, rng.integers(n_cols)] = np.nan                 # NaN: NaN row
    x[4, : min(n_cols - 1, 300)] = -np.inf              # a leading run of -inf
    nan_rows = np.array([False, True, True, True, False, False])
    return on_device(xp, to_dtype(x, dtype)), nan_rows


def short_row():
    """The guard case N = 100 < 256 threads: threads 100..255 never see an element."""
    return np.random.default_rng(3).standard_normal((1, 100)).astype(np.float32)


def leading_neg_inf_row():
    """The guard case whose first 300 of 1000 elements are -inf: every thread starts on -inf and threads 0..43 read a second -inf (column t + 256 < 300)."""
    x = np.random.default_rng(4).standard_normal((1, 1000)).astype(np.float32)
    x[0, :300] = -np.inf
    return x


# The two rows that come out all NaN without the -inf guards (chapter 03, tests, guards-gpu suite).
GUARD_ROWS = {"N=100": short_row, "first 300 are -inf": leading_neg_inf_row}


# ---- poison, errors, comparisons ----------------------------------------------------------------

def poison_value(name: str) -> float:
    """The poison as the dtype holds it (bf16 rounds 1e30)."""
    return float(np.asarray(POISON[name], dtype=np.float32).astype(np_dtype(name)).astype(np.float64))


def poisoned_like(x, dtype=None, shape=None):
    """An output buffer like x (or of `shape`/`dtype`) filled with its dtype's poison."""
    xp = array_module(x)
    name = np.dtype(dtype).name if dtype is not None and not isinstance(dtype, str) else (dtype or x.dtype.name)
    host = np.full(x.shape if shape is None else shape, POISON[name], dtype=np.float32).astype(np_dtype(name))
    return on_device(xp, host)


def max_abs_error(y, ref) -> float:
    """max |y - ref| over the non-NaN reference entries; inf if the NaN patterns differ."""
    xp = array_module(y)
    y = y.astype(xp.float64)
    ref = xp.asarray(ref, dtype=xp.float64)
    ref_nan, y_nan = xp.isnan(ref), xp.isnan(y)
    if bool((ref_nan != y_nan).any()):
        return float("inf")
    finite = ~ref_nan
    if not bool(finite.any()):
        return 0.0
    with np.errstate(invalid="ignore"):
        diff = xp.abs(y - ref)
    diff = xp.where(finite, diff, 0.0)
    same_inf = (y == ref)  # -inf == -inf (log-softmax) counts as no error
    return float(xp.where(same_inf, 0.0, diff).max())


def tolerance(base_error: float, ref, dtype) -> float:
    """Error-based tolerance: twice the same-dtype baseline's error plus two ulps of the largest |ref|."""
    xp = array_module(ref)
    finite = xp.abs(ref[xp.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 1.0
    eps = EPS.get(np.dtype(dtype).name) or float(np.finfo(dtype).eps)   # np.finfo knows no bfloat16
    return 2.0 * base_error + 2.0 * eps * max(scale, 1.0)


def compare(y, ref, baseline, dtype) -> tuple[bool, str]:
    """(passed, message) for output `y` against the float64 `ref` and a same-dtype `baseline`."""
    err = max_abs_error(y, ref)
    base_err = max_abs_error(baseline, ref)
    if not np.isfinite(base_err):  # the baseline itself disagrees on NaN; judge on ulps alone
        base_err = 0.0
    tol = tolerance(base_err, ref, dtype)
    passed = bool(err <= tol)
    return passed, f"error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def compare_each_row(y, ref, baseline, dtype) -> list[tuple[bool, str]]:
    """`compare` row by row: each row of y against its float64 reference with its own baseline's error
    (a long row's verdict is not covered by another row's larger baseline error)."""
    return [compare(y[r:r + 1], ref[r:r + 1], baseline[r:r + 1], dtype) for r in range(y.shape[0])]


def unwritten(y) -> int:
    """How many outputs still hold the poison value."""
    return int((as_float64(y) == poison_value(y.dtype.name)).sum())


def baseline_softmax(x):
    """The same-dtype safe softmax as float64: fp32 math rounded to x's dtype (fp32: computed in fp32)."""
    xp = array_module(x)
    x32 = as_float64(x).astype(xp.float32)
    s32 = reference.softmax_same_dtype(x32)
    if x.dtype.name == "float16":
        s32 = s32.astype(xp.float16).astype(xp.float32)
    elif x.dtype.name == "bfloat16":
        s32 = round_to_bf16(s32)
    return s32.astype(xp.float64)


def compare_softmax(y, x) -> tuple[bool, str]:
    """(passed, message): softmax output y against the float64 reference of x, with x's dtype's rule.
    The ulps are those of the largest output, not of 1: with 16-bit dtypes two ulps of 1 would let
    a wrong small probability pass."""
    dtype = x.dtype.name
    ref = reference.softmax(as_float64(x))
    err = max_abs_error(as_float64(y), ref)
    base_err = max_abs_error(baseline_softmax(x), ref)
    if not np.isfinite(base_err):
        base_err = 0.0
    xp = array_module(ref)
    finite = xp.abs(ref[xp.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 1.0
    tol = 2.0 * base_err + 2.0 * EPS[dtype] * scale
    return bool(err <= tol), f"{dtype}: error {err:.3e}, baseline {base_err:.3e}, tolerance {tol:.3e}"


def fp16_rounding_excess(y, ref) -> float:
    """max over elements of |y - ref| / (half an fp16 ulp of ref + fp32 slack); <= 1 passes: what fp32
    arithmetic followed by one rounding to fp16 can deliver (the strict fp16 check of chapter 03).

    The slack 2^-16 * ref covers fp32 exp and sum error (long rows); 2^-25 is half the smallest
    fp16 subnormal spacing. NaN patterns must match exactly (else inf).
    """
    xp = array_module(y)
    y = y.astype(xp.float64)
    ref = xp.asarray(ref, dtype=xp.float64)
    if bool((xp.isnan(y) != xp.isnan(ref)).any()):
        return float("inf")
    keep = ~xp.isnan(ref)
    if not bool(keep.any()):
        return 0.0
    y, ref = y[keep], ref[keep]
    # half an ulp of fp16 at |ref| (normal range: 2^(e - 11)), with subnormals' fixed spacing below.
    exponent = xp.floor(xp.log2(xp.maximum(xp.abs(ref), 2.0**-14)))
    half_ulp = 2.0 ** (exponent - 11)
    allowed = half_ulp + 2.0**-16 * xp.abs(ref) + 2.0**-25
    return float((xp.abs(y - ref) / allowed).max())


def run_checked(fn, x, shape=None, dtype=None):
    """fn(x, out) on a poisoned `out` (x's shape and dtype unless given); on a GPU, synchronize so that
    a CUDA error surfaces here; every element must have been written. Returns out."""
    out = poisoned_like(x, dtype=dtype, shape=shape)
    result = fn(x, out)
    assert result is out, "the function must fill and return the given out"
    if array_module(out) is not np:
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    missing = unwritten(out)
    assert missing == 0, f"{missing} of {out.size} outputs were never written"
    return out


# ---- softmax + top-k ----------------------------------------------------------------------------

COLUMN_POISON = -12345   # int64 columns never written by a kernel keep it (and fail every check)
# Below these, stored probabilities may all be 0 and tie: the kernels' exponentials (MUFU.EX2, flushing
# to zero) return 0 under fp32's smallest normal 2^-126, which is also bfloat16's; an fp16 result keeps
# fp16's subnormals (rounded from fp32), so there it is twice fp16's subnormal spacing.
UNDERFLOW_SLACK = {"float32": 2.0**-126, "bfloat16": 2.0**-126, "float16": 2.0**-23}


def host(a):
    """numpy (or cupy, copied to the host; bfloat16 through its 16-bit words) -> numpy."""
    if not hasattr(a, "get"):
        return np.asarray(a)
    if a.dtype.name == "bfloat16":
        import cupy

        return cupy.ascontiguousarray(a).view(cupy.uint16).get().view(np_dtype("bfloat16"))
    return a.get()


def compare_topk(probs, columns, x, k: int, renormalize: bool = False, selects_on: str = "logits",
                 lse=None) -> tuple[bool, str]:
    """(passed, message): the k probabilities and columns of a softmax + top-k of the rows of x (2-D,
    numpy or cupy) against the float64 definition (reference.softmax_topk).

    selects_on="logits" (the fused kernels): the columns are the definition's exactly (equal logits
    to the lower column, NaN first). "probabilities" (a top-k of stored probabilities, as the unfused
    path and torch do): the columns of each row are distinct, and at every rank the returned column's
    float64 probability is within the tolerance of the definition's (rounded probabilities may tie
    and swap columns, and every probability under fp32's smallest normal may be stored as 0); a row whose softmax is NaN returns columns 0 .. k-1. Probabilities: NaN exactly
    where the definition's are, and an error at most twice the baseline's (the softmax in fp32
    rounded once to x's dtype, at the same columns) plus two ulps of max(|p|, 1), i.e. of 1. lse, if given:
    within 4 fp32 ulps (of max(|lse|, 1)) of the float64 log-sum-exp where that is finite, and NaN in
    every row whose probabilities are NaN (a row holding +inf or NaN: the fused kernels give no LSE
    for a row they cannot normalise)."""
    x_host, probs_host, got = host(x), host(probs), host(columns)
    x64 = np.asarray(as_float64(x_host))
    n_rows, n_cols = x64.shape
    if got.shape != (n_rows, k) or got.dtype != np.int64 or probs_host.shape != (n_rows, k):
        return False, f"expected ({n_rows}, {k}) probabilities and int64 columns, got {probs_host.shape} and " \
                      f"{got.shape} {got.dtype}"
    if probs_host.dtype != x_host.dtype:
        return False, f"probabilities in {probs_host.dtype}, expected x's {x_host.dtype}"
    if (got < 0).any() or (got >= n_cols).any():
        return False, f"columns outside 0 .. {n_cols - 1} (unwritten: {int((got == COLUMN_POISON).sum())})"
    want_p, want_c = reference.softmax_topk(x64, k, renormalize)
    p64 = reference.softmax(x64)
    if selects_on == "logits":
        if not (got == want_c).all():
            row = int(np.flatnonzero((got != want_c).any(axis=1))[0])
            return False, f"row {row}: columns {got[row].tolist()}, the definition's {want_c[row].tolist()}"
    elif selects_on == "probabilities":
        if any(len(set(r)) != k for r in got.tolist()):
            return False, "a row returns a column twice"
        nan_rows = np.isnan(p64).all(axis=1)
        at_got = np.take_along_axis(p64, got, axis=1)[~nan_rows]
        at_want = np.take_along_axis(p64, want_c, axis=1)[~nan_rows]
        # two probabilities can swap only if they round to the same stored value: a few ulps apart
        # (relative), or both flushed to zero or into the subnormals (absolute: UNDERFLOW_SLACK; the
        # H200 returned columns 0, 1 for two probabilities of 1e-53 beside one of 8e-45, all stored as 0)
        slack = 4 * (EPS[x_host.dtype.name] + 2.0**-23) * np.abs(at_want) + UNDERFLOW_SLACK[x_host.dtype.name]
        if (nan_rows & (got != np.arange(k)).any(axis=1)).any() or not (np.abs(at_got - at_want) <= slack).all():
            return False, "columns whose probabilities are not the k largest"
    else:
        raise ValueError(f"selects_on must be 'logits' or 'probabilities', got {selects_on!r}")
    probs64 = np.asarray(as_float64(probs_host))
    if not np.array_equal(np.isnan(probs64), np.isnan(want_p)):
        return False, "NaN where the definition has none, or a number where it is NaN"
    base = np.take_along_axis(np.asarray(baseline_softmax(x_host)), want_c, axis=1)
    if renormalize:
        with np.errstate(all="ignore"):
            base = base / base.sum(axis=1, keepdims=True)
    finite = np.isfinite(want_p)
    base_err = float(np.abs(base - want_p)[finite].max()) if finite.any() else 0.0
    tol = tolerance(base_err if np.isfinite(base_err) else 0.0, want_p, x_host.dtype)
    err = float(np.abs(probs64 - want_p)[finite].max()) if finite.any() else 0.0
    if not err <= tol:
        return False, f"probabilities: error {err:.3e}, tolerance {tol:.3e}"
    message = f"{x_host.dtype} k={k}: error {err:.3e}, tolerance {tol:.3e}"
    if lse is not None:
        lse_host, want_lse = host(lse).astype(np.float64), reference.logsumexp(x64)
        want_lse = np.where(np.isnan(p64).all(axis=1) & (want_lse != -np.inf), np.nan, want_lse)
        ok = np.isfinite(want_lse)
        # twice a float32 baseline's error (numpy's pairwise sum of the kernels' terms) plus four ulps
        with np.errstate(all="ignore"):
            x32 = x64.astype(np.float32); m32 = np.max(x32, axis=-1, keepdims=True)  # noqa: E702
            s32 = np.exp2((x32 - m32) * np.float32(1.4426950408889634)).sum(axis=-1, dtype=np.float32)
            base_err = np.abs(m32[..., 0] + np.log(s32.astype(np.float64)) - want_lse)[ok]
        lse_tol = 2 * np.nan_to_num(base_err, posinf=0) + 4 * 2.0**-23 * np.maximum(np.abs(want_lse[ok]), 1)
        lse_err = np.abs(lse_host[ok] - want_lse[ok])
        if not (lse_err <= lse_tol).all() or not np.array_equal(np.isnan(lse_host[~ok]), np.isnan(want_lse[~ok])):
            return False, f"the log-sum-exp is off: worst error over tolerance {np.max(lse_err / lse_tol, initial=0):.2f}"
    return True, message
