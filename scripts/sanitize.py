"""The launches compute-sanitizer watches, one family of kernels per run (scripts/sanitize.sh runs
`python3 scripts/sanitize.py FAMILY` under memcheck, racecheck and synccheck, one process per family
and tool: on the H200 every attention and top-k kernel in one process under racecheck ended after
about 190 s with exit 9 and no output, while each family alone completes clean,
logs/h200/2026-12-03-sanitizer-racecheck-parts.log).

Each family launches its kernels through the API or their plans (as a caller does) in float32,
float16 and bfloat16 on short awkward shapes: tails, misaligned and strided views, rows that see no
key, forced chunk and cluster counts. SANITIZE_ONLY="name,name" limits a family to those kernels.
"""
from __future__ import annotations

import os
import sys

FAMILIES = {}   # name -> (what it covers, the kernels it launches, function)


def family(name: str, about: str, kernels: tuple[str, ...]):
    def register(fn):
        FAMILIES[name] = (about, kernels, fn)
        return fn
    return register


def wanted(name: str) -> bool:
    only = [k for k in os.environ.get("SANITIZE_ONLY", "").split(",") if k]
    return not only or name in only


@family("teaching", "softmax_00 .. 02 at a few shapes", ("softmax_00_naive", "softmax_01_safe", "softmax_02_online"))
def teaching(cp, osm, checks):
    for name in FAMILIES["teaching"][1]:
        if wanted(name):
            for shape in ((1, 1), (3, 100), (2, 4097), (1, 65536)):
                osm.softmax(checks.random_rows(cp, *shape, max_offset=5), variant=name)


@family("masked", "softmax_03 and softmax_14 with every kind of mask, aligned and misaligned rows",
        ("softmax_03_online_masked", "softmax_14_registers_masked"))
def masked(cp, osm, checks):
    for name in FAMILIES["masked"][1]:
        if not wanted(name):
            continue
        for dtype in checks.DTYPES:
            for shape in ((1, 1), (3, 100), (5, 1024), (2, 4097), (2, 32768)):
                x = checks.random_rows(cp, *shape, dtype, max_offset=3)
                rng = cp.random.default_rng(shape[1])
                mask = cp.where(rng.random(shape) < 0.7, 0.0, -cp.inf).astype(cp.float32)
                lengths = rng.integers(0, shape[1] + 1, size=shape[0]).astype(cp.int32)
                for kwargs in ({"causal": True}, {"mask": mask}, {"mask": mask[0]}, {"valid_lengths": lengths},
                               {"mask": mask, "valid_lengths": lengths, "mask_value": -1e6}):
                    osm.softmax(x, variant=name, **kwargs)
                if shape[1] > 1:   # rows off 16 bytes: the scalar builds
                    osm.softmax(x[:, 1:], variant=name, causal=True, valid_lengths=lengths)
                cp.cuda.Device().synchronize()


@family("online-variants", "chapter 03's kernels: softmax_03 with every mask kind, the fp16 softmax_04/05 on views",
        ("softmax_03_online_masked", "softmax_04_online_fp16_vec4", "softmax_05_online_fp16_vec8"))
def online_variants(cp, osm, checks):
    from onlinesoftmax.kernels.softmax import masked as softmax_masked

    if wanted("softmax_03_online_masked"):
        for shape in ((1, 1), (7, 100), (3, 4097), (300, 257)):
            for dtype in checks.DTYPES:
                x = checks.random_rows(cp, *shape, seed=1).astype(dtype)
                for kind in softmax_masked.MASK_KINDS:
                    kwargs, _ = softmax_masked.example_mask(kind, *shape, cp)
                    osm.softmax(x, variant="softmax_03_online_masked", **kwargs)
                osm.softmax(x, causal=True, valid_lengths=cp.zeros(shape[0], cp.int32))
                osm.softmax(x.reshape(1, *shape), causal=True)
                x3 = cp.stack([x, x])   # (2, q, N) scores, one (q, N) mask; lengths outside [0, N]; repeated
                for _ in range(2):
                    osm.softmax(x3, mask=cp.zeros(shape, cp.float32))
                    osm.softmax(x, valid_lengths=cp.asarray([-5, shape[1] + 7] * shape[0], cp.int32)[:shape[0]])
    for name in ("softmax_04_online_fp16_vec4", "softmax_05_online_fp16_vec8"):
        if not wanted(name):
            continue
        base = checks.random_rows(cp, 5, 1003, "float16", seed=2, max_offset=8)
        out = checks.poisoned_like(base)
        for view, y in ((base, None), (base[:, 1:], None), (base[:, 3:1000], out[:, 3:1000]),
                        (base[:, :5], None), (base[:, 7:9], out[:, 7:9])):
            osm.softmax(view, variant=name, out=y)
        osm.softmax(checks.random_rows(cp, 2, 65536, "float16", seed=3, max_offset=8), variant=name)


@family("fast", "softmax_07 .. 13 in every dtype, forced cluster sizes, a partial shared cache, the scalar path",
        ("softmax_07_warp_per_row", "softmax_08_registers", "softmax_09_shared", "softmax_10_cluster",
         "softmax_11_split", "softmax_12_pipelined", "softmax_13_cooperative"))
def fast(cp, osm, checks):
    from onlinesoftmax import api
    from onlinesoftmax.runtime import driver

    runs = [("softmax_07_warp_per_row", (3, 100), {}), ("softmax_07_warp_per_row", (5, 1024), {}),
            ("softmax_07_warp_per_row", (2, 33), {"vec": 1}),
            ("softmax_08_registers", (2, 4097), {}), ("softmax_08_registers", (2, 32768), {}),
            ("softmax_08_registers", (2, 2048), {"vec": 1}),
            ("softmax_09_shared", (2, 65536), {}), ("softmax_09_shared", (1, 100003), {"cache_elems": 4096}),
            ("softmax_11_split", (2, 200000), {}), ("softmax_11_split", (1, 4099), {"n_chunks": 3}),
            ("softmax_13_cooperative", (2, 200000), {}),
            ("softmax_13_cooperative", (7, 4099), {"n_chunks": 3, "max_groups": 2}),
            ("softmax_13_cooperative", (3, 70000), {"n_chunks": 300, "vec": 1})]
    if driver.cluster_launch_works():
        runs += [("softmax_10_cluster", (2, 65536), {"n_chunks": 4}),
                 ("softmax_10_cluster", (1, 300001), {"n_chunks": 16, "cache_elems": 8192}),
                 ("softmax_10_cluster", (3, 1000), {"n_chunks": 2}),
                 ("softmax_10_cluster", (5, 1001), {"n_chunks": 2}),     # odd rows: the scalar (V = 1) build
                 ("softmax_10_cluster", (3, 40001), {"n_chunks": 4, "cache_elems": 4096}),
                 ("softmax_12_pipelined", (9, 65536), {"n_chunks": 4, "max_clusters": 2}),
                 ("softmax_12_pipelined", (5, 4096), {"n_chunks": 2, "max_clusters": 1, "cache_elems": 512}),
                 ("softmax_12_pipelined", (3, 96), {"n_chunks": 16})]
    else:
        print("no cluster launch:", driver.cluster_status())
    for name, shape, options in runs:
        if wanted(name):
            for dtype in checks.DTYPES:
                api.run(osm.REGISTRY[name], checks.random_rows(cp, *shape, dtype, seed=1), **options)
                cp.cuda.Device().synchronize()


@family("logsumexp", "logsumexp_01/02/03, log_softmax_01/02/03/04/05 (lane groups, misaligned and strided views, "
        "chunk counts, cache and cluster sizes), softmax_06",
        ("logsumexp_01_online", "log_softmax_01_online", "log_softmax_02_registers", "softmax_06_split_merge",
         "logsumexp_02_state", "logsumexp_03_split", "log_softmax_03_split", "log_softmax_04_shared",
         "log_softmax_05_cluster"))
def logsumexp(cp, osm, checks):
    from onlinesoftmax.kernels.logsumexp import state as logsumexp_state
    from onlinesoftmax.runtime.plan import get_runner

    lse_v, log_v, reg_v, split_v = (osm.REGISTRY[name] for name in FAMILIES["logsumexp"][1][:4])
    for n_rows, n_cols in ((1, 1), (3, 5), (7, 100), (2, 4097), (1, 65536), (5, 600), (3, 32768), (130, 256)):
        for dtype in log_v.dtypes:
            base = checks.random_rows(cp, n_rows + 2, n_cols + 9, dtype, max_offset=5)
            for x in (base[:n_rows, :n_cols], base[1:n_rows + 1, 1:n_cols + 1], base[::2, 3:n_cols + 3]):
                for group in (1, 4, 32, 64, 1024):
                    if wanted(log_v.name):   # misaligned output rows
                        out = checks.poisoned_like(checks.random_rows(cp, x.shape[0], n_cols + 1, dtype))[:, 1:]
                        get_runner(log_v, x, out, {"group": group})(x, out)
                    if wanted(lse_v.name):
                        lse = cp.empty(x.shape[0], cp.float32)
                        get_runner(lse_v, x, lse, {"group": group})(x, lse)
                if n_cols <= reg_v.max_cols and wanted(reg_v.name):
                    out = checks.poisoned_like(checks.random_rows(cp, x.shape[0], n_cols + 1, dtype))[:, 1:]
                    get_runner(reg_v, x, out, {})(x, out)
                    out = checks.poisoned_like(x)
                    get_runner(reg_v, x, out, {})(x, out)
                if dtype == "float32" and n_cols <= 65536 and wanted(split_v.name):
                    for blocks_per_row in (None, 3, 64):
                        osm.api.run(split_v, x, blocks_per_row=blocks_per_row)
                if wanted("logsumexp_03_split") and x.strides[1] == x.itemsize:   # chunks: one, a few, many
                    lse = cp.empty(x.shape[0], cp.float32)
                    for n_chunks in (None, 1, 3, 1024):
                        get_runner(osm.REGISTRY["logsumexp_03_split"], x, lse, {"n_chunks": n_chunks})(x, lse)
                if wanted("log_softmax_03_split") and x.strides[1] == x.itemsize:   # misaligned output rows too
                    out = checks.poisoned_like(checks.random_rows(cp, x.shape[0], n_cols + 1, dtype))[:, 1:]
                    for n_chunks in (None, 1, 3, 1024):
                        get_runner(osm.REGISTRY["log_softmax_03_split"], x, out, {"n_chunks": n_chunks})(x, out)
                if wanted("log_softmax_04_shared") and x.strides[1] == x.itemsize:   # whole, part and no cache
                    for out in (checks.poisoned_like(x),   # x's phase: 16-byte build; the other: scalar
                                checks.poisoned_like(checks.random_rows(cp, x.shape[0], n_cols + 1, dtype))[:, 1:]):
                        for cache in (None, 1024, 0):
                            get_runner(osm.REGISTRY["log_softmax_04_shared"], x, out, {"cache_elems": cache})(x, out)
                if wanted("log_softmax_05_cluster") and x.strides[1] == x.itemsize:   # cluster sizes, caches
                    out = checks.poisoned_like(x)
                    for n_chunks, cache in ((None, None), (1, 0), (2, 1024), (16, None)):
                        get_runner(osm.REGISTRY["log_softmax_05_cluster"], x, out,
                                   {"n_chunks": n_chunks, "cache_elems": cache})(x, out)
                if wanted("logsumexp_02_state") and x.strides[1] == x.itemsize:   # shard statistics, with targets
                    targets = cp.arange(x.shape[0], dtype=cp.int64) % (n_cols + 2)
                    logsumexp_state.row_state_planes(x)
                    logsumexp_state.row_state_planes(x, targets=targets, vocab_start=1)
            cp.cuda.Device().synchronize()


@family("attention", "attention_01_blocked (every head dimension) and attention_13_fp32_pipelined (fp32, d 64 and 128): "
        "causal and not, partial tiles, blind rows", ("attention_01_blocked", "attention_13_fp32_pipelined"))
def attention(cp, osm, checks):
    _attention_cuda_cores(cp, osm, checks, (("attention_01_blocked", (70, 33, 1)), ("attention_01_blocked", (5, 130, 2))))
    if wanted("attention_13_fp32_pipelined"):
        for d in (64, 128):
            for n_q, n_k, kv in ((70, 33, 1), (5, 130, 2), (130, 200, 1), (1, 1, 1)):
                q = checks.random_rows(cp, 2 * 2 * n_q, d, "float32", seed=1).reshape(2, 2, n_q, d)
                k = checks.random_rows(cp, 2 * kv * n_k, d, "float32", seed=2).reshape(2, kv, n_k, d)
                v = checks.random_rows(cp, 2 * kv * n_k, d, "float32", seed=3).reshape(2, kv, n_k, d)
                for causal in (False, True):
                    osm.attention(q, k, v, causal=causal, return_lse=True, variant="attention_13_fp32_pipelined")


@family("decode", "attention_02_decode_split (one split and several) and attention_06_decode_mma",
        ("attention_02_decode_split", "attention_06_decode_mma"))
def decode(cp, osm, checks):
    _attention_cuda_cores(cp, osm, checks, (("attention_02_decode_split", (1, 3000, 1)),
                                            ("attention_02_decode_split", (3, 700, 2)),
                                            ("attention_02_decode_split", (1, 31, 2))))
    if wanted("attention_06_decode_mma"):
        for dtype in ("float16", "bfloat16"):
            for d in (64, 128):
                for batch, heads, kv, n_k in ((1, 32, 8, 5000), (2, 8, 2, 700), (1, 4, 1, 31)):
                    q = checks.random_rows(cp, batch * heads, d, dtype, seed=7).reshape(batch, heads, 1, d)
                    k = checks.random_rows(cp, batch * kv * n_k, d, dtype, seed=8).reshape(batch, kv, n_k, d)
                    osm.attention(q, k, k, causal=False, return_lse=True, variant="attention_06_decode_mma")


@family("paged", "attention_08_paged_decode: page sizes 1, 16, 48 and 256, lengths 0 to 5000, grouped heads, causal; "
        "unchecked calls with page numbers and lengths outside the arrays", ("attention_08_paged_decode",))
def paged(cp, osm, checks):
    if not wanted("attention_08_paged_decode"):
        return
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            for page_size, lengths, heads, kv, n_q in ((16, (5000, 0, 1, 333), 32, 8, 1), (1, (70, 3), 4, 4, 2),
                                                       (256, (257, 4096), 8, 2, 3)):
                per_seq = -(-max(lengths) // page_size)
                n_pages = len(lengths) * per_seq + 1
                q = checks.random_rows(cp, len(lengths) * heads * n_q, d, dtype, seed=7).reshape(len(lengths), heads, n_q, d)
                pool = checks.random_rows(cp, n_pages * page_size * kv, d, dtype, seed=8).reshape(n_pages, page_size, kv, d)
                table = cp.arange(len(lengths) * per_seq, dtype=cp.int32)[::-1].reshape(len(lengths), per_seq).copy()
                osm.attention(q, kv_cache=(pool, pool), page_table=table, cache_lengths=cp.asarray(lengths, cp.int32),
                              causal=n_q > 1, return_lse=True)
            # unchecked: wrong page numbers (far past the pool, negative) and a length past the table
            q = checks.random_rows(cp, 3 * 8, d, dtype, seed=9).reshape(3, 8, 1, d)
            pool = checks.random_rows(cp, 12 * 48 * 2, d, dtype, seed=10).reshape(12, 48, 2, d)
            table = cp.arange(12, dtype=cp.int32).reshape(3, 4)
            table[0, 1], table[1, 0] = 10**8, -5
            osm.attention(q, kv_cache=(pool, pool), page_table=table, check_cache=False,
                          cache_lengths=cp.asarray([100, 30, 4 * 48 + 7], cp.int32))


@family("varlen", "attention_09_varlen: packed sequences of 0 to 700 tokens, grouped heads, causal and not",
        ("attention_09_varlen",))
def varlen(cp, osm, checks):
    if not wanted("attention_09_varlen"):
        return
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            for q_lengths, k_lengths, heads, kv in (((1, 0, 700, 129), (1, 4, 700, 300), 8, 2),
                                                    ((5, 33), (2, 0), 4, 4)):
                cu_q, cu_k = (cp.asarray([0, *cp.cumsum(cp.asarray(n)).tolist()], cp.int32) for n in (q_lengths, k_lengths))
                q = checks.random_rows(cp, int(cu_q[-1]) * heads, d, dtype, seed=7).reshape(-1, heads, d)
                k = checks.random_rows(cp, int(cu_k[-1]) * kv, d, dtype, seed=8).reshape(-1, kv, d)
                for causal in (False, True):
                    osm.attention(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=causal, return_lse=True)


@family("attention_backward", "attention_backward_01_blocked, 02_mma, 03_pipelined and 04_wgmma (on compute "
        "capability 9.0): d 64 and 128, causal, grouped heads, n_q != n_k, atomic and deterministic dq",
        ("attention_backward_01_blocked", "attention_backward_02_mma", "attention_backward_03_pipelined",
         "attention_backward_04_wgmma"))
def attention_backward(cp, osm, checks):
    kernels = {"blocked": "attention_backward_01_blocked", "mma": "attention_backward_02_mma",
               "pipelined": "attention_backward_03_pipelined", "wgmma": "attention_backward_04_wgmma"}
    hopper = cp.cuda.Device().compute_capability == "90"
    for dtype in checks.DTYPES:
        runs = [(variant, deterministic) for variant, deterministic in
                (("blocked", False), ("blocked", True), ("mma", False), ("pipelined", False), ("wgmma", False))
                if wanted(kernels[variant]) and (variant == "blocked" or dtype != "float32")
                and (variant != "wgmma" or hopper)]
        for d in (64, 128):
            for heads, kv, n_q, n_k, causal in ((4, 2, 70, 33, True), (2, 2, 1, 300, False), (2, 1, 129, 129, True)):
                q = checks.random_rows(cp, 2 * heads * n_q, d, dtype, seed=1).reshape(2, heads, n_q, d)
                k = checks.random_rows(cp, 2 * kv * n_k, d, dtype, seed=2).reshape(2, kv, n_k, d)
                out, lse = osm.attention(q, k, k, causal=causal, return_lse=True, variant="blocked")
                for variant, deterministic in runs:
                    osm.attention_backward(out, q, k, k, out, lse, causal=causal, deterministic=deterministic,
                                           variant=variant)


def _attention_cuda_cores(cp, osm, checks, cases):
    for dtype in checks.DTYPES:
        for d in (32, 64, 96, 128):
            for variant, (n_q, n_k, kv) in cases:
                if not wanted(variant):
                    continue
                q = checks.random_rows(cp, 2 * 2 * n_q, d, dtype, seed=1).reshape(2, 2, n_q, d)
                k = checks.random_rows(cp, 2 * kv * n_k, d, dtype, seed=2).reshape(2, kv, n_k, d)
                v = checks.random_rows(cp, 2 * kv * n_k, d, dtype, seed=3).reshape(2, kv, n_k, d)
                for causal in (False, True):
                    osm.attention(q, k, v, causal=causal, return_lse=True, variant=variant)


@family("attention-mma", "attention_03 .. 05, 07 and 10 .. 12 (tensor cores): partial tiles, blind rows, grouped heads",
        ("attention_03_mma", "attention_04_ldmatrix", "attention_05_pipelined", "attention_07_fragment_reuse",
         "attention_10_wgmma", "attention_11_wgmma_tma", "attention_12_wgmma_overlap"))
def attention_mma(cp, osm, checks):
    from onlinesoftmax.kernels.attention import mma as am
    from onlinesoftmax.kernels.attention import wgmma as aw

    hopper = cp.cuda.Device().compute_capability == "90"
    for variant in (*am.VARIANTS, *(aw.HOPPER if hopper else ())):
        if not wanted(variant.name):
            continue
        for dtype in am.DTYPES:
            for d in am.SUPPORTED_D:
                for n_q, n_k, kv in ((130, 70, 1), (33, 200, 2), (1, 1, 1)):
                    q = checks.random_rows(cp, 1 * 2 * n_q, d, dtype, seed=1).reshape(1, 2, n_q, d)
                    k = checks.random_rows(cp, 1 * kv * n_k, d, dtype, seed=2).reshape(1, kv, n_k, d)
                    v = checks.random_rows(cp, 1 * kv * n_k, d, dtype, seed=3).reshape(1, kv, n_k, d)
                    for causal in (False, True):
                        osm.attention(q, k, v, causal=causal, return_lse=True, variant=variant.name)


@family("topk", "softmax_topk_01 .. 05: the paper's four (64- and 32-thread blocks) and the warp-per-row kernel",
        ("softmax_topk_01_topk_only", "softmax_topk_02_safe_unfused", "softmax_topk_03_safe_fused",
         "softmax_topk_04_online_fused", "softmax_topk_05_warp_rows"))
def topk(cp, osm, checks):
    for dtype in checks.DTYPES:
        for n_rows, n_cols, k in ((3, 1, 1), (2, 33, 4), (2, 1000, 16), (1, 4097, 32), (2, 70000, 5), (1100, 300, 2),
                                  (3000, 1000, 5)):
            x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=4)[:, :n_cols - (n_cols > 3)]   # misaligned tails
            for variant in ("softmax_topk_02_safe_unfused", "softmax_topk_03_safe_fused", "softmax_topk_04_online_fused"):
                if wanted(variant):
                    osm.softmax_topk(x, min(k, x.shape[1]), return_lse=True, variant=variant)
            if wanted("softmax_topk_01_topk_only"):
                osm.topk_logits(x, min(k, x.shape[1]))
        for n_rows, n_cols, k in ((3, 1, 1), (9, 33, 4), (17, 300, 8), (6, 264, 8), (5, 1024, 2)):   # both load orders
            if wanted("softmax_topk_05_warp_rows"):
                x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=5)
                osm.softmax_topk(x, k, return_lse=True, variant="softmax_topk_05_warp_rows")


@family("topk-split", "softmax_topk_06_split: chunks of one step and of many, candidate buffers that fill",
        ("softmax_topk_06_split",))
def topk_split(cp, osm, checks):
    if not wanted("softmax_topk_06_split"):
        return
    for dtype in checks.DTYPES:
        for n_rows, n_cols, k in ((1, 3, 2), (2, 4097, 50), (1, 151936, 20), (3, 20000, 1024), (40, 3000, 5),
                                  (300, 20000, 300), (600, 9000, 20)):
            x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=6)[:, 1:]
            for rows in (x, cp.sort(x.astype(cp.float32), axis=1).astype(x.dtype)):   # ascending: all candidates
                osm.softmax_topk(rows, k, return_lse=True, renormalize=True, variant="softmax_topk_06_split")


@family("backward", "softmax_backward_01 and log_softmax_backward_01: lane groups of 4 .. 1024, aligned and not",
        ("softmax_backward_01_rows", "log_softmax_backward_01_rows"))
def backward(cp, osm, checks):
    for name, function in (("softmax_backward_01_rows", osm.softmax_backward),
                           ("log_softmax_backward_01_rows", osm.log_softmax_backward)):
        if not wanted(name):
            continue
        for dtype in checks.DTYPES:
            for n_rows, n_cols in ((1, 1), (3, 37), (65, 512), (5, 4099), (2, 70000)):
                y = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=8)
                dy = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=9)
                function(y[:, :n_cols], dy[:, :n_cols])
                function(y[:, 1:], dy[:, 1:])       # rows off 16 bytes: element by element


@family("cross_entropy", "cross_entropy_01_rows and cross_entropy_02_cluster: every option, in place and not, rows "
        "aligned and not, no gradient, rows of one to eight chunks, the public call's steps around them; "
        "cross_entropy_03_from_lse: every option, blocks "
        "at a row's start and past it", ("cross_entropy_01_rows", "cross_entropy_02_cluster", "cross_entropy_03_from_lse"))
def cross_entropy(cp, osm, checks):
    from onlinesoftmax.runtime import device
    from onlinesoftmax.runtime.plan import get_runner

    for name in ("cross_entropy_01_rows", "cross_entropy_02_cluster"):
        if not wanted(name) or device.compute_capability() < osm.REGISTRY[name].min_cc:
            continue
        variant = osm.REGISTRY[name]
        for dtype in checks.DTYPES:
            for n_rows, n_cols in ((1, 1), (3, 37), (65, 512), (5, 4099), (2, 70000), (2, 262143)):
                x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=8)
                t = cp.arange(n_rows, dtype=cp.int64) % n_cols
                t[::3] = -100
                for rows in (x[:, :n_cols], x[:, 1:]):   # the second off 16 bytes: element by element
                    for options, grad, in_place in (({}, False, False), ({"label_smoothing": 0.1, "z_loss": 1e-4,
                                                     "softcap": 30.0}, True, False), ({}, True, True)):
                        rows = cp.ascontiguousarray(rows) if in_place else rows
                        loss, lse = cp.empty(n_rows, cp.float32), cp.empty(n_rows, cp.float32)
                        given = {"targets": t, "lse": lse, "dx": (rows if in_place else cp.empty_like(rows))
                                 if grad else None, "grad_scale": cp.ones(1, cp.float32) if grad else None}
                        full = {"ignore_index": -100, "label_smoothing": 0.0, "z_loss": 0.0, "softcap": 0.0}
                        get_runner(variant, rows, loss, {**full, **options, **given})(rows, loss, **given)
    if wanted("cross_entropy_01_rows"):   # the public call's steps (_targets, _reduce) around the row kernel
        for n_rows in (1, 33, 1500):
            x = checks.random_rows(cp, n_rows, 300, "float32", seed=3)
            t = cp.arange(n_rows, dtype=cp.int64) % 300
            t[::5], t[1::7] = -100, 300                           # ignored, and outside [0, V)
            for reduction in ("mean", "sum", "none"):
                osm.cross_entropy_with_grad(x, t, reduction=reduction, check_targets=False)
                osm.loss.cross_entropy_with_grad_deferred(x, t, reduction=reduction)
    cross_entropy_from_lse(cp, osm, checks)


def cross_entropy_from_lse(cp, osm, checks):
    """cross_entropy_03_from_lse: every option, rows aligned and not, blocks at the row's start and past
    it, ignored rows."""
    from onlinesoftmax.kernels.cross_entropy.from_lse import gradient_from_lse

    if not wanted("cross_entropy_03_from_lse"):
        return
    for dtype in checks.DTYPES:
        for n_rows, n_cols in ((1, 1), (3, 37), (65, 512), (5, 4099), (2, 70000)):
            x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=8)
            m = cp.asarray(x.astype(cp.float32).max(axis=1))
            log_l = cp.full(n_rows, 3.0, cp.float32)
            t = cp.arange(n_rows, dtype=cp.int64) % n_cols
            t[::3] = -100
            for block in (x[:, :n_cols], x[:, 1:]):   # the second off 16 bytes: element by element
                for first, options in ((0, {}), (n_cols // 2, {"uniform": 1e-5, "hit": 0.9, "z_loss": 1e-4,
                                                                "softcap": 30.0})):
                    gradient_from_lse(block, m, log_l, t, first=first, scale=0.5, **options)


@family("sampling", "sampling_01_rows and sampling_02_split: no filter, every filter, per-row parameters, greedy "
        "rows, rows aligned and not", ("sampling_01_rows", "sampling_02_split"))
def sampling(cp, osm, checks):
    for name in ("sampling_01_rows", "sampling_02_split"):
        if not wanted(name):
            continue
        for dtype in checks.DTYPES:
            for n_rows, n_cols in ((1, 1), (3, 37), (65, 512), (5, 4099), (2, 70000)):
                x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=8)
                per_row = {"temperature": cp.linspace(0, 2, n_rows, dtype=cp.float32),
                           "top_k": cp.arange(n_rows, dtype=cp.int32) * 7 - 1, "top_p": cp.full(n_rows, 0.8, cp.float32)}
                for rows in (x[:, :n_cols], x[:, 1:]):
                    osm.sample(rows, generator=1, variant=name)
                    osm.sample(rows, temperature=0.7, top_k=20, top_p=0.9, min_p=0.05, generator=2, variant=name)
                    osm.sample(rows, generator=3, variant=name, **per_row)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in FAMILIES:
        print("usage: python3 scripts/sanitize.py FAMILY\nfamilies:\n" +
              "\n".join(f"  {name:16} {about}" for name, (about, _, _) in FAMILIES.items()), file=sys.stderr)
        return 2
    import cupy as cp

    import onlinesoftmax as osm
    from onlinesoftmax import checks

    FAMILIES[argv[0]][2](cp, osm, checks)
    cp.cuda.Device().synchronize()
    print("sanitized", argv[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
