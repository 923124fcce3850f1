#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the attention kernels
# (attention_01_blocked, attention_02_decode_split with one split and with several, causal and
# not, every head dimension) and the fused softmax + top-k kernels, all three
# dtypes, short awkward shapes; the top-k kernels are softmax_topk_01 .. 06 (the paper's four, the
# warp-per-row kernel, the split kernel with its two launches). Host API errors are not reported
# (cuda-bindings probes the driver).
# Prints one "<tool> exit N" line per tool; exit 0 = nothing found.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
source "$(dirname "$0")/sanitizer_tools.sh"
sanitize_python <<'PY'
import cupy as cp
import onlinesoftmax as osm
from onlinesoftmax import checks

launches = 0
for dtype in checks.DTYPES:
    for d in (32, 64, 96, 128):
        for variant, (n_q, n_k, kv) in (("blocked", (70, 33, 1)), ("blocked", (5, 130, 2)),
                                         ("decode", (1, 3000, 1)), ("decode", (3, 700, 2)), ("decode", (1, 31, 2))):
            q = checks.random_rows(cp, 2 * 2 * n_q, d, dtype, seed=1).reshape(2, 2, n_q, d)
            k = checks.random_rows(cp, 2 * kv * n_k, d, dtype, seed=2).reshape(2, kv, n_k, d)
            v = checks.random_rows(cp, 2 * kv * n_k, d, dtype, seed=3).reshape(2, kv, n_k, d)
            for causal in (False, True):
                osm.attention(q, k, v, causal=causal, return_lse=True, variant=variant)
                launches += 1
    # the last two: many rows, the 64- and 32-thread blocks (softmax_topk.block_threads)
    for n_rows, n_cols, k in ((3, 1, 1), (2, 33, 4), (2, 1000, 16), (1, 4097, 32), (2, 70000, 5), (1100, 300, 2),
                              (3000, 1000, 5)):
        x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=4)[:, :n_cols - (n_cols > 3)]   # misaligned tails too
        for variant in ("softmax_topk_02_safe_unfused", "softmax_topk_03_safe_fused", "softmax_topk_04_online_fused"):
            osm.softmax_topk(x, min(k, x.shape[1]), return_lse=True, variant=variant)
            launches += 1
        osm.topk_logits(x, min(k, x.shape[1]))            # softmax_topk_01_topk_only
        launches += 1
    for n_rows, n_cols, k in ((3, 1, 1), (9, 33, 4), (17, 300, 8), (6, 264, 8), (5, 1024, 2)):   # the warp-per-row kernel (both load orders)
        x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=5)
        osm.softmax_topk(x, k, return_lse=True, variant="softmax_topk_05_warp_rows")
        launches += 1
    for n_rows, n_cols, k in ((1, 3, 2), (2, 4097, 50), (1, 151936, 20), (3, 20000, 1024), (40, 3000, 5)):
        x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=6)[:, 1:]           # the split kernel
        osm.softmax_topk(x, k, return_lse=True, renormalize=True, variant="softmax_topk_06_split")
        launches += 1
cp.cuda.Device().synchronize()
print("sanitized", launches, "calls")
PY
