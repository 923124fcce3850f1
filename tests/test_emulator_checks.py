"""The emulator's checks, each on a tiny kernel wrong in exactly that way (it must be reported, with
its line) and on its right twin (it must pass): shared-memory races, out-of-bounds reads and
writes, misaligned vector accesses, a barrier some threads exited before, schedules that disagree,
and the design counters (LaunchStats)."""
import numpy as np
import pytest

from onlinesoftmax.runtime import emulator

pytestmark = pytest.mark.skipif(not emulator.available(), reason="the CPU emulator needs g++")


def module(tmp_path, name, text, entries=None):
    path = tmp_path / f"{name}.cu"
    path.write_text(text)
    return emulator.Module(path, entries or [name])


# ---- races ----------------------------------------------------------------------------------------

# A block of 64 sums its row three times through one shared buffer (max, sum, write). `BARRIER`
# is the __syncthreads between the last read of the buffer in one pass and the next pass's write.
THREE_PASS = r'''
__device__ float block_reduce(float v, float* buf, bool is_max) {
    const int t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (int s = 32; s > 0; s >>= 1) {
        if (t < s) buf[t] = is_max ? fmaxf(buf[t], buf[t + s]) : buf[t] + buf[t + s];
        __syncthreads();
    }
    float r = buf[0];
    BARRIER
    return r;
}
extern "C" __global__ void three_pass(const float* x, float* y, int n) {
    __shared__ float buf[64];
    const float* row = x + blockIdx.x * n;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += 64) m = fmaxf(m, row[i]);
    m = block_reduce(m, buf, true);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += 64) s += expf(row[i] - m);
    s = block_reduce(s, buf, false);
    for (int i = threadIdx.x; i < n; i += 64) y[blockIdx.x * n + i] = expf(row[i] - m) / s;
}
'''


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def three_pass_args(rows=3, n=100):
    x = np.random.default_rng(0).normal(size=(rows, n)).astype(np.float32)
    return [x, np.zeros_like(x), np.int32(n)]


@pytest.mark.parametrize("schedule,seed", [("fixed", 0), ("random", 1), ("random", 2)])
def test_a_missing_barrier_after_the_last_read_is_a_race_under_every_schedule(tmp_path, schedule, seed):
    wrong = module(tmp_path, "three_pass", THREE_PASS.replace("BARRIER", ""))
    # The next pass's write (line 4) meets this pass's read of buf[0] (line 10) in one barrier interval;
    # which comes first depends on the schedule, the report does not.
    with pytest.raises(emulator.EmulatorRace, match=r"(write-after-read|read-after-write)\) on static __shared__ "
                                                    r"byte 0: thread \d+ .*three_pass.cu:(4|10).*three_pass.cu:(10|4),"):
        wrong.launch("three_pass", 3, 64, three_pass_args(), schedule=schedule, seed=seed)
    right = module(tmp_path, "three_pass", THREE_PASS.replace("BARRIER", "__syncthreads();"))
    x, y, n = three_pass_args()
    right.launch("three_pass", 3, 64, (x, y, n), schedule=schedule, seed=seed)
    np.testing.assert_allclose(y, softmax(x.astype(np.float64)), rtol=1e-5)


# The same kernel as a function template whose buffer is its own static __shared__, and one declared in an
# included header: g++ drops a section attribute on a template's static locals, so the emulator must give
# such buffers their storage in the block's shared memory some other way, or it would never check them.
TEMPLATED = THREE_PASS.replace("extern \"C\" __global__ void three_pass(const float* x, float* y, int n) {\n"
                               "    __shared__ float buf[64];",
                               "template <int K>\n__device__ void pass3(const float* x, float* y, int n) {\n"
                               "    __shared__ float buf[64 * K];") + \
    'extern "C" __global__ void three_pass(const float* x, float* y, int n) { pass3<1>(x, y, n); }\n'


@pytest.mark.parametrize("where", ("kernel file", "header"))
def test_a_race_on_a_templates_own_shared_buffer_is_found(tmp_path, where):
    text = TEMPLATED.replace("BARRIER", "")
    if where == "header":
        (tmp_path / "pass3.cuh").write_text("#pragma once\n" + text.split("extern \"C\"")[0])
        text = '#include "pass3.cuh"\n' + 'extern "C"' + text.split('extern "C"')[1]
    with pytest.raises(emulator.EmulatorRace, match=r"on static __shared__ byte 0"):
        module(tmp_path, "three_pass", text).launch("three_pass", 3, 64, three_pass_args(), schedule="random", seed=1)
    right = module(tmp_path, "three_pass", TEMPLATED.replace("BARRIER", "__syncthreads();"))
    x, y, n = three_pass_args()
    stats = right.launch("three_pass", 3, 64, (x, y, n), stats=True)
    np.testing.assert_allclose(y, softmax(x.astype(np.float64)), rtol=1e-5)
    assert stats.shared_bytes == 64 * 4, "the template's buffer is seen by the checks"


def test_the_race_check_can_be_turned_off(tmp_path):
    wrong = module(tmp_path, "three_pass", THREE_PASS.replace("BARRIER", ""))
    wrong.launch("three_pass", 3, 64, three_pass_args(), check_races=False)   # the fixed schedule hides it


# Warp 0 writes, warp 1 reads: a __syncwarp orders lanes of one warp only.
CROSS_WARP = r'''
extern "C" __global__ void cross_warp(float* y) {
    __shared__ float buf[64];
    buf[threadIdx.x] = threadIdx.x;
    SYNC
    y[threadIdx.x] = buf[63 - threadIdx.x];
}
'''
IN_WARP = r'''
extern "C" __global__ void in_warp(float* y) {
    __shared__ float buf[64];
    buf[threadIdx.x] = threadIdx.x;
    SYNC
    y[threadIdx.x] = buf[threadIdx.x ^ 1];
}
'''


def test_a_syncwarp_does_not_order_two_warps_but_orders_one(tmp_path):
    fixed_with_syncwarp = module(tmp_path, "cross_warp", CROSS_WARP.replace("SYNC", "__syncwarp();"))
    with pytest.raises(emulator.EmulatorRace, match=r"read-after-write.*warp 0.*warp 1|read-after-write.*warp 1.*warp 0"):
        fixed_with_syncwarp.launch("cross_warp", 1, 64, (np.zeros(64, np.float32),))
    y = np.zeros(64, np.float32)
    module(tmp_path, "cross_warp", CROSS_WARP.replace("SYNC", "__syncthreads();")).launch("cross_warp", 1, 64, (y,))
    np.testing.assert_array_equal(y, 63 - np.arange(64))

    with pytest.raises(emulator.EmulatorRace, match="(read-after-write|write-after-read).*in_warp.cu:[46]"):
        module(tmp_path, "in_warp", IN_WARP.replace("SYNC", "")).launch("in_warp", 1, 64, (np.zeros(64, np.float32),))
    y = np.zeros(64, np.float32)
    module(tmp_path, "in_warp", IN_WARP.replace("SYNC", "__syncwarp();")).launch("in_warp", 1, 64, (y,))
    np.testing.assert_array_equal(y, np.arange(64) ^ 1)


def test_two_threads_writing_one_shared_word_is_a_write_after_write(tmp_path):
    text = ('extern "C" __global__ void waw(float* y) {\n  __shared__ float s;\n  s = threadIdx.x;\n'
            '  __syncthreads();\n  y[threadIdx.x] = s;\n}\n')
    with pytest.raises(emulator.EmulatorRace, match=r"write-after-write.*waw.cu:3.*waw.cu:3"):
        module(tmp_path, "waw", text).launch("waw", 1, 64, (np.zeros(64, np.float32),))
    once = text.replace("  s = threadIdx.x;", "  if (threadIdx.x == 5) s = threadIdx.x;")
    y = np.zeros(64, np.float32)
    module(tmp_path, "waw", once).launch("waw", 1, 64, (y,))
    assert (y == 5).all()


# ---- out of bounds --------------------------------------------------------------------------------

# The tail of a row of n: loading x[i] for i >= n and masking the result afterwards is still a read
# past the array.
TAIL = r'''
extern "C" __global__ void tail(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    LOAD
    if (i < n) y[i] = 2.0f * v;
}
'''


def test_a_read_past_the_end_that_is_masked_afterwards_is_out_of_bounds(tmp_path):
    x, y = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    wrong = module(tmp_path, "tail", TAIL.replace("LOAD", "float v = x[i];"))
    with pytest.raises(emulator.EmulatorOutOfBounds,
                       match=r"out-of-bounds read of argument 0 at \S*tail.cu:4: element offset 100 of an array of 100"):
        wrong.launch("tail", 4, 32, (x, y, np.int32(100)))
    assert (y == 0).all()                                   # a failed launch leaves the arrays as they were
    right = module(tmp_path, "tail", TAIL.replace("LOAD", "float v = i < n ? x[i] : 0.0f;"))
    right.launch("tail", 4, 32, (x, y, np.int32(100)))
    np.testing.assert_array_equal(y, 2 * x)


def test_reads_before_the_start_and_writes_past_the_end_are_out_of_bounds(tmp_path):
    text = ('extern "C" __global__ void shift(const float* x, float* y, int by) {\n'
            '  const int i = threadIdx.x;\n  y[i + (by > 0 ? by : 0)] = x[i + (by < 0 ? by : 0)];\n}\n')
    shift = module(tmp_path, "shift", text)
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    with pytest.raises(emulator.EmulatorOutOfBounds, match=r"read of argument 0 .*shift.cu:3: element offset -3 "):
        shift.launch("shift", 1, 32, (x, y, np.int32(-3)))
    with pytest.raises(emulator.EmulatorOutOfBounds, match=r"write of argument 1 .*element offset 32 "):
        shift.launch("shift", 1, 32, (x, y, np.int32(1)), isolated=True)
    shift.launch("shift", 1, 32, (x, y, np.int32(0)))
    np.testing.assert_array_equal(y, x)


# ---- alignment ------------------------------------------------------------------------------------

VECTOR = r'''
extern "C" __global__ void vector(const float* x, float* y, int offset) {
    const float4 v = reinterpret_cast<const float4*>(x + offset)[threadIdx.x];
    reinterpret_cast<float4*>(y)[threadIdx.x] = v;
}
'''


def test_a_float4_load_at_an_address_not_a_multiple_of_16_is_misaligned(tmp_path):
    vector = module(tmp_path, "vector", VECTOR)
    x, y = np.arange(132, dtype=np.float32), np.zeros(128, np.float32)
    with pytest.raises(emulator.EmulatorMisaligned, match=r"misaligned 16-byte load at \S*vector.cu:3: address 0x"):
        vector.launch("vector", 1, 32, (x, y, np.int32(1)))
    vector.launch("vector", 1, 32, (x, y, np.int32(4)))
    np.testing.assert_array_equal(y, x[4:])


def test_a_float2_store_at_an_odd_float_is_misaligned(tmp_path):
    text = ('extern "C" __global__ void pair(float* y, int offset) {\n'
            '  reinterpret_cast<float2*>(y + offset)[threadIdx.x] = make_float2(1.0f, 2.0f);\n}\n')
    pair = module(tmp_path, "pair", text)
    with pytest.raises(emulator.EmulatorMisaligned, match=r"misaligned 8-byte store at \S*pair.cu:2"):
        pair.launch("pair", 1, 8, (np.zeros(18, np.float32), np.int32(1)))
    y = np.zeros(18, np.float32)
    pair.launch("pair", 1, 8, (y, np.int32(2)))
    np.testing.assert_array_equal(y[2:], np.tile([1, 2], 8))


# ---- threads that exit before a barrier -------------------------------------------------------------

EXIT = r'''
extern "C" __global__ void early(const float* x, float* y, int n) {
    __shared__ float buf[64];
    const int i = threadIdx.x;
    RETURN
    buf[i] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = buf[(i + 1) % n];
}
'''


def test_threads_that_exit_before_a_barrier_others_reach_are_a_fault(tmp_path):
    x, y = np.arange(40, dtype=np.float32), np.zeros(40, np.float32)
    wrong = module(tmp_path, "early", EXIT.replace("RETURN", "if (i >= n) return;"))
    with pytest.raises(emulator.EmulatorFault, match=r"__syncthreads\(\) reached by only some of the block's threads.*"
                                                     r"threads 0-39 wait at __syncthreads\(\) \(line 7\); threads 40-63 returned"):
        wrong.launch("early", 1, 64, (x, y, np.int32(40)))
    # A whole warp leaving (n = 32) is the same fault, though a GPU would let the barrier open.
    with pytest.raises(emulator.EmulatorFault, match=r"threads 32-63 returned"):
        wrong.launch("early", 1, 64, (x[:32].copy(), y[:32].copy(), np.int32(32)))
    right = module(tmp_path, "early", EXIT.replace("RETURN", ""))
    right.launch("early", 1, 64, (x, y, np.int32(40)))
    np.testing.assert_array_equal(y, np.roll(x, -1))


# ---- schedules ------------------------------------------------------------------------------------

# Every thread writes its index into one global word after a __syncwarp: the last writer wins, and
# which one that is depends on the schedule.
LAST_WRITER = r'''
extern "C" __global__ void last_writer(float* total) {
    OTHER
    total[0] = threadIdx.x;
}
'''


def test_launch_schedules_reports_the_first_schedule_whose_outputs_differ(tmp_path):
    wrong = module(tmp_path, "last_writer", LAST_WRITER.replace("OTHER", "__syncwarp();"))
    with pytest.raises(emulator.EmulatorScheduleDependent,
                       match=r"the random schedule with seed \d+ gave other outputs than the fixed schedule: argument 0"):
        wrong.launch_schedules("last_writer", 1, 64, lambda: [np.zeros(1, np.float32)], seeds=(1, 2, 3, 4))
    right = module(tmp_path, "last_writer", LAST_WRITER.replace("total[0] = threadIdx.x;", "atomicAdd(total, 1.0f);")
                   .replace("OTHER", "__syncwarp();"))
    (total,) = right.launch_schedules("last_writer", 1, 64, lambda: [np.zeros(1, np.float32)], seeds=(1, 2))
    assert total[0] == 64


def test_launch_schedules_names_the_schedule_of_a_fault(tmp_path):
    wrong = module(tmp_path, "three_pass", THREE_PASS.replace("BARRIER", ""))
    with pytest.raises(emulator.EmulatorRace, match=r"^under the fixed schedule: shared-memory race"):
        wrong.launch_schedules("three_pass", 3, 64, three_pass_args, seeds=(1,))


# ---- design counters ------------------------------------------------------------------------------

def test_stats_tell_a_three_pass_kernel_from_a_split_and_count_shared_bytes(tmp_path):
    three = module(tmp_path, "three_pass", THREE_PASS.replace("BARRIER", "__syncthreads();"))
    x, y, n = three_pass_args(rows=2, n=100)
    stats = three.launch("three_pass", 2, 64, (x, y, n), stats=True)
    assert (stats.reads[0] == 3).all() and (stats.writes[0] == 0).all()       # every element read three times
    assert (stats.writes[1] == 1).all() and (stats.reads[1] == 0).all()
    assert [list(b) for b in stats.block_reads[0]] == [list(range(0, 100)), list(range(100, 200))]
    assert stats.shared_bytes == 64 * 4
    # Without stats: the shared bytes only.
    plain = three.launch("three_pass", 2, 64, three_pass_args(rows=2, n=100))
    assert plain.reads == {} and plain.block_reads == {} and plain.shared_bytes == 256

    # A "split" of a row of 256 over 4 blocks: each must read its quarter, not the whole row.
    split = r'''
extern "C" __global__ void split(const float* x, float* partial, int n) {
    const int chunk = CHUNK;
    float s = 0.0f;
    for (int i = blockIdx.x * chunk + threadIdx.x; i < (blockIdx.x + 1) * chunk && i < n; i += 32) s += x[i];
    if (threadIdx.x == 0) partial[blockIdx.x] = s;   /* not the block's sum: counting only */
}
'''
    x = np.ones(256, np.float32)
    good = module(tmp_path, "split", split.replace("CHUNK", "(n + gridDim.x - 1) / gridDim.x"))
    stats = good.launch("split", 4, 32, (x, np.zeros(4, np.float32), np.int32(256)), stats=True)
    assert [len(b) for b in stats.block_reads[0]] == [64] * 4 and (stats.reads[0] == 1).all()
    bad = module(tmp_path, "split", split.replace("CHUNK", "n").replace("blockIdx.x * chunk", "0")
                 .replace("(blockIdx.x + 1) * chunk", "chunk"))
    stats = bad.launch("split", 4, 32, (x, np.zeros(4, np.float32), np.int32(256)), stats=True)
    assert [len(b) for b in stats.block_reads[0]] == [256] * 4 and (stats.reads[0] == 4).all()


def test_stats_of_an_isolated_launch_come_back(tmp_path):
    three = module(tmp_path, "three_pass", THREE_PASS.replace("BARRIER", "__syncthreads();"))
    x, y, n = three_pass_args(rows=2, n=100)
    stats = three.launch("three_pass", 2, 64, (x, y, n), stats=True, isolated=True)
    assert (stats.reads[0] == 3).all() and len(stats.block_reads[0]) == 2 and stats.shared_bytes == 256
    np.testing.assert_allclose(y, softmax(x.astype(np.float64)), rtol=1e-5)


def test_an_uninstrumented_build_runs_without_the_checks_and_says_so(tmp_path):
    """emulator.uninstrumented(): a separate build without the per-access hooks; asking it for counts is
    an error, not a silent zero."""
    import numpy as np

    from onlinesoftmax.runtime import emulator

    source = tmp_path / "copy_kernel.cu"
    source.write_text('extern "C" __global__ void copy_kernel(const float* x, float* y, int n) {\n'
                      '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n')
    x, y = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    with emulator.uninstrumented():
        fast = emulator.Module(source, ["copy_kernel"])
    checked = emulator.Module(source, ["copy_kernel"])
    assert not fast.instrumented and checked.instrumented and fast.so != checked.so
    fast.launch("copy_kernel", (1,), (128,), (x, y, np.int32(100)))
    assert (y == x).all()
    with pytest.raises(ValueError, match="per-access checks"):
        fast.launch("copy_kernel", (1,), (128,), (x, y, np.int32(100)), stats=True)
    assert checked.launch("copy_kernel", (1,), (128,), (x, y, np.int32(100)), stats=True) is not None
