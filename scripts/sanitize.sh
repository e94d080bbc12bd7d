#!/usr/bin/env bash
# Builds the tests with a sanitizer and runs them: `scripts/sanitize.sh thread [TARGET...]`
# or `scripts/sanitize.sh address,undefined [TARGET...]`. With targets, only those test
# binaries are built and run (the test script runs `thread engines_tests`: the engines are the
# multithreaded layer); without, the `test_programs` target (every program ctest runs, no
# benchmark or soak programs) is built and every ctest test is run, at full scale (the test
# script runs `address,undefined` that way; there each GoogleTest program is one ctest test
# that runs all its cases in one process, DYNRT_TEST_PER_CASE=OFF: a process start costs most
# under a sanitizer). Warnings are errors, except under TSan, where GCC
# warns (-Wtsan) about the atomic_thread_fence inside Boost.Asio's headers. Build trees:
# build-san-<sanitizer>/.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizer="${1:?usage: scripts/sanitize.sh thread|address,undefined [TARGET...]}"
shift
dir="build-san-${sanitizer//,/-}"
werror=ON
[[ "$sanitizer" == *thread* ]] && werror=OFF
# -Og -g1 (line tables are enough for symbolized reports): under ASan+UBSan GCC 12 compiles at
# -Og a third faster than at -O1 (actors/services.cpp: 24 s against 38 s; -O1 was itself 2.6
# times faster than -O2 -g), and compiling is most of the sanitized step's time in CI.
# The test programs' own sources at -O0 (the code they test keeps -Og): under ASan+UBSan they
# compile about a sixth faster (tests/actors/lifecycle_test.cpp: 19 s of CPU against 22 s).
test_flags="-O0"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1 -DNDEBUG" \
  -DDYNRT_BUILD_TESTS=ON -DDYNRT_BUILD_BENCH=OFF -DDYNRT_TEST_PER_CASE=OFF -DDYNRT_WERROR="$werror" \
  -DDYNRT_SANITIZE="$sanitizer" -DDYNRT_TEST_CXX_FLAGS="$test_flags" >/dev/null
# Symbolized reports need llvm-symbolizer, which Debian ships in llvm-14 under a versioned path.
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
# malloc_context_size=5: an allocation records five frames of its stack, not thirty; the
# suite runs about a fifth faster (its simulations allocate a lot), and an error's own stack
# is whole. ASAN_OPTIONS=malloc_context_size=30 in the environment restores the default.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:malloc_context_size=5${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/scripts/ubsan.supp"
if [ "$#" -eq 0 ]; then
  cmake --build "$dir" -j"$(nproc)" --target test_programs
  ./scripts/ctest.sh "$dir"
else
  cmake --build "$dir" -j"$(nproc)" --target "$@" dynrt-sim-engine
  for t in "$@"; do "./$dir/$t"; done
fi
echo "sanitize.sh: $sanitizer clean"
