"""Launcher module of the fast softmax kernels softmax_07 .. softmax_12 (and the attempt softmax_13).

fp32, fp16 and bf16.

Every kernel reads a row once and writes it once (softmax_11 reads a chunk twice, the
second time from L2 where it fits). Each `.cu` holds template instantiations with
extern "C" entries named `<file stem>_<dtype>_v<V>[_...]`: V = 16 / itemsize elements per
16-byte access, or V = 1 (the scalar path for rows that are not 16-byte aligned).

`choose(n_rows, n_cols, dtype)` is the dispatcher behind `softmax(x, variant="fast")`;
each variant's NumPy model (`simulate`) follows its partition and reduction order.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

from onlinesoftmax import simulate as sim
from onlinesoftmax.runtime.loader import get_kernel, nvcc_available, ptxas_reports
from onlinesoftmax.registry import Launch, Variant, register

F32 = np.float32
LOG2E = F32(1.4426950408889634)
DTYPES = ("float32", "float16", "bfloat16")
TAGS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
SMS_H200 = 132
SHARED_LIMIT_BYTES = 227 * 1024 - 1024      # dynamic shared memory per block, minus the static part
SHARED_TWO_BLOCKS_BYTES = 112 * 1024        # a row (chunk) this small leaves room for a second block
CHUNK_UNROLL = 4                            # row_chunk.cuh: vectors per thread per step
MAX_CLUSTER = 16                            # 16 is Hopper's non-portable maximum (8 portable)
WARP_ROWS_BLOCK = 128                       # softmax_07's block size
PIPELINED_MIN_ROWS = 1024                   # dispatcher: 16-bit rows of 64K go to softmax_12 from here (measured at 4000)

# softmax_07: (vectors per lane NV, lanes per row G) for the 16-byte and the scalar path.
CONFIGS_07 = {
    "float32": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(2, 32), (4, 32), (8, 32)],
    "float16": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(2, 32), (4, 32)],
    "bfloat16": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(2, 32), (4, 32)],
    "scalar": [(1, g) for g in (1, 2, 4, 8, 16, 32)] + [(n, 32) for n in (2, 4, 8, 16, 32)],
}
# softmax_08: (vectors per thread NV, threads T), smallest capacity first.
CONFIGS_08 = {
    "float32": [(4, 128), (4, 256), (4, 512), (4, 1024), (8, 1024)],
    "float16": [(2, 128), (4, 128), (4, 256), (4, 512), (4, 1024)],
    "bfloat16": [(2, 128), (4, 128), (4, 256), (4, 512), (4, 1024)],
    "scalar": [(16, 128), (16, 256), (16, 512), (16, 1024), (32, 1024)],
}
MAX_COLS_07 = 1024
MAX_COLS_08 = 32768


def dtype_name(dtype) -> str:
    if isinstance(dtype, str) and dtype in DTYPES:  # "bfloat16" needs no ml_dtypes import
        return dtype
    name = getattr(dtype, "name", None) or np.dtype(dtype).name
    if name not in DTYPES:
        raise TypeError(f"the fast kernels take {', '.join(DTYPES)}, got {name}")
    return name


def vector_width(dtype) -> int:
    """Elements per 16-byte access."""
    return 16 // ITEMSIZE[dtype_name(dtype)]


def aligned_for_vectors(*arrays) -> bool:
    """True when every row of every (2-D, unit column stride) array starts on 16 bytes and
    N is a multiple of the vector width: the condition of the V > 1 builds."""
    for a in arrays:
        data_ptr = a.data.ptr if hasattr(a.data, "ptr") else a.__array_interface__["data"][0]
        if data_ptr % 16 or a.strides[0] % 16 or (a.shape[1] * a.itemsize) % 16:
            return False
    return True


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


# ---- configurations ---------------------------------------------------------------------

def config_07(n_cols: int, dtype: str, vec: int) -> tuple[int, int]:
    """(NV, G) for softmax_07: the fewest lanes, then the fewest vectors, that hold the row."""
    key = dtype if vec > 1 else "scalar"
    n_vec = -(-n_cols // vec)
    for nv, g in CONFIGS_07[key]:
        if nv * g >= n_vec:
            return nv, g
    raise ValueError(f"softmax_07_warp_per_row holds at most {MAX_COLS_07} columns, got {n_cols}")


def config_08(n_cols: int, dtype: str, vec: int) -> tuple[int, int]:
    """(NV, T) for softmax_08: the smallest register footprint that holds the row."""
    key = dtype if vec > 1 else "scalar"
    for nv, t in CONFIGS_08[key]:
        if nv * t * vec >= n_cols:
            return nv, t
    raise ValueError(f"softmax_08_registers holds at most {MAX_COLS_08} columns, got {n_cols}")


BIG_CHUNK_BYTES = 96 * 1024   # above this only one block fits an SM: give it 1024 threads


def chunk_threads(chunk_elems: int, vec: int, itemsize: int = 4) -> int:
    """Threads for a chunk kernel: about 8 vectors per thread, 128 .. 512; 1024 for a chunk so
    large that its block is alone on the SM (then it alone must keep ~64 KB of loads in flight)."""
    if chunk_elems * itemsize > BIG_CHUNK_BYTES:
        return 1024
    return int(min(512, max(128, _pow2_at_least(-(-chunk_elems // (8 * vec))))))


def chunk_elems_for(n_cols: int, n_chunks: int, vec: int) -> int:
    """Elements per chunk, a multiple of the vector width."""
    return -(-n_cols // (n_chunks * vec)) * vec


@dataclass(frozen=True)
class ChunkPlan:
    n_chunks: int
    chunk_elems: int
    cache_elems: int
    threads: int


MAX_SPLIT_CHUNKS = 1024                     # softmax_11: one partial state per merge thread


def check_chunks(n_chunks, variant_name: str) -> None:
    """An explicit chunk count: an int (not a bool); softmax_10/12 take a cluster size 1, 2, 4, 8 or 16,
    softmax_11 and softmax_13 any count in 1 .. 1024. None (choose one) passes."""
    if n_chunks is None:
        return
    if isinstance(n_chunks, (bool, np.bool_)) or not isinstance(n_chunks, (int, np.integer)):
        raise TypeError(f"{variant_name}: n_chunks must be an int, got {type(n_chunks).__name__} {n_chunks!r}")
    if variant_name.startswith(("softmax_11", "softmax_13")):
        if not 1 <= n_chunks <= MAX_SPLIT_CHUNKS:
            raise ValueError(f"{variant_name}: n_chunks must be in 1 .. {MAX_SPLIT_CHUNKS}, got {n_chunks}")
    elif not (1 <= n_chunks <= MAX_CLUSTER and n_chunks & (n_chunks - 1) == 0):
        raise ValueError(f"{variant_name}: n_chunks is a cluster size, one of 1, 2, 4, 8, {MAX_CLUSTER}; "
                         f"got {n_chunks}")


def plan_09(n_cols: int, dtype: str, vec: int) -> ChunkPlan:
    itemsize = ITEMSIZE[dtype]
    chunk = chunk_elems_for(n_cols, 1, vec)
    cache = min(chunk, (SHARED_LIMIT_BYTES // itemsize) // vec * vec)
    return ChunkPlan(1, chunk, cache, chunk_threads(chunk, vec, itemsize))


def plan_10(n_rows: int, n_cols: int, dtype: str, vec: int, n_chunks: int | None = None,
            sms: int = SMS_H200) -> ChunkPlan:
    """Cluster size: enough blocks to fill the GPU and chunks small enough for ~3 blocks/SM."""
    check_chunks(n_chunks, "softmax_10_cluster")
    itemsize = ITEMSIZE[dtype]
    if n_chunks is None:
        fit = _pow2_at_least(-(-n_cols * itemsize // (64 * 1024)))
        fill = _pow2_at_least(-(-2 * sms // n_rows))
        min_chunk = _pow2_at_least(-(-n_cols // 4096))  # chunks of at least ~4K elements
        n_chunks = int(min(MAX_CLUSTER, max(1, fit, min(fill, min_chunk))))
    chunk = chunk_elems_for(n_cols, n_chunks, vec)
    cache = min(chunk, (SHARED_LIMIT_BYTES // itemsize) // vec * vec)
    return ChunkPlan(n_chunks, chunk, cache, chunk_threads(chunk, vec, itemsize))


def plan_11(n_rows: int, n_cols: int, dtype: str, vec: int, n_chunks: int | None = None,
            sms: int = SMS_H200) -> ChunkPlan:
    """Chunks of >= 2K elements, enough of them for ~4 blocks per SM (at most 1024 per row)."""
    check_chunks(n_chunks, "softmax_11_split")
    if n_chunks is None:
        fill = -(-4 * sms // n_rows)
        n_chunks = int(max(1, min(1024, fill, -(-n_cols // 2048))))
    chunk = chunk_elems_for(n_cols, n_chunks, vec)
    return ChunkPlan(n_chunks, chunk, 0, chunk_threads(chunk, vec, ITEMSIZE[dtype]))


COOP_CHUNK_BYTES = 32 * 1024               # softmax_13: chunk per block when rows are many (>= 4 blocks/SM)
COOP_MIN_CHUNK_BYTES = 8 * 1024            # ... and the smallest chunk when few rows must fill the GPU
COOP_MAX_CHUNKS = 1024
RESIDENT_BLOCKS_H200 = 4 * SMS_H200         # CPU-side estimate; on a GPU the occupancy API answers


def coop_buffers(vec: int, prefetch: bool = True) -> int:
    """Shared-memory buffers of a softmax_13 block: two (this row, the prefetched next) in the 16-byte
    builds, one in the scalar builds or without prefetch (-DCOOPERATIVE_PREFETCH=0)."""
    return 2 if prefetch and vec > 1 else 1


def plan_13(n_rows: int, n_cols: int, dtype: str, vec: int, n_chunks: int | None = None,
            resident: int = RESIDENT_BLOCKS_H200, prefetch: bool = True) -> ChunkPlan:
    """Chunks of ~32 KB (so several blocks share an SM); with few rows, smaller chunks (>= 8 KB) until the
    rows' blocks fill the resident grid. The whole chunk is cached (twice with prefetch): the buffers must
    fit the shared memory limit."""
    check_chunks(n_chunks, "softmax_13_cooperative")
    itemsize = ITEMSIZE[dtype]
    row_bytes = n_cols * itemsize
    if n_chunks is None:
        target = -(-row_bytes // COOP_CHUNK_BYTES)
        fill = min(-(-resident // n_rows), -(-row_bytes // COOP_MIN_CHUNK_BYTES))
        n_chunks = int(max(1, min(COOP_MAX_CHUNKS, max(target, fill))))
    chunk = chunk_elems_for(n_cols, n_chunks, vec)
    buffers = coop_buffers(vec, prefetch)
    if buffers * chunk * itemsize > SHARED_LIMIT_BYTES:
        raise ValueError(f"softmax_13_cooperative: {n_chunks} chunks of a {n_cols}-column row are "
                         f"{chunk * itemsize} B each; {buffers} of them exceed one block's {SHARED_LIMIT_BYTES} B "
                         "of shared memory")
    return ChunkPlan(n_chunks, chunk, chunk, chunk_threads(chunk, vec, itemsize))


# ---- launching ----------------------------------------------------------------------------

def _entry(stem: str, dtype: str, vec: int, suffix: str = "") -> str:
    return f"{stem}_{TAGS[dtype]}_v{vec}{suffix}"


def _vec_for(x, y, force_vec: int | None) -> int:
    vec = vector_width(x.dtype)
    if force_vec == 1 or not aligned_for_vectors(x, y):
        return 1
    return vec


def _strides(x, y):
    return np.int64(x.strides[0] // x.itemsize), np.int64(y.strides[0] // y.itemsize)


def _set_shared(kernel, shared_bytes: int) -> None:
    """Raise the cupy kernel's dynamic shared-memory limit to `shared_bytes` if it is lower; never lower it.

    The limit belongs to the function (the CUfunction that cuLaunchKernelEx launches too), not to a launch
    shape: setting it to each shape's size would let a smaller shape lower it under a larger shape whose
    launch configuration is cached (the launch then fails with CUDA_ERROR_INVALID_VALUE; seen on the H200).
    Read from the driver each time, so every launcher calls this before every launch."""
    if shared_bytes > 48 * 1024 and kernel.max_dynamic_shared_size_bytes < shared_bytes:
        kernel.max_dynamic_shared_size_bytes = shared_bytes


def launch_07(variant: Variant, x, y, vec: int | None = None) -> None:
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    nv, g = config_07(x.shape[1], dtype, v)
    fn = get_kernel(variant.path, _entry(variant.name, dtype, v, f"_n{nv}_g{g}"))
    rows_per_block = WARP_ROWS_BLOCK // g
    grid = (-(-x.shape[0] // rows_per_block),)
    fn(grid, (WARP_ROWS_BLOCK,), (x, y, np.int32(x.shape[0]), np.int32(x.shape[1]), *_strides(x, y)))


def launch_08(variant: Variant, x, y, vec: int | None = None) -> None:
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    nv, t = config_08(x.shape[1], dtype, v)
    fn = get_kernel(variant.path, _entry(variant.name, dtype, v, f"_n{nv}_t{t}"))
    fn((x.shape[0],), (t,), (x, y, np.int32(x.shape[1]), *_strides(x, y)))


def launch_09(variant: Variant, x, y, vec: int | None = None, cache_elems: int | None = None) -> None:
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    plan = plan_09(x.shape[1], dtype, v)
    cache = plan.cache_elems if cache_elems is None else min(plan.cache_elems, cache_elems // v * v)
    fn = get_kernel(variant.path, _entry(variant.name, dtype, v))
    shared = cache * ITEMSIZE[dtype]
    _set_shared(fn, shared)
    fn((x.shape[0],), (plan.threads,), (x, y, np.int32(x.shape[1]), *_strides(x, y), np.int32(cache)),
           shared_mem=shared)


def launch_10(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
              cache_elems: int | None = None) -> None:
    check_chunks(n_chunks, variant.name)
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    plan = plan_10(x.shape[0], x.shape[1], dtype, v, n_chunks)
    entry = _entry(variant.name, dtype, v)
    while True:  # a cluster that cannot be resident (shared memory, GPC size) would fail to launch
        cache = plan.cache_elems if cache_elems is None else min(plan.cache_elems, cache_elems // v * v)
        shared = cache * ITEMSIZE[dtype]
        if plan.n_chunks == 1 or max_active_clusters(entry, plan.threads, shared, plan.n_chunks, variant.file) > 0:
            break
        if n_chunks is not None:
            raise ValueError(f"a cluster of {n_chunks} blocks with {shared} B of shared memory each "
                             "cannot be resident on this GPU")
        plan = plan_10(x.shape[0], x.shape[1], dtype, v, plan.n_chunks // 2)
    launch = get_kernel(variant.path, entry)
    x_stride, y_stride = _strides(x, y)
    args = ((x.data.ptr, ctypes.c_void_p), (y.data.ptr, ctypes.c_void_p), (x.shape[1], ctypes.c_int),
            (int(x_stride), ctypes.c_longlong), (int(y_stride), ctypes.c_longlong),
            (plan.chunk_elems, ctypes.c_int), (cache, ctypes.c_int))
    cluster_launch(launch, (x.shape[0] * plan.n_chunks,), (plan.threads,), args, shared, plan.n_chunks)


def launch_12(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
              cache_elems: int | None = None, max_clusters: int | None = None) -> None:
    """Persistent clusters: as many as are resident at once (or `max_clusters`), each looping over rows.
    Rows that are not 16-byte aligned (or vec=1) go to softmax_10, which has the scalar builds."""
    check_chunks(n_chunks, variant.name)
    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    if v == 1:
        return launch_10(CLUSTER, x, y, vec=1, n_chunks=n_chunks, cache_elems=cache_elems)
    plan = plan_10(x.shape[0], x.shape[1], dtype, v, n_chunks)
    entry = _entry(variant.name, dtype, v)
    while True:
        cache = plan.cache_elems if cache_elems is None else min(plan.cache_elems, cache_elems // v * v)
        shared = cache * ITEMSIZE[dtype]
        resident = max_active_clusters(entry, plan.threads, shared, plan.n_chunks, variant.file)
        if resident > 0:
            break
        if n_chunks is not None or plan.n_chunks == 1:
            raise ValueError(f"a cluster of {plan.n_chunks} blocks with {shared} B of shared memory each "
                             "cannot be resident on this GPU")
        plan = plan_10(x.shape[0], x.shape[1], dtype, v, plan.n_chunks // 2)
    clusters = min(x.shape[0], resident if max_clusters is None else max(1, min(resident, max_clusters)))
    launch = get_kernel(variant.path, entry)
    x_stride, y_stride = _strides(x, y)
    args = ((x.data.ptr, ctypes.c_void_p), (y.data.ptr, ctypes.c_void_p), (x.shape[0], ctypes.c_int),
            (x.shape[1], ctypes.c_int), (int(x_stride), ctypes.c_longlong), (int(y_stride), ctypes.c_longlong),
            (plan.chunk_elems, ctypes.c_int), (cache, ctypes.c_int))
    cluster_launch(launch, (clusters * plan.n_chunks,), (plan.threads,), args, shared, plan.n_chunks)


def launch_11(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
              programmatic: bool = True) -> None:
    """Stats, then output as a programmatic dependent launch (cupy's ordinary launch when
    programmatic=False or without cuda-bindings; the kernels are correct either way)."""
    check_chunks(n_chunks, variant.name)
    import cupy

    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    plan = plan_11(x.shape[0], x.shape[1], dtype, v, n_chunks)
    stats = get_kernel(variant.path, _entry("softmax_11_split_stats", dtype, v))
    output = get_kernel(variant.path, _entry("softmax_11_split_output", dtype, v))
    partials = cupy.empty(2 * x.shape[0] * plan.n_chunks, dtype=cupy.float32)
    stats_launch, output_launch = launches_11(x.shape[0], plan)
    x_stride, y_stride = _strides(x, y)
    n_cols, n_chunks, chunk = np.int32(x.shape[1]), np.int32(plan.n_chunks), np.int32(plan.chunk_elems)
    stats(stats_launch.grid, stats_launch.block, (x, partials, n_cols, x_stride, n_chunks, chunk))
    if not programmatic or not has_driver_bindings():
        output(output_launch.grid, output_launch.block, (x, y, partials, n_cols, x_stride, y_stride, n_chunks, chunk))
        return
    args = ((x.data.ptr, ctypes.c_void_p), (y.data.ptr, ctypes.c_void_p), (partials.data.ptr, ctypes.c_void_p),
            (int(n_cols), ctypes.c_int), (int(x_stride), ctypes.c_longlong), (int(y_stride), ctypes.c_longlong),
            (int(n_chunks), ctypes.c_int), (int(chunk), ctypes.c_int))
    cluster_launch(output, output_launch.grid, output_launch.block, args, 0, 1, programmatic=True)


def launch_13(variant: Variant, x, y, vec: int | None = None, n_chunks: int | None = None,
              max_groups: int | None = None, prefetch: bool = True) -> None:
    """Cooperative launch of G groups of P blocks, G * P <= the blocks resident at once (or `max_groups`
    groups: tests use it to make each group loop over many rows). prefetch=False: the build without
    the second buffer (-DCOOPERATIVE_PREFETCH=0)."""
    check_chunks(n_chunks, variant.name)
    import cupy

    dtype = dtype_name(x.dtype)
    v = _vec_for(x, y, vec)
    entry = _entry(variant.name, dtype, v)
    defines = () if prefetch else ("COOPERATIVE_PREFETCH=0",)
    plan = plan_13(x.shape[0], x.shape[1], dtype, v, n_chunks, prefetch=prefetch)
    shared = coop_buffers(v, prefetch) * plan.chunk_elems * ITEMSIZE[dtype]
    resident = resident_blocks(entry, plan.threads, shared, variant.file, defines)
    if n_chunks is None and plan.n_chunks > resident:   # estimate too high for this GPU: bigger chunks
        plan = plan_13(x.shape[0], x.shape[1], dtype, v, max(1, resident // 2), prefetch=prefetch)
        shared = coop_buffers(v, prefetch) * plan.chunk_elems * ITEMSIZE[dtype]
        resident = resident_blocks(entry, plan.threads, shared, variant.file, defines)
    if plan.n_chunks > resident:
        raise ValueError(f"softmax_13_cooperative: {plan.n_chunks} blocks per row, but only {resident} blocks "
                         f"of {plan.threads} threads and {shared} B fit the GPU at once")
    groups = min(x.shape[0], resident // plan.n_chunks)
    if max_groups is not None:
        groups = max(1, min(groups, int(max_groups)))
    fn = get_kernel(variant.path, entry, defines)
    partials = cupy.empty(2 * x.shape[0] * plan.n_chunks, dtype=cupy.float32)
    # every slot empty: the bytes 0xff (grid_states.cuh), set on the launch's stream
    cupy.cuda.runtime.memsetAsync(partials.data.ptr, 0xFF, partials.nbytes, cupy.cuda.get_current_stream().ptr)
    x_stride, y_stride = _strides(x, y)
    args = ((x.data.ptr, ctypes.c_void_p), (y.data.ptr, ctypes.c_void_p), (partials.data.ptr, ctypes.c_void_p),
            (x.shape[0], ctypes.c_int), (x.shape[1], ctypes.c_int),
            (int(x_stride), ctypes.c_longlong), (int(y_stride), ctypes.c_longlong),
            (plan.n_chunks, ctypes.c_int), (plan.chunk_elems, ctypes.c_int))
    cluster_launch(fn, (groups * plan.n_chunks,), (plan.threads,), args, shared, 1, cooperative=True)


def launches_11(n_rows: int, plan: ChunkPlan) -> tuple[Launch, Launch]:
    """softmax_11's two launches: stats with block T; output with block max(T, C rounded up to a power of
    two, 32), so that every one of the row's C partial states has a thread in the merge."""
    grid = (n_rows * plan.n_chunks,)
    merge_threads = max(plan.threads, _pow2_at_least(plan.n_chunks), 32)
    return Launch(grid=grid, block=(plan.threads,)), Launch(grid=grid, block=(merge_threads,))


# ---- clusters: cuLaunchKernelEx through cuda-bindings ------------------------------------

class ClusterLaunchError(RuntimeError):
    """A cluster launch was refused (no cuda-bindings, no sm_90, or the driver said no)."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError as error:
            raise ClusterLaunchError("cluster launches need the cuda-bindings package") from error
    return driver


def has_driver_bindings() -> bool:
    try:
        _driver()
    except ClusterLaunchError:
        return False
    return True


def _check(result, what: str):
    driver = _driver()
    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        name = driver.cuGetErrorName(err)[1]
        raise ClusterLaunchError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return result[1:] if len(result) > 1 else None


def _function_handle(kernel):
    """The CUfunction of a cupy RawKernel (loaded on the current device)."""
    driver = _driver()
    return driver.CUfunction(int(kernel.kernel.ptr))


_configs: dict = {}
CACHE_LIMIT = 256   # prepared launch configurations / occupancy answers kept before a cache is cleared


def _remember(cache: dict, key, value):
    """cache[key] = value, clearing the cache first once it holds CACHE_LIMIT entries (streams, shapes and
    edited sources would otherwise grow it without bound)."""
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def cluster_launch(fn, grid, block, args, shared_bytes: int, cluster: int, cooperative: bool = False,
                   programmatic: bool = False) -> None:
    """Launch the cupy RawKernel `fn` on cupy's current stream with clusters of `cluster` blocks along x
    (cluster = 1: no cluster attribute), cooperatively if asked (every block resident at once, or an error),
    as a programmatic dependent launch if asked (launch_order.cuh: it may start before the previous kernel
    on the stream ends, and waits for it where the kernel says so).

    `args` is a sequence of (value, ctypes type) pairs in the kernel's parameter order.
    """
    import cupy

    driver = _driver()
    stream = cupy.cuda.get_current_stream().ptr
    key = (int(fn.kernel.ptr), tuple(grid), tuple(block), shared_bytes, cluster, cooperative, programmatic, stream)
    prepared = _configs.get(key)
    if prepared is None:
        function = _function_handle(fn)
        attribute = driver.CUfunction_attribute
        if cluster > 8:
            _check(driver.cuFuncSetAttribute(function, attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                             1), "allowing a non-portable cluster size")
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = (tuple(grid) + (1, 1))[:3]
        config.blockDimX, config.blockDimY, config.blockDimZ = (tuple(block) + (1, 1))[:3]
        config.sharedMemBytes = shared_bytes
        config.hStream = driver.CUstream(stream)
        attrs = []
        if cluster > 1:
            dims = driver.CUlaunchAttribute()
            dims.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            dims.value.clusterDim.x, dims.value.clusterDim.y, dims.value.clusterDim.z = cluster, 1, 1
            attrs.append(dims)
        if cooperative:
            together = driver.CUlaunchAttribute()
            together.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            together.value.cooperative = 1
            attrs.append(together)
        if programmatic:
            early = driver.CUlaunchAttribute()
            early.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            early.value.programmaticStreamSerializationAllowed = 1
            attrs.append(early)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        prepared = _remember(_configs, key, (function, config))
    function, config = prepared
    _set_shared(fn, shared_bytes)   # every launch: another shape may have been launched since
    values = tuple(value for value, _ in args)
    types = tuple(kind for _, kind in args)
    what = (f"cuLaunchKernelEx (cluster {cluster}{', cooperative' if cooperative else ''}"
            f"{', programmatic' if programmatic else ''})")
    _check(driver.cuLaunchKernelEx(config, function, (values, types), 0), what)


_occupancy: dict = {}
_source_keys: dict = {}


def _source_key(file) -> str:
    """loader.source_key of `file`, recomputed only when one of the files it is made of changed."""
    from onlinesoftmax.runtime.loader import REPO_ROOT, expand_source, source_key

    cached = _source_keys.get(str(file))
    if cached is not None:
        files, mtimes, key = cached
        if tuple((REPO_ROOT / f).stat().st_mtime_ns for f in files) == mtimes:
            return key
    _, files = expand_source(file)
    mtimes = tuple((REPO_ROOT / f).stat().st_mtime_ns for f in files)
    return _remember(_source_keys, str(file), (files, mtimes, source_key(file)))[2]


def _device_id() -> int:
    import cupy

    return cupy.cuda.Device().id


def max_active_clusters(entry: str, threads: int, shared_bytes: int, cluster: int,
                        file: str = "softmax/softmax_10_cluster.cu") -> int:
    """How many clusters of this shape fit on the current GPU at once (0: the launch would fail).

    Cached per device and per build of the source (an edited .cu or header is asked again)."""
    key = (_device_id(), _source_key(file), str(file), entry, threads, shared_bytes, cluster)
    count = _occupancy.get(key)
    if count is None:
        count = _remember(_occupancy, key, _max_active_clusters(entry, threads, shared_bytes, cluster, file))
    return count


def resident_blocks(entry: str, threads: int, shared_bytes: int, file: str, defines=()) -> int:
    """Blocks of this shape resident on the current GPU at once (occupancy per SM x SMs), cached like
    max_active_clusters."""
    key = (_device_id(), _source_key(file), str(file), entry, tuple(defines), threads, shared_bytes, "blocks")
    count = _occupancy.get(key)
    if count is None:
        import cupy

        driver = _driver()
        kernel = get_kernel(file, entry, defines)
        _set_shared(kernel, shared_bytes)
        function = _function_handle(kernel)
        (per_sm,) = _check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, threads, shared_bytes),
                           "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        count = _remember(_occupancy, key, int(per_sm) * cupy.cuda.Device().attributes["MultiProcessorCount"])
    return count


def _max_active_clusters(entry: str, threads: int, shared_bytes: int, cluster: int, file: str) -> int:
    import cupy

    driver = _driver()
    function_kernel = get_kernel(file, entry)
    function = _function_handle(function_kernel)
    attribute = driver.CUfunction_attribute
    _set_shared(function_kernel, shared_bytes)
    if cluster > 8:
        _check(driver.cuFuncSetAttribute(function, attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
               "allowing a non-portable cluster size")
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = cluster, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
    config.sharedMemBytes = shared_bytes
    config.hStream = driver.CUstream(cupy.cuda.get_current_stream().ptr)
    dims = driver.CUlaunchAttribute()
    dims.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    dims.value.clusterDim.x, dims.value.clusterDim.y, dims.value.clusterDim.z = cluster, 1, 1
    config.attrs = [dims]
    config.numAttrs = 1
    (count,) = _check(driver.cuOccupancyMaxActiveClusters(function, config), "cuOccupancyMaxActiveClusters")
    return int(count)


_cluster_probe: dict = {}


def cluster_launch_works() -> bool:
    """Launch the probe kernel with clusters of 2, 8 and 16 and check the ranks it reports (cached)."""
    if "ok" in _cluster_probe:
        return _cluster_probe["ok"]
    from onlinesoftmax.runtime import device

    ok, why = False, "no GPU"
    if device.has_gpu():
        import cupy

        try:
            if int(cupy.cuda.Device().compute_capability) < 90:
                raise ClusterLaunchError("clusters need compute capability 9.0")
            probe = get_kernel(FAST_FILES["softmax_10_cluster"], "softmax_10_cluster_probe")
            for cluster in (2, 8, 16):
                out = cupy.full(2 * 2 * cluster, -1, dtype=cupy.int32)
                cluster_launch(probe, (2 * cluster,), (64,), ((out.data.ptr, ctypes.c_void_p),), 0, cluster)
                got = out.get().reshape(-1, 2)
                expect = np.stack([np.tile(np.arange(cluster), 2), np.full(2 * cluster, cluster)], axis=1)
                if not (got == expect).all():
                    raise ClusterLaunchError(f"cluster {cluster}: probe saw {got.tolist()}")
            ok, why = True, "cuLaunchKernelEx with a cluster dimension works"
        except Exception as error:  # any refusal means: use the split fallback
            ok, why = False, f"{type(error).__name__}: {error}"
    _cluster_probe.update(ok=ok, why=why)
    return ok


def cluster_status() -> str:
    cluster_launch_works()
    return _cluster_probe["why"]


# ---- NumPy models ------------------------------------------------------------------------

def as_float32(x) -> np.ndarray:
    """Storage -> fp32 (exact for fp16 and bf16)."""
    return np.asarray(x).astype(F32)


def to_storage(y32: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes

        return y32.astype(ml_dtypes.bfloat16)
    return y32.astype(dtype)


def exp_sub(v: np.ndarray, m: np.ndarray, folded: bool) -> np.ndarray:
    """The kernels' e^(v - m): 2^((v - m) log2e) in fp32, or 2^(fma(v, log2e, -m log2e)) (folded)."""
    with np.errstate(all="ignore"):
        if folded:
            m_log2e = (m.astype(F32) * LOG2E).astype(F32)
            t = (v.astype(np.float64) * np.float64(LOG2E) - m_log2e.astype(np.float64)).astype(F32)
        else:
            t = ((v - m).astype(F32) * LOG2E).astype(F32)
        return np.exp2(t).astype(F32)


def online_base(m):
    return np.where(m == -np.inf, F32(0), m).astype(F32)


def combine(a, b):
    with np.errstate(all="ignore"):
        return sim.online_combine(a, b, guards=True)


def registers_model(x, dtype: str, vec: int, nv: int, lanes: int, reduce) -> np.ndarray:
    """softmax_07 / softmax_08: lane t of `lanes` holds vectors k lanes + t; one exp per element."""
    x32 = as_float32(x)
    n_rows, n_cols = x32.shape
    folded = ITEMSIZE[dtype] == 2
    k, t, j = np.meshgrid(np.arange(nv), np.arange(lanes), np.arange(vec), indexing="ij")
    cols = ((k * lanes + t) * vec + j).transpose(1, 0, 2).reshape(lanes, nv * vec)   # (lanes, E)
    valid = cols < n_cols
    v = np.full((n_rows, lanes, nv * vec), -np.inf, dtype=F32)
    v[:, valid] = x32[:, cols[valid]]
    with np.errstate(all="ignore"):
        m = np.fmax.reduce(v, axis=2, initial=-np.inf).astype(F32)
        e = exp_sub(v, online_base(m)[..., None], folded)
        l = e.sum(axis=2, dtype=F32)
        row_m, row_l = reduce((m, l))
        rebase = np.where(m == -np.inf, F32(0), np.exp2(((m - row_m[:, None]) * LOG2E).astype(F32)))
        scale = (rebase * (F32(1) / row_l)[:, None]).astype(F32)
        y = (e * scale[..., None]).astype(F32)
    out = np.empty((n_rows, n_cols), dtype=F32)
    out[:, cols[valid]] = y[:, valid]
    return to_storage(out, dtype)


def group_butterfly(state, width: int):
    """xor butterfly over offsets below `width` (arrays (rows, lanes)); lane 0's result per row."""
    lanes = np.arange(state[0].shape[1])
    for offset in (o for o in (16, 8, 4, 2, 1) if o < width):
        partner = tuple(s[:, lanes ^ offset] for s in state)
        state = combine(state, partner)
    return state[0][:, 0], state[1][:, 0]


def simulate_07(x, vec: int | None = None) -> np.ndarray:
    dtype = dtype_name(np.asarray(x).dtype)
    v = vec or vector_width(dtype)
    if v > 1 and x.shape[1] % v:
        v = 1
    nv, g = config_07(x.shape[1], dtype, v)
    return registers_model(x, dtype, v, nv, g, lambda s: group_butterfly(s, g))


def simulate_08(x, vec: int | None = None) -> np.ndarray:
    dtype = dtype_name(np.asarray(x).dtype)
    v = vec or vector_width(dtype)
    if v > 1 and x.shape[1] % v:
        v = 1
    nv, t = config_08(x.shape[1], dtype, v)
    return registers_model(x, dtype, v, nv, t,
                           lambda s: sim.block_reduce(s, combine, (F32(-np.inf), F32(0))))


def chunk_states(x32: np.ndarray, threads: int, vec: int, folded: bool):
    """row_chunk.cuh's chunk_state for every chunk row of x32 (rows, chunk): per-thread (m, l)."""
    n_rows, length = x32.shape
    n_vec = length // vec
    m = np.full((n_rows, threads), -np.inf, dtype=F32)
    l = np.zeros((n_rows, threads), dtype=F32)
    t = np.arange(threads)
    with np.errstate(all="ignore"):
        for first in range(0, n_vec, CHUNK_UNROLL * threads):
            idx = first + t[:, None] + np.arange(CHUNK_UNROLL)[None, :] * threads      # (T, U)
            ok = idx < n_vec
            cols = idx[..., None] * vec + np.arange(vec)                              # (T, U, V)
            vals = np.full((n_rows, threads, CHUNK_UNROLL, vec), -np.inf, dtype=F32)
            vals[:, ok] = x32[:, cols[ok]]
            vals = vals.reshape(n_rows, threads, -1)
            batch_max = np.fmax.reduce(vals, axis=2, initial=-np.inf).astype(F32)
            m_new = np.fmax(m, batch_max)
            base = online_base(m_new)
            l = (l * np.exp2(((m - base) * LOG2E).astype(F32))).astype(F32) + \
                exp_sub(vals, base[..., None], folded).sum(axis=2, dtype=F32)
            l = l.astype(F32)
            m = m_new
    return m, l


def chunk_output(x32: np.ndarray, row_m: np.ndarray, row_l: np.ndarray, folded: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (exp_sub(x32, row_m[:, None], folded) * (F32(1) / row_l)[:, None]).astype(F32)


def split_rows(x32: np.ndarray, n_chunks: int, chunk: int) -> np.ndarray:
    """(rows, N) -> (rows * n_chunks, chunk), padded with -inf past N (never read by the kernels)."""
    n_rows, n_cols = x32.shape
    padded = np.full((n_rows, n_chunks * chunk), -np.inf, dtype=F32)
    padded[:, :n_cols] = x32
    return padded.reshape(n_rows * n_chunks, chunk)


def chunked_model(x, plan: ChunkPlan, vec: int, merge: str) -> np.ndarray:
    """softmax_09 / 10 / 11 / 13: per-chunk block states, then the row's merge ("cluster", "block" or "fold")."""
    dtype = dtype_name(np.asarray(x).dtype)
    x32 = as_float32(x)
    n_rows, n_cols = x32.shape
    folded = ITEMSIZE[dtype] == 2
    chunks = split_rows(x32, plan.n_chunks, plan.chunk_elems)
    # a chunk's length is what lies inside the row; padding is -inf, which the kernels treat alike
    m, l = chunk_states(chunks, plan.threads, vec, folded)
    block = sim.block_reduce((m, l), combine, (F32(-np.inf), F32(0)))
    states = tuple(s.reshape(n_rows, plan.n_chunks) for s in block)
    if plan.n_chunks == 1:
        row_m, row_l = states[0][:, 0], states[1][:, 0]
    elif merge == "cluster":
        pad = tuple(np.concatenate([s, np.full((n_rows, 32 - plan.n_chunks), ident, F32)], axis=1)
                    for s, ident in zip(states, (-np.inf, 0)))
        row_m, row_l = group_butterfly(pad, plan.n_chunks)
    elif merge == "fold":   # softmax_13: thread t folds states t, t + T, ..., then the block reduction
        threads = plan.threads
        width = -(-plan.n_chunks // threads) * threads
        pad = tuple(np.concatenate([s, np.full((n_rows, width - plan.n_chunks), ident, F32)], axis=1)
                    for s, ident in zip(states, (-np.inf, 0)))
        folded_m = np.full((n_rows, threads), -np.inf, F32)
        folded_l = np.zeros((n_rows, threads), F32)
        for k in range(0, width, threads):
            folded_m, folded_l = combine((folded_m, folded_l), (pad[0][:, k:k + threads], pad[1][:, k:k + threads]))
        row_m, row_l = sim.block_reduce((folded_m, folded_l), combine, (F32(-np.inf), F32(0)))
    else:
        merge_threads = max(plan.threads, _pow2_at_least(plan.n_chunks), 32)
        pad = tuple(np.concatenate([s, np.full((n_rows, merge_threads - plan.n_chunks), ident, F32)], axis=1)
                    for s, ident in zip(states, (-np.inf, 0)))
        row_m, row_l = sim.block_reduce(pad, combine, (F32(-np.inf), F32(0)))
    y = chunk_output(x32, row_m.astype(F32), row_l.astype(F32), folded)
    return to_storage(y, dtype)


def _model_vec(x, vec):
    dtype = dtype_name(np.asarray(x).dtype)
    v = vec or vector_width(dtype)
    return dtype, (1 if v > 1 and x.shape[1] % v else v)


def simulate_09(x, vec: int | None = None, cache_elems: int | None = None) -> np.ndarray:
    dtype, v = _model_vec(x, vec)
    return chunked_model(x, plan_09(x.shape[1], dtype, v), v, "block")


def simulate_10(x, vec: int | None = None, n_chunks: int | None = None, cache_elems: int | None = None) -> np.ndarray:
    dtype, v = _model_vec(x, vec)
    return chunked_model(x, plan_10(x.shape[0], x.shape[1], dtype, v, n_chunks), v, "cluster")


def simulate_12(x, vec: int | None = None, n_chunks: int | None = None, cache_elems: int | None = None,
                max_clusters: int | None = None) -> np.ndarray:
    """softmax_12 partitions and reduces a row exactly as softmax_10 (persistence changes only the order of rows)."""
    return simulate_10(x, vec=vec, n_chunks=n_chunks, cache_elems=cache_elems)


def simulate_11(x, vec: int | None = None, n_chunks: int | None = None, programmatic: bool = True) -> np.ndarray:
    dtype, v = _model_vec(x, vec)
    return chunked_model(x, plan_11(x.shape[0], x.shape[1], dtype, v, n_chunks), v, "block")


def simulate_13(x, vec: int | None = None, n_chunks: int | None = None, max_groups: int | None = None,
                prefetch: bool = True) -> np.ndarray:
    """softmax_13: softmax_10's chunk states, merged as thread t folding states t, t + T, ... then the
    block reduction (the number of groups and the prefetch change only when a row is loaded, not its sums)."""
    dtype, v = _model_vec(x, vec)
    return chunked_model(x, plan_13(x.shape[0], x.shape[1], dtype, v, n_chunks, prefetch=prefetch), v, "fold")


# ---- geometry (fp32, aligned rows) for the registry ---------------------------------------

def geometry_07(n_rows: int, n_cols: int) -> Launch:
    nv, g = config_07(n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return Launch(grid=(-(-n_rows // (WARP_ROWS_BLOCK // g)),), block=(WARP_ROWS_BLOCK,))


def geometry_08(n_rows: int, n_cols: int) -> Launch:
    nv, t = config_08(n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return Launch(grid=(n_rows,), block=(t,), shared_bytes=0)


def geometry_09(n_rows: int, n_cols: int) -> Launch:
    plan = plan_09(n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return Launch(grid=(n_rows,), block=(plan.threads,), shared_bytes=plan.cache_elems * 4)


def geometry_10(n_rows: int, n_cols: int) -> Launch:
    plan = plan_10(n_rows, n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return Launch(grid=(n_rows * plan.n_chunks,), block=(plan.threads,), shared_bytes=plan.cache_elems * 4)


def geometry_12(n_rows: int, n_cols: int) -> Launch:
    """Per cluster launched; the grid is capped at the clusters resident at once (known on the GPU only)."""
    plan = plan_10(n_rows, n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return Launch(grid=(n_rows * plan.n_chunks,), block=(plan.threads,), shared_bytes=plan.cache_elems * 4)


def geometry_11(n_rows: int, n_cols: int) -> Launch:
    """The output (merge) launch, the larger block; the stats launch has the same grid and block (T,)
    (`launches_11` gives both)."""
    plan = plan_11(n_rows, n_cols, "float32", 4 if n_cols % 4 == 0 else 1)
    return launches_11(n_rows, plan)[1]


def geometry_13(n_rows: int, n_cols: int) -> Launch:
    """Blocks per row and block shape; the grid is G * P with G capped by residency (known on the GPU only)."""
    vec = 4 if n_cols % 4 == 0 else 1
    plan = plan_13(n_rows, n_cols, "float32", vec)
    return Launch(grid=(n_rows * plan.n_chunks,), block=(plan.threads,),
                  shared_bytes=coop_buffers(vec) * plan.cache_elems * 4)


def _per_call(launch):
    """Transitional: a plan whose runner re-does the launcher's work on every call."""
    def plan(variant, x, y, **options):
        return lambda x, y, **_: launch(variant, x, y, **options)
    return plan


def _launched(variant: Variant) -> list[str]:
    return entry_names(variant)


FAST_FILES = {
    "softmax_07_warp_per_row": "softmax/softmax_07_warp_per_row.cu",
    "softmax_08_registers": "softmax/softmax_08_registers.cu",
    "softmax_09_shared": "softmax/softmax_09_shared.cu",
    "softmax_10_cluster": "softmax/softmax_10_cluster.cu",
    "softmax_11_split": "softmax/softmax_11_split.cu",
    "softmax_12_pipelined": "softmax/softmax_12_pipelined.cu",
    "softmax_13_cooperative": "softmax/softmax_13_cooperative.cu",
}

WARP_PER_ROW = register(Variant(
    name="softmax_07_warp_per_row", family="softmax", file=FAST_FILES["softmax_07_warp_per_row"],
    short="warp_per_row", entry="softmax_07_warp_per_row_f32_v4_n8_g32",
    story="short rows: a group of 1-32 lanes per row, the row in registers, read once",
    geometry=geometry_07, simulate=simulate_07, plan=_per_call(launch_07), reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entries=_launched, max_cols=MAX_COLS_07))

REGISTERS = register(Variant(
    name="softmax_08_registers", family="softmax", file=FAST_FILES["softmax_08_registers"],
    short="registers", entry="softmax_08_registers_f32_v4_n8_t1024",
    story="a block per row, the row cached in registers: one read, one exp per element",
    geometry=geometry_08, simulate=simulate_08, plan=_per_call(launch_08), reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entries=_launched, max_cols=MAX_COLS_08))

SHARED = register(Variant(
    name="softmax_09_shared", family="softmax", file=FAST_FILES["softmax_09_shared"],
    short="shared", entry="softmax_09_shared_f32_v4",
    story="a block per row, the row cached in up to 227 KB of shared memory",
    geometry=geometry_09, simulate=simulate_09, plan=_per_call(launch_09), reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entries=_launched))

CLUSTER = register(Variant(
    name="softmax_10_cluster", family="softmax", file=FAST_FILES["softmax_10_cluster"],
    short="cluster", entry="softmax_10_cluster_f32_v4",
    story="a thread-block cluster per row: chunks in shared memory, (m, l) through DSMEM",
    geometry=geometry_10, simulate=simulate_10, plan=_per_call(launch_10), reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entries=_launched))

SPLIT = register(Variant(
    name="softmax_11_split", family="softmax", file=FAST_FILES["softmax_11_split"],
    short="split", entry="softmax_11_split_stats_f32_v4",
    story="the row split over many blocks without clusters: partial states, then a merge launch",
    geometry=geometry_11, simulate=simulate_11, plan=_per_call(launch_11), reads_per_element=2,
    writes_per_element=1, dtypes=DTYPES, entries=_launched))

PIPELINED = register(Variant(
    name="softmax_12_pipelined", family="softmax", file=FAST_FILES["softmax_12_pipelined"],
    short="pipelined", entry="softmax_12_pipelined_f32_v4",
    story="persistent clusters: the next row's cp.async loads overlap this row's reduction and stores",
    geometry=geometry_12, simulate=simulate_12, plan=_per_call(launch_12), reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entries=_launched))

COOPERATIVE = register(Variant(
    name="softmax_13_cooperative", family="softmax", file=FAST_FILES["softmax_13_cooperative"],
    short="cooperative", entry="softmax_13_cooperative_f32_v4",
    story="any number of blocks per row on a cooperative grid: chunks in shared memory, (m, l) met in global memory",
    geometry=geometry_13, simulate=simulate_13, plan=_per_call(launch_13), reads_per_element=1,
    writes_per_element=1, dtypes=DTYPES, entries=_launched))

FAST_VARIANTS = (WARP_PER_ROW, REGISTERS, SHARED, CLUSTER, SPLIT, PIPELINED)
# Measured and not adopted (suite softmax-fast-cooperative; chapter 06): outside the dispatcher,
# the softmax-fast benchmark and the chapter's ladder, still tested and sanitized.
ATTEMPT_VARIANTS = (COOPERATIVE,)


# ---- the dispatcher ----------------------------------------------------------------------

@dataclass(frozen=True)
class Choice:
    variant: Variant
    reason: str


def choose(n_rows: int, n_cols: int, dtype="float32", clusters: bool | None = None,
           sms: int = SMS_H200) -> Choice:
    """The fast kernel for a shape: the rule behind softmax(x, variant="fast").

    `clusters` None: ask the GPU whether a cluster launch works (no GPU: assume the H200).
    """
    dtype = dtype_name(dtype)
    if n_rows < 1 or n_cols < 1:
        raise ValueError(f"expected a non-empty shape, got ({n_rows}, {n_cols})")
    if clusters is None:
        from onlinesoftmax.runtime import device

        clusters = cluster_launch_works() if device.has_gpu() else True
    row_bytes = n_cols * ITEMSIZE[dtype]
    few_rows = n_rows < sms
    # Thresholds from the H200 measurements of softmax-fast (data/h200/*-softmax-fast.json).
    if n_cols <= MAX_COLS_07:
        return Choice(WARP_PER_ROW, "N <= 1024: a lane group per row, the row in registers")
    if n_cols <= 8192 or (few_rows and n_cols <= 16384):
        return Choice(REGISTERS, "N <= 8K (or 16K with few rows): a block per row, the row in registers")
    if not few_rows and row_bytes <= SHARED_TWO_BLOCKS_BYTES:
        return Choice(SHARED, "many rows of <= 112 KB: a block per row cached in shared memory, two blocks per SM")
    small_input = n_rows * row_bytes <= 24 * 2**20
    if few_rows and n_rows * MAX_CLUSTER < sms and small_input and row_bytes >= 512 * 1024:
        return Choice(SPLIT, "a few long rows that fit L2: split over every SM, partials merged in a second launch")
    # softmax_12 where it measured ahead of softmax_10 / 11 (suite softmax-fast-cooperative): many fp32 rows
    # of >= 1M; thousands of 16-bit rows of 64K (up to 256 KB: below, 09 wins; at 512 KB they tie).
    if clusters and not few_rows and dtype == "float32" and row_bytes > MAX_CLUSTER * SHARED_TWO_BLOCKS_BYTES:
        return Choice(PIPELINED, "many fp32 rows too long for a cluster's shared memory: persistent clusters, "
                                 "the next row's loads in flight during this row's stores")
    if clusters and n_rows >= PIPELINED_MIN_ROWS and ITEMSIZE[dtype] == 2 and row_bytes <= 256 * 1024:
        return Choice(PIPELINED, "thousands of 16-bit rows of 64-256 KB: persistent clusters")
    if not few_rows and row_bytes > MAX_CLUSTER * SHARED_TWO_BLOCKS_BYTES:
        return Choice(SPLIT, "many rows too long for a 16-block cluster at two blocks per SM: split, second read from L2")
    if clusters:
        return Choice(CLUSTER, "long rows or few rows: a cluster of blocks per row")
    if not few_rows:
        return Choice(SHARED, "no clusters, many rows: a block per row cached in shared memory")
    return Choice(SPLIT, "no clusters, few rows: partial states and a merge launch")


def softmax_fast(x, out=None):
    """softmax(x, variant="fast"): validate, choose by (rows, N, dtype), run (model on numpy input)."""
    from onlinesoftmax.api import check_input, run

    if not hasattr(x, "ndim") or not hasattr(x, "dtype"):
        raise TypeError(f"expected a numpy or cupy ndarray, got {type(x).__module__}.{type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array (rows x N), got shape {x.shape}")
    x, _ = check_input(x, CLUSTER)  # dtype / emptiness / device checks (every fast variant takes the same dtypes)
    choice = choose(x.shape[0], x.shape[1], x.dtype)
    return run(choice.variant, x, out=out)


# ---- resources ---------------------------------------------------------------------------

def resources_table(variant: Variant) -> dict:
    """{entry: ResourceReport} for every build in the variant's file: the device's view on a GPU,
    nvcc's (sm_90a) without one; {} when neither is available."""
    from onlinesoftmax.runtime import device
    from onlinesoftmax.runtime.loader import resources_from_device

    if device.has_gpu():
        return {name: resources_from_device(get_kernel(variant.path, name)) for name in _nvcc_entry_names(variant)}
    if not nvcc_available():
        return {}
    return dict(ptxas_reports(variant.path))


def _nvcc_entry_names(variant: Variant) -> list[str]:
    """Entry names from the instantiation macros (no nvcc needed)."""
    names = []
    for dtype in DTYPES:
        vecs = (vector_width(dtype),) if variant is PIPELINED else (vector_width(dtype), 1)
        for v in vecs:
            key = dtype if v > 1 else "scalar"
            if variant is WARP_PER_ROW:
                names += [_entry(variant.name, dtype, v, f"_n{nv}_g{g}") for nv, g in CONFIGS_07[key]]
            elif variant is REGISTERS:
                names += [_entry(variant.name, dtype, v, f"_n{nv}_t{t}") for nv, t in CONFIGS_08[key]]
            elif variant is SPLIT:
                names += [_entry("softmax_11_split_stats", dtype, v), _entry("softmax_11_split_output", dtype, v)]
            else:
                names.append(_entry(variant.name, dtype, v))
    return names


entry_names = _nvcc_entry_names
