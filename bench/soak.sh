#!/usr/bin/env bash
# The soak benchmark for bounded run state, on loopback: dynrt-sim-engine (answering at once),
# `dynrt serve templates/` in front of it, and bench/soak creating N distinct workflow runs
# (tagged Routing router calls, each with a workflow id of its own) as fast as it can on C
# connections, then waiting for them to expire, while a tagged probe call goes every 100 ms and
# /metrics is scraped (and dynrt serve's VmRSS read) every second. Then:
#   1. SIGTERM to that dynrt serve, at rest: the time until it has exited;
#   2. a second dynrt serve, the same burst, and SIGTERM in the middle of it: the time until it
#      has exited under load (target: the shutdown grace period plus 2 s).
# Prints the figures docs/benchmarks.md quotes and exits non-zero when a target is missed:
# tagged-call p99 < 50 ms, RSS 30 s after expiry within 20% of (RSS before the burst + the
# library's own size), SIGTERM exit within grace + 2 s.
#
#   bench/soak.sh                    # 100,000 runs (build/)
#   bench/soak.sh -n 20000 --after 5 # shorter
#
# Options: -n RUNS (100000), -c CONNECTIONS (16), --build DIR (build), --idle-ms MS (workflow
# idle time, 60000: the default), --grace-ms MS (shutdown grace, 10000), --after S (30), --out DIR,
# --serve-arg ARG (one more argument for dynrt serve). Run from the repository root.
set -u
. "$(dirname "$0")/lib.sh"
runs=100000
connections=16
build=build
idle_ms=60000
grace_ms=10000
after=30
out=""
serve_extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs="$2"; shift 2 ;;
    -c) connections="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --idle-ms) idle_ms="$2"; shift 2 ;;
    --grace-ms) grace_ms="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --serve-arg) serve_extra+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
dynrt="$build/dynrt" sim="$build/dynrt-sim-engine" client="$build/soak"
for b in "$dynrt" "$sim" "$client"; do
  [ -x "$b" ] || { echo "soak.sh: $b is not built" >&2; exit 2; }
done
[ -d templates ] || { echo "soak.sh: run it from the repository root" >&2; exit 2; }
if [ -z "$out" ]; then out="$(mktemp -d -t dynrt-soak-XXXXXX)"; else mkdir -p "$out"; fi
sim_pid="" serve_pid="" client_pid=""
cleanup() {
  for p in $client_pid $serve_pid $sim_pid; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT

for h in weather calendar email; do
  printf '{"contains": "[route %s]", "response": "Thinking it over.\\nHANDLER: %s"}\n' "$h" "$h"
done >"$out/script.jsonl"
"$sim" --port 0 --slots 4096 --kv-tokens 4000000000 --time-scale 0 --script "$out/script.jsonl" \
  --threads 1 >"$out/sim.out" 2>"$out/sim.err" &
sim_pid=$!
sim_port="$(port_of "$sim_pid" "$out/sim.out")" || {
  echo "soak.sh: dynrt-sim-engine did not start:" >&2; cat "$out/sim.err" >&2; exit 1; }
cat >"$out/serve.yaml" <<YAML
engines:
  - url: http://127.0.0.1:$sim_port
    models: [qwen3-32b]
    max_num_seqs: 4096
YAML

start_serve() {  # start_serve NAME: starts dynrt serve, sets serve_pid and port
  "$dynrt" serve templates --config "$out/serve.yaml" --port 0 --workflow-idle-ms "$idle_ms" \
    --shutdown-grace-ms "$grace_ms" "${serve_extra[@]}" >"$out/$1.out" 2>"$out/$1.err" &
  serve_pid=$!
  port="$(port_of "$serve_pid" "$out/$1.out")" || {
    echo "soak.sh: dynrt serve did not start:" >&2; cat "$out/$1.err" >&2; exit 1; }
}

# SIGTERM, then the seconds until the process is gone (waited for, at most 600 s): sets
# `elapsed` and `serve_rc`.
stop_serve() {
  local t0 t1
  t0="$(date +%s.%N)"
  kill -TERM "$serve_pid"
  for _ in $(seq 1 60000); do
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.01
  done
  t1="$(date +%s.%N)"
  wait "$serve_pid" 2>/dev/null
  serve_rc=$?
  serve_pid=""
  elapsed="$(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')"
}

echo "soak.sh: $runs runs on $connections connections, workflow idle $idle_ms ms (results in $out)"
start_serve serve1
"$client" --port "$port" --pid "$serve_pid" -n "$runs" -c "$connections" --after "$after" \
  --json "$out/soak.json" | tee "$out/soak.txt"
client_rc=${PIPESTATUS[0]}
curl -s --max-time 30 "http://127.0.0.1:$port/metrics" >"$out/metrics.txt" 2>/dev/null
stop_serve
exit_rest=$elapsed rc_rest=$serve_rc

# Under load: the same burst against a fresh server, stopped half-way.
start_serve serve2
"$client" --port "$port" --pid "$serve_pid" -n "$runs" -c "$connections" --no-expiry \
  >"$out/burst2.txt" 2>&1 &
client_pid=$!
for _ in $(seq 1 6000); do
  live="$(curl -s --max-time 5 "http://127.0.0.1:$port/metrics" 2>/dev/null |
    awk '$1 == "dynrt_runs_evicted_total" {print $2}')"
  [ "${live%.*}" -ge "$((runs / 4))" ] 2>/dev/null && break
  kill -0 "$client_pid" 2>/dev/null || break
  sleep 0.1
done
live_at_stop="$(curl -s --max-time 5 "http://127.0.0.1:$port/metrics" 2>/dev/null |
  awk '$1 == "dynrt_workflows_live" {print $2}')"
stop_serve
exit_load=$elapsed rc_load=$serve_rc
kill "$client_pid" 2>/dev/null
wait "$client_pid" 2>/dev/null
client_pid=""

result="$(grep '^RESULT' "$out/soak.txt")"
val() { echo "$result" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}'; }
limit="$(awk -v g="$grace_ms" 'BEGIN {printf "%.2f", g / 1000 + 2}')"
fails=0
problem() { echo "MISSED: $*"; fails=$((fails + 1)); }
[ "$client_rc" = 0 ] || problem "the soak client reported failed calls (exit $client_rc)"
awk -v p="$(val probe_p99_ms)" 'BEGIN {exit !(p < 50)}' || problem "tagged-call p99 $(val probe_p99_ms) ms (target < 50 ms)"
awk -v a="$(val rss_after_kb)" -v b="$(val rss_bound_kb)" 'BEGIN {exit !(a <= b)}' ||
  problem "RSS after expiry $(val rss_after_kb) kB over $(val rss_bound_kb) kB"
awk -v t="$exit_rest" -v l="$limit" 'BEGIN {exit !(t <= l)}' || problem "SIGTERM at rest took $exit_rest s (target <= $limit s)"
awk -v t="$exit_load" -v l="$limit" 'BEGIN {exit !(t <= l)}' || problem "SIGTERM under load took $exit_load s (target <= $limit s)"
[ "$rc_rest" = 0 ] && [ "$rc_load" = 0 ] || problem "dynrt serve exited $rc_rest / $rc_load on SIGTERM"
echo
echo "| | value |"
echo "| --- | --- |"
echo "| runs created / failed calls | $(val runs) / $(val failed) at $(val runs_per_s) runs/s |"
echo "| dynrt serve VmRSS before / peak / 30 s after expiry | $(( $(val rss_before_kb) / 1024 )) / $(( $(val rss_peak_kb) / 1024 )) / $(( $(val rss_after_kb) / 1024 )) MB (bound $(awk -v b="$(val rss_bound_kb)" 'BEGIN {printf "%d", b / 1024}') MB) |"
echo "| runs expired after the burst | $(val expired_after_s) s |"
echo "| tagged call every 100 ms: p99 / max | $(val probe_p99_ms) / $(val probe_max_ms) ms |"
echo "| /metrics scrape: p99 / max | $(val scrape_p99_ms) / $(val scrape_max_ms) ms |"
echo "| SIGTERM to exit: at rest / under load ($live_at_stop runs live) | $exit_rest / $exit_load s (grace $((grace_ms / 1000)) s) |"
echo "soak.sh: missed=$fails"
[ "$fails" = 0 ]
