"""CPU tier for the fast kernels: NumPy models vs the float64 reference, dispatch, configurations,
error messages, and the recorded-data comparison script."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels import dispatch
from onlinesoftmax.kernels.softmax import fast as kf
from onlinesoftmax.kernels.softmax import fast_configs as configs
from onlinesoftmax.kernels.softmax import fast_models as models
from onlinesoftmax.runtime import driver, loader
from onlinesoftmax.runtime.loader import REPO_ROOT
from onlinesoftmax.registry import DTYPE_ITEMSIZE

ml_dtypes = pytest.importorskip("ml_dtypes")
FAST = tuple(v.name for v in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS)


def test_model_partition_options_agree():
    """Scalar path, forced cluster sizes, chunk counts: the same function, and a row of 1M."""
    x = checks.random_rows(np, 2, 70001, "float32", seed=4)
    for y in (models.simulate_09(x, vec=1), models.simulate_10(x, n_chunks=16), models.simulate_10(x, n_chunks=2, vec=1),
              models.simulate_11(x, n_chunks=7), models.simulate_11(x, n_chunks=1000), models.simulate_13(x, n_chunks=3),
              models.simulate_13(x, n_chunks=700), models.simulate_13(x, n_chunks=64, vec=1)):
        assert checks.compare_softmax(y, x)[0]
    big = checks.random_rows(np, 1, 1 << 20, "bfloat16", seed=5)
    assert checks.compare_softmax(models.simulate_10(big), big)[0]


def test_fast_dispatch_on_numpy_runs_the_chosen_model():
    for n_rows, n_cols in ((4, 100), (4, 5000), (2, 70000)):
        x = checks.random_rows(np, n_rows, n_cols, "float16", seed=1)
        chosen = dispatch.choose(n_rows, n_cols, "float16").variant.name
        np.testing.assert_array_equal(osm.softmax(x, variant="fast"), osm.softmax(x, variant=chosen))


@pytest.mark.parametrize(("n_rows", "n_cols", "clusters", "expected"), [
    (4000, 256, True, "softmax_07_warp_per_row"),
    (1, 1024, True, "softmax_07_warp_per_row"),
    (4000, 4096, True, "softmax_08_registers"),
    (4000, 8192, True, "softmax_08_registers"),
    (4000, 16384, True, "softmax_09_shared"),
    (4000, 32768, True, "softmax_08_registers"),   # too long for two blocks' shared memory: registers
    (4000, 28672, True, "softmax_09_shared"),
    (512, 32000, False, "softmax_08_registers"),
    (64, 32000, True, "softmax_08_registers"),
    (8, 32000, True, "softmax_10_cluster"),
    (4000, 32769, True, "softmax_10_cluster"),
    (10, 4096, True, "softmax_08_registers"),
    (4000, 65536, True, "softmax_10_cluster"),
    (64, 16384, True, "softmax_08_registers"),
    (64, 65536, True, "softmax_10_cluster"),
    (1024, 1 << 20, True, "softmax_12_pipelined"),
    (64, 1 << 20, True, "softmax_10_cluster"),
    (1, 1 << 20, True, "softmax_11_split"),
    (4000, 65536, False, "softmax_09_shared"),
    (10, 1 << 20, False, "softmax_11_split"),
    (4000, 1 << 18, False, "softmax_09_shared"),
    (64, 1 << 20, False, "softmax_11_split"),
])
def test_dispatch_choices(n_rows, n_cols, clusters, expected):
    assert dispatch.choose(n_rows, n_cols, "float32", clusters=clusters).variant.name == expected


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize(("n_rows", "n_cols", "clusters", "expected"), [
    (4000, 16384, True, "softmax_09_shared"),
    (4000, 32000, True, "softmax_09_shared"),
    (64, 24576, True, "softmax_08_registers"),
    (8, 24576, True, "softmax_10_cluster"),
    (4000, 65536, True, "softmax_12_pipelined"),
    (4000, 65536, False, "softmax_09_shared"),
    (64, 65536, True, "softmax_10_cluster"),
    (4000, 262144, True, "softmax_10_cluster"),
    (1024, 1 << 20, True, "softmax_11_split"),
])
def test_dispatch_choices_16_bit(n_rows, n_cols, clusters, expected, dtype):
    assert dispatch.choose(n_rows, n_cols, dtype, clusters=clusters).variant.name == expected


def test_configurations_hold_the_row_and_exist_in_the_source():
    for dtype in checks.DTYPES:
        for vec in (configs.vector_width(dtype), 1):
            for n_cols in (1, 7, 31, 32, 33, 255, 512, 1000, 1024):
                nv, g = configs.config_07(n_cols, dtype, vec)
                assert nv * g * vec >= n_cols
            for n_cols in (1025, 2048, 5000, 16384, 20000, 32768):
                nv, t = configs.config_08(n_cols, dtype, vec)
                assert nv * t * vec >= n_cols
    for variant in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS:
        source = variant.path.read_text()
        entries = variant.launched_entries
        assert len(set(entries)) == len(entries)
        for entry in entries:
            # <stem>_<tag>_v<V>[_n<NV>_g<G> | _n<NV>_t<T>]: the prefix must be pasted together in the file
            match = re.fullmatch(r"(softmax_\d\d_[a-z_]+?)_(f32|f16|bf16)_v(\d+)(_n\d+_[gt]\d+)?", entry)
            assert match, entry
            assert f"{match.group(1)}_##TAG##_v##V" in source, f"{entry}: no such entry macro in {variant.file}"
    with pytest.raises(ValueError, match="at most 1024"):
        configs.config_07(1025, "float32", 4)
    with pytest.raises(ValueError, match="at most 32768"):
        configs.config_08(40000, "bfloat16", 8)


def test_plans_respect_hardware_limits():
    for n_rows in (1, 10, 64, 4000):
        for n_cols in (4096, 65536, 1 << 18, 1 << 20, 3_000_001):
            for dtype in checks.DTYPES:
                vec = configs.vector_width(dtype)
                p10 = configs.chunks_10(n_rows, n_cols, dtype, vec)
                assert p10.n_chunks in (1, 2, 4, 8, 16)
                assert p10.n_chunks * p10.chunk_elems >= n_cols and p10.chunk_elems % vec == 0
                assert p10.cache_elems * DTYPE_ITEMSIZE[dtype] <= configs.SHARED_LIMIT_BYTES
                p11 = configs.chunks_11(n_rows, n_cols, dtype, vec)
                assert 1 <= p11.n_chunks <= 1024 and p11.n_chunks * p11.chunk_elems >= n_cols
                assert 128 <= p11.threads <= 1024
                p13 = configs.chunks_13(n_rows, n_cols, dtype, vec)
                assert 1 <= p13.n_chunks <= 1024 and p13.n_chunks * p13.chunk_elems >= n_cols
                assert p13.cache_elems == p13.chunk_elems and p13.chunk_elems % vec == 0
                assert configs.coop_buffers(vec) * p13.chunk_elems * DTYPE_ITEMSIZE[dtype] <= configs.SHARED_LIMIT_BYTES
                if n_rows == 4000 and n_cols >= 65536:   # many rows: ~32 KB chunks, several blocks per SM
                    assert p13.chunk_elems * DTYPE_ITEMSIZE[dtype] <= configs.COOP_CHUNK_BYTES
    with pytest.raises(ValueError, match="shared memory"):
        configs.chunks_13(1, 1 << 20, "float32", 4, n_chunks=2)   # 2 MB chunks cannot be cached


def test_cooperative_fold_merge_matches_a_sequential_fold():
    """softmax_13's merge with more chunks than threads: thread t folds states t, t + T, ... in order."""
    x = checks.random_rows(np, 2, 70000, "float32", seed=8)
    plan = configs.chunks_13(2, 70000, "float32", 4, n_chunks=700)
    assert plan.n_chunks > plan.threads
    y = models.simulate_13(x, n_chunks=700).astype(np.float64)
    assert checks.compare_softmax(models.simulate_13(x, n_chunks=700), x)[0]
    np.testing.assert_allclose(y, models.simulate_11(x, n_chunks=700).astype(np.float64), rtol=4e-7, atol=0)


def test_bad_input_messages():
    with pytest.raises(TypeError, match="takes float32, float16 and bfloat16, got float64"):
        osm.softmax(np.ones((2, 8), np.float64), variant="softmax_08_registers")
    with pytest.raises(TypeError):
        osm.softmax(np.ones((2, 8), np.int32), variant="softmax_08_registers")
    with pytest.raises(ValueError, match="2-D"):
        osm.api.run(osm.REGISTRY["softmax_08_registers"], np.ones(8, np.float32))
    with pytest.raises(ValueError, match="non-empty"):   # a named kernel on 2-D rows: empty is refused
        osm.api.run(osm.REGISTRY["softmax_08_registers"], np.ones((0, 8), np.float32))
    with pytest.raises(ValueError, match="at most 1024"):
        osm.softmax(np.ones((2, 2000), np.float32), variant="softmax_07_warp_per_row")
    with pytest.raises(ValueError, match="takes no mask"):
        osm.softmax(np.ones((2, 8), np.float32), variant="registers", causal=True)
    with pytest.raises(TypeError):
        osm.softmax([[1.0, 2.0]], variant="fast")
    with pytest.raises(ValueError, match="out"):
        osm.softmax(np.ones((2, 8), np.float32), variant="fast", out=np.ones((2, 8), np.float16))


def test_checker_rejects_a_wrong_answer_in_every_dtype():
    for dtype in checks.DTYPES:
        x = checks.random_rows(np, 4, 1000, dtype, seed=2)
        y = osm.softmax(x, variant="fast")
        assert checks.compare_softmax(y, x)[0]
        wrong = y.astype(np.float32)
        wrong[1, int(np.argmax(wrong[1]))] *= 1.05
        assert not checks.compare_softmax(checks.to_dtype(wrong, dtype), x)[0]
        poisoned = checks.poisoned_like(x)
        assert checks.unwritten(poisoned) == x.size


def test_registry_entries_name_their_files():
    for variant in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS:
        assert variant.entry_name in variant.launched_entries, f"{variant.name}: registry entry is never launched"
        assert variant.dtypes == checks.DTYPES
        assert variant.reads_per_element + variant.writes_per_element <= 3


def _recorded():
    files = sorted((REPO_ROOT / "data" / "h200").glob("*-softmax-fast.json"))
    return files[-1] if files else None


def test_compare_script_runs_on_the_recorded_file(tmp_path):
    path = _recorded()
    if path is None:  # no device run recorded yet: exercise the script on a synthetic file instead
        rows = [{"kernel": "copy", "GBps": 4000.0, "ms": 1.0}]
        for n_cols in (1024, 1 << 20):
            for kernel, ms in (("fast", 1.0), ("torch_softmax", 2.0), ("cupy_softmax", 3.0)):
                rows.append({"kernel": kernel, "dtype": "float32", "batch": 4000, "n_rows": 4000, "n_cols": n_cols,
                             "ms": ms, "GBps": 3800.0 / ms, "fraction_of_copy": 0.95 / ms,
                             "variant": "softmax_08_registers"})
        path = tmp_path / "2026-01-01-softmax-fast.json"
        path.write_text(json.dumps({"meta": {"gpu": "synthetic"}, "rows": rows}))
    done = subprocess.run([sys.executable, "-m", "onlinesoftmax.bench.compare_fast", str(path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "targets:" in done.stdout and "geomean_vs_torch" in done.stdout
    from onlinesoftmax.bench import compare_fast

    summary = compare_fast.summarize(json.loads(Path(path).read_text()))
    assert summary["table"] and summary["geomean_vs_torch"]["value"] > 0


def test_bfloat16_by_name_needs_no_ml_dtypes_import():
    """A fresh process must not need `import ml_dtypes` before naming bf16."""
    import subprocess
    import sys

    code = ("from onlinesoftmax.kernels import dispatch; from onlinesoftmax.kernels.softmax import fast_configs as configs; "
            "print(configs.dtype_name('bfloat16'), configs.vector_width('bfloat16'), "
            "dispatch.choose(4, 100, 'bfloat16').variant.name)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["bfloat16", "8"]


class DeviceLike:
    """A numpy array dressed as a cupy one: shape, strides, dtype and a device address (.data.ptr)."""

    def __init__(self, array):
        self.array, self.shape, self.strides, self.dtype = array, array.shape, array.strides, array.dtype
        self.itemsize, self.nbytes, self.ndim = array.itemsize, array.nbytes, array.ndim
        self.data = type("Pointer", (), {"ptr": array.ctypes.data})()


class Recorder:
    """Stands in for a compiled kernel and for the driver: records what a plan builder launches."""

    def __init__(self, launches, name):
        self.launches, self.name = launches, name
        self.max_dynamic_shared_size_bytes = 48 * 1024

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((self.name, tuple(grid), tuple(block), shared_mem))


@pytest.fixture
def recorded_launches(monkeypatch):
    """Plan builders run on numpy arrays with the GPU replaced by recorders: kernels, cluster launches,
    occupancy answers and the partials' allocation. Yields the list of (entry, grid, block, shared)."""
    import cupy

    launches = []
    monkeypatch.setattr(kf, "get_kernel", lambda path, name, defines=(): Recorder(launches, name))

    def prepare_launch(fn, grid, block, shared, cluster, types, **flags):
        return lambda *values: launches.append((fn.name, tuple(grid), tuple(block), shared))
    monkeypatch.setattr(driver, "prepare_launch", prepare_launch)
    monkeypatch.setattr(driver, "max_active_clusters", lambda *args: 8)
    monkeypatch.setattr(driver, "resident_blocks", lambda *args: 4 * 132)
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype=None: DeviceLike(np.empty(shape, dtype)))
    monkeypatch.setattr(cupy.cuda.runtime, "memsetAsync", lambda *args: None)
    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: type("S", (), {"ptr": 0})())
    return launches


def _run_plan(name, x, **options):
    variant = osm.REGISTRY[name]
    x, y = DeviceLike(x), DeviceLike(np.empty_like(x))
    variant.plan(variant, x, y, **options)(x, y, **options)


SHAPES = ((3, 1), (5, 33), (2, 1000), (7, 1024), (3, 4097), (2, 8192), (2, 20000), (2, 32768), (2, 70000),
          (1, 1 << 20))


@pytest.mark.parametrize("name", FAST)
def test_every_entry_a_plan_launches_is_declared(name, recorded_launches):
    """Run the variant's plan builder over shapes, dtypes and both alignments; every entry it launches must
    be in the registry's `launched_entries` (which the compile test checks against ptxas's report)."""
    variant = osm.REGISTRY[name]
    for dtype in checks.DTYPES:
        for n_rows, n_cols in SHAPES:
            if n_cols > variant.max_cols:
                continue
            x = checks.random_rows(np, n_rows, n_cols + 1, dtype, seed=n_cols)
            _run_plan(name, np.ascontiguousarray(x[:, :n_cols]))          # 16-byte rows where N allows
            _run_plan(name, x[:, 1:])                                   # rows that start off 16 bytes
    launched = {entry for entry, *_ in recorded_launches}
    assert launched, f"{name}: nothing was launched"
    declared = set(variant.launched_entries)
    if name == "softmax_12_pipelined":   # rows off 16 bytes go to softmax_10's scalar builds
        declared |= {e for e in kf.CLUSTER.launched_entries if e.endswith("_v1")}
    missing = launched - declared
    assert not missing, f"{name} launches entries the registry does not declare: {sorted(missing)}"
    assert variant.entry_name in variant.launched_entries


def test_split_geometry_is_what_the_launcher_uses(recorded_launches):
    """softmax_11 launches stats with block T and output with block max(T, pow2(C), 32); the registry's
    geometry reports the output launch."""
    x = checks.random_rows(np, 1, 1 << 20, "float32", seed=1)
    _run_plan("softmax_11_split", x, programmatic=False)
    (stats_entry, stats_grid, stats_block, _), (output_entry, output_grid, output_block, _) = recorded_launches
    plan = configs.chunks_11(1, 1 << 20, "float32", 4)
    assert plan.n_chunks > plan.threads  # a case where the two blocks differ
    assert stats_entry.startswith("softmax_11_split_stats") and output_entry.startswith("softmax_11_split_output")
    assert stats_block == (plan.threads,) and output_block == (configs.pow2_at_least(plan.n_chunks),)
    assert stats_grid == output_grid == (plan.n_chunks,)
    geometry = osm.REGISTRY["softmax_11_split"].geometry(1, 1 << 20)
    assert (geometry.grid, geometry.block) == (output_grid, output_block)
    recorded_launches.clear()
    _run_plan("softmax_11_split", checks.random_rows(np, 4, 4096, "float32", seed=2), n_chunks=3, programmatic=False)
    assert recorded_launches[1][2] == (128,)


@pytest.mark.parametrize("name", ("softmax_10_cluster", "softmax_12_pipelined", "softmax_11_split",
                                  "softmax_13_cooperative"))
def test_explicit_chunk_counts_are_checked_before_any_gpu_call(name, recorded_launches):
    """A bad n_chunks is refused by the plan builder before anything is launched, and by the model."""
    variant = osm.REGISTRY[name]
    x = checks.random_rows(np, 2, 4096, "float32", seed=3)
    y = np.empty_like(x)
    any_count = name in ("softmax_11_split", "softmax_13_cooperative")
    too_many = 1025 if any_count else 32
    bad_values = (0, -2, too_many) + (() if any_count else (3, 12))
    for bad in bad_values:
        with pytest.raises(ValueError, match="n_chunks"):
            variant.plan(variant, x, y, n_chunks=bad)
        with pytest.raises(ValueError, match="n_chunks"):
            osm.api.run(variant, x, n_chunks=bad)     # the NumPy model takes the same option
    for bad in (True, 2.0, "4"):
        with pytest.raises(TypeError, match="n_chunks"):
            variant.plan(variant, x, y, n_chunks=bad)
        with pytest.raises(TypeError, match="n_chunks"):
            osm.api.run(variant, x, n_chunks=bad)
    assert not recorded_launches
    good = (1, 7, 1024) if any_count else (1, 2, 16)
    for n_chunks in good:
        assert checks.compare_softmax(osm.api.run(variant, x, n_chunks=n_chunks), x)[0]


def test_occupancy_is_asked_once_per_device_and_again_after_reload(monkeypatch):
    asked = []
    device_id = [0]
    monkeypatch.setattr(driver, "_device_id", lambda: device_id[0])
    monkeypatch.setattr(driver, "_ask_max_active_clusters", lambda *args: asked.append(args) or 7)
    driver._occupancy.clear()
    assert driver.max_active_clusters("softmax/softmax_10_cluster.cu", "k", 256, 0, 2) == 7
    assert driver.max_active_clusters("softmax/softmax_10_cluster.cu", "k", 256, 0, 2) == 7 and len(asked) == 1
    device_id[0] = 1
    driver.max_active_clusters("softmax/softmax_10_cluster.cu", "k", 256, 0, 2)
    assert len(asked) == 2, "another device must be asked"
    loader.reload()
    driver.max_active_clusters("softmax/softmax_10_cluster.cu", "k", 256, 0, 2)
    assert len(asked) == 3, "after reload() (an edited kernel) the occupancy must be asked again"


def test_shared_memory_limit_is_only_ever_raised():
    """raise_shared_limit, called when each plan is built: a smaller shape never lowers the limit a larger
    shape's cached plan needs (the H200 failed a cached larger launch with CUDA_ERROR_INVALID_VALUE)."""
    class Kernel:
        max_dynamic_shared_size_bytes = 48 * 1024

    kernel = Kernel()
    for shared, expected in ((200 * 1024, 200 * 1024), (64 * 1024, 200 * 1024), (16 * 1024, 200 * 1024),
                             (220 * 1024, 220 * 1024)):
        driver.raise_shared_limit(kernel, shared)
        assert kernel.max_dynamic_shared_size_bytes == expected
    kernel.max_dynamic_shared_size_bytes = 44 * 1024      # 48 KiB less 4 KiB of static shared arrays
    driver.raise_shared_limit(kernel, 48 * 1024)          # 48 KiB of dynamic memory beside them needs the raise
    assert kernel.max_dynamic_shared_size_bytes == 48 * 1024


# ---- rows at any start: the 16-byte builds of softmax_09 .. 12 on odd N and misaligned rows ----------------

ANY_START = ("softmax_09_shared", "softmax_10_cluster", "softmax_11_split", "softmax_12_pipelined")
ODD_COLS = (1, 3, 7, 9, 31, 33, 257, 1001, 4097, 50257)


def _rows_at(values: np.ndarray, offset: int = 0, row_stride: int | None = None) -> np.ndarray:
    """A (rows, N) numpy view holding `values` whose first element lies `offset` elements past a
    16-byte boundary, rows `row_stride` elements apart (default N): addresses the test controls."""
    n_rows, n_cols = values.shape
    row_stride = n_cols if row_stride is None else row_stride
    itemsize = values.dtype.itemsize
    count = offset + n_rows * row_stride
    raw = np.zeros(count * itemsize + 16, dtype=np.uint8)
    skip = (-raw.ctypes.data) % 16
    flat = raw[skip:skip + count * itemsize].view(values.dtype)
    view = flat[offset:].reshape(n_rows, row_stride)[:, :n_cols]
    view[...] = values
    assert (view.ctypes.data - offset * itemsize) % 16 == 0
    return view


def _misaligned_views(n_rows: int, n_cols: int, dtype: str, seed: int):
    """Odd-N rows at starts off 16 bytes: x[:, 1:] and x[1:, :] of a contiguous array, a view starting
    3 elements in with a row stride that moves the phase from row to row, and the contiguous rows."""
    base = checks.random_rows(np, n_rows + 1, n_cols + 3, dtype, seed=seed)
    contiguous = _rows_at(np.ascontiguousarray(base[:n_rows, :n_cols]))
    shifted = _rows_at(np.ascontiguousarray(base[:, :n_cols + 1]))
    return (contiguous, shifted[:, 1:], shifted[1:, :n_cols], _rows_at(base[:n_rows, 2:], offset=3, row_stride=n_cols + 2))


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", ANY_START)
def test_models_of_rows_at_any_start_match_the_reference(name, dtype):
    """The models follow the 16-byte builds on rows with a scalar head and tail (odd N, misaligned
    starts, phases changing from row to row) and agree with the float64 reference; some rows must
    really have a head and a tail."""
    vec = configs.vector_width(dtype)
    heads_seen = tails_seen = 0
    for n_cols in ODD_COLS:
        for view in _misaligned_views(3, n_cols, dtype, seed=n_cols):
            heads = configs.row_heads(view, vec)
            heads_seen += int((heads > 0).sum())
            tails_seen += int(((n_cols - heads) % vec > 0).sum())
            y = osm.softmax(view, variant=name)
            assert y.dtype == view.dtype and y.shape == view.shape
            passed, message = checks.compare_softmax(y, view)
            assert passed, f"{name} N={n_cols} heads={heads.tolist()}: {message}"
    assert heads_seen and tails_seen


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", ANY_START)
def test_models_count_head_and_tail_elements_once(name, dtype):
    """The row's maximum in its head (chunk 0's threads) or its tail (the last chunk's threads): a lost or
    doubled element would move the sum by a whole term. Also many chunks, so head and tail lie in different
    blocks, and vec=1 (the scalar build, no head) on the same rows."""
    options = {"softmax_10_cluster": {"n_chunks": 8}, "softmax_12_pipelined": {"n_chunks": 4},
               "softmax_11_split": {"n_chunks": 13}}.get(name, {})
    for n_cols in (3, 33, 4097, 50257):
        for view in _misaligned_views(4, n_cols, dtype, seed=n_cols + 1):
            values = view.astype(np.float32)
            values[0, 0] += 12.0          # a head element whenever row 0 has a head
            values[1, -1] += 12.0         # a tail element whenever row 1 has a tail
            values[2, :2] = values[2, :2].max() + 9.0
            spiked = _rows_at(checks.to_dtype(values, dtype), offset=int(view.ctypes.data % 16 // view.itemsize),
                              row_stride=view.strides[0] // view.itemsize)
            vec = configs.vector_width(dtype)
            assert (configs.row_heads(spiked, vec) == configs.row_heads(view, vec)).all()
            for extra in (options, dict(options, vec=1)) if options else ({}, {"vec": 1}):
                passed, message = checks.compare_softmax(osm.api.run(osm.REGISTRY[name], spiked, **extra), spiked)
                assert passed, f"{name} N={n_cols} {extra}: {message}"


def test_row_heads_and_the_phase_rule():
    """row_heads: elements to the first 16-byte boundary per row (at most N); aligned_for_vectors: the
    16-byte builds of softmax_09 .. 12 need x and y in the same phase; the old rule (07, 08, 13) needs
    rows on 16 bytes and N % V == 0."""
    x = _rows_at(np.zeros((4, 7), np.float32), offset=1)               # rows 28 bytes apart
    assert configs.row_heads(x, 4).tolist() == [3, 0, 1, 2]
    assert configs.row_heads(x, 1).tolist() == [0, 0, 0, 0]
    half = _rows_at(np.zeros((3, 2), np.float16), offset=1, row_stride=5)   # heads 7, 2, 5: at most N = 2
    assert configs.row_heads(half, 8).tolist() == [2, 2, 2]
    same = _rows_at(np.zeros((4, 7), np.float32), offset=1)
    other = _rows_at(np.zeros((4, 7), np.float32), offset=2)
    wider = _rows_at(np.zeros((4, 7), np.float32), offset=1, row_stride=8)   # same start, stride 32 B vs 28 B
    assert configs.aligned_for_vectors(x, same)
    assert not configs.aligned_for_vectors(x, other)
    assert not configs.aligned_for_vectors(x, wider)
    assert configs.aligned_for_vectors(x[:1], wider[:1])                 # one row: the strides do not matter
    assert configs.aligned_for_vectors(DeviceLike(x), DeviceLike(same))
    assert not configs.rows_aligned_for_vectors(x, same)
    aligned = _rows_at(np.zeros((4, 8), np.float32))
    assert configs.rows_aligned_for_vectors(aligned, _rows_at(np.zeros((4, 8), np.float32)))
    assert not configs.rows_aligned_for_vectors(_rows_at(np.zeros((4, 7), np.float32)))


def _run_plan_on(name, x, y, **options):
    variant = osm.REGISTRY[name]
    x, y = DeviceLike(x), DeviceLike(y)
    variant.plan(variant, x, y, **options)(x, y, **options)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_plans_take_the_16_byte_build_for_rows_at_any_start(dtype, recorded_launches):
    """Odd N with x and y rows in the same phase: softmax_09 .. 12 launch their 16-byte entries; phases that
    differ: the scalar entries (softmax_12 hands those rows to softmax_10's). softmax_07, 08 and 13 keep the
    old rule: odd N or rows off 16 bytes run the scalar build."""
    vec = configs.vector_width(dtype)
    for n_rows, n_cols in ((3, 33), (2, 50257), (1, 262147)):
        values = checks.random_rows(np, n_rows, n_cols, dtype, seed=n_cols)
        layouts = {
            "same phase, contiguous": (_rows_at(values), _rows_at(np.zeros_like(values)), vec),
            "same phase, off 16 bytes": (_rows_at(values, offset=1, row_stride=n_cols + 2),
                                         _rows_at(np.zeros_like(values), offset=1, row_stride=n_cols + 2), vec),
            "phases differ": (_rows_at(values, offset=1), _rows_at(np.zeros_like(values)), 1),
        }
        for label, (x, y, expected) in layouts.items():
            for name in ANY_START:
                recorded_launches.clear()
                _run_plan_on(name, x, y)
                launched = {entry for entry, *_ in recorded_launches}
                assert launched, f"{name} {label}: nothing launched"
                assert all(entry.endswith(f"_v{expected}") for entry in launched), (name, label, launched)
                if name == "softmax_12_pipelined":
                    stem = "softmax_12_pipelined" if expected > 1 else "softmax_10_cluster"
                    assert all(entry.startswith(stem) for entry in launched), (label, launched)
            for name in ("softmax_08_registers", "softmax_13_cooperative") if n_cols <= 32768 else ("softmax_13_cooperative",):
                recorded_launches.clear()
                _run_plan_on(name, x, y)
                assert all("_v1" in entry for entry, *_ in recorded_launches), (name, label, recorded_launches)
        recorded_launches.clear()
        _run_plan_on("softmax_09_shared", _rows_at(values), _rows_at(np.zeros_like(values)), vec=1)
        assert all(entry.endswith("_v1") for entry, *_ in recorded_launches)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("name", ANY_START)
def test_models_of_one_hot_rows_at_any_start_are_exact(name, dtype):
    """Rows of -inf with one 0, the 0 walking over heads, chunk edges and tails in every phase: exactly 1 there,
    0 elsewhere, also with many chunks (an element counted twice gives 0.5, one missed NaN)."""
    vec = configs.vector_width(dtype)
    options = ({}, {"n_chunks": 16} if name in ("softmax_10_cluster", "softmax_12_pipelined") else
               {"n_chunks": 13} if name == "softmax_11_split" else {"vec": 1})
    for n_cols in (3, 33, 257):
        cols = set(range(min(n_cols, 2 * vec + 2))) | set(range(max(0, n_cols - 2 * vec - 2), n_cols))
        for n_chunks in (2, 3, 16, 64):
            chunk = configs.chunk_elems_for(n_cols, n_chunks, vec)
            cols |= {c for c in range(chunk - vec - 1, chunk + 2 * vec + 1) if 0 <= c < n_cols}
        cols = np.repeat(sorted(cols), vec)
        values = np.full((len(cols), n_cols), -np.inf, np.float32)
        values[np.arange(len(cols)), cols] = 0.0
        for offset in (0, 3):
            x = _rows_at(checks.to_dtype(values, dtype), offset=offset)
            assert len(set(configs.row_heads(x, vec).tolist())) > 1 or n_cols < vec
            for extra in options:
                y = checks.as_float64(osm.api.run(osm.REGISTRY[name], x, **extra))
                np.testing.assert_array_equal(y, np.where(values == 0, 1.0, 0.0), err_msg=f"{name} N={n_cols} {extra}")


def test_registry_geometry_is_what_the_plans_launch_for_odd_rows(recorded_launches):
    """softmax_09 .. 11 on a contiguous fp32 x of odd N (a fresh y has its phase): the 16-byte build, with the
    grid, block and shared memory the registry's geometry reports."""
    for n_rows, n_cols in ((3, 33), (2, 50257), (1, 1_000_003)):
        x = checks.random_rows(np, n_rows, n_cols, "float32", seed=n_cols)
        for name in ("softmax_09_shared", "softmax_10_cluster", "softmax_11_split"):
            recorded_launches.clear()
            _run_plan(name, x, **({"programmatic": False} if name == "softmax_11_split" else {}))
            entry, grid, block, shared = recorded_launches[-1]
            assert entry.endswith("_f32_v4"), entry
            geometry = osm.REGISTRY[name].geometry(n_rows, n_cols)
            assert (grid, block) == (geometry.grid, geometry.block), (name, n_cols)
            if name != "softmax_11_split":
                assert shared == geometry.shared_bytes, (name, n_cols)
