#!/usr/bin/env bash
# Fuzzes the template parser and linter with libFuzzer (clang, AddressSanitizer and
# UndefinedBehaviorSanitizer) for SECONDS (default 60).
#   scripts/fuzz.sh [SECONDS]
# The committed corpus (tests/fuzz/corpus/template), the shipped templates and the golden
# cases seed it; new inputs go to a scratch folder, so the checkout is not modified. A crash
# stops the run with the input saved under build-fuzz/artifacts/: add that file to
# tests/fuzz/corpus/template/ with the fix, so the replay test keeps it fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ is not installed (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
CXX=clang++ cmake -S . -B build-fuzz -DDYNRT_FUZZ=ON -DDYNRT_BUILD_TESTS=OFF \
  -DDYNRT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
cmake --build build-fuzz --target template_fuzz -j"$(nproc)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p build-fuzz/artifacts
# Symbolized reports need llvm-symbolizer, which Debian ships in llvm-14 under a versioned path.
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer" UBSAN_SYMBOLIZER_PATH="$symbolizer"
# -timeout: an input that takes seconds is a hang; -rss_limit_mb: unbounded memory is a bug.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  build-fuzz/template_fuzz -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -dict=tests/fuzz/template.dict -artifact_prefix=build-fuzz/artifacts/ \
  -print_final_stats=1 "$scratch" tests/fuzz/corpus/template templates tests/dsl/golden
