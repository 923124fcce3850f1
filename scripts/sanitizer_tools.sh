# Sourced by scripts/sanitize_*.sh: sanitize_python runs the Python program on its standard input
# under compute-sanitizer's memcheck, racecheck and synccheck, one process per tool, prints one
# "<tool> exit N" line each (N: the sanitizer's own status; 0: nothing found) and returns 1 if any
# tool found something. Host API errors (--report-api-errors no) are left out: the driver bindings
# probe entry points that this driver lacks (34 cuGetProcAddress_v2 reports per process on the
# H200), which says nothing about the kernels.
sanitize_python() {
  local program status=0 rc tool
  program=$(cat)
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20 --report-api-errors no \
      python3 - <<< "$program"
    rc=$?
    echo "$tool exit $rc"
    [ "$rc" = 0 ] || status=1
  done
  return $status
}
