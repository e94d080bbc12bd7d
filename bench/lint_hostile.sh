#!/usr/bin/env bash
# Wall time and peak memory of `dynrt lint` on each hostile input (alias bomb,
# 10,000-deep nesting, a 10 MB scalar, an empty file, a BOM, invalid UTF-8), through the
# real binary. Usage: bench/lint_hostile.sh [path/to/dynrt]   (figures: docs/benchmarks.md)
set -euo pipefail
dynrt="${1:-./build/dynrt}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
/usr/bin/python3 - "$dir" <<'PY'
import sys, os
d = sys.argv[1]
s = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
for c in "bcdefghi":
    p = chr(ord(c) - 1)
    s += "%s: &%s [%s]\n" % (c, c, ", ".join(["*" + p] * 10))
open(os.path.join(d, "alias-bomb.yaml"), "w").write(s)
open(os.path.join(d, "cyclic-alias.yaml"), "w").write("a: &x [*x]\n")
open(os.path.join(d, "nesting-10k.yaml"), "w").write("a: " + "[" * 10000 + "]" * 10000 + "\n")
open(os.path.join(d, "block-nesting-10k.yaml"), "w").write("".join(" " * i + "k:\n" for i in range(10000)))
open(os.path.join(d, "scalar-10MB.yaml"), "w").write("a: " + "x" * (10 << 20) + "\n")
open(os.path.join(d, "scalar-4MB.yaml"), "w").write("a: " + "x" * ((4 << 20) - 8) + "\n")
open(os.path.join(d, "empty.yaml"), "w").write("")
open(os.path.join(d, "bom.yaml"), "wb").write(b"\xef\xbb\xbfversion: 1\n")
open(os.path.join(d, "invalid-utf8.yaml"), "wb").write(b"version: 1\nworkflow: \xff\n")
PY
printf '%-24s %10s %12s  %s\n' input seconds "peak KiB" finding
for f in alias-bomb cyclic-alias nesting-10k block-nesting-10k scalar-10MB scalar-4MB empty bom invalid-utf8; do
  out=$( { /usr/bin/time -f "%e %M" "$dynrt" lint --format json "$dir/$f.yaml" >"$dir/out.json"; } 2>&1 | tail -n 1 || true)
  rule=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(",".join(x["rule"] for x in d["findings"]))' "$dir/out.json")
  printf '%-24s %10s %12s  %s\n' "$f" $out "$rule"
done
