#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the teaching kernels at a few shapes.
set -u
source "$(dirname "$0")/sanitizer_tools.sh"
sanitize_python <<'PY'
import cupy as cp, onlinesoftmax as osm
from onlinesoftmax import checks
for name in ("softmax_00_naive", "softmax_01_safe", "softmax_02_online"):
    for shape in ((1, 1), (3, 100), (2, 4097), (1, 65536)):
        x = checks.random_rows(cp, *shape, max_offset=5)
        osm.softmax(x, variant=name); cp.cuda.Device().synchronize()
print("sanitized")
PY
