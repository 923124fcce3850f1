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
from onlinesoftmax.kernels import softmax_fast as kf
from onlinesoftmax import checks_fast as cf
from onlinesoftmax.runtime.loader import REPO_ROOT

ml_dtypes = pytest.importorskip("ml_dtypes")
FAST = tuple(v.name for v in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS)
COLS = (1, 2, 3, 31, 33, 100, 255, 256, 257, 1000, 1024, 4096, 4097, 40000)


@pytest.mark.parametrize("dtype", cf.DTYPES)
@pytest.mark.parametrize("name", FAST)
def test_models_match_the_reference(name, dtype):
    for n_cols in COLS:
        if n_cols > osm.REGISTRY[name].max_cols:
            continue
        x = cf.random_rows(np, 3, n_cols, dtype, seed=n_cols)
        y = osm.softmax(x, name)
        assert y.dtype == x.dtype and y.shape == x.shape
        passed, message = cf.compare(y, x)
        assert passed, f"{name} N={n_cols}: {message}"


@pytest.mark.parametrize("dtype", cf.DTYPES)
@pytest.mark.parametrize("name", FAST)
def test_models_follow_the_nan_convention(name, dtype):
    for n_cols in (1, 3, 100, 1000, 4097):
        if n_cols > osm.REGISTRY[name].max_cols:
            continue
        x, nan_rows = cf.special_rows(np, n_cols, dtype)
        y = cf.as_float64(osm.softmax(x, name))
        assert (np.isnan(y).all(axis=1) == nan_rows).all(), f"{name} N={n_cols}"
        assert not np.isnan(y[~nan_rows]).any()
        assert cf.compare(osm.softmax(x, name), x)[0]


def test_model_partition_options_agree():
    """Scalar path, forced cluster sizes, chunk counts: the same function, and a row of 1M."""
    x = cf.random_rows(np, 2, 70001, "float32", seed=4)
    for y in (kf.simulate_09(x, vec=1), kf.simulate_10(x, n_chunks=16), kf.simulate_10(x, n_chunks=2, vec=1),
              kf.simulate_11(x, n_chunks=7), kf.simulate_11(x, n_chunks=1000), kf.simulate_13(x, n_chunks=3),
              kf.simulate_13(x, n_chunks=700), kf.simulate_13(x, n_chunks=64, vec=1)):
        assert cf.compare(y, x)[0]
    big = cf.random_rows(np, 1, 1 << 20, "bfloat16", seed=5)
    assert cf.compare(kf.simulate_10(big), big)[0]


def test_fast_dispatch_on_numpy_runs_the_chosen_model():
    for n_rows, n_cols in ((4, 100), (4, 5000), (2, 70000)):
        x = cf.random_rows(np, n_rows, n_cols, "float16", seed=1)
        chosen = kf.choose(n_rows, n_cols, "float16").variant.name
        np.testing.assert_array_equal(osm.softmax(x, "fast"), osm.softmax(x, chosen))


@pytest.mark.parametrize(("n_rows", "n_cols", "clusters", "expected"), [
    (4000, 256, True, "softmax_07_warp_per_row"),
    (1, 1024, True, "softmax_07_warp_per_row"),
    (4000, 4096, True, "softmax_08_registers"),
    (4000, 8192, True, "softmax_08_registers"),
    (4000, 16384, True, "softmax_09_shared"),
    (4000, 32768, True, "softmax_10_cluster"),
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
    assert kf.choose(n_rows, n_cols, "float32", clusters=clusters).variant.name == expected


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize(("n_rows", "n_cols", "clusters", "expected"), [
    (4000, 16384, True, "softmax_09_shared"),
    (4000, 65536, True, "softmax_12_pipelined"),
    (4000, 65536, False, "softmax_09_shared"),
    (64, 65536, True, "softmax_10_cluster"),
    (4000, 262144, True, "softmax_10_cluster"),
    (1024, 1 << 20, True, "softmax_11_split"),
])
def test_dispatch_choices_16_bit(n_rows, n_cols, clusters, expected, dtype):
    assert kf.choose(n_rows, n_cols, dtype, clusters=clusters).variant.name == expected


def test_configurations_hold_the_row_and_exist_in_the_source():
    for dtype in cf.DTYPES:
        for vec in (kf.vector_width(dtype), 1):
            for n_cols in (1, 7, 31, 32, 33, 255, 512, 1000, 1024):
                nv, g = kf.config_07(n_cols, dtype, vec)
                assert nv * g * vec >= n_cols
            for n_cols in (1025, 2048, 5000, 16384, 20000, 32768):
                nv, t = kf.config_08(n_cols, dtype, vec)
                assert nv * t * vec >= n_cols
    for variant in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS:
        source = variant.path.read_text()
        entries = kf.entry_names(variant)
        assert len(set(entries)) == len(entries) and variant.launched_entries == tuple(entries)
        for entry in entries:
            # <stem>_<tag>_v<V>[_n<NV>_g<G> | _n<NV>_t<T>]: the prefix must be pasted together in the file
            match = re.fullmatch(r"(softmax_\d\d_[a-z_]+?)_(f32|f16|bf16)_v(\d+)(_n\d+_[gt]\d+)?", entry)
            assert match, entry
            assert f"{match.group(1)}_##TAG##_v##V" in source, f"{entry}: no such entry macro in {variant.file}"
    with pytest.raises(ValueError, match="at most 1024"):
        kf.config_07(1025, "float32", 4)
    with pytest.raises(ValueError, match="at most 32768"):
        kf.config_08(40000, "bfloat16", 8)


def test_plans_respect_hardware_limits():
    for n_rows in (1, 10, 64, 4000):
        for n_cols in (4096, 65536, 1 << 18, 1 << 20, 3_000_001):
            for dtype in cf.DTYPES:
                vec = kf.vector_width(dtype)
                p10 = kf.plan_10(n_rows, n_cols, dtype, vec)
                assert p10.n_chunks in (1, 2, 4, 8, 16)
                assert p10.n_chunks * p10.chunk_elems >= n_cols and p10.chunk_elems % vec == 0
                assert p10.cache_elems * kf.ITEMSIZE[dtype] <= kf.SHARED_LIMIT_BYTES
                p11 = kf.plan_11(n_rows, n_cols, dtype, vec)
                assert 1 <= p11.n_chunks <= 1024 and p11.n_chunks * p11.chunk_elems >= n_cols
                assert 128 <= p11.threads <= 1024
                p13 = kf.plan_13(n_rows, n_cols, dtype, vec)
                assert 1 <= p13.n_chunks <= 1024 and p13.n_chunks * p13.chunk_elems >= n_cols
                assert p13.cache_elems == p13.chunk_elems and p13.chunk_elems % vec == 0
                assert kf.coop_buffers(vec) * p13.chunk_elems * kf.ITEMSIZE[dtype] <= kf.SHARED_LIMIT_BYTES
                if n_rows == 4000 and n_cols >= 65536:   # many rows: ~32 KB chunks, several blocks per SM
                    assert p13.chunk_elems * kf.ITEMSIZE[dtype] <= kf.COOP_CHUNK_BYTES
    with pytest.raises(ValueError, match="shared memory"):
        kf.plan_13(1, 1 << 20, "float32", 4, n_chunks=2)   # 2 MB chunks cannot be cached


def test_cooperative_fold_merge_matches_a_sequential_fold():
    """softmax_13's merge with more chunks than threads: thread t folds states t, t + T, ... in order."""
    x = cf.random_rows(np, 2, 70000, "float32", seed=8)
    plan = kf.plan_13(2, 70000, "float32", 4, n_chunks=700)
    assert plan.n_chunks > plan.threads
    y = kf.simulate_13(x, n_chunks=700).astype(np.float64)
    assert cf.compare(kf.simulate_13(x, n_chunks=700), x)[0]
    np.testing.assert_allclose(y, kf.simulate_11(x, n_chunks=700).astype(np.float64), rtol=4e-7, atol=0)


def test_bad_input_messages():
    with pytest.raises(TypeError, match="float32, float16, bfloat16"):
        osm.softmax(np.ones((2, 8), np.float64), "fast")
    with pytest.raises(TypeError):
        osm.softmax(np.ones((2, 8), np.int32), "softmax_08_registers")
    with pytest.raises(ValueError, match="2-D"):
        osm.softmax(np.ones(8, np.float32), "fast")
    with pytest.raises(ValueError, match="non-empty"):
        osm.softmax(np.ones((0, 8), np.float32), "fast")
    with pytest.raises(ValueError, match="at most 1024"):
        osm.softmax(np.ones((2, 2000), np.float32), "softmax_07_warp_per_row")
    with pytest.raises(ValueError, match="mask"):
        osm.softmax(np.ones((2, 8), np.float32), "fast", mask="causal")
    with pytest.raises(TypeError):
        osm.softmax([[1.0, 2.0]], "fast")
    with pytest.raises(ValueError, match="out"):
        osm.softmax(np.ones((2, 8), np.float32), "fast", out=np.ones((2, 8), np.float16))


def test_checker_rejects_a_wrong_answer_in_every_dtype():
    for dtype in cf.DTYPES:
        x = cf.random_rows(np, 4, 1000, dtype, seed=2)
        y = osm.softmax(x, "fast")
        assert cf.compare(y, x)[0]
        wrong = y.astype(np.float32)
        wrong[1, int(np.argmax(wrong[1]))] *= 1.05
        assert not cf.compare(cf.to_dtype(wrong, dtype), x)[0]
        poisoned = cf.poisoned_like(x)
        assert cf.unwritten(poisoned) == x.size


def test_registry_entries_name_their_files():
    for variant in kf.FAST_VARIANTS + kf.ATTEMPT_VARIANTS:
        assert variant.entry_name in variant.launched_entries, f"{variant.name}: registry entry is never launched"
        assert variant.dtypes == cf.DTYPES
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
    done = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "compare_fast.py"), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "targets:" in done.stdout and "geomean_vs_torch" in done.stdout
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import compare_fast

    summary = compare_fast.summarize(json.loads(Path(path).read_text()))
    assert summary["table"] and summary["geomean_vs_torch"]["value"] > 0


def test_bfloat16_by_name_needs_no_ml_dtypes_import():
    """A fresh process must not need `import ml_dtypes` before naming bf16."""
    import subprocess
    import sys

    code = ("from onlinesoftmax.kernels import softmax_fast as kf; "
            "print(kf.dtype_name('bfloat16'), kf.vector_width('bfloat16'), kf.choose(4, 100, 'bfloat16').variant.name)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["bfloat16", "8"]


@pytest.mark.parametrize(("name", "launch"), [("softmax_10_cluster", kf.launch_10), ("softmax_12_pipelined", kf.launch_12),
                                              ("softmax_11_split", kf.launch_11),
                                              ("softmax_13_cooperative", kf.launch_13)])
def test_explicit_chunk_counts_are_checked_before_any_gpu_call(name, launch):
    """numpy arrays: a bad n_chunks must be refused before the launcher touches the GPU."""
    variant = osm.REGISTRY[name]
    x = cf.random_rows(np, 2, 4096, "float32", seed=3)
    y = np.empty_like(x)
    any_count = name in ("softmax_11_split", "softmax_13_cooperative")
    too_many = 1025 if any_count else 32
    bad_values = (0, -2, too_many) + (() if any_count else (3, 12))
    for bad in bad_values:
        with pytest.raises(ValueError, match="n_chunks"):
            launch(variant, x, y, n_chunks=bad)
        with pytest.raises(ValueError, match="n_chunks"):
            osm.api.run(variant, x, n_chunks=bad)     # the NumPy model takes the same option
    for bad in (True, 2.0, "4"):
        with pytest.raises(TypeError, match="n_chunks"):
            launch(variant, x, y, n_chunks=bad)
        with pytest.raises(TypeError, match="n_chunks"):
            osm.api.run(variant, x, n_chunks=bad)
    good = (1, 7, 1024) if any_count else (1, 2, 16)
    for n_chunks in good:
        assert cf.compare(osm.api.run(variant, x, n_chunks=n_chunks), x)[0]


def test_cluster_occupancy_cache_follows_the_device_and_the_source(tmp_path, monkeypatch):
    """max_active_clusters asks again on another device or after a source edit; its caches stay bounded."""
    import os

    asked = []
    device = [0]
    monkeypatch.setattr(kf, "_device_id", lambda: device[0])
    monkeypatch.setattr(kf, "_max_active_clusters", lambda *args: asked.append(args) or 7)
    monkeypatch.setattr(kf, "_occupancy", {})
    source = tmp_path / "k.cu"
    source.write_text('extern "C" __global__ void k() {}\n')
    assert kf.max_active_clusters("k", 256, 0, 2, str(source)) == 7
    assert kf.max_active_clusters("k", 256, 0, 2, str(source)) == 7 and len(asked) == 1
    device[0] = 1
    kf.max_active_clusters("k", 256, 0, 2, str(source))
    assert len(asked) == 2, "another device must be asked"
    source.write_text('extern "C" __global__ void k() { }\n')
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    kf.max_active_clusters("k", 256, 0, 2, str(source))
    assert len(asked) == 3, "an edited source must be asked again"
    cache = {}
    for i in range(3 * kf.CACHE_LIMIT):
        kf._remember(cache, i, i)
    assert 0 < len(cache) <= kf.CACHE_LIMIT and cache[3 * kf.CACHE_LIMIT - 1] == 3 * kf.CACHE_LIMIT - 1


def test_split_geometry_is_what_the_launcher_uses():
    """softmax_11: stats block T; output block max(T, pow2(C), 32), which geometry_11 reports."""
    plan = kf.plan_11(1, 1 << 20, "float32", 4)
    assert plan.n_chunks > plan.threads  # a case where the two blocks differ
    stats, output = kf.launches_11(1, plan)
    assert stats.block == (plan.threads,) and output.block == (kf._pow2_at_least(plan.n_chunks),)
    assert stats.grid == output.grid == (plan.n_chunks,)
    assert osm.REGISTRY["softmax_11_split"].geometry(1, 1 << 20) == output
    assert kf.launches_11(4, kf.plan_11(4, 4096, "float32", 4, n_chunks=3))[1].block == (128,)


def test_shared_memory_limit_is_only_ever_raised():
    """_set_shared, called before every launch of a kernel with > 48 KB: a smaller shape never lowers the
    limit a larger shape needs (the H200 failed a cached larger launch with CUDA_ERROR_INVALID_VALUE)."""
    class Kernel:
        max_dynamic_shared_size_bytes = 48 * 1024

    kernel = Kernel()
    for shared, expected in ((200 * 1024, 200 * 1024), (64 * 1024, 200 * 1024), (16 * 1024, 200 * 1024),
                             (220 * 1024, 220 * 1024)):
        kf._set_shared(kernel, shared)
        assert kernel.max_dynamic_shared_size_bytes == expected
