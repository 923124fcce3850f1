#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over logsumexp_01_online,
# log_softmax_01_online and log_softmax_02_registers in float32, float16 and bfloat16 (launched through their plans, as the
# API does; the LSE output float32 for every dtype), and softmax_06_split_merge: several
# lane-group sizes, misaligned and strided views, outputs with another alignment than their
# input, empty chunks.
set -u
source "$(dirname "$0")/sanitizer_tools.sh"
sanitize_python <<'PY'
import cupy as cp, onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.runtime.plan import get_runner
LSE = osm.REGISTRY["logsumexp_01_online"]
LOG_SOFTMAX = osm.REGISTRY["log_softmax_01_online"]
REGISTERS = osm.REGISTRY["log_softmax_02_registers"]
SPLIT = osm.REGISTRY["softmax_06_split_merge"]
for n_rows, n_cols in ((1, 1), (3, 5), (7, 100), (2, 4097), (1, 65536), (5, 600), (3, 32768), (130, 256)):
    for dtype in LOG_SOFTMAX.dtypes:
        base = checks.random_rows(cp, n_rows + 2, n_cols + 9, dtype, max_offset=5)
        for x in (base[:n_rows, :n_cols], base[1:n_rows + 1, 1:n_cols + 1], base[::2, 3:n_cols + 3]):
            for group in (1, 4, 32, 64, 1024):
                out = checks.poisoned_like(checks.random_rows(cp, x.shape[0], n_cols + 1, dtype))[:, 1:]
                get_runner(LOG_SOFTMAX, x, out, {"group": group})(x, out)  # misaligned output rows
                lse = cp.empty(x.shape[0], cp.float32)
                get_runner(LSE, x, lse, {"group": group})(x, lse)
            if n_cols <= REGISTERS.max_cols:   # lane groups, blocks, the scalar builds (misaligned rows)
                out = checks.poisoned_like(checks.random_rows(cp, x.shape[0], n_cols + 1, dtype))[:, 1:]
                get_runner(REGISTERS, x, out, {})(x, out)
                out = checks.poisoned_like(x)
                get_runner(REGISTERS, x, out, {})(x, out)
            if dtype == "float32" and n_cols <= 65536:
                for blocks_per_row in (None, 3, 64):
                    osm.api.run(SPLIT, x, blocks_per_row=blocks_per_row)
        cp.cuda.Device().synchronize()
print("sanitized")
PY
