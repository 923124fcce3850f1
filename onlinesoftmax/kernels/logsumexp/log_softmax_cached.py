"""Launcher module of log_softmax_04_shared and log_softmax_05_cluster: log-softmax of rows past 32K
read from global memory once, the row cached on chip.

log_softmax_04_shared is softmax_09_shared with the log output: a block per row, chunk_state's pass
caching the raw bits in dynamic shared memory (row_chunk.cuh), the block reduction, then
y = (x - M) - log L from the cache (log_softmax_chunk.cuh). log_softmax_05_cluster is softmax_10_cluster
with the same output: a cluster of C blocks per row, each caching its chunk, the C states combined
through distributed shared memory. So the plans are softmax_09's and softmax_10's (`fast.plan_09`,
`fast.plan_10`: threads, cache size, cluster size, the 16-byte build for rows at any start) on these
files' entries, and the NumPy models are theirs (`fast_models.chunked_model`) with the log output,
computed in float32 and rounded once to x's dtype.
"""
from __future__ import annotations

from onlinesoftmax.kernels.softmax import fast, fast_models as models
from onlinesoftmax.kernels.softmax.fast_configs import (
    DTYPES, chunks_09, chunks_10, dtype_name, entry, geometry_09, geometry_10, vector_width)
from onlinesoftmax.registry import Variant, register

SHARED_NAME, CLUSTER_NAME = "log_softmax_04_shared", "log_softmax_05_cluster"


def simulate_log_softmax_shared(x, vec: int | None = None, cache_elems: int | None = None):
    """NumPy model of log_softmax_04_shared (the cache size does not change the values)."""
    dtype = dtype_name(x.dtype)
    v = vec or vector_width(dtype)
    return models.chunked_model(x, chunks_09(x.shape[1], dtype, v), v, "block", any_start=True,
                                output=models.log_chunk_output)


def simulate_log_softmax_cluster(x, vec: int | None = None, n_chunks: int | None = None,
                                 cache_elems: int | None = None):
    """NumPy model of log_softmax_05_cluster: its chunks, the cluster's butterfly over their states."""
    dtype = dtype_name(x.dtype)
    v = vec or vector_width(dtype)
    return models.chunked_model(x, chunks_10(x.shape[0], x.shape[1], dtype, v, n_chunks), v, "cluster",
                                any_start=True, output=models.log_chunk_output)


def _same_dtype(variant: Variant, x, y) -> None:
    if y.dtype != x.dtype:
        raise TypeError(f"{variant.name} writes x's dtype {x.dtype.name}, got an output of {y.dtype.name}")


def plan_log_softmax_shared(variant: Variant, x, y, vec: int | None = None, cache_elems: int | None = None):
    """Runner on 2-D cupy arrays, y in x's dtype: softmax_09's plan on this kernel's entries."""
    _same_dtype(variant, x, y)
    return fast.plan_09(variant, x, y, vec=vec, cache_elems=cache_elems)


def plan_log_softmax_cluster(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
                             cache_elems: int | None = None):
    """Runner on 2-D cupy arrays, y in x's dtype: softmax_10's plan (cluster size, residency) on this kernel."""
    _same_dtype(variant, x, y)
    return fast.plan_10(variant, x, y, vec=vec, n_chunks=n_chunks, cache_elems=cache_elems)


def _entries(variant: Variant) -> list[str]:
    return [entry(variant.name, dtype, v) for dtype in DTYPES for v in (vector_width(dtype), 1)]


LOG_SOFTMAX_SHARED = register(Variant(
    name=SHARED_NAME, family="log_softmax", file="logsumexp/log_softmax_04_shared.cu", short="shared",
    story="log_softmax_01 with the row cached in shared memory (softmax_09's pass): one read, one write, "
          "rows past 32K",
    geometry=geometry_09, simulate=simulate_log_softmax_shared, plan=plan_log_softmax_shared,
    reads_per_element=1, writes_per_element=1, dtypes=DTYPES, min_cc=80,
    entry="log_softmax_04_shared_f32_v4", entries=_entries))

LOG_SOFTMAX_CLUSTER = register(Variant(
    name=CLUSTER_NAME, family="log_softmax", file="logsumexp/log_softmax_05_cluster.cu", short="cluster",
    story="log_softmax_04 with a row over a thread-block cluster (softmax_10's pass): chunks in shared memory, "
          "(m, l) through DSMEM, one read",
    geometry=geometry_10, simulate=simulate_log_softmax_cluster, plan=plan_log_softmax_cluster,
    reads_per_element=1, writes_per_element=1, dtypes=DTYPES, min_cc=90,
    entry="log_softmax_05_cluster_f32_v4", entries=_entries))
