#!/usr/bin/env bash
# One device round for the fast kernels (issue #5): probes, GPU tests, benchmark, sanitizers.
#   bash scripts/fast_round.sh "probe tests bench sanitize"      (parts to run; default these four)
#   part "attempts": onlinesoftmax/bench/softmax_fast_attempts.py (suite softmax-fast-attempts, ~20 s)
# Logs and the recorded softmax-fast JSON land in $OUT; set ONLINESOFTMAX_GIT_COMMIT first.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
parts=${1:-probe tests bench sanitize}
has() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }
status=0
if has probe; then
  python3 - <<'PY' 2>&1 | tee "$OUT/probe.log"
import cupy, numpy, ml_dtypes
import onlinesoftmax as osm
from onlinesoftmax.kernels.softmax import fast as kf
print("cupy", cupy.__version__, "numpy", numpy.__version__, "commit", __import__("os").environ.get("ONLINESOFTMAX_GIT_COMMIT"))
try:
    a = cupy.asarray(numpy.arange(4, dtype=numpy.uint16)).view(ml_dtypes.bfloat16)
    print("cupy bf16 view:", a.dtype, a.shape)
except Exception as e:
    print("cupy bf16 view FAILED:", type(e).__name__, e)
print("cluster launch:", kf.cluster_launch_works(), kf.cluster_status())
for v in kf.FAST_VARIANTS:
    r = v.resources(); print(v.name, v.entry_name, r.registers, "regs", r.shared_bytes, "B smem", r.stack_bytes, "B stack")
PY
  (compute-sanitizer --version | tail -1) 2>&1 | tee -a "$OUT/probe.log"
fi
if has tests; then
  timeout 420 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE tests/gpu/test_fast_gpu.py > "$OUT/fast-tests.log" 2>&1
  rc=$?; [ "$rc" = 0 ] || status=1
  grep -E "^(FAILED|ERROR)" "$OUT/fast-tests.log" | head -30; tail -2 "$OUT/fast-tests.log"; echo "tests exit $rc"
fi
if has sanitize; then
  timeout 240 bash scripts/sanitize.sh fast > "$OUT/sanitize.log" 2>&1; rc=$?; [ "$rc" = 0 ] || status=1
  grep -E "exit|ERROR SUMMARY|sanitized|no cluster" "$OUT/sanitize.log"; echo "sanitize exit $rc"
fi
if has bench; then
  timeout 330 python3 -m onlinesoftmax.bench softmax-fast $( has quick && echo --quick ) > "$OUT/bench.log" 2>&1
  rc=$?; [ "$rc" = 0 ] || status=1
  cp data/h200/*-softmax-fast*.json "$OUT/" 2>/dev/null
  sed -n '/^copy ceiling/,$p' "$OUT/bench.log" | tail -110; echo "bench exit $rc"
fi
if has attempts; then
  timeout 120 python3 -m onlinesoftmax.bench softmax-fast-attempts > "$OUT/attempts.log" 2>&1; rc=$?; [ "$rc" = 0 ] || status=1
  cp data/h200/*-softmax-fast-attempts.json "$OUT/" 2>/dev/null
  tail -14 "$OUT/attempts.log"; echo "attempts exit $rc"
fi
echo "round status $status"
exit $status
