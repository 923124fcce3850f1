#!/usr/bin/env bash
# One check-and-measure round on a GPU machine (the lent H200): GPU tests, benchmarks,
# chapters run as scripts, sanitizers. The suites it records land in data/<gpu>/, the logs in
# logs/<gpu>/, and what the round wrote is packed into $OUT/round.tar.gz so it comes back in one file.
#
#   bash scripts/device_round.sh "<pytest selection>[; <selection> ...]" "<suite [args]>[; ...]" \
#        [chapters] ["<sanitizer families>"]
#
# Test selections separated by ';' run at the same time, one pytest process each (their kernel
# compilations overlap; the tests themselves are checks, never timings), each under a timeout of
# TEST_TIMEOUT seconds (600); their logs are joined into one file. Benchmark suites separated by ';' run one after the other,
# alone on the GPU, each as `python3 -m onlinesoftmax.bench <suite [args]>` (e.g. "softmax-fast --quick;
# attention-decode"), each under a timeout of BENCH_TIMEOUT seconds (300).
#
# "chapters" runs scripts/run_chapters.sh over build/chapter_scripts/ (made here beforehand by
# scripts/chapters_to_scripts.sh and carried, with the IPython/ipywidgets wheels in .whl/);
# "chapters:<glob> [<glob> ...]" over the scripts matching those globs only.
#
# Set ONLINESOFTMAX_GIT_COMMIT to the commit the tree was sent from.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg
export ONLINESOFTMAX_NAME_FAILURES=1   # conftest.py: a failing test named at once (a timeout keeps the names)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tests=${1-tests/gpu}; benches=${2:-}; chapters=${3:-}; sanitize=${4:-}   # tests "" = none
day=$(date -u +%F)
# 'NVIDIA H200' -> h200 (the suites write to data/<results.gpu_slug of the GPU's name>/)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
log_dir=logs/${gpu:-h200}     # what ran: test tiers, chapters, sanitizers
mkdir -p "$log_dir"
started_mark=$(mktemp); touch "$started_mark"
log="$OUT/round.log"
commit=${ONLINESOFTMAX_GIT_COMMIT:-}
tag=${commit:+-${commit:0:7}}   # logs named by the commit sent: two rounds of one day never overwrite each other
status=0
trim() { sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<< "$1"; }   # (xargs would drop quotes)
pack() {   # after every step, what this round wrote (a timeout keeps what was done)
  find data logs -type f -newer "$started_mark" | tar czf "$OUT/round.tar.gz" -T - 2>/dev/null; }

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
  IFS=';' read -r -a groups <<< "$tests"
  pids=()
  for i in "${!groups[@]}"; do
    selection=$(trim "${groups[$i]}")
    echo "== GPU tier [$i]: pytest -m gpu $selection" | tee -a "$log"
    # eval: a selection may quote its -k expression ("-k 'quick or long'")
    eval timeout "${TEST_TIMEOUT:-600}" python3 -m pytest -m gpu -q -rfE -p no:cacheprovider --dist loadgroup "$selection" \
      > "$OUT/gpu-tests-$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; group_rc=$?; [ "$group_rc" = 0 ] || rc=$group_rc
    echo "== GPU tier [$i] exit $group_rc: $(tail -n 1 "$OUT/gpu-tests-$i.log")" | tee -a "$log"
  done
  [ "$rc" = 0 ] || status=1
  suffix=${TESTS_LOG_SUFFIX:-gpu-tests$tag}
  { echo "# pytest -m gpu $tests on $(nvidia-smi --query-gpu=name --format=csv,noheader), $day, commit ${ONLINESOFTMAX_GIT_COMMIT:-unknown}, exit $rc"
    for i in "${!groups[@]}"; do echo "## pytest -m gpu $(trim "${groups[$i]}")"; cat "$OUT/gpu-tests-$i.log"; done
  } > "$log_dir/$day-$suffix.log"
  rm -f "$OUT"/gpu-tests-*.log; pack
fi

IFS=';' read -r -a bench_commands <<< "$benches"
for bench in "${bench_commands[@]}"; do
  bench=$(trim "$bench"); [ -n "$bench" ] || continue
  echo "== benchmark $bench" | tee -a "$log"
  began=$SECONDS
  timeout "${BENCH_TIMEOUT:-300}" python3 -m onlinesoftmax.bench $bench 2>&1 | tee -a "$log" | tail -30 || status=1
  echo "== benchmark $bench: $(( SECONDS - began )) s" | tee -a "$log"
  pack
done

if [ "$chapters" = chapters ] || [ "${chapters#chapters:}" != "$chapters" ]; then
  # "chapters:<glob>" runs the scripts matching build/chapter_scripts/<glob> only (the whole book takes
  # about as long as one call may run: split it, e.g. "chapters:0[0-4]*" then "chapters:[!0]*" ...);
  # CHAPTERS_TIMEOUT (400 s) stops the step in time for its log to be packed
  pattern=${chapters#chapters}; pattern=${pattern#:}
  echo "== chapters as scripts on the GPU ${pattern:+($pattern)}" | tee -a "$log"
  CHAPTERS="$pattern" timeout "${CHAPTERS_TIMEOUT:-400}" bash scripts/run_chapters.sh 2>&1 | tee -a "$log" || status=1
  pack
fi

for family in $sanitize; do   # kernel families of scripts/sanitize.py ("all" for every one)
  echo "== compute-sanitizer: $family" | tee -a "$log"
  slog="$log_dir/$day-sanitizer-$family$tag.log"
  { echo "# sanitize.sh $family (compute-sanitizer) on $(nvidia-smi --query-gpu=name --format=csv,noheader), $day, commit ${ONLINESOFTMAX_GIT_COMMIT:-unknown}"
    bash scripts/sanitize.sh "$family"; } > "$slog" 2>&1; rc=$?
  grep -E "exit|ERROR SUMMARY|RACECHECK SUMMARY" "$slog" | tee -a "$log"
  [ "$rc" = 0 ] || status=1
  pack
done

echo "== round done, status $status" | tee -a "$log"
exit $status
