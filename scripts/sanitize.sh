#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over one or more kernel families:
#
#   bash scripts/sanitize.sh FAMILY [FAMILY ...]     (or "all"; no argument: the list)
#
# Each family's launches (scripts/sanitize.py) run under each tool in a process of their own, and
# print one "<family> <tool> exit N" line per run: N is compute-sanitizer's own status (0: nothing
# found); the script exits 1 if any run found something. Host API errors (--report-api-errors no)
# are left out: the driver bindings probe entry points that this driver lacks (34
# cuGetProcAddress_v2 reports per process on the H200), which says nothing about the kernels.
# SANITIZE_ONLY="name,name" limits a family to those kernels.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
families=$(python3 -c "import runpy; print(' '.join(runpy.run_path('scripts/sanitize.py')['FAMILIES']))")
if [ $# = 0 ]; then
  python3 scripts/sanitize.py; exit 2
fi
[ "$1" = all ] && set -- $families
status=0
for family in "$@"; do
  case " $families " in *" $family "*) ;; *) echo "unknown family $family (families: $families)"; exit 2;; esac
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20 --report-api-errors no \
      python3 scripts/sanitize.py "$family"
    rc=$?
    echo "$family $tool exit $rc"
    [ "$rc" = 0 ] || status=1
  done
done
exit $status
