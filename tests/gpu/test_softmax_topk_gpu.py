"""GPU tier for the softmax + top-k kernels (softmax_topk_01 .. 06) on the edge matrix, into poisoned
outputs, against the float64 definition (checks.compare_topk): N from 1 to 2^20, k from 1 to
min(N, 1024), ties, -inf / +inf / NaN rows, misaligned and strided views, every dtype.

    pytest -m gpu tests/gpu/test_softmax_topk_gpu.py -k quick     # about 30 s with the compilation
    pytest -m gpu tests/gpu/test_softmax_topk_gpu.py               # the whole matrix (minutes)

The quick tests use one list bucket per dtype (K = 8 in fp32, K = 32 in bf16) so that a fresh
machine compiles a dozen single-entry builds (topk_build.cuh); the others cover every bucket.
Rows are checked as a few of them at the start and end when a tensor is large (the float64
reference of a gigabyte would take longer than the kernels)."""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks, reference, topk
from onlinesoftmax.kernels.topk import softmax_topk as kt
from onlinesoftmax.kernels.topk import moe
from onlinesoftmax.kernels.topk import split as sp
from onlinesoftmax.runtime import plan

pytestmark = pytest.mark.gpu

LIST_KERNELS = (kt.SAFE_UNFUSED, kt.SAFE_FUSED, kt.ONLINE_FUSED)
CHECKED_ROWS = 6


def edge(a):
    """The first and last CHECKED_ROWS rows of a 2-D cupy array, on the host."""
    head, tail = checks.host(a[:CHECKED_ROWS]), checks.host(a[max(CHECKED_ROWS, a.shape[0] - CHECKED_ROWS):])
    return np.concatenate([head, tail]) if tail.size else head


def assert_kernel(variant, x, k, renormalize=False):
    n = x.shape[0]
    probs = checks.poisoned_like(x, shape=(n, k))
    columns = cp.full((n, k), checks.COLUMN_POISON, dtype=cp.int64)
    lse = checks.poisoned_like(x, dtype="float32", shape=(n,))
    topk.run(variant, x, k, renormalize, probs, columns, lse)
    cp.cuda.Device().synchronize()
    on = "probabilities" if variant is kt.SAFE_UNFUSED else "logits"
    ok, message = checks.compare_topk(edge(probs), edge(columns), edge(x), k, renormalize, on, edge(lse[:, None])[:, 0])
    assert ok, f"{variant.name} {tuple(x.shape)} {x.dtype} k={k} renormalize={renormalize}: {message}"


def assert_logits(x, k):
    values, columns = osm.topk_logits(x, k)
    x64 = np.asarray(checks.as_float64(edge(x)))
    want = reference.topk_order(x64)[:, :k]
    np.testing.assert_array_equal(edge(columns), want)
    np.testing.assert_array_equal(np.asarray(checks.as_float64(edge(values))), np.take_along_axis(x64, want, axis=1))


QUICK_K = {"float32": 5, "bfloat16": 30}          # buckets 8 and 32


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_quick_every_kernel_on_awkward_rows(dtype):
    k = QUICK_K[dtype]
    special, _ = checks.special_rows(np, 300, dtype)
    ties = checks.to_dtype(np.array([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0] * 6, [0.0] * 36, [-0.0, 0.0] * 18]), dtype)
    base = checks.random_rows(cp, 7, 70001, dtype, seed=3)
    inputs = [checks.random_rows(cp, 3, n, dtype, seed=n) for n in (33, 4097)] + \
        [checks.on_device(cp, special), checks.on_device(cp, ties), base[:, 5:], base[1::3, 1:40000]]
    for x in inputs:
        kk = min(k, x.shape[1])
        for variant in LIST_KERNELS + (sp.SPLIT,):
            assert_kernel(variant, x, kk)
            assert_kernel(variant, x, kk, renormalize=True)
        assert_logits(x, kk)
        if x.shape[1] <= moe.MAX_COLS:
            assert_kernel(moe.WARP_ROWS, x, min(8, kk))


def test_quick_the_shapes_of_the_benchmark():
    """The headline shape, sampling rows, gating and the largest k, as the suite runs them."""
    assert_kernel(kt.ONLINE_FUSED, checks.random_rows(cp, 4000, 32768, "float32", seed=1), 5)
    for n_rows, n_cols, k in ((1, 151936, 30), (64, 128256, 30), (1, 2**20, 30)):
        assert_kernel(sp.SPLIT, checks.random_rows(cp, n_rows, n_cols, "bfloat16", seed=n_cols), k)
    assert_kernel(moe.WARP_ROWS, checks.random_rows(cp, 4096, 512, "bfloat16", seed=2), 8)
    assert_kernel(sp.SPLIT, checks.random_rows(cp, 256, 262144, "float32", seed=3), 1024)
    assert_kernel(sp.SPLIT, checks.random_rows(cp, 2, 2**20, "float32", seed=4), 256)


@pytest.mark.parametrize("dtype", checks.DTYPES)
def test_warp_rows_both_load_orders(dtype):
    """softmax_topk_05_warp_rows: 16-byte loads for aligned rows whose N is a multiple of a vector, scalar
    loads otherwise (a misaligned view, an odd N), each E bucket, every k, special rows and ties."""
    vec = moe.vector_width(dtype)
    special, _ = checks.special_rows(np, 256, dtype)
    for n_cols in (8, 16, 24, 64, 128, 136, 256, 264, 384, 512, 520, 1000, 1024):
        base = checks.random_rows(cp, 19, n_cols + vec, dtype, seed=n_cols)
        inputs = {"aligned": cp.ascontiguousarray(base[:, :n_cols]), "strided": base[:, :n_cols],
                  "misaligned": base[:, 1:n_cols + 1]}
        for layout, x in inputs.items():
            vectors = n_cols % vec == 0 and layout != "misaligned"
            for k in (1, 2, 3, 5, 8):
                if k > n_cols:
                    continue
                runner = topk.run(moe.WARP_ROWS, x, k, False, *(cp.empty((x.shape[0], k), t) for t in (x.dtype, cp.int64)))
                assert runner.entry.endswith("_vec") == vectors, (layout, n_cols, runner.entry)
                assert_kernel(moe.WARP_ROWS, x, k, renormalize=k % 2 == 0)
    shifted = np.concatenate([special[:, :1], special], axis=1)          # the same rows one element later
    for x in (checks.on_device(cp, special), checks.on_device(cp, shifted)[:, 1:]):
        for k in (1, 4, 8):
            assert_kernel(moe.WARP_ROWS, x, k)


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
@pytest.mark.parametrize("n_rows", (1024, 3000))
def test_the_smaller_blocks_of_many_rows(dtype, n_rows):
    """Many rows get 64 or 32 threads a row (softmax_topk.block_threads): every list kernel and
    topk_logits there, on misaligned rows of the edge lengths, special rows among them."""
    special, _ = checks.special_rows(np, 1000, dtype)
    for n_cols in (1, 33, 1000, 4097, 32768, 100003):
        x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=n_cols)[:, 1:]
        if n_cols == 1000:   # copied as bits (bf16 has no cupy kernels of its own)
            bits = cp.uint32 if x.itemsize == 4 else cp.uint16
            x.view(bits)[:special.shape[0]] = checks.on_device(cp, special).view(bits)
        for k in (1, 2, 5, 8):
            if k > n_cols:
                continue
            assert kt.block_threads(n_rows, n_cols, k) in ((64, 32) if n_rows >= 1024 and n_cols < 131072 else (128,))
            for variant in LIST_KERNELS:
                assert_kernel(variant, x, k, renormalize=k == 2)
            assert_logits(x, k)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("n_cols", checks.EDGE_COLS + checks.HUGE_COLS)
def test_every_kernel_and_bucket_on_the_edge_matrix(dtype, n_cols):
    n_rows = 3 if n_cols >= 2**16 else 7
    x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=n_cols)[:, 1:]      # a misaligned view
    for k in sorted({1, 2, 4, 5, 8, 9, 16, 17, 32} & set(range(1, n_cols + 1))):
        for variant in LIST_KERNELS:
            assert_kernel(variant, x, k, renormalize=k % 2 == 0)
        assert_logits(x, k)
        if n_cols <= moe.MAX_COLS and k <= moe.MAX_K:
            assert_kernel(moe.WARP_ROWS, x, k)
    for k in sorted({1, 7, 33, 50, 100, 256, 1000, 1024, n_cols} & set(range(1, sp.max_k(n_cols, dtype) + 1))):
        assert_kernel(sp.SPLIT, x, k, renormalize=k % 2 == 1)


@pytest.mark.parametrize("name", [v.name for v in LIST_KERNELS + (sp.SPLIT, moe.WARP_ROWS)])
def test_special_rows_in_every_dtype(name):
    variant = osm.REGISTRY[name]
    for dtype in checks.DTYPES:
        special, _ = checks.special_rows(np, 300, dtype)
        for k in (1, 8):
            assert_kernel(variant, checks.on_device(cp, special), k)
        all_neg_inf = cp.full((3, 1000), -np.inf, dtype=cp.float32).astype(checks.np_dtype(dtype)) \
            if dtype != "bfloat16" else checks.on_device(cp, checks.to_dtype(np.full((3, 1000), -np.inf), dtype))
        probs, columns = osm.softmax_topk(all_neg_inf if variant is not moe.WARP_ROWS else all_neg_inf[:, :512], 3,
                                          variant=variant.name)
        assert bool(cp.isnan(checks.as_float64(probs)).all()) and columns.get().tolist() == [[0, 1, 2]] * 3


def test_the_plans_are_reused_and_the_api_agrees_with_the_runner():
    x = checks.random_rows(cp, 64, 128256, "bfloat16", seed=9)
    first = osm.softmax_topk(x, 20, return_lse=True)
    cached = plan.cached_runners()
    second = osm.softmax_topk(x, 20, return_lse=True)
    assert plan.cached_runners() == cached
    for a, b in zip(first, second):
        np.testing.assert_array_equal(checks.as_float64(a).get(), checks.as_float64(b).get())
    assert checks.compare_topk(first[0], first[1], x, 20, lse=first[2])[0]


def test_the_split_plan_owns_its_records():
    """The launches write and read the records at an address fixed when the plan was built: the runner
    must keep that array, or the pool gives its memory to later allocations, which every call then
    overwrites. Repeated calls of one plan give the first call's answer."""
    import gc

    x = checks.random_rows(cp, 3, 151936, "float32", seed=10)
    probs, columns, lse = topk._outputs(3, 50, x.dtype)
    runner = plan.get_runner(sp.SPLIT, x, probs, {"k": 50, "renormalize": False, "columns": columns, "lse": lse})
    assert runner.shape.n_chunks > 1
    gc.collect()
    sentinels = [cp.full(a.size, 7, a.dtype) for a in runner.workspace for _ in range(4)]
    answers = []
    for _ in range(3):
        runner(x, probs, columns=columns, lse=lse)
        answers.append((probs.copy(), columns.copy(), lse.copy()))
    cp.cuda.Device().synchronize()
    assert all(bool((s == 7).all()) for s in sentinels), "a later allocation was written by the split launches"
    assert checks.compare_topk(*answers[0][:2], x, 50, lse=answers[0][2])[0]
    for later in answers[1:]:
        for a, b in zip(answers[0], later):
            np.testing.assert_array_equal(a.get(), b.get())
