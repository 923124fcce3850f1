#!/usr/bin/env bash
# One check-and-measure round on a GPU machine (the lent H200): GPU tests, benchmarks,
# chapters run as scripts, sanitizers. Everything it records lands in data/<gpu>/ and
# is packed into $OUT/round.tar.gz (with the logs) so it comes back in one file.
#
#   bash scripts/device_round.sh "<pytest selection>" "<benchmark scripts>" [chapters] [sanitize]
#
# Set ONLINESOFTMAX_GIT_COMMIT to the commit the tree was sent from.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tests=${1:-tests/gpu}; benches=${2:-}; chapters=${3:-}; sanitize=${4:-}
day=$(date -u +%F)
gpu_dir=data/h200
mkdir -p "$gpu_dir"
log="$OUT/round.log"
status=0

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

{
  echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import cupy, numpy, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__, 'numpy', numpy.__version__)"
  python3 -c "import torch; print('torch', torch.__version__)" 2>/dev/null
  echo "commit ${ONLINESOFTMAX_GIT_COMMIT:-unknown}"
} 2>&1 | tee "$log"

if [ -n "$tests" ]; then
  echo "== GPU tier: pytest -m gpu $tests" | tee -a "$log"
  python3 -m pytest -m gpu -q -p no:cacheprovider $tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -40 >> "$log"
  rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=1
  { echo "# pytest -m gpu $tests on $(nvidia-smi --query-gpu=name --format=csv,noheader), $day, commit ${ONLINESOFTMAX_GIT_COMMIT:-unknown}, exit $rc"
    cat "$OUT/gpu-tests.log"; } > "$gpu_dir/$day-gpu-tests.log"
  tail -3 "$OUT/gpu-tests.log"
fi

for bench in $benches; do
  echo "== benchmark $bench" | tee -a "$log"
  python3 "$bench" 2>&1 | tee -a "$log" | tail -30 || status=1
done

for chapter in $chapters; do
  echo "== chapter $chapter as a script" | tee -a "$log"
  python3 "$chapter" > "$OUT/$(basename "$chapter" .py).out" 2>&1; rc=$?
  echo "exit $rc" | tee -a "$log"; [ "$rc" = 0 ] || { status=1; tail -20 "$OUT/$(basename "$chapter" .py).out"; }
done

if [ -n "$sanitize" ]; then
  echo "== compute-sanitizer: $sanitize" | tee -a "$log"
  bash $sanitize 2>&1 | tee "$OUT/sanitizer.log" | tail -30 || status=1
fi

tar czf "$OUT/round.tar.gz" "$gpu_dir" 2>/dev/null
echo "== round done, status $status" | tee -a "$log"
exit $status
