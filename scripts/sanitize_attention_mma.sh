#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the tensor-core attention kernels
# (attention_03_mma, attention_04_ldmatrix, attention_05_pipelined, attention_07_fragment_reuse): bfloat16 and float16, d = 64
# and 128, causal and not, short awkward shapes (a partial query tile, a short last key tile, rows
# that see no key, grouped-query heads). Host API errors are not reported (cuda-bindings probes the
# driver). Prints one "<tool> exit N" line per tool; exit 0 = nothing found.
# ATTENTION_SANITIZE_VARIANTS (comma-separated kernel names) limits the run to those kernels.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
source "$(dirname "$0")/sanitizer_tools.sh"
sanitize_python <<'PY'
import os

import cupy as cp
import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels import attention_mma as am

launches = 0
only = [name for name in os.environ.get("ATTENTION_SANITIZE_VARIANTS", "").split(",") if name]
for variant in [v for v in am.VARIANTS if not only or v.name in only]:
    for dtype in am.DTYPES:
        for d in am.SUPPORTED_D:
            for n_q, n_k, kv in ((130, 70, 1), (33, 200, 2), (1, 1, 1)):
                q = checks.random_rows(cp, 1 * 2 * n_q, d, dtype, seed=1).reshape(1, 2, n_q, d)
                k = checks.random_rows(cp, 1 * kv * n_k, d, dtype, seed=2).reshape(1, kv, n_k, d)
                v = checks.random_rows(cp, 1 * kv * n_k, d, dtype, seed=3).reshape(1, kv, n_k, d)
                for causal in (False, True):
                    osm.attention(q, k, v, causal=causal, return_lse=True, variant=variant.name)
                    launches += 1
cp.cuda.Device().synchronize()
print("sanitized", launches, "calls")
PY
