"""CPU tier: the CPU emulator itself (kernels/emulator/, onlinesoftmax/runtime/emulator.py) on small
kernels written here. The warp intrinsics give CUDA's answers on both schedules; the fixed schedule
runs threads in thread order and the random one a different order per seed, with barriers kept; a
barrier or a shuffle some threads never reach, a lane outside a shuffle's mask, shared memory read
before it is written (NaN) or written past its size, ldmatrix on a global address, a cp.async never
waited for and an mma.sync in a partial warp are each caught with a message that says where; an
isolated launch that reads past an array (the guard page) or hangs is a fault and the caller goes
on; a compile error names the line. The exercises (test_kernel_exercises.py) and the tensor-core
kernels (test_attention_emulated.py) run on the same emulator."""
import os

import numpy as np
import pytest

from onlinesoftmax.runtime import emulator

pytestmark = pytest.mark.skipif(not emulator.available() and not os.environ.get("CI"),
                                reason="the CPU emulator needs g++ (under CI=true a missing g++ fails)")

WARP_KERNEL = '''extern "C" __global__ void warp(int* out) {
    const int lane = threadIdx.x & 31;
    const int t = threadIdx.x;
    out[0 * 64 + t] = __shfl_xor_sync(0xffffffffu, lane * 10, 1);
    out[1 * 64 + t] = __shfl_down_sync(0xffffffffu, lane, 4);
    out[2 * 64 + t] = __shfl_up_sync(0xffffffffu, lane, 4);
    out[3 * 64 + t] = __shfl_sync(0xffffffffu, lane, 5);
    out[4 * 64 + t] = __shfl_sync(0xffffffffu, lane, 3, 8);
    out[5 * 64 + t] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    out[6 * 64 + t] = __any_sync(0xffffffffu, t == 40) + 2 * __all_sync(0xffffffffu, lane < 32);
    __shared__ int partial[2];
    int v = lane;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) partial[t >> 5] = v;
    __syncthreads();
    out[7 * 64 + t] = partial[0] + partial[1];
}
'''


def module(tmp_path, name: str, text: str, entries=None, **options) -> emulator.Module:
    path = tmp_path / f"{name}.cu"
    path.write_text(text)
    return emulator.Module(path, entries or [name], **options)


@pytest.mark.parametrize("schedule", emulator.SCHEDULES)
def test_the_warp_intrinsics_match_cuda(tmp_path, schedule):
    out = np.full(8 * 64, -1, np.int32)
    module(tmp_path, "warp", WARP_KERNEL, schedule=schedule, seed=4).launch("warp", (1,), (64,), (out,))
    lane = np.arange(64) % 32
    rows = out.reshape(8, 64)
    np.testing.assert_array_equal(rows[0], (lane ^ 1) * 10)
    np.testing.assert_array_equal(rows[1], np.where(lane + 4 < 32, lane + 4, lane))
    np.testing.assert_array_equal(rows[2], np.where(lane >= 4, lane - 4, lane))
    np.testing.assert_array_equal(rows[3], np.full(64, 5))
    np.testing.assert_array_equal(rows[4], (lane // 8) * 8 + 3)
    ballot = sum(1 << i for i in range(32) if i % 3 == 0)
    np.testing.assert_array_equal(rows[5], np.full(64, np.int32(np.uint32(ballot).view(np.int32))))
    np.testing.assert_array_equal(rows[6], np.r_[np.full(32, 2), np.full(32, 3)])   # t == 40 is in warp 1
    np.testing.assert_array_equal(rows[7], np.full(64, 2 * sum(range(32))))


ORDER_KERNEL = '''extern "C" __global__ void order(int* log, int* counter) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    log[atomicAdd(counter, 1)] = t;
    __syncthreads();
    log[atomicAdd(counter, 1)] = 1000 + t;
}
'''


def run_order(tmp_path, schedule, seed=0) -> np.ndarray:
    log, counter = np.full(256, -1, np.int32), np.zeros(1, np.int32)
    module(tmp_path, "order", ORDER_KERNEL, schedule=schedule, seed=seed).launch("order", (2,), (64,), (log, counter))
    return log


def test_the_fixed_schedule_runs_threads_in_order_and_the_random_one_by_its_seed(tmp_path):
    fixed = run_order(tmp_path, "fixed")
    expected = np.r_[np.arange(64), 1000 + np.arange(64), 64 + np.arange(64), 1064 + np.arange(64)]
    np.testing.assert_array_equal(fixed, expected)
    one, again, other = (run_order(tmp_path, "random", seed) for seed in (1, 1, 2))
    np.testing.assert_array_equal(one, again)                       # a seed is one order
    assert not np.array_equal(one, other) and not np.array_equal(one, fixed)
    for log in (one, other):
        assert sorted(log) == sorted(expected)                        # every thread, once per phase
        for block in range(2):                                        # the barrier: all of a block's first
            first = [i for i, v in enumerate(log) if v < 1000 and v // 64 == block]   # writes before its second
            second = [i for i, v in enumerate(log) if v >= 1000 and (v - 1000) // 64 == block]
            assert max(first) < min(second) and max(first) - min(first) == 63   # blocks one after the other


FAULTY = {   # a kernel some of whose threads the others wait for in vain, and what the emulator says
    "barrier_skipped": ("if (threadIdx.x < 40) __syncthreads();\n  y[threadIdx.x] = 1.0f;", 64,
                        r"__syncthreads\(\) reached by only some.*threads 0-39 wait at __syncthreads\(\) \(line 2\); "
                        r"threads 40-63 returned"),
    "two_shuffles": ("float v = y[threadIdx.x];\n  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);\n"
                     "  else v = __shfl_xor_sync(0xffffffffu, v, 2);\n  y[threadIdx.x] = v;", 32,
                     r"no thread can go on: threads 0-15 wait in __shfl_xor_sync \(mask 0xffffffff, line 3\); "
                     r"threads 16-31 wait in __shfl_xor_sync \(mask 0xffffffff, line 4\)"),
    "lane_outside_mask": ("if (threadIdx.x < 16) y[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 16);", 32,
                          r"line 2: lane \d+ reads lane (\d+) in __shfl_xor_sync, but the mask 0x0000ffff leaves lane "
                          r"\1 out"),
}


@pytest.mark.parametrize("schedule", emulator.SCHEDULES)
@pytest.mark.parametrize("name", FAULTY)
def test_threads_left_waiting_stop_the_launch_with_where_they_are(tmp_path, name, schedule):
    body, threads, message = FAULTY[name]
    kernel = module(tmp_path, name, f'extern "C" __global__ void {name}(float* y) {{\n  {body}\n}}\n',
                    schedule=schedule, seed=3)
    with pytest.raises(emulator.EmulatorFault, match=message):
        kernel.launch(name, (1,), (threads,), (np.zeros(threads, np.float32),))


SHARED_KERNEL = '''extern "C" __global__ void shared(float* out, int past) {
    __shared__ float fixed[64];
    extern __shared__ float4 dynamic_part[];
    float* dynamic = reinterpret_cast<float*>(dynamic_part);
    const int t = threadIdx.x;
    out[blockIdx.x * 128 + t] = fixed[t];            // nobody wrote them in this block
    out[blockIdx.x * 128 + 64 + t] = dynamic[t];
    __syncthreads();
    fixed[t] = 1.0f;
    dynamic[t + past] = 2.0f;
}
'''


def test_shared_memory_is_nan_until_written_in_every_block_and_its_end_is_guarded(tmp_path):
    shared = module(tmp_path, "shared", SHARED_KERNEL)
    out = np.zeros(2 * 128, np.float32)
    shared.launch("shared", (2,), (64,), (out, np.int32(0)), shared_bytes=256)
    assert np.isnan(out).all(), out               # block 1 sees NaN again, not block 0's writes
    with pytest.raises(emulator.EmulatorFault, match=r"shared memory written past the dynamic size \(256 bytes\): "
                                                     r"0 bytes after it"):
        shared.launch("shared", (1,), (64,), (out, np.int32(64)), shared_bytes=256)


TENSOR_KERNELS = '''#include "mma.cuh"
extern "C" __global__ void load_global(const unsigned short* x, unsigned* out) {
    u32 r[4];
    ldmatrix_x4(r, x + 8 * (threadIdx.x & 31));
    out[threadIdx.x] = r[0];
}
extern "C" __global__ void copy_without_wait(const unsigned short* x, unsigned* out) {
    extern __shared__ int4 staging[];
    cp_async_16_or_zero(staging + threadIdx.x, x + 8 * threadIdx.x, true);
    cp_async_commit_group();
}
extern "C" __global__ void mma_partial_warp(float* out) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const u32 a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    Bf16Mma::mma(c, a, b);
    out[threadIdx.x] = c[0];
}
'''


def test_the_tensor_core_instructions_check_what_the_hardware_requires(tmp_path):
    tensor = module(tmp_path, "tensor", TENSOR_KERNELS, ["load_global", "copy_without_wait", "mma_partial_warp"])
    x, out = np.zeros(64 * 8, np.uint16), np.zeros(64, np.uint32)
    with pytest.raises(emulator.EmulatorFault, match=r"ldmatrix\.x4: lane 0's row address is outside the block's "
                                                     r"shared memory \(block 0,0,0, thread 0\)"):
        tensor.launch("load_global", (1,), (32,), (x, out))
    with pytest.raises(emulator.EmulatorFault, match="a thread ended with cp.async copies it never waited for"):
        tensor.launch("copy_without_wait", (1,), (32,), (x, out), shared_bytes=512)
    with pytest.raises(emulator.EmulatorFault, match=r"mma\.sync needs a whole warp, but warp 1 of this block of 48 "
                                                     r"threads has 16 lanes"):
        tensor.launch("mma_partial_warp", (1,), (48,), (np.zeros(48, np.float32),))


def test_an_isolated_launch_that_reads_past_an_array_is_a_fault_and_the_caller_goes_on(tmp_path):
    shift = module(tmp_path, "shift", 'extern "C" __global__ void shift(const float* x, float* y, int by) {\n'
                                      '  y[threadIdx.x] = x[threadIdx.x + by];\n}\n')
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(emulator.EmulatorOutOfBounds,
                       match=r"out-of-bounds read of argument 0 at \S*shift.cu:2: element offset 64 of an array of 64"):
        shift.launch("shift", (1,), (64,), (x, y, np.int32(1)), isolated=True)   # x[64]: a guard region
    assert (y == 0).all()
    shift.launch("shift", (1,), (64,), (x, y, np.int32(0)), isolated=True)
    np.testing.assert_array_equal(y, x)                                        # the child's writes come back


def test_an_isolated_hang_ends_at_the_timeout(tmp_path):
    hang = module(tmp_path, "hang", 'extern "C" __global__ void hang(int n) {\n  while (n > 0) __nanosleep(100);\n}\n')
    with pytest.raises(emulator.EmulatorFault, match="did not finish in 1 s: a hang"):
        hang.launch("hang", (1,), (32,), (np.int32(1),), isolated=True, timeout_s=1)


def test_guarded_arrays_end_at_an_inaccessible_page():
    a = emulator.guarded((3, 5), np.float32, 1.5)
    assert a.shape == (3, 5) and (a == 1.5).all() and a.flags.c_contiguous and a.ctypes.data % 16 == 0
    end = a.ctypes.data + a.nbytes
    assert (end + 15) // 16 * 16 % os.sysconf("SC_PAGE_SIZE") == 0       # the page after the (16-byte) end


def test_bad_builds_and_bad_arguments_are_clear_errors(tmp_path):
    path = tmp_path / "broken.cu"
    path.write_text('extern "C" __global__ void broken(float* y) {\n  y[0] = undefined_name;\n}\n')
    with pytest.raises(emulator.EmulatorBuildError, match=r"broken\.cu:2:.*undefined_name") as caught:
        emulator.Module(path, ["broken"])
    assert isinstance(caught.value, emulator.EmulatorError) and issubclass(emulator.EmulatorFault, emulator.EmulatorError)
    with pytest.raises(ValueError, match="schedule must be one of fixed, random, got 'sometimes'"):
        module(tmp_path, "warp", WARP_KERNEL, schedule="sometimes")
    warp = module(tmp_path, "warp", WARP_KERNEL)
    with pytest.raises(ValueError, match="no entry 'wrap' in this module; it has warp"):
        warp.launch("wrap", (1,), (64,), (np.zeros(512, np.int32),))
    with pytest.raises(TypeError, match="got float"):
        warp.launch("warp", (1,), (64,), (1.0,))
    with pytest.raises(ValueError, match="C-contiguous"):
        warp.launch("warp", (1,), (64,), (np.zeros(1024, np.int32)[::2],))
    with pytest.raises(emulator.EmulatorFault, match="a block of 2048 threads"):
        warp.launch("warp", (1,), (2048,), (np.zeros(512, np.int32),))
