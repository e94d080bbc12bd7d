#!/usr/bin/env bash
# Runs every ctest test of a build tree as the test scripts do: `scripts/ctest.sh BUILD_DIR`.
# When a test fails, it ends with a digest of what failed: each failing GoogleTest case with its
# assertion, each sanitizer report's first lines and each failed check of the shell and Python
# tests, read back from ctest's log. A GoogleTest program runs all its cases in one ctest test
# under the sanitizers, so its output is long, and a CI log that keeps only its head and tail
# would otherwise lose the one case that failed.
set -uo pipefail
dir="${1:?usage: scripts/ctest.sh BUILD_DIR}"
cd "$dir" || exit 2
# --no-tests=error: a tree with no tests is a broken build, not a pass.
ctest -j"$(nproc)" --output-on-failure --timeout 900 --no-tests=error
status=$?
if [ "$status" -ne 0 ] && [ -f Testing/Temporary/LastTest.log ]; then
  echo "ctest.sh: what failed in $dir (from Testing/Temporary/LastTest.log):"
  grep -a -E -A6 \
    -e ': Failure$' \
    -e '^\[  FAILED  \] [^ ]+\.[^ ]+' \
    -e '^==[0-9]+==ERROR: ' \
    -e 'runtime error: ' \
    -e '^FAIL[ :]' \
    -e '^ThreadSanitizer: ' \
    Testing/Temporary/LastTest.log | head -n 200
fi
exit "$status"
