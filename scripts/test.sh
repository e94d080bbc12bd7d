#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs the Debian dependencies;
#   2. builds everything with warnings as errors (build/, RelWithDebInfo) and runs every ctest
#      test there: unit, golden, CLI, e2e, the load smoke test, the history checker and the
#      fuzz-corpus replays;
#   3. runs the engines' tests under ThreadSanitizer (DYNRT_TSAN=0 skips it);
#   4. fuzzes the template parser, the HTTP request path and the SSE parser for
#      DYNRT_FUZZ_SECONDS in all (default 30; 0 skips it).
# DYNRT_SANITIZE=address,undefined runs step 2 under AddressSanitizer and
# UndefinedBehaviorSanitizer instead (build-san-address-undefined/, via scripts/sanitize.sh),
# so a leak, an overflow or undefined behaviour anywhere fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
./scripts/install-deps.sh
if [ "${DYNRT_SANITIZE:-none}" = none ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDYNRT_BUILD_TESTS=ON -DDYNRT_WERROR=ON
  cmake --build build -j"$jobs"
  (cd build && ctest -j"$jobs" --output-on-failure --timeout 900)
else
  ./scripts/sanitize.sh address,undefined
fi
# TSan is not used on the actor graph: Debian's CAF is not instrumented, so TSan cannot see
# its mailbox hand-offs (docs/operations.md, "Sanitizers").
if [ "${DYNRT_TSAN:-1}" != 0 ]; then
  ./scripts/sanitize.sh thread engines_tests
fi
fuzz_seconds="${DYNRT_FUZZ_SECONDS:-30}"
if [ "$fuzz_seconds" -gt 0 ]; then
  ./scripts/fuzz.sh "$fuzz_seconds"
fi
echo "test.sh: all tests passed"
