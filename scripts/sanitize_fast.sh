#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the fast kernels softmax_07 .. 13,
# all three dtypes, a few shapes each (including forced cluster sizes, a partial shared-memory
# cache and the scalar path). Host API errors are not reported: cuda-bindings probes the
# driver with cuGetProcAddress for entry points this driver lacks, which is no kernel error.
# SANITIZE_KERNELS="name ..." limits the runs to those kernels.
# Prints one "<tool> exit N" line per tool; exit 0 = nothing found.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
source "$(dirname "$0")/sanitizer_tools.sh"
sanitize_python <<'PY'
import os

import cupy as cp
import onlinesoftmax as osm
from onlinesoftmax import api, checks
from onlinesoftmax.kernels import softmax_fast as kf
from onlinesoftmax.kernels import dispatch, softmax_fast_configs as configs
from onlinesoftmax.runtime import driver

runs = [("softmax_07_warp_per_row", (3, 100), {}), ("softmax_07_warp_per_row", (5, 1024), {}),
        ("softmax_07_warp_per_row", (2, 33), {"vec": 1}),
        ("softmax_08_registers", (2, 4097), {}), ("softmax_08_registers", (2, 32768), {}),
        ("softmax_08_registers", (2, 2048), {"vec": 1}),
        ("softmax_09_shared", (2, 65536), {}), ("softmax_09_shared", (1, 100003), {"cache_elems": 4096}),
        ("softmax_11_split", (2, 200000), {}), ("softmax_11_split", (1, 4099), {"n_chunks": 3}),
        ("softmax_13_cooperative", (2, 200000), {}), ("softmax_13_cooperative", (7, 4099), {"n_chunks": 3, "max_groups": 2}),
        ("softmax_13_cooperative", (3, 70000), {"n_chunks": 300, "vec": 1})]
if driver.cluster_launch_works():
    runs += [("softmax_10_cluster", (2, 65536), {"n_chunks": 4}),
             ("softmax_10_cluster", (1, 300001), {"n_chunks": 16, "cache_elems": 8192}),
             ("softmax_10_cluster", (3, 1000), {"n_chunks": 2}),
             ("softmax_12_pipelined", (9, 65536), {"n_chunks": 4, "max_clusters": 2}),
             ("softmax_12_pipelined", (5, 4096), {"n_chunks": 2, "max_clusters": 1, "cache_elems": 512}),
             ("softmax_12_pipelined", (3, 96), {"n_chunks": 16})]
else:
    print("no cluster launch:", driver.cluster_status())
only = os.environ.get("SANITIZE_KERNELS", "").split()  # e.g. "softmax_12_pipelined": only those
runs = [r for r in runs if not only or r[0] in only]
for name, shape, options in runs:
    for dtype in checks.DTYPES:
        x = checks.random_rows(cp, *shape, dtype, seed=1)
        api.run(osm.REGISTRY[name], x, **options)
        cp.cuda.Device().synchronize()
print("sanitized", len(runs) * 3, "launches")
PY
