#!/usr/bin/env bash
# Run the chapter scripts made by chapters_to_scripts.sh, each cell by cell in one IPython shell
# (scripts/run_chapter_cells.py, which names the slow cells), from
# chapters/ (as the book build does), on the real kernels. The combined log is written to
# logs/<gpu>/<date>-chapters-on-gpu.log.  Needs IPython + ipywidgets (carried as wheels).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/scripts/chapter_shims:$PWD${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg
day=$(date -u +%F)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
log="logs/${gpu:-h200}/$day-chapters-on-gpu${CHAPTERS:+-$(tr -c 'a-zA-Z0-9_\n' '_' <<< "$CHAPTERS")}.log"
mkdir -p "$(dirname "$log")"
status=0
{
  echo "# chapters run as scripts (jupytext py:percent, IPython) on $(nvidia-smi --query-gpu=name --format=csv,noheader), $day, commit ${ONLINESOFTMAX_GIT_COMMIT:-unknown}"
  read -r -a globs <<< "${CHAPTERS:-*}"   # CHAPTERS: globs of script names, space-separated (default all)
  for script in $(for g in "${globs[@]}"; do printf '%s\n' build/chapter_scripts/$g.py; done); do
    echo "## $script"
    began=$(date +%s)
    (cd chapters && python3 ../scripts/run_chapter_cells.py "../$script") 2>&1; rc=$?   # cell by cell, the slow cells named
    echo "## $script: exit $rc after $(( $(date +%s) - began )) s"
    [ "$rc" = 0 ] || status=1
  done
} > "$log" 2>&1
grep '^## .*exit' "$log"
exit $status
