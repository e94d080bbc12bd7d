#!/usr/bin/env bash
# bench/plot.py as a process: the fixture gives the four figures as PNG files, a run without
# sweeps gives only the figures from records, a load sweep's results give its two figures,
# bad input exits 2 and writes nothing, and a
# missing matplotlib exits 3. Skipped (77) where /usr/bin/python3 has no matplotlib.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
python=/usr/bin/python3
plot="$root/bench/plot.py"
fixture="$root/tests/bench/plot_fixture.json"
if ! "$python" -c 'import matplotlib' 2>/dev/null; then
  echo "skip: $python cannot import matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run() {  # run NAME EXPECTED_STATUS ARGS...: plot.py ARGS, output kept in $tmp/out, $tmp/err
  local name="$1" want="$2"
  shift 2
  timeout 120 "$python" "$plot" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" != "$want" ]; then
    fail "$name: exit $got, want $want"
    sed 's/^/  stdout: /' "$tmp/out" | head -20
    sed 's/^/  stderr: /' "$tmp/err" | head -20
  else
    echo "ok   $name"
  fi
}
is_png() {  # is_png FILE: the file starts with the 8-byte PNG signature
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]
}
expect_figures() {  # expect_figures NAME DIR FIG...: exactly these PNGs, each reported
  local name="$1" dir="$2"
  shift 2
  for fig in "$@"; do
    if [ ! -f "$dir/$fig.png" ]; then
      fail "$name: $dir/$fig.png not written"
    elif ! is_png "$dir/$fig.png"; then
      fail "$name: $dir/$fig.png lacks the PNG signature"
    elif ! grep -qxF "wrote $dir/$fig.png" "$tmp/out"; then
      fail "$name: no line \"wrote $dir/$fig.png\" on stdout"
    fi
  done
  local want=$# got
  got=$(find "$dir" -type f | wc -l)
  [ "$got" = "$want" ] || fail "$name: $got files in $dir, want $want"
}

run "all figures" 0 "$fixture" "$tmp/all"
expect_figures "all figures" "$tmp/all" fig8 fig14 fig9a fig10a

"$python" -c 'import json, sys
d = json.load(open(sys.argv[1])); del d["sweeps"]; json.dump(d, open(sys.argv[2], "w"))' \
  "$fixture" "$tmp/records_only.json"
run "no sweeps" 0 "$tmp/records_only.json" "$tmp/records_only"
expect_figures "no sweeps" "$tmp/records_only" fig8 fig14

# `dynrt bench sweep` output: its two figures, and not the per-rate bench figures.
run "sweep figures" 0 "$root/tests/bench/plot_sweep_fixture.json" "$tmp/sweep"
expect_figures "sweep figures" "$tmp/sweep" sweep-latency sweep-wasted

printf '{"records": [' >"$tmp/bad.json"
run "bad json" 2 "$tmp/bad.json" "$tmp/bad"
[ -s "$tmp/err" ] || fail "bad json: nothing on stderr"
[ ! -e "$tmp/bad" ] || fail "bad json: $tmp/bad was created"

run "missing file" 2 "$tmp/absent.json" "$tmp/absent"
[ ! -e "$tmp/absent" ] || fail "missing file: $tmp/absent was created"

echo '{"records": [{"workload": "routing", "rate": "high", "arm": "full"}]}' >"$tmp/shape.json"
run "bad record" 2 "$tmp/shape.json" "$tmp/shape"
grep -qF 'records[0].rate' "$tmp/err" || fail "bad record: stderr does not name records[0].rate"

mkdir -p "$tmp/fake/matplotlib"
echo 'raise ImportError("simulated: no matplotlib")' >"$tmp/fake/matplotlib/__init__.py"
PYTHONPATH="$tmp/fake" run "no matplotlib" 3 "$fixture" "$tmp/nompl"
grep -qF 'python3-matplotlib is not installed' "$tmp/err" ||
  fail "no matplotlib: stderr lacks the install hint"
[ ! -e "$tmp/nompl" ] || fail "no matplotlib: $tmp/nompl was created"

run "help" 0 --help
grep -qF 'RESULTS_JSON' "$tmp/out" || fail "help: usage lacks RESULTS_JSON"

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "all passed"
