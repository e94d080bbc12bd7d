#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this), in this order:
#   0. installs the Debian dependencies;
#   1. builds everything with warnings as errors (build/, RelWithDebInfo at -O2 -g1) and runs
#      every ctest test there: unit, golden, CLI, e2e, the load smoke test, the history checker
#      and the fuzz-corpus replays;
#   2. builds the test programs again under AddressSanitizer and UndefinedBehaviorSanitizer
#      (build-san-address-undefined/, -Og -g1, via scripts/sanitize.sh address,undefined) and
#      runs the same whole ctest suite there, so a leak, an overflow or undefined behaviour
#      anywhere fails the run (DYNRT_SANITIZE=0 skips it, for a quicker local run);
#   3. runs the engines' tests under ThreadSanitizer (DYNRT_TSAN=0 skips it);
#   4. fuzzes the template parser, the HTTP request path and the SSE parser for
#      DYNRT_FUZZ_SECONDS in all (default 30; 0 skips it).
# Every test runs at the same scale in both builds; none is cut down under the sanitizers.
# Each step's wall time is printed at the end; most of it is compiling (docs/operations.md,
# "Sanitizers and fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
case "${DYNRT_SANITIZE:-1}" in
  0 | none | off) asan=0 ;;
  1 | address,undefined) asan=1 ;;
  *)
    echo "test.sh: DYNRT_SANITIZE is 0 (skip the ASan+UBSan suite) or 1 (run it, the default)" >&2
    exit 2
    ;;
esac
timings=()
step() {  # step NAME COMMAND...: runs COMMAND and records its wall time
  local name="$1" start=$SECONDS
  shift
  echo "test.sh: step: $name"
  "$@"
  timings+=("$(printf '%-28s %5d s' "$name" $((SECONDS - start)))")
}
plain() {
  # -g1 (line tables, enough for a symbolized backtrace) rather than -g: a fifth less compile
  # time and a third of the object size, which keeps the whole run inside its budget. The test
  # programs' own sources at -O0 (the code they test stays at -O2): a quarter less time to
  # compile them, and they run little.
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DDYNRT_BUILD_TESTS=ON -DDYNRT_WERROR=ON -DDYNRT_TEST_CXX_FLAGS=-O0
  cmake --build build -j"$jobs"
  ./scripts/ctest.sh build
}
step "install-deps" ./scripts/install-deps.sh
step "1 plain build and suite" plain
if [ "$asan" = 1 ]; then
  step "2 ASan+UBSan suite" ./scripts/sanitize.sh address,undefined
fi
# TSan is not used on the actor graph: Debian's CAF is not instrumented, so TSan cannot see
# its mailbox hand-offs (docs/operations.md, "Sanitizers").
if [ "${DYNRT_TSAN:-1}" != 0 ]; then
  step "3 TSan engines_tests" ./scripts/sanitize.sh thread engines_tests
fi
fuzz_seconds="${DYNRT_FUZZ_SECONDS:-30}"
if [ "$fuzz_seconds" -gt 0 ]; then
  step "4 fuzz ${fuzz_seconds}s" ./scripts/fuzz.sh "$fuzz_seconds"
fi
echo "test.sh: wall time per step:"
printf '  %s\n' "${timings[@]}"
echo "test.sh: all tests passed in $SECONDS s"
