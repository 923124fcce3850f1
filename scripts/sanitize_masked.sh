#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the masked kernels, softmax_03_online_masked
# and softmax_14_registers_masked, in every dtype, with every kind of mask, on aligned and misaligned rows.
set -u
source "$(dirname "$0")/sanitizer_tools.sh"
sanitize_python <<'PY'
import cupy as cp, numpy as np, onlinesoftmax as osm
from onlinesoftmax import checks
for name in ("softmax_03_online_masked", "softmax_14_registers_masked"):
    for dtype in checks.DTYPES:
        for shape in ((1, 1), (3, 100), (5, 1024), (2, 4097), (2, 32768)):
            x = checks.random_rows(cp, *shape, dtype, max_offset=3)
            rng = cp.random.default_rng(shape[1])
            mask = cp.where(rng.random(shape) < 0.7, 0.0, -cp.inf).astype(cp.float32)
            lengths = rng.integers(0, shape[1] + 1, size=shape[0]).astype(cp.int32)
            for kwargs in ({"mask": "causal"}, {"mask": mask}, {"mask": mask[0]}, {"valid_lengths": lengths},
                           {"mask": mask, "valid_lengths": lengths, "mask_value": -1e6}):
                osm.softmax(x, variant=name, **kwargs)
            if shape[1] > 1:   # rows off 16 bytes: the scalar builds
                osm.softmax(x[:, 1:], variant=name, mask="causal", valid_lengths=lengths)
            cp.cuda.Device().synchronize()
print("sanitized")
PY
