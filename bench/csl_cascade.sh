#!/usr/bin/env bash
# Instructions per removed entry of one invalidation cascade, for |A| = 1 .. 100,000, counted
# by callgrind inside Store::write only (figures: docs/benchmarks.md).
#   bench/csl_cascade.sh [path/to/csl_cascade]
set -euo pipefail
bin="${1:-./build/csl_cascade}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%8s %14s %12s  %s\n' "|A|" instructions "per entry" "wall (native run)"
for n in 1 10 100 1000 10000 100000; do
  valgrind --tool=callgrind --toggle-collect='dynrt::csl::Store::write*' \
    --callgrind-out-file="$out/cg" "$bin" "$n" >/dev/null 2>&1
  ir=$(callgrind_annotate "$out/cg" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  wall=$("$bin" "$n" | sed 's/.*write //')
  printf '%8d %14d %12.1f  %s\n' "$n" "$ir" "$(echo "$ir / $n" | bc -l)" "$wall"
done
