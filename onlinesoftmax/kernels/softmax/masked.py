"""Launcher module of the masked online softmax, softmax_03_online_masked (fp32, fp16, bf16).

Masks are fused into the kernel: an additive mask (rows x N, or one row of N
broadcast), a causal mask (row i keeps columns j <= i, top-left aligned like
torch's `is_causal`) and padding (row i keeps columns j < valid_lengths[i]).
Columns removed by causal/padding take the value `mask_value` (default -inf).

`prepare` validates the mask arguments once and turns them into the keyword
options that both the kernel launcher and the NumPy model take.

x may be float32, float16 or bfloat16: one entry per dtype, `softmax_03_online_masked_f32`,
`_f16` and `_bf16` (the fast kernels' tags), chosen by the plan builder from x's dtype. The
kernel widens x to fp32 as it loads it, adds the additive mask (float32 for every dtype),
computes in fp32 as the fp32 entry does, and rounds y once to x's dtype; so does the model.
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.softmax.fast_configs import MAX_COLS_07, MAX_COLS_08, WARP_ROWS_BLOCK
from onlinesoftmax.kernels.softmax.teaching import BLOCK_THREADS, sequential_build
from onlinesoftmax.reference import array_module
from onlinesoftmax.registry import DTYPES, Launch, Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

POINTER, INT, LONG, FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float

MASK_KINDS = ("none", "causal", "padding", "additive (rows x N)", "additive (N)")  # example_mask
FLT_MAX = float(np.finfo(np.float32).max)
MIN_THREADS = 64


def block_threads(n_cols: int) -> int:
    """Threads per row: the power of two >= N / 4 between 64 and 256 (softmax_02's 256 from N = 513
    on), so that a short row does not leave most of its block idle (16384 rows of 256: 64 threads)."""
    return max(MIN_THREADS, min(BLOCK_THREADS, 1 << max(0, (-(-n_cols // 4) - 1).bit_length())))


def geometry(n_rows: int, n_cols: int) -> Launch:
    return Launch(grid=(n_rows,), block=(block_threads(n_cols),))


def _as_module_of(x, a):
    """`a` as an array of x's kind (numpy or cupy)."""
    if array_module(x) is np:
        return a.get() if type(a).__module__.startswith("cupy") else np.asarray(a)
    import cupy

    return cupy.asarray(a)


def prepare(x, mask=None, valid_lengths=None, mask_value=-np.inf, shape=None) -> dict:
    """Validate mask arguments for the rows `x` (rows, N); return the kernel/model options.

    `shape` is the caller's shape when x is its rows (a score tensor (..., q, N) has rows of
    (q, N) matrices); default x's own. mask: None, "causal" (row i of each (q, N) matrix keeps
    columns j <= i), or an additive float array of shape (N,), (q, N), the caller's shape, or
    (rows, N). valid_lengths: None or integers of the caller's shape without its last axis (one
    per row): row i keeps columns j < valid_lengths[i], so a length >= N keeps the whole row and a
    length <= 0 removes it all. The lengths are never read on the host (no synchronization): a
    cupy int32 array goes to the kernel as it is, on every call. mask_value: what causal / padding put in place of a removed logit
    (-inf, -1e6, ...). Raises TypeError / ValueError with the reason.
    """
    n_rows, n_cols = x.shape
    shape = tuple(x.shape) if shape is None else tuple(shape)
    query_rows = shape[-2] if len(shape) >= 2 else 1
    options = {"mask": None, "causal": False, "causal_rows": query_rows, "valid_lengths": None, "fill": -np.inf}
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f'mask must be None, "causal" or an additive float array, got {mask!r}')
        options["causal"] = True
    elif mask is not None:
        if not hasattr(mask, "shape") or not hasattr(mask, "dtype"):
            raise TypeError(f"an additive mask must be a numpy or cupy array, got {type(mask).__name__}")
        if mask.dtype.kind != "f":
            raise TypeError(f"an additive mask must hold floats (0 keeps, -inf removes), got {mask.dtype}; "
                            "for a boolean keep-mask pass np.where(keep, 0.0, -np.inf)")
        accepted = {(n_cols,), (1, n_cols), (query_rows, n_cols), shape, (n_rows, n_cols)}
        if tuple(mask.shape) not in accepted:
            raise ValueError(f"mask shape {tuple(mask.shape)} does not match x of shape {shape}: expected one of "
                             + ", ".join(str(s) for s in sorted(accepted, key=len)))
        mask = mask.reshape(-1, n_cols)
        mask = _as_module_of(x, mask)
        xp = array_module(mask)
        options["mask"] = xp.ascontiguousarray(mask.astype(xp.float32, copy=False))
    if valid_lengths is not None:
        lengths = valid_lengths
        if not hasattr(lengths, "dtype"):
            lengths = np.asarray(lengths)
        if lengths.dtype.kind not in "iu":
            raise TypeError(f"valid_lengths must be integers, got {lengths.dtype}")
        if tuple(lengths.shape) not in {(n_rows,), shape[:-1]}:
            raise ValueError(f"valid_lengths must have one entry per row, shape {shape[:-1]}, got {lengths.shape}")
        lengths = _as_module_of(x, lengths.reshape(n_rows))
        xp = array_module(lengths)
        if lengths.dtype != np.int32:   # clamped first, so that no length wraps around in 32 bits
            lengths = xp.clip(lengths, 0, n_cols).astype(np.int32)
        options["valid_lengths"] = xp.ascontiguousarray(lengths)
    fill = float(mask_value)
    if np.isnan(fill) or fill == np.inf:
        raise ValueError(f"mask_value must be -inf or finite, got {mask_value}")
    if fill != -np.inf and abs(fill) > FLT_MAX:
        raise ValueError(f"mask_value {mask_value} is not representable in float32")
    # the float32 value as a Python float: a plan key (runtime/plan.py) takes a numpy scalar for an array
    options["fill"] = float(np.float32(fill))
    return options


def example_mask(kind: str, n_rows: int, n_cols: int, xp=np, seed: int = 0) -> tuple[dict, int]:
    """softmax keyword arguments for one of MASK_KINDS, and the bytes the mask adds (read once).

    The masks the benchmark and chapter 03 use: causal; padding with valid lengths uniform
    in [N/2, N]; additive 0 / -inf with 70% of the entries kept. numpy or cupy (`xp`).
    """
    rng = xp.random.default_rng(seed)
    if kind == "none":
        return {}, 0
    if kind == "causal":
        return {"mask": "causal"}, 0
    if kind == "padding":
        return {"valid_lengths": rng.integers(n_cols // 2, n_cols + 1, size=n_rows)}, 0
    if kind == "additive (rows x N)":
        keep = rng.random((n_rows, n_cols), dtype=xp.float32) < 0.7
        return {"mask": xp.where(keep, 0.0, -xp.inf).astype(xp.float32)}, n_rows * n_cols * 4
    if kind == "additive (N)":
        keep = rng.random(n_cols, dtype=xp.float32) < 0.7
        return {"mask": xp.where(keep, 0.0, -xp.inf).astype(xp.float32)}, n_cols * 4
    raise ValueError(f"unknown mask kind {kind!r}; known: {', '.join(MASK_KINDS)}")


def effective_logits(x, mask=None, causal=False, valid_lengths=None, fill=-np.inf, dtype=np.float32,
                     causal_rows=None):
    """The logits the kernel sees after masking: x + mask, then `fill` past each row's limit.
    A mask of fewer rows than x repeats over them (row i uses mask row i mod its rows); causal
    rows come in (causal_rows, N) matrices (default: all rows are one matrix).

    In float32 (the default) this is exactly what the kernel computes; with
    dtype=float64 it is the input of the float64 reference. numpy or cupy.
    """
    xp = array_module(x)
    n_rows, n_cols = x.shape
    v = xp.array(x, dtype=dtype)
    if mask is not None:
        mask = xp.asarray(mask, dtype=dtype).reshape(-1, n_cols)
        with np.errstate(invalid="ignore", over="ignore"):
            v = (v + mask[xp.arange(n_rows) % mask.shape[0]]).astype(dtype)
    limit = xp.full(n_rows, n_cols, dtype=xp.int64)
    if causal:
        limit = xp.minimum(limit, xp.arange(n_rows) % (causal_rows or n_rows) + 1)
    if valid_lengths is not None:
        limit = xp.minimum(limit, xp.asarray(valid_lengths, dtype=xp.int64))
    removed = xp.arange(n_cols)[None, :] >= limit[:, None]
    v[removed] = float(np.float32(fill))
    return v


def reference_masked(x, **options):
    """The float64 reference of the masked softmax (options as from `prepare`)."""
    from onlinesoftmax import reference

    return reference.softmax(effective_logits(x, dtype=np.float64, **options))


def simulate_masked(x, mask=None, causal=False, valid_lengths=None, fill=-np.inf, guards=True,
                    causal_rows=None, sequential=False) -> np.ndarray:
    """NumPy model of softmax_03_online_masked: same masking, same thread schedule (block_threads,
    each thread's columns folded in chunks merged pairwise; `sequential`: one running state, the
    -DTHREAD_FOLD_SEQUENTIAL=1 build).

    x float32, float16 or bfloat16 (ml_dtypes): the logits are formed in float32 (x widened
    exactly), the result computed in float32 and rounded once to x's dtype."""
    v = effective_logits(x, mask, causal, valid_lengths, fill, causal_rows=causal_rows)
    m, l = sim.online_row_state(v, block_threads(v.shape[1]), guards, chunked=not sequential)
    with np.errstate(all="ignore"):
        inv_l = np.float32(1) / l
        y = (np.exp(v - m[:, None]) * inv_l[:, None]).astype(np.float32)
        return y if x.dtype == np.float32 else y.astype(x.dtype)


def plan_masked(variant: Variant, x, y, mask=None, causal=False, valid_lengths=None, fill=-np.inf,
                causal_rows=None):
    """Runner on 2-D cupy arrays; options as returned by `prepare` (None = nullptr). The mask and
    the lengths are passed on every call; their layout is part of the plan. The entry follows
    x's dtype; y must have x's dtype, the mask must be float32."""
    entry = variant.dtype_entry(x.dtype.name)
    if y.dtype != x.dtype:
        raise TypeError(f"{variant.name}: y must have x's dtype {x.dtype.name}, got {y.dtype.name}")
    if mask is not None and mask.dtype != np.float32:
        raise TypeError(f"{variant.name}: the additive mask must be float32 (prepare converts it), got {mask.dtype}")
    geometry = variant.geometry(*x.shape)
    kernel = get_kernel(variant.path, entry, variant.defines)
    mask_stride = 0 if mask is None else mask.strides[0] // mask.itemsize
    mask_rows = 1 if mask is None else mask.shape[0]
    # x, y, n_cols, x_stride, y_stride, mask, mask_stride, mask_rows, valid_lengths, causal_rows, fill
    launch = driver.prepare_launch(
        kernel, geometry.grid, geometry.block, geometry.shared_bytes, 1,
        (POINTER, POINTER, INT, LONG, LONG, POINTER, LONG, INT, POINTER, INT, FLOAT),
        fixed={2: x.shape[1], 3: x.strides[0] // x.itemsize, 4: y.strides[0] // y.itemsize, 6: mask_stride,
               7: mask_rows, 9: (causal_rows or x.shape[0]) if causal else 0, 10: float(np.float32(fill))})

    def run(x, y, mask=None, valid_lengths=None, **_):
        launch(x.data.ptr, y.data.ptr, None if mask is None else mask.data.ptr,
               None if valid_lengths is None else valid_lengths.data.ptr)
    return run


MASKED = register(Variant(
    name="softmax_03_online_masked", family="softmax", file="softmax/softmax_03_online_masked.cu",
    short="online_masked",
    story="softmax_02_online with additive / causal / padding masks fused into both passes",
    geometry=geometry, simulate=simulate_masked, plan=plan_masked,
    reads_per_element=2, writes_per_element=1,
    features=frozenset({"mask", "causal", "valid_lengths"}),
    dtypes=DTYPES, entry="softmax_03_online_masked_f32", entries=dtype_entries))
# the schedule before the accuracy fix (softmax_teaching.sequential_build)
sequential_build(MASKED, lambda x, **options: simulate_masked(x, sequential=True, **options))


# ---- softmax_14_registers_masked: the row in registers (softmax_08), the same masks ----------

def simulate_registers_masked(x, mask=None, causal=False, valid_lengths=None, fill=-np.inf, causal_rows=None,
                              vec=None) -> np.ndarray:
    """NumPy model of softmax_14_registers_masked: the masked logits in float32 (x widened exactly, the
    float32 mask added, `fill` past each row's limit), then the model of softmax_07 (rows up to 1024)
    or softmax_08 on them (their partition and reduction; the exponent with the subtraction first in
    every dtype), rounded once to x's dtype."""
    from onlinesoftmax.kernels.softmax import fast_models as models

    dtype = models.dtype_name(np.asarray(x).dtype)
    v = vec or models.vector_width(dtype)
    if v > 1 and x.shape[1] % v:
        v = 1
    logits = effective_logits(x, mask, causal, valid_lengths, fill, causal_rows=causal_rows)
    if x.shape[1] <= MAX_COLS_07:
        nv, g = models.config_07(x.shape[1], dtype, v)
        return models.registers_model(logits, dtype, v, nv, g, lambda s: models.group_butterfly(s, g))
    nv, t = models.config_08(x.shape[1], dtype, v)
    return models.registers_model(logits, dtype, v, nv, t,
                                  lambda s: sim.block_reduce(s, models.combine, (np.float32(-np.inf), np.float32(0))))


def plan_registers_masked(variant: Variant, x, y, mask=None, causal=False, valid_lengths=None, fill=-np.inf,
                          causal_rows=None, vec=None):
    """Runner of softmax_14 on 2-D cupy arrays (options as `prepare` makes them). The 16-byte build
    needs x's and y's rows on 16 bytes with N % V == 0 and the mask's rows on 16 bytes; else V = 1."""
    from onlinesoftmax.kernels.softmax import fast

    dtype = fast.dtype_name(x.dtype)
    if y.dtype != x.dtype:
        raise TypeError(f"{variant.name}: y must have x's dtype {x.dtype.name}, got {y.dtype.name}")
    if mask is not None and mask.dtype != np.float32:
        raise TypeError(f"{variant.name}: the additive mask must be float32 (prepare converts it), got {mask.dtype}")
    v = fast._vec_for(x, y, vec)
    if mask is not None and (mask.data.ptr % 16 or (mask.shape[0] > 1 and mask.strides[0] % 16)):
        v = 1
    n_rows, n_cols = x.shape
    if n_cols <= MAX_COLS_07:   # a lane group per row (softmax_07's layout)
        nv, g = fast.config_07(n_cols, dtype, v)
        suffix, grid, block, sizes = f"_n{nv}_g{g}", (-(-n_rows // (WARP_ROWS_BLOCK // g)),), (WARP_ROWS_BLOCK,), \
            (n_rows, n_cols)
    else:                       # a block per row (softmax_08's)
        nv, t = fast.config_08(n_cols, dtype, v)
        suffix, grid, block, sizes = f"_n{nv}_t{t}", (n_rows,), (t,), (n_cols,)
    kernel = get_kernel(variant.path, fast.entry(variant.name, dtype, v, suffix))
    # x, y, sizes, x_stride, y_stride, mask, mask_stride, mask_rows, valid_lengths, causal_rows, fill;
    # the four pointers change from call to call, the rest is fixed here
    types = (POINTER, POINTER, *[INT] * len(sizes), LONG, LONG, POINTER, LONG, INT, POINTER, INT, FLOAT)
    values = (None, None, *sizes, x.strides[0] // x.itemsize, y.strides[0] // y.itemsize,
              None, 0 if mask is None else mask.strides[0] // mask.itemsize, 1 if mask is None else mask.shape[0],
              None, (causal_rows or n_rows) if causal else 0, float(np.float32(fill)))
    launch = driver.prepare_launch(kernel, grid, block, 0, 1, types,
                                   fixed={i: value for i, value in enumerate(values) if types[i] is not POINTER})

    def run(x, y, mask=None, valid_lengths=None, **_):
        launch(x.data.ptr, y.data.ptr, None if mask is None else mask.data.ptr,
               None if valid_lengths is None else valid_lengths.data.ptr)
    return run


def _entries_14(variant: Variant) -> list[str]:
    from onlinesoftmax.kernels.softmax import fast_configs as configs

    names = []
    for dtype in DTYPES:
        for v in (configs.vector_width(dtype), 1):
            key = dtype if v > 1 else "scalar"
            names += [configs.entry(variant.name, dtype, v, f"_n{nv}_g{g}") for nv, g in configs.CONFIGS_07[key]]
            names += [configs.entry(variant.name, dtype, v, f"_n{nv}_t{t}") for nv, t in configs.CONFIGS_08[key]]
    return names


def _geometry_14(n_rows: int, n_cols: int) -> Launch:
    from onlinesoftmax.kernels.softmax.fast_configs import geometry_07, geometry_08

    return (geometry_07 if n_cols <= MAX_COLS_07 else geometry_08)(n_rows, n_cols)   # softmax_07's or 08's launch


REGISTERS_MASKED = register(Variant(
    name="softmax_14_registers_masked", family="softmax", file="softmax/softmax_14_registers_masked.cu",
    short="registers_masked",
    story="softmax_07 / 08 with the masks fused in: the row in registers, x and the mask read once, rows up to 32K",
    geometry=_geometry_14, simulate=simulate_registers_masked,
    plan=plan_registers_masked, reads_per_element=1, writes_per_element=1,
    features=frozenset({"mask", "causal", "valid_lengths"}), dtypes=DTYPES, max_cols=MAX_COLS_08, min_cc=80,
    entry="softmax_14_registers_masked_f32_v4_n8_t1024", entries=_entries_14))
