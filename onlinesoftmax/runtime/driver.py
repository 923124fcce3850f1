"""Driver calls cupy does not make: launches with a cluster dimension, cooperative launches and
programmatic dependent launches (cuLaunchKernelEx through cuda-bindings), occupancy questions,
and the dynamic shared-memory limit of a kernel.

Everything here is asked once and remembered: `prepare_launch` returns a function that only
packs the arguments and calls cuLaunchKernelEx; occupancy answers are cached per device and
kernel build until `reload()`.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from onlinesoftmax.runtime import loader
from onlinesoftmax.runtime.cache import Cache


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


def check(result, what: str):
    """The values of a cuda-bindings call, or ClusterLaunchError naming the call and the error."""
    driver = _driver()
    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        name = driver.cuGetErrorName(err)[1]
        raise ClusterLaunchError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return result[1:] if len(result) > 1 else None


def function_handle(kernel):
    """The CUfunction of a cupy RawKernel (loaded on the current device)."""
    return _driver().CUfunction(int(kernel.kernel.ptr))


def raise_shared_limit(kernel, shared_bytes: int) -> None:
    """Raise the kernel's dynamic shared-memory limit to `shared_bytes` if it is lower; never lower it.

    The limit belongs to the function (the CUfunction that cuLaunchKernelEx launches too), not to a
    launch shape: setting it to each shape's size would let a smaller shape lower it under a larger
    shape whose plan is cached (that launch then fails with CUDA_ERROR_INVALID_VALUE; seen on the
    H200). Plans call this when they are built; the limit only grows, so every cached plan stays valid.
    The comparison is with the function's own limit, never with 48 KiB: a kernel's default limit is 48 KiB
    less its static shared memory, so 48 KiB of dynamic memory beside 4 KiB of static arrays needs the
    raise too (softmax_topk_06's merge at N = 4096, k = 1024 failed so on the H200)."""
    if kernel.max_dynamic_shared_size_bytes < shared_bytes:
        kernel.max_dynamic_shared_size_bytes = shared_bytes


def _allow_big_clusters(function, cluster: int) -> None:
    if cluster > 8:
        driver = _driver()
        check(driver.cuFuncSetAttribute(function,
                                        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                        1), "allowing a non-portable cluster size")


_NUMPY_OF = {ctypes.c_void_p: np.uint64, ctypes.c_int: np.int32, ctypes.c_uint: np.uint32,
             ctypes.c_longlong: np.int64, ctypes.c_float: np.float32}


def prepare_launch(fn, grid, block, shared_bytes: int, cluster: int, arg_types, *, fixed=None,
                   cooperative: bool = False, programmatic: bool = False, stream=None):
    """A function launch(*values) that launches the cupy RawKernel `fn` through the driver.

    `arg_types` are the ctypes of the kernel's parameters, in order; `fixed` maps a parameter's
    index to its value for the parameters that are the same on every call (sizes, strides): they
    are packed once, here, with the grid, block, shared memory and stream (the current one, or
    `stream`), and launch(*values) takes only the others (the addresses), in order. Clusters of
    `cluster` blocks along x (1: no cluster attribute); cooperatively if asked (every block
    resident at once, or an error); as a programmatic dependent launch if asked (it may start
    before the previous kernel on the stream ends and waits where the kernel says so:
    launch_order.cuh).

    Why not cupy's launch: a cupy RawKernel call converts every argument on every call (about
    0.5 us each); here a call writes the changing values into the packed buffer and makes one
    cuLaunchKernel(Ex) call through cuda-bindings. The buffer belongs to the launch, so a lock
    makes writing it and launching one step: two threads calling the same launch never send each
    other's addresses. A thread that has not used CUDA yet has no current context, and the driver
    refuses its launch (CUDA_ERROR_INVALID_CONTEXT): the launch then makes the device's primary
    context current for that thread (as CuPy and torch use it) and launches again. Without
    cuda-bindings a launch without attributes falls back to cupy's call."""
    import cupy

    fixed = dict(fixed or {})
    types = tuple(arg_types)
    grid3, block3 = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
    stream_ptr = cupy.cuda.get_current_stream().ptr if stream is None else int(stream)
    special = cluster > 1 or cooperative or programmatic
    if not has_driver_bindings():
        if special or any(issubclass(t, ctypes.Array) for t in types):
            raise ClusterLaunchError("cluster, cooperative and programmatic launches, and structs passed by value, "
                                     "need the cuda-bindings package")
        raise_shared_limit(fn, shared_bytes)
        return _cupy_launch(fn, grid3, block3, shared_bytes, types, fixed)
    device_id = cupy.cuda.runtime.getDevice()
    driver = _driver()
    function = function_handle(fn)
    _allow_big_clusters(function, cluster)
    raise_shared_limit(fn, shared_bytes)
    holders = [kind() for kind in types]
    for index, value in fixed.items():
        holders[index].value = float(value) if types[index] is ctypes.c_float else int(value)
    params = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.addressof(h) for h in holders])
    address = ctypes.addressof(params)
    free = [holders[i] for i in range(len(holders)) if i not in fixed]
    success = driver.CUresult.CUDA_SUCCESS
    what = (f"{'cuLaunchKernelEx' if special else 'cuLaunchKernel'} of {getattr(fn, 'name', fn)} (cluster {cluster}"
            f"{', cooperative' if cooperative else ''}{', programmatic' if programmatic else ''})")
    if special:
        config = _launch_config(driver, grid3, block3, shared_bytes, stream_ptr, cluster, cooperative, programmatic)
        launch_call, call_args = driver.cuLaunchKernelEx, (config, function, address, 0)
    else:
        launch_call = driver.cuLaunchKernel
        call_args = (function, *grid3, *block3, shared_bytes, driver.CUstream(stream_ptr), address, 0)

    lock = threading.Lock()

    def failed(result) -> None:   # a thread without a current context: make it current, launch again
        if result[0] == driver.CUresult.CUDA_ERROR_INVALID_CONTEXT and make_context_current(device_id):
            result = launch_call(*call_args)
        if result[0] != success:
            check(result, what)

    if len(free) == 2:   # x and y: the launch of nearly every kernel, written out (no loop, no inner call)
        first, second = free

        def launch(x_address, y_address) -> None:
            with lock:
                first.value, second.value = x_address, y_address
                result = launch_call(*call_args)
                if result[0] != success:
                    failed(result)
    else:
        def launch(*values) -> None:
            with lock:
                for holder, value in zip(free, values):
                    if isinstance(holder, ctypes.Array):   # a struct by value (a tensor map): its bytes
                        ctypes.memmove(holder, value, len(holder))
                    else:
                        holder.value = value
                result = launch_call(*call_args)
                if result[0] != success:
                    failed(result)
    launch.keep = (holders, params)   # the packed buffer lives as long as the launch
    return launch


def make_context_current(device_id: int) -> bool:
    """Make the device's primary context (the one CuPy and torch use) current on this thread; True if
    there was none and now there is."""
    driver = _driver()
    (context,) = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if context is not None and int(context) != 0:
        return False
    import cupy

    cupy.cuda.runtime.setDevice(device_id)   # CUDA 12+: sets the primary context current on this thread
    (context,) = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if context is None or int(context) == 0:
        (device,) = check(driver.cuDeviceGet(device_id), "cuDeviceGet")
        (context,) = check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return True


def _launch_config(driver, grid3, block3, shared_bytes, stream_ptr, cluster, cooperative, programmatic):
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid3
    config.blockDimX, config.blockDimY, config.blockDimZ = block3
    config.sharedMemBytes = shared_bytes
    config.hStream = driver.CUstream(stream_ptr)
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
    return config


def _cupy_launch(fn, grid3, block3, shared_bytes, types, fixed):
    """The same launch through cupy's RawKernel call (no cuda-bindings): addresses as 64-bit integers."""
    values = [None if i not in fixed else _NUMPY_OF[t](fixed[i]) for i, t in enumerate(types)]
    free = [i for i in range(len(types)) if i not in fixed]

    def launch(*given) -> None:
        arguments = list(values)     # this call's own list: concurrent callers never share it
        for index, value in zip(free, given):
            arguments[index] = _NUMPY_OF[types[index]](value or 0)
        fn(grid3, block3, tuple(arguments), shared_mem=shared_bytes)   # on the current stream, as planned
    return launch


# ---- occupancy, asked once per device and kernel build ----------------------------------------

_occupancy = Cache("occupancy", 4096, about="resident blocks or clusters per (kernel, block, shared memory)")


def _device_id() -> int:
    import cupy

    return cupy.cuda.Device().id


def max_active_clusters(file: str, entry: str, threads: int, shared_bytes: int, cluster: int, defines=()) -> int:
    """How many clusters of this shape fit on the current GPU at once (0: the launch would fail).
    Asked once per device and kernel build (until `reload()`)."""
    key = (_device_id(), str(file), entry, tuple(defines), threads, shared_bytes, cluster, "clusters")
    count = _occupancy.get(key)
    if count is None:
        count = _occupancy[key] = _ask_max_active_clusters(file, entry, threads, shared_bytes, cluster, defines)
    return count


def _ask_max_active_clusters(file, entry, threads, shared_bytes, cluster, defines) -> int:
    import cupy

    driver = _driver()
    kernel = loader.get_kernel(file, entry, defines)
    function = function_handle(kernel)
    raise_shared_limit(kernel, shared_bytes)
    _allow_big_clusters(function, cluster)
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
    (count,) = check(driver.cuOccupancyMaxActiveClusters(function, config), "cuOccupancyMaxActiveClusters")
    return int(count)


def resident_blocks(file: str, entry: str, threads: int, shared_bytes: int, defines=()) -> int:
    """Blocks of this shape resident on the current GPU at once (occupancy per SM x SMs)."""
    key = (_device_id(), str(file), entry, tuple(defines), threads, shared_bytes, "blocks")
    count = _occupancy.get(key)
    if count is None:
        import cupy

        driver = _driver()
        kernel = loader.get_kernel(file, entry, defines)
        raise_shared_limit(kernel, shared_bytes)
        (per_sm,) = check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function_handle(kernel), threads,
                                                                             shared_bytes),
                          "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        count = _occupancy[key] = int(per_sm) * cupy.cuda.Device().attributes["MultiProcessorCount"]
    return count


# ---- does a cluster launch work here? ---------------------------------------------------------

_cluster_probe = Cache("cluster probe", 64, about="whether a cluster launch works, per device")


def cluster_launch_works(probe_file: str = "softmax/softmax_10_cluster.cu",
                         probe_entry: str = "softmax_10_cluster_probe") -> bool:
    """Launch the probe kernel with clusters of 2, 8 and 16 and check the ranks it reports (cached per device)."""
    from onlinesoftmax.runtime import device

    key = device.current_device_id()
    if key in _cluster_probe:
        return _cluster_probe[key][0]
    ok, why = False, "no GPU"
    if device.has_gpu():
        import cupy

        try:
            if device.compute_capability() < 90:
                raise ClusterLaunchError("clusters need compute capability 9.0")
            probe = loader.get_kernel(probe_file, probe_entry)
            for cluster in (2, 8, 16):
                out = cupy.full(2 * 2 * cluster, -1, dtype=cupy.int32)
                prepare_launch(probe, (2 * cluster,), (64,), 0, cluster, (ctypes.c_void_p,))(out.data.ptr)
                got = out.get().reshape(-1, 2)
                expect = np.stack([np.tile(np.arange(cluster), 2), np.full(2 * cluster, cluster)], axis=1)
                if not (got == expect).all():
                    raise ClusterLaunchError(f"cluster {cluster}: probe saw {got.tolist()}")
            ok, why = True, "cuLaunchKernelEx with a cluster dimension works"
        except Exception as error:  # any refusal means: use the kernels without clusters
            ok, why = False, f"{type(error).__name__}: {error}"
    _cluster_probe[key] = (ok, why)
    return ok


def cluster_status() -> str:
    from onlinesoftmax.runtime import device

    cluster_launch_works()
    return _cluster_probe[device.current_device_id()][1]
