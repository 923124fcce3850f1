"""Launcher module of log_softmax_02_registers: log-softmax with the row in registers (rows up to 32K).

The kernel holds a row in softmax_07's layout (a group of G lanes per row, rows up to 1024) or
softmax_08's (a block of T threads per row, up to 32K), with the same configuration tables
(softmax_fast_configs.py), and writes (x - m) - log l from the values it holds: one read and one
write per element, where log_softmax_01_online reads the row twice. Scalar rows (misaligned, or N
not a multiple of the vector width) past 512 columns take the block layout: the kernel has no
scalar builds of 32 values per lane.

The NumPy model follows the same partition, each lane's state, the butterfly or block reduction,
and the subtraction-first exponent of every dtype; the output is computed in float32 and rounded
once to x's dtype.
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.kernels.softmax import fast_models as models
from onlinesoftmax.kernels.softmax.fast_configs import (
    CONFIGS_07, CONFIGS_08, DTYPES, F32, MAX_COLS_07, MAX_COLS_08, WARP_ROWS_BLOCK, config_07, config_08,
    dtype_name, entry, rows_aligned_for_vectors, vector_width)
from onlinesoftmax.registry import Launch, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel
from onlinesoftmax.runtime.plan import two_pointer_runner

NAME = "log_softmax_02_registers"
SCALAR_GROUP_COLS = 16 * 32   # the scalar group builds stop at 16 values per lane


def layout(n_cols: int, dtype: str, vec: int) -> tuple[str, int, int]:
    """("g", NV, G): a lane group per row; or ("t", NV, T): a block per row."""
    if n_cols <= MAX_COLS_07 and (vec > 1 or n_cols <= SCALAR_GROUP_COLS):
        return ("g", *config_07(n_cols, dtype, vec))
    return ("t", *config_08(n_cols, dtype, vec))


def _vec(x, dtype: str, vec: int | None) -> int:
    """The vector width of the model (or the build): 16 bytes' worth when N is a multiple of it."""
    v = vec or vector_width(dtype)
    return 1 if v > 1 and x.shape[1] % v else v


def simulate_log_softmax_registers(x, vec: int | None = None) -> np.ndarray:
    """NumPy model of log_softmax_02_registers on float32, float16 or bfloat16 rows (ml_dtypes)."""
    dtype = dtype_name(np.asarray(x).dtype)
    if x.shape[1] > MAX_COLS_08:
        raise ValueError(f"{NAME} holds rows of at most {MAX_COLS_08} columns, got {x.shape[1]}")
    v = _vec(x, dtype, vec)
    kind, nv, lanes = layout(x.shape[1], dtype, v)
    x32 = models.as_float32(x)
    held, _, _ = models.register_lanes(x32, v, nv, lanes)
    with np.errstate(all="ignore"):
        m = np.fmax.reduce(held, axis=2, initial=-np.inf).astype(F32)
        l = models.exp_sub(held, models.online_base(m)[..., None]).sum(axis=2, dtype=F32)
        if kind == "g":
            row_m, row_l = models.group_butterfly((m, l), lanes)
        else:
            row_m, row_l = sim.block_reduce((m, l), models.combine, (F32(-np.inf), F32(0)))
        y = ((x32 - row_m[:, None]).astype(F32) - np.log(row_l).astype(F32)[:, None]).astype(F32)
    return models.to_storage(y, dtype)


def geometry(n_rows: int, n_cols: int) -> Launch:
    """The launch for float32 rows (16-byte build when N % 4 == 0) and a fresh y."""
    kind, _, lanes = layout(n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    if kind == "g":
        return Launch(grid=(-(-n_rows // (WARP_ROWS_BLOCK // lanes)),), block=(WARP_ROWS_BLOCK,))
    return Launch(grid=(n_rows,), block=(lanes,))


def plan_log_softmax_registers(variant: Variant, x, y, vec: int | None = None):
    """Runner on 2-D cupy arrays; y in x's dtype. The 16-byte build needs x's and y's rows on 16 bytes
    and N % V == 0 (else V = 1); vec=1 asks for the scalar build."""
    dtype = dtype_name(x.dtype)
    if y.dtype != x.dtype:
        raise TypeError(f"{variant.name} writes x's dtype {x.dtype.name}, got an output of {y.dtype.name}")
    n_rows, n_cols = x.shape
    if n_cols > MAX_COLS_08:
        raise ValueError(f"{variant.name} holds rows of at most {MAX_COLS_08} columns, got {n_cols}")
    v = 1 if vec == 1 or not rows_aligned_for_vectors(x, y) else vector_width(dtype)
    kind, nv, lanes = layout(n_cols, dtype, v)
    fn = get_kernel(variant.path, entry(variant.name, dtype, v, f"_n{nv}_{kind}{lanes}"))
    strides = (x.strides[0] // x.itemsize, y.strides[0] // y.itemsize)
    pointer, integer, long = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    if kind == "g":
        launch = driver.prepare_launch(fn, (-(-n_rows // (WARP_ROWS_BLOCK // lanes)),), (WARP_ROWS_BLOCK,), 0, 1,
                                       (pointer, pointer, integer, integer, long, long),
                                       fixed={2: n_rows, 3: n_cols, 4: strides[0], 5: strides[1]})
    else:
        launch = driver.prepare_launch(fn, (n_rows,), (lanes,), 0, 1, (pointer, pointer, integer, long, long),
                                       fixed={2: n_cols, 3: strides[0], 4: strides[1]})
    return two_pointer_runner(launch)


def _entries(variant: Variant) -> list[str]:
    names = []
    for dtype in DTYPES:
        for v in (vector_width(dtype), 1):
            key = dtype if v > 1 else "scalar"
            names += [entry(variant.name, dtype, v, f"_n{nv}_g{g}") for nv, g in CONFIGS_07[key]
                      if v > 1 or nv * g <= SCALAR_GROUP_COLS]
            names += [entry(variant.name, dtype, v, f"_n{nv}_t{t}") for nv, t in CONFIGS_08[key]]
    return names


LOG_SOFTMAX_REGISTERS = register(Variant(
    name=NAME, family="log_softmax", file="logsumexp/log_softmax_02_registers.cu", short="registers",
    story="log_softmax_01 with the row in registers (softmax_07 / 08's layouts): one read, one write, rows up to 32K",
    geometry=geometry, simulate=simulate_log_softmax_registers, plan=plan_log_softmax_registers,
    reads_per_element=1, writes_per_element=1, dtypes=DTYPES, max_cols=MAX_COLS_08, min_cc=80,
    entry="log_softmax_02_registers_f32_v4_n8_t1024", entries=_entries))
