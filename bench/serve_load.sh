#!/usr/bin/env bash
# The bounded load test, on loopback: dynrt-sim-engine, `dynrt serve templates/` in front
# of it, and bench/serve_load holding C concurrent streaming chat completions through dynrt for
# D seconds (a seeded mix of tagged Routing runs and untagged calls). Meanwhile it samples
# `dynrt serve`'s resident memory (VmRSS) and open descriptors every second; at the end it
# scrapes dynrt's /metrics and checks the library against its budgets. Exits non-zero on any
# failed request, an error counted by dynrt, a CSL budget exceeded, resident memory above
# --max-rss-mb, a dynrt serve that died or did not stop cleanly on SIGTERM.
#
#   bench/serve_load.sh                      # the full run: 1,000 streams for 60 s (build/)
#   bench/serve_load.sh -c 100 -d 5 --smoke  # the ctest smoke test (correctness only)
#
# Options: -c CONNECTIONS (1000), -d SECONDS (60), --build DIR (build), --dynrt/--sim/--client
# PATH (default: in the build dir), --time-scale MS (1000: real time; a response lasts a few
# seconds), --seed N (1), --out DIR (its logs; default a fresh temporary folder, removed when
# the run passes), --max-rss-mb N (4096),
# --serve-arg ARG (one more argument for dynrt serve, e.g. --serve-arg --workflow-idle-ms=5000),
# --smoke (time scale 100 and a quieter report), --wrong-router (the engine's script names the
# weather handler for every query, so the run must fail: the check that the check can fail).
# Run from the repository root.
set -u
. "$(dirname "$0")/lib.sh"
connections=1000
seconds=60
build=build
dynrt="" sim="" client=""
time_scale=1000
seed=1
out=""
max_rss_mb=4096
serve_extra=()
smoke=0
wrong_router=0
while [ $# -gt 0 ]; do
  case "$1" in
    -c) connections="$2"; shift 2 ;;
    -d) seconds="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --dynrt) dynrt="$2"; shift 2 ;;
    --sim) sim="$2"; shift 2 ;;
    --client) client="$2"; shift 2 ;;
    --time-scale) time_scale="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --max-rss-mb) max_rss_mb="$2"; shift 2 ;;
    --serve-arg) serve_extra+=("$2"); shift 2 ;;
    --smoke) smoke=1; time_scale=100; shift ;;
    --wrong-router) wrong_router=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "serve_load.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
dynrt="${dynrt:-$build/dynrt}"
sim="${sim:-$build/dynrt-sim-engine}"
client="${client:-$build/serve_load}"
for b in "$dynrt" "$sim" "$client"; do
  [ -x "$b" ] || { echo "serve_load.sh: $b is not built" >&2; exit 2; }
done
[ -d templates ] || { echo "serve_load.sh: run it from the repository root" >&2; exit 2; }

# Each stream holds a socket in the client, two in dynrt serve (client and engine side) and one
# in the engine: lift the soft limit to the hard one, and refuse to start when even that is short.
ulimit -n "$(ulimit -Hn)" 2>/dev/null
need=$((2 * connections + 256))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
  echo "serve_load.sh: $connections streams need $need file descriptors; ulimit -n is $(ulimit -n)" >&2
  exit 2
fi

# A folder of our own (no --out) goes when the run passes; one that failed keeps its logs.
own_out=0
if [ -z "$out" ]; then out="$(mktemp -d -t dynrt-load-XXXXXX)"; own_out=1; else mkdir -p "$out"; fi
sim_pid="" serve_pid="" sampler_pid="" fails=""
cleanup() {
  for p in $sampler_pid $serve_pid $sim_pid; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ "$own_out" = 1 ]; then
    if [ "$fails" = 0 ]; then rm -rf "$out"; else echo "serve_load.sh: logs kept in $out" >&2; fi
  fi
}
trap cleanup EXIT

# The router's answers: a little reasoning, then the handler the query's tag names.
reasoning="Let me think about which handler fits this request, step by step, looking at what the user asks for and which API can do it."
for h in weather calendar email; do
  answer="$h"; [ "$wrong_router" = 1 ] && answer=weather
  printf '{"contains": "[route %s]", "response": "%s\\nHANDLER: %s"}\n' "$h" "$reasoning" "$answer"
done >"$out/script.jsonl"

# Enough decode slots for every stream and the fills they open; a KV pool large enough that the
# interference model's KV term stays small (the sim's decode step then lasts about 30 ms).
slots=$((4 * connections + 64))
"$sim" --port 0 --slots "$slots" --kv-tokens 4000000000 --time-scale "$time_scale" \
  --script "$out/script.jsonl" --threads 2 >"$out/sim.out" 2>"$out/sim.err" &
sim_pid=$!
sim_port="$(port_of "$sim_pid" "$out/sim.out")" || {
  echo "serve_load.sh: dynrt-sim-engine did not start:" >&2; cat "$out/sim.err" >&2; exit 1; }

cat >"$out/serve.yaml" <<EOF
engines:
  - url: http://127.0.0.1:$sim_port
    models: [qwen3-32b]
    max_num_seqs: $slots
EOF
serve_args=(serve templates --config "$out/serve.yaml" --port 0 "${serve_extra[@]}")
if "$dynrt" serve --help 2>/dev/null | grep -q -- --max-connections; then
  cap=$((connections + 256)); [ "$cap" -lt 4096 ] && cap=4096
  serve_args+=(--max-connections "$cap")
fi
"$dynrt" "${serve_args[@]}" >"$out/serve.out" 2>"$out/serve.err" &
serve_pid=$!
port="$(port_of "$serve_pid" "$out/serve.out")" || {
  echo "serve_load.sh: dynrt serve did not start:" >&2; cat "$out/serve.err" >&2; exit 1; }
serve_files="$(awk '/Max open files/ {print $4}' "/proc/$serve_pid/limits")"

# Every second: dynrt serve's VmRSS and VmHWM (kB) and open descriptors, and the connections
# to the engine: established, and closed ones in TIME_WAIT (connection churn).
(
  start=$SECONDS
  while kill -0 "$serve_pid" 2>/dev/null; do
    rss="$(awk '/^VmRSS/ {print $2}' "/proc/$serve_pid/status" 2>/dev/null)"
    hwm="$(awk '/^VmHWM/ {print $2}' "/proc/$serve_pid/status" 2>/dev/null)"
    fds="$(ls "/proc/$serve_pid/fd" 2>/dev/null | wc -l)"
    est="$(ss -Htn state established "( dport = :$sim_port )" 2>/dev/null | wc -l)"
    tw="$(ss -Htn state time-wait "( dport = :$sim_port )" 2>/dev/null | wc -l)"
    [ -n "$rss" ] && echo "$((SECONDS - start)) $rss $hwm $fds $est $tw"
    sleep 1
  done
) >"$out/rss.tsv" &
sampler_pid=$!

[ "$smoke" = 1 ] || echo "serve_load.sh: $connections streams for $seconds s against dynrt serve :$port (engine :$sim_port, time scale $time_scale, results in $out)"
# Query pools that grow with the streams, so most requests reach the engine and some are exact
# repeats (served from the library, or from a fill of the router's branch).
"$client" --port "$port" -c "$connections" -d "$seconds" --seed "$seed" \
  --queries "$((connections * 20))" --prompts "$((connections * 5))" --json "$out/client.json" >"$out/client.txt" 2>&1
client_rc=$?

# GET /metrics with curl, or bash's /dev/tcp where curl is not installed (HTTP/1.0: the server
# closes after the answer; the body follows the blank line).
if command -v curl >/dev/null; then
  metrics="$(curl -s --max-time 30 "http://127.0.0.1:$port/metrics")"
else
  metrics="$(timeout 30 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"
    printf "GET /metrics HTTP/1.0\r\nHost: load\r\n\r\n" >&3; cat <&3' _ "$port" |
    tr -d '\r' | sed '1,/^$/d')"
fi
echo "$metrics" >"$out/metrics.txt"
metric() { echo "$metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%.0f", s}'; }
served() { echo "$metrics" | awk -v n="dynrt_requests_total{served=\"$1\"}" '$1 == n {print $2}'; }
entries="$(metric dynrt_csl_entries)"
bytes="$(metric dynrt_csl_bytes)"
errors="$(metric dynrt_errors_total)"
fills="$(metric dynrt_fills_issued_total)"
workflows="$(metric dynrt_workflows_live)"
rss_line="$(tail -1 "$out/rss.tsv")"
base_rss="$(awk 'NR == 1 {print $2}' "$out/rss.tsv")"
peak_rss="$(awk '$2 > m {m = $2} END {print m + 0}' "$out/rss.tsv")"
hwm="$(awk '/^VmHWM/ {print $2}' "/proc/$serve_pid/status" 2>/dev/null)"
hwm="${hwm:-$(echo "$rss_line" | awk '{print $3}')}"
peak_fds="$(awk '$4 > m {m = $4} END {print m + 0}' "$out/rss.tsv")"
peak_est="$(awk '$5 > m {m = $5} END {print m + 0}' "$out/rss.tsv")"
peak_tw="$(awk '$6 > m {m = $6} END {print m + 0}' "$out/rss.tsv")"
sim_hwm="$(awk '/^VmHWM/ {print $2}' "/proc/$sim_pid/status" 2>/dev/null)"

kill "$sampler_pid" 2>/dev/null
kill -TERM "$serve_pid"
serve_rc=124
for _ in $(seq 1 300); do
  if ! kill -0 "$serve_pid" 2>/dev/null; then wait "$serve_pid"; serve_rc=$?; break; fi
  sleep 0.1
done
serve_pid=""

fails=0
problem() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ "$client_rc" = 0 ] || problem "the load client reported failures (exit $client_rc)"
[ -n "$metrics" ] || problem "dynrt serve's /metrics did not answer after the run"
[ "${errors:-1}" = 0 ] || problem "dynrt_errors_total is $errors"
[ "${entries:-0}" -le 1000000 ] || problem "dynrt_csl_entries $entries over the budget of 1,000,000"
[ "${bytes:-0}" -le 1073741824 ] || problem "dynrt_csl_bytes $bytes over the budget of 1 GiB"
[ "$((hwm / 1024))" -le "$max_rss_mb" ] || problem "dynrt serve's peak RSS $((hwm / 1024)) MB is over $max_rss_mb MB"
[ "$serve_rc" = 0 ] || problem "dynrt serve exited $serve_rc on SIGTERM (124: did not stop in 30 s)"

if [ "$smoke" = 1 ]; then
  grep '^RESULT\|^failure' "$out/client.txt"
else
  cat "$out/client.txt" | grep -v '^RESULT'
  echo
  echo "| dynrt serve | value |"
  echo "| --- | --- |"
  echo "| resident memory: after start / peak VmRSS / VmHWM | $((base_rss / 1024)) MB / $((peak_rss / 1024)) MB / $((hwm / 1024)) MB (bound $max_rss_mb MB) |"
  echo "| open descriptors: peak (limit) | $peak_fds ($serve_files) |"
  echo "| connections to the engine: peak established / peak in TIME_WAIT | $peak_est / $peak_tw |"
  echo "| served: engine / fill / cache | $(served engine) / $(served fill) / $(served cache) |"
  echo "| fills issued / workflow runs live at the end | $fills / $workflows |"
  echo "| dynrt_errors_total | $errors |"
  echo "| dynrt_csl_entries (budget 1,000,000) | $entries |"
  echo "| dynrt_csl_bytes (budget 1 GiB) | $bytes |"
  echo "| dynrt-sim-engine VmHWM | $(( ${sim_hwm:-0} / 1024 )) MB |"
fi
echo "serve_load.sh: peak_rss_mb=$((peak_rss / 1024)) vmhwm_mb=$((hwm / 1024)) csl_entries=$entries csl_bytes=$bytes errors=$errors serve_exit=$serve_rc failures=$fails"
[ "$fails" = 0 ]
