"""Launcher module of log_softmax_04_shared: log-softmax with the row cached in shared memory, read
from global memory once (rows too long for log_softmax_02's registers).

The kernel is softmax_09_shared's with the log output: the same block per row, the same chunk_state
pass caching the raw bits in dynamic shared memory (row_chunk.cuh), the same block reduction, then
y = (x - M) - log L from the cache. So the plan is softmax_09's (`fast.plan_09`: threads, cache size
and the 16-byte build for rows at any start) on this file's entries, and the NumPy model is softmax_09's
(`fast_models.chunked_model`) with the log output, computed in float32 and rounded once to x's dtype.
"""
from __future__ import annotations

from onlinesoftmax.kernels.softmax import fast, fast_models as models
from onlinesoftmax.kernels.softmax.fast_configs import DTYPES, chunks_09, dtype_name, entry, geometry_09, vector_width
from onlinesoftmax.registry import Variant, register

NAME = "log_softmax_04_shared"


def simulate_log_softmax_shared(x, vec: int | None = None, cache_elems: int | None = None):
    """NumPy model of log_softmax_04_shared (the cache size does not change the values)."""
    dtype = dtype_name(x.dtype)
    v = vec or vector_width(dtype)
    return models.chunked_model(x, chunks_09(x.shape[1], dtype, v), v, "block", any_start=True,
                                output=models.log_chunk_output)


def plan_log_softmax_shared(variant: Variant, x, y, vec: int | None = None, cache_elems: int | None = None):
    """Runner on 2-D cupy arrays, y in x's dtype: softmax_09's plan on this kernel's entries."""
    if y.dtype != x.dtype:
        raise TypeError(f"{variant.name} writes x's dtype {x.dtype.name}, got an output of {y.dtype.name}")
    return fast.plan_09(variant, x, y, vec=vec, cache_elems=cache_elems)


def _entries(variant: Variant) -> list[str]:
    return [entry(variant.name, dtype, v) for dtype in DTYPES for v in (vector_width(dtype), 1)]


LOG_SOFTMAX_SHARED = register(Variant(
    name=NAME, family="log_softmax", file="logsumexp/log_softmax_04_shared.cu", short="shared",
    story="log_softmax_01 with the row cached in shared memory (softmax_09's pass): one read, one write, "
          "rows past 32K",
    geometry=geometry_09, simulate=simulate_log_softmax_shared, plan=plan_log_softmax_shared,
    reads_per_element=1, writes_per_element=1, dtypes=DTYPES, min_cc=80,
    entry="log_softmax_04_shared_f32_v4", entries=_entries))
