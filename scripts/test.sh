#!/usr/bin/env bash
# The whole test suite: installs the Debian dependencies, builds everything with warnings as
# errors, runs every ctest test (unit, golden, CLI, schema, fuzz-corpus replay), then fuzzes
# the engines' tests under ThreadSanitizer (DYNRT_TSAN=0 skips it), then fuzzes the template
# parser for DYNRT_FUZZ_SECONDS (default 30; 0 skips it). .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDYNRT_BUILD_TESTS=ON -DDYNRT_WERROR=ON
cmake --build build -j"$jobs"
(cd build && ctest -j"$jobs" --output-on-failure --timeout 900)
if [ "${DYNRT_TSAN:-1}" != 0 ]; then
  ./scripts/sanitize.sh thread engines_tests
fi
# The actor graph under ASan and UBSan (leaks included), when DYNRT_ASAN=1: its own build tree
# takes about 11 minutes on 2 cores, which would bring CI near its 30-minute budget. TSan is
# not used there: Debian's CAF is not instrumented, so TSan cannot see its mailbox hand-offs.
if [ "${DYNRT_ASAN:-0}" != 0 ]; then
  ./scripts/sanitize.sh address,undefined actors_tests
fi
fuzz_seconds="${DYNRT_FUZZ_SECONDS:-30}"
if [ "$fuzz_seconds" -gt 0 ]; then
  ./scripts/fuzz.sh "$fuzz_seconds"
fi
echo "test.sh: all tests passed"
