#!/usr/bin/env bash
# Fuzzes with libFuzzer (clang, AddressSanitizer and UndefinedBehaviorSanitizer) for SECONDS
# in all (default 60), split evenly across the targets:
#   template      the template parser and linter (tests/fuzz/template_fuzz.cpp)
#   http_request  the gateway's request path into canonical JSON and reuse names
#   sse           the SSE parser, fed in every split
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (DYNRT_FUZZ_BUILD: the build folder, build-fuzz)
# Each target's committed corpus (tests/fuzz/corpus/<target>; the template target also the
# shipped templates and the golden cases) seeds it; new inputs go to a scratch folder, so the
# checkout is not modified. A crash stops the run with the input saved under
# build-fuzz/artifacts/: add that file to tests/fuzz/corpus/<target>/ with the fix, so the
# replay test keeps it fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${DYNRT_FUZZ_BUILD:-build-fuzz}"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(template http_request sse)
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ is not installed (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
# -O1 with line tables, as libFuzzer's documentation builds its targets: it compiles in about
# half the time of the default -O2 -g, and the sanitizers' reports keep their line numbers.
CXX=clang++ cmake -S . -B "$build" -DDYNRT_FUZZ=ON -DDYNRT_BUILD_TESTS=OFF \
  -DDYNRT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/%/_fuzz}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build"/artifacts
# Symbolized reports need llvm-symbolizer, which Debian ships in llvm-14 under a versioned path.
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer" UBSAN_SYMBOLIZER_PATH="$symbolizer"
each=$(( seconds / ${#targets[@]} ))
[ "$each" -lt 1 ] && each=1
for t in "${targets[@]}"; do
  seeds=(tests/fuzz/corpus/"$t")
  extra=()
  case "$t" in
    template) seeds+=(templates tests/dsl/golden); extra=(-dict=tests/fuzz/template.dict) ;;
    http_request) extra=(-dict=tests/fuzz/http_request.dict) ;;
  esac
  mkdir -p "$scratch/$t"
  echo "fuzz.sh: $t for ${each}s"
  # -timeout: an input that takes seconds is a hang; -rss_limit_mb: unbounded memory is a bug.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/${t}_fuzz" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 "${extra[@]}" -artifact_prefix="$build"/artifacts/ \
    -print_final_stats=1 "$scratch/$t" "${seeds[@]}"
done
