#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the attention kernels
# (attention_01_blocked, attention_02_decode_split with one split and with several, causal and
# not, every head dimension) and the fused softmax + top-k kernels, all three
# dtypes, short awkward shapes; the top-k kernels are softmax_topk_01 .. 06 (the paper's four, the
# warp-per-row kernel, the split kernel with its two launches). Host API errors are not reported
# (cuda-bindings probes the driver).
# attention_06_decode_mma (grouped heads, float16 and bfloat16) runs with one split and several.
# SANITIZE_ONLY (comma-separated kernel names) limits the run to those kernels. Without it the
# kernels run in four families, one process per family and tool: on the H200 the whole program in
# one process under racecheck ended after about 190 s with exit 9 and no output, while each family
# alone completes clean (logs/h200/2026-12-03-sanitizer-racecheck-parts.log).
# Prints one "<tool> exit N" line per tool and family; exit 0 = nothing found.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
source "$(dirname "$0")/sanitizer_tools.sh"
program=$(cat <<'PY'
import os

import cupy as cp
import onlinesoftmax as osm
from onlinesoftmax import checks

only = [name for name in os.environ.get("SANITIZE_ONLY", "").split(",") if name]
def wanted(name):
    return not only or name in only

launches = 0
for dtype in checks.DTYPES:
    for d in (32, 64, 96, 128):
        for variant, (n_q, n_k, kv) in (("attention_01_blocked", (70, 33, 1)), ("attention_01_blocked", (5, 130, 2)),
                                         ("attention_02_decode_split", (1, 3000, 1)),
                                         ("attention_02_decode_split", (3, 700, 2)),
                                         ("attention_02_decode_split", (1, 31, 2))):
            if not wanted(variant):
                continue
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
            if wanted(variant):
                osm.softmax_topk(x, min(k, x.shape[1]), return_lse=True, variant=variant)
                launches += 1
        if wanted("softmax_topk_01_topk_only"):
            osm.topk_logits(x, min(k, x.shape[1]))
            launches += 1
    for n_rows, n_cols, k in ((3, 1, 1), (9, 33, 4), (17, 300, 8), (6, 264, 8), (5, 1024, 2)):   # the warp-per-row kernel (both load orders)
        if wanted("softmax_topk_05_warp_rows"):
            x = checks.random_rows(cp, n_rows, n_cols, dtype, seed=5)
            osm.softmax_topk(x, k, return_lse=True, variant="softmax_topk_05_warp_rows")
            launches += 1
    # the split kernel: a chunk per step (few rows) and chunks of many steps, whose candidate buffers
    # fill and are selected (many rows; ascending rows make every element a candidate)
    for n_rows, n_cols, k in ((1, 3, 2), (2, 4097, 50), (1, 151936, 20), (3, 20000, 1024), (40, 3000, 5),
                              (300, 20000, 300), (600, 9000, 20)):
        if not wanted("softmax_topk_06_split"):
            continue
        x = checks.random_rows(cp, n_rows, n_cols + 1, dtype, seed=6)[:, 1:]
        for rows in (x, cp.sort(x.astype(cp.float32), axis=1).astype(x.dtype)):   # (cupy sorts no bfloat16)
            osm.softmax_topk(rows, k, return_lse=True, renormalize=True, variant="softmax_topk_06_split")
            launches += 1
    if dtype != "float32" and wanted("attention_06_decode_mma"):
        for d in (64, 128):
            for batch, heads, kv, n_k in ((1, 32, 8, 5000), (2, 8, 2, 700), (1, 4, 1, 31)):
                q = checks.random_rows(cp, batch * heads, d, dtype, seed=7).reshape(batch, heads, 1, d)
                k = checks.random_rows(cp, batch * kv * n_k, d, dtype, seed=8).reshape(batch, kv, n_k, d)
                osm.attention(q, k, k, causal=False, return_lse=True, variant="attention_06_decode_mma")
                launches += 1
cp.cuda.Device().synchronize()
print("sanitized", launches, "calls")
PY
)
families=("attention_01_blocked"
          "attention_02_decode_split,attention_06_decode_mma"
          "softmax_topk_01_topk_only,softmax_topk_02_safe_unfused,softmax_topk_03_safe_fused,softmax_topk_04_online_fused,softmax_topk_05_warp_rows"
          "softmax_topk_06_split")
[ -n "${SANITIZE_ONLY:-}" ] && families=("$SANITIZE_ONLY")
status=0
for family in "${families[@]}"; do
  echo "## $family"
  SANITIZE_ONLY=$family sanitize_python <<< "$program" || status=1
done
exit $status
