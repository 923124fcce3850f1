#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over chapter 03's kernels:
# softmax_03_online_masked with every kind of mask, and the fp16 kernels softmax_04/05 on
# aligned and misaligned views (scalar head, vector body, scalar tail, scalar-store path).
# Host API errors are not reported (cuda-bindings probes the driver for entry points).
# Prints one "<tool> exit N" line per tool; exit 0 = nothing found.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
source "$(dirname "$0")/sanitizer_tools.sh"
sanitize_python <<'PY'
import cupy as cp
import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels import softmax_masked

for shape in ((1, 1), (7, 100), (3, 4097), (300, 257)):
    for dtype in ("float32", "float16", "bfloat16"):
        x = checks.random_rows(cp, *shape, seed=1).astype(dtype)
        for kind in softmax_masked.MASK_KINDS:
            kwargs, _ = softmax_masked.example_mask(kind, *shape, cp)
            osm.softmax(x, variant="softmax_03_online_masked", **kwargs)
        osm.softmax(x, mask="causal", valid_lengths=cp.zeros(shape[0], cp.int32))
        osm.softmax(x.reshape(1, *shape), mask="causal")
        # (2, q, N) scores with one (q, N) mask; lengths outside [0, N]; repeated (the fast path)
        x3 = cp.stack([x, x])
        for _ in range(2):
            osm.softmax(x3, mask=cp.zeros(shape, cp.float32))
            osm.softmax(x, valid_lengths=cp.asarray([-5, shape[1] + 7] * shape[0], cp.int32)[:shape[0]])
for name in ("softmax_04_online_fp16_vec4", "softmax_05_online_fp16_vec8"):
    base = checks.random_rows(cp, 5, 1003, "float16", seed=2, max_offset=8)
    out = checks.poisoned_like(base)
    for view, y in ((base, None), (base[:, 1:], None), (base[:, 3:1000], out[:, 3:1000]),
                    (base[:, :5], None), (base[:, 7:9], out[:, 7:9])):
        osm.softmax(view, variant=name, out=y)
    osm.softmax(checks.random_rows(cp, 2, 65536, "float16", seed=3, max_offset=8), variant=name)
cp.cuda.Device().synchronize()
print("sanitized")
PY
