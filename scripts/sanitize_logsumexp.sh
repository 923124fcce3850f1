#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over logsumexp_01_online,
# log_softmax_01_online(_fp16) and softmax_06_split_merge: several lane-group sizes, misaligned
# and strided views, outputs with another alignment than their input, empty chunks.
set -u
status=0
for tool in memcheck racecheck synccheck; do
  compute-sanitizer --tool "$tool" --error-exitcode 3 python3 - <<'PY' || status=1
import cupy as cp, onlinesoftmax as osm
from onlinesoftmax import checks
LSE = osm.REGISTRY["logsumexp_01_online"]
SPLIT = osm.REGISTRY["softmax_06_split_merge"]
LOG_SOFTMAX = {"float32": osm.REGISTRY["log_softmax_01_online"], "float16": osm.REGISTRY["log_softmax_01_online_fp16"]}
for n_rows, n_cols in ((1, 1), (3, 5), (7, 100), (2, 4097), (1, 65536)):
    for dtype, variant in LOG_SOFTMAX.items():
        base = checks.random_rows(cp, n_rows + 2, n_cols + 9, dtype=dtype, max_offset=5)
        for x in (base[:n_rows, :n_cols], base[1:n_rows + 1, 1:n_cols + 1], base[::2, 3:n_cols + 3]):
            for group in (1, 4, 32, 64, 1024):
                out = cp.empty((x.shape[0], n_cols + 1), dtype=dtype)[:, 1:]  # misaligned output rows
                osm.api.run(variant, x, out=out, group=group)
                if dtype == "float32":
                    osm.api.run(LSE, x, group=group)
            if dtype == "float32":
                for blocks_per_row in (None, 3, 64):
                    osm.api.run(SPLIT, x, blocks_per_row=blocks_per_row)
        cp.cuda.Device().synchronize()
print("sanitized")
PY
  echo "$tool exit $?"
done
exit $status
