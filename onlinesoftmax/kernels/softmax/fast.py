"""The fast softmax kernels softmax_07 .. softmax_12 (and the measured attempt softmax_13): plan
builders and registration. fp32, fp16 and bf16; every kernel reads a row once and writes it once
(softmax_11 reads a chunk twice, the second time from L2 where it fits).

A plan builder works out, once per layout, the entry (dtype, vector width, configuration), the
grid, block and shared memory (softmax_fast_configs.py), raises the shared-memory limit, asks the
occupancy questions and prepares the driver's launch configuration (runtime/driver.py); the runner
it returns only packs the addresses and launches. The NumPy models are in softmax_fast_models.py,
the choice among these kernels in dispatch.py.
"""
from __future__ import annotations

import ctypes

import numpy as np

from onlinesoftmax.kernels.softmax.fast_configs import (
    CONFIGS_07, CONFIGS_08, DTYPES, MAX_COLS_07, MAX_COLS_08, WARP_ROWS_BLOCK, aligned_for_vectors,
    check_chunks, chunks_09, chunks_10, chunks_11, chunks_13, config_07, config_08, coop_buffers, dtype_name,
    entry, geometry_07, geometry_08, geometry_09, geometry_10, geometry_11, geometry_12, geometry_13, launches_11,
    rows_aligned_for_vectors, vector_width)
from onlinesoftmax.kernels.softmax.fast_models import (
    simulate_07, simulate_08, simulate_09, simulate_10, simulate_11, simulate_12, simulate_13)
from onlinesoftmax.registry import DTYPE_ITEMSIZE, Variant, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel, nvcc_available, ptxas_reports
from onlinesoftmax.runtime.plan import two_pointer_runner

POINTER, INT, LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


def _vec_for(x, y, force_vec: int | None, any_start: bool = False) -> int:
    """The vector width of the build to launch: 1 when asked (vec=1); else 16 bytes' worth when the
    variant's condition holds. any_start (softmax_09 .. 12): x's and y's rows in the same phase, any start
    and any N; otherwise (softmax_07, 08, 13) rows on 16 bytes with N % V == 0."""
    if force_vec == 1:
        return 1
    fits = aligned_for_vectors(x, y) if any_start else rows_aligned_for_vectors(x, y)
    return vector_width(x.dtype) if fits else 1


def _strides(x, y):
    return np.int64(x.strides[0] // x.itemsize), np.int64(y.strides[0] // y.itemsize)


def _fixed(first: int, *values) -> dict:
    """The fixed parameters of a launch (driver.prepare_launch): values from parameter `first` on."""
    return {first + i: value for i, value in enumerate(values)}


def _cache(plan, cache_elems, v):
    return plan.cache_elems if cache_elems is None else min(plan.cache_elems, cache_elems // v * v)


def plan_07(variant: Variant, x, y, vec: int | None = None):
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    nv, g = config_07(x.shape[1], dtype, v)
    fn = get_kernel(variant.path, entry(variant.name, dtype, v, f"_n{nv}_g{g}"))
    grid, block = (-(-x.shape[0] // (WARP_ROWS_BLOCK // g)),), (WARP_ROWS_BLOCK,)
    launch = driver.prepare_launch(fn, grid, block, 0, 1, (POINTER, POINTER, INT, INT, LONG, LONG),
                                   fixed=_fixed(2, x.shape[0], x.shape[1], *_strides(x, y)))
    return two_pointer_runner(launch)


def plan_08(variant: Variant, x, y, vec: int | None = None):
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    nv, t = config_08(x.shape[1], dtype, v)
    fn = get_kernel(variant.path, entry(variant.name, dtype, v, f"_n{nv}_t{t}"))
    launch = driver.prepare_launch(fn, (x.shape[0],), (t,), 0, 1, (POINTER, POINTER, INT, LONG, LONG),
                                   fixed=_fixed(2, x.shape[1], *_strides(x, y)))
    return two_pointer_runner(launch)


def plan_09(variant: Variant, x, y, vec: int | None = None, cache_elems: int | None = None):
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec, any_start=True)
    chunks = chunks_09(x.shape[1], dtype, v)
    cache = _cache(chunks, cache_elems, v)
    fn = get_kernel(variant.path, entry(variant.name, dtype, v))
    shared = cache * DTYPE_ITEMSIZE[dtype]
    launch = driver.prepare_launch(fn, (x.shape[0],), (chunks.threads,), shared, 1,
                                   (POINTER, POINTER, INT, LONG, LONG, INT),
                                   fixed=_fixed(2, x.shape[1], *_strides(x, y), cache))
    return two_pointer_runner(launch)


def _resident_cluster_plan(variant, x, dtype, v, n_chunks, cache_elems):
    """softmax_10/12: the cluster plan, halved until a cluster of it can be resident on this GPU."""
    chunks = chunks_10(x.shape[0], x.shape[1], dtype, v, n_chunks)
    name = entry(variant.name, dtype, v)
    while True:  # a cluster that cannot be resident (shared memory, GPC size) would fail to launch
        cache = _cache(chunks, cache_elems, v)
        shared = cache * DTYPE_ITEMSIZE[dtype]
        resident = 1 if chunks.n_chunks == 1 and variant.name == CLUSTER_NAME else \
            driver.max_active_clusters(variant.file, name, chunks.threads, shared, chunks.n_chunks)
        if resident > 0:
            return chunks, name, cache, shared, resident
        if n_chunks is not None or chunks.n_chunks == 1:
            raise ValueError(f"a cluster of {chunks.n_chunks} blocks with {shared} B of shared memory each "
                             "cannot be resident on this GPU")
        chunks = chunks_10(x.shape[0], x.shape[1], dtype, v, chunks.n_chunks // 2)


CLUSTER_NAME = "softmax_10_cluster"
CLUSTER_ARGS = (POINTER, POINTER, INT, LONG, LONG, INT, INT)


def plan_10(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
            cache_elems: int | None = None):
    check_chunks(n_chunks, variant.name)
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec, any_start=True)
    chunks, name, cache, shared, _ = _resident_cluster_plan(variant, x, dtype, v, n_chunks, cache_elems)
    launch = driver.prepare_launch(get_kernel(variant.path, name), (x.shape[0] * chunks.n_chunks,),
                                   (chunks.threads,), shared, chunks.n_chunks, CLUSTER_ARGS,
                                   fixed=_fixed(2, x.shape[1], *_strides(x, y), chunks.chunk_elems, cache))
    return two_pointer_runner(launch)


def plan_12(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
            cache_elems: int | None = None, max_clusters: int | None = None):
    """Persistent clusters: as many as are resident at once (or `max_clusters`), each looping over rows.
    Rows whose x and y phases differ (or vec=1) go to softmax_10, which has the scalar builds."""
    check_chunks(n_chunks, variant.name)
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec, any_start=True)
    if v == 1:
        return plan_10(CLUSTER, x, y, vec=1, n_chunks=n_chunks, cache_elems=cache_elems)
    chunks, name, cache, shared, resident = _resident_cluster_plan(variant, x, dtype, v, n_chunks, cache_elems)
    clusters = min(x.shape[0], resident if max_clusters is None else max(1, min(resident, max_clusters)))
    launch = driver.prepare_launch(get_kernel(variant.path, name), (clusters * chunks.n_chunks,),
                                   (chunks.threads,), shared, chunks.n_chunks,
                                   (POINTER, POINTER, INT, INT, LONG, LONG, INT, INT),
                                   fixed=_fixed(2, *x.shape, *_strides(x, y), chunks.chunk_elems, cache))
    return two_pointer_runner(launch)


def plan_11(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
            programmatic: bool = True):
    """Stats, then output as a programmatic dependent launch (cupy's ordinary launch when
    programmatic=False, below compute capability 9.0 or without cuda-bindings; the kernels are
    correct either way: without PDL the stream orders the two launches)."""
    from onlinesoftmax.runtime import device

    check_chunks(n_chunks, variant.name)
    import cupy

    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec, any_start=True)
    chunks = chunks_11(x.shape[0], x.shape[1], dtype, v, n_chunks)
    stats = get_kernel(variant.path, entry("softmax_11_split_stats", dtype, v))
    output = get_kernel(variant.path, entry("softmax_11_split_output", dtype, v))
    stats_launch, output_launch = launches_11(x.shape[0], chunks)
    n_partials = 2 * x.shape[0] * chunks.n_chunks
    sizes = (x.shape[1], *_strides(x, y), chunks.n_chunks, chunks.chunk_elems)   # n_cols, strides, count, chunk
    launch_stats = driver.prepare_launch(stats, stats_launch.grid, stats_launch.block, 0, 1,
                                         (POINTER, POINTER, INT, LONG, INT, INT),
                                         fixed=_fixed(2, sizes[0], sizes[1], *sizes[3:]))
    early = programmatic and device.compute_capability() >= 90 and driver.has_driver_bindings()
    launch_output = driver.prepare_launch(output, output_launch.grid, output_launch.block, 0, 1,
                                          (POINTER, POINTER, POINTER, INT, LONG, LONG, INT, INT),
                                          fixed=_fixed(3, *sizes), programmatic=early)

    def run(x, y, **_):
        partials = cupy.empty(n_partials, dtype=cupy.float32)
        launch_stats(x.data.ptr, partials.data.ptr)
        launch_output(x.data.ptr, y.data.ptr, partials.data.ptr)
    return run


def plan_13(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
            max_groups: int | None = None, prefetch: bool = True):
    """Cooperative launch of G groups of P blocks, G * P <= the blocks resident at once (or `max_groups`
    groups: tests use it to make each group loop over many rows). prefetch=False: the build without
    the second buffer (-DCOOPERATIVE_PREFETCH=0)."""
    check_chunks(n_chunks, variant.name)
    import cupy

    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    name = entry(variant.name, dtype, v)
    defines = () if prefetch else ("COOPERATIVE_PREFETCH=0",)
    chunks = chunks_13(x.shape[0], x.shape[1], dtype, v, n_chunks, prefetch=prefetch)
    shared = coop_buffers(v, prefetch) * chunks.chunk_elems * DTYPE_ITEMSIZE[dtype]
    resident = driver.resident_blocks(variant.file, name, chunks.threads, shared, defines)
    if n_chunks is None and chunks.n_chunks > resident:   # estimate too high for this GPU: bigger chunks
        chunks = chunks_13(x.shape[0], x.shape[1], dtype, v, max(1, resident // 2), prefetch=prefetch)
        shared = coop_buffers(v, prefetch) * chunks.chunk_elems * DTYPE_ITEMSIZE[dtype]
        resident = driver.resident_blocks(variant.file, name, chunks.threads, shared, defines)
    if chunks.n_chunks > resident:
        raise ValueError(f"softmax_13_cooperative: {chunks.n_chunks} blocks per row, but only {resident} blocks "
                         f"of {chunks.threads} threads and {shared} B fit the GPU at once")
    groups = min(x.shape[0], resident // chunks.n_chunks)
    if max_groups is not None:
        groups = max(1, min(groups, int(max_groups)))
    launch = driver.prepare_launch(get_kernel(variant.path, name, defines), (groups * chunks.n_chunks,),
                                   (chunks.threads,), shared, 1,
                                   (POINTER, POINTER, POINTER, INT, INT, LONG, LONG, INT, INT), cooperative=True,
                                   fixed=_fixed(3, *x.shape, *_strides(x, y), chunks.n_chunks, chunks.chunk_elems))
    n_partials = 2 * x.shape[0] * chunks.n_chunks

    def run(x, y, **_):
        partials = cupy.empty(n_partials, dtype=cupy.float32)
        # every slot empty: the bytes 0xff (grid_states.cuh), set on the launch's stream
        cupy.cuda.runtime.memsetAsync(partials.data.ptr, 0xFF, partials.nbytes, cupy.cuda.get_current_stream().ptr)
        launch(x.data.ptr, y.data.ptr, partials.data.ptr)
    return run


# ---- registration ----------------------------------------------------------------------------

def entry_names(variant: Variant) -> list[str]:
    """Every entry of the variant's file, from the instantiation tables (no nvcc needed)."""
    names = []
    for dtype in DTYPES:
        vecs = (vector_width(dtype),) if variant.name == "softmax_12_pipelined" else (vector_width(dtype), 1)
        for v in vecs:
            key = dtype if v > 1 else "scalar"
            if variant.name == "softmax_07_warp_per_row":
                names += [entry(variant.name, dtype, v, f"_n{nv}_g{g}") for nv, g in CONFIGS_07[key]]
            elif variant.name == "softmax_08_registers":
                names += [entry(variant.name, dtype, v, f"_n{nv}_t{t}") for nv, t in CONFIGS_08[key]]
            elif variant.name == "softmax_11_split":
                names += [entry("softmax_11_split_stats", dtype, v), entry("softmax_11_split_output", dtype, v)]
            else:
                names.append(entry(variant.name, dtype, v))
    return names


def _fast(name: str, **fields) -> Variant:
    return register(Variant(name=name, family="softmax", file=f"softmax/{name}.cu", dtypes=DTYPES,
                            reads_per_element=fields.pop("reads_per_element", 1), writes_per_element=1,
                            entries=entry_names, **fields))


WARP_PER_ROW = _fast(
    "softmax_07_warp_per_row", short="warp_per_row", entry="softmax_07_warp_per_row_f32_v4_n8_g32",
    story="short rows: a group of 1-32 lanes per row, the row in registers, read once",
    geometry=geometry_07, simulate=simulate_07, plan=plan_07, max_cols=MAX_COLS_07, min_cc=80)

REGISTERS = _fast(
    "softmax_08_registers", short="registers", entry="softmax_08_registers_f32_v4_n8_t1024",
    story="a block per row, the row cached in registers: one read, one exp per element",
    geometry=geometry_08, simulate=simulate_08, plan=plan_08, max_cols=MAX_COLS_08, min_cc=80)

SHARED = _fast(
    "softmax_09_shared", short="shared", entry="softmax_09_shared_f32_v4",
    story="a block per row, the row cached in up to 227 KB of shared memory",
    geometry=geometry_09, simulate=simulate_09, plan=plan_09, min_cc=80)

CLUSTER = _fast(
    "softmax_10_cluster", short="cluster", entry="softmax_10_cluster_f32_v4",
    story="a thread-block cluster per row: chunks in shared memory, (m, l) through DSMEM",
    geometry=geometry_10, simulate=simulate_10, plan=plan_10, min_cc=90)

SPLIT = _fast(
    "softmax_11_split", short="split", entry="softmax_11_split_stats_f32_v4", reads_per_element=2,
    story="the row split over many blocks without clusters: partial states, then a merge launch",
    geometry=geometry_11, simulate=simulate_11, plan=plan_11, min_cc=80)

PIPELINED = _fast(
    "softmax_12_pipelined", short="pipelined", entry="softmax_12_pipelined_f32_v4",
    story="persistent clusters: the next row's cp.async loads overlap this row's reduction and stores",
    geometry=geometry_12, simulate=simulate_12, plan=plan_12, min_cc=90)

COOPERATIVE = _fast(
    "softmax_13_cooperative", short="cooperative", entry="softmax_13_cooperative_f32_v4",
    story="any number of blocks per row on a cooperative grid: chunks in shared memory, (m, l) met in global memory",
    geometry=geometry_13, simulate=simulate_13, plan=plan_13, min_cc=80)

FAST_VARIANTS = (WARP_PER_ROW, REGISTERS, SHARED, CLUSTER, SPLIT, PIPELINED)
# Measured and not adopted (suite softmax-fast-cooperative; chapter 06): outside the dispatcher,
# the softmax-fast benchmark and the chapter's ladder, still tested and sanitized.
ATTEMPT_VARIANTS = (COOPERATIVE,)


def resources_table(variant: Variant) -> dict:
    """{entry: ResourceReport} for every build in the variant's file: the device's view on a GPU,
    nvcc's (sm_90a) without one; {} when neither is available."""
    from onlinesoftmax.runtime import device
    from onlinesoftmax.runtime.loader import resources_from_device

    if device.has_gpu():
        return {name: resources_from_device(get_kernel(variant.path, name)) for name in entry_names(variant)}
    if not nvcc_available():
        return {}
    return dict(ptxas_reports(variant.path))
