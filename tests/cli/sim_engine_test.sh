#!/usr/bin/env bash
# dynrt-sim-engine as a process: its options and their errors, then a scripted answer over
# HTTP (streamed and not), /metrics, and a clean exit on SIGTERM. Run with the binary's path.
set -u
engine="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null' EXIT
fails=0
check() {  # check NAME EXPECTED_STATUS COMMAND...
  local name="$1" want="$2"
  shift 2
  timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $got, want $want"
    sed 's/^/  stdout: /' "$tmp/out" | head -20
    sed 's/^/  stderr: /' "$tmp/err" | head -20
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
contains() {  # contains NAME FILE TEXT
  if ! grep -qF -- "$3" "$2"; then
    echo "FAIL $1: output lacks: $3"
    sed 's/^/  /' "$2" | head -10
    fails=$((fails + 1))
  fi
}

check "--help" 0 "$engine" --help
contains "--help lists the time scale" "$tmp/out" "--time-scale"
check "unknown option" 2 "$engine" --bogus
check "slots out of range" 2 "$engine" --slots 0
contains "slots out of range names it" "$tmp/err" "--slots"
check "a NaN time scale" 2 "$engine" --time-scale nan --port 0
contains "a NaN time scale names it" "$tmp/err" "--time-scale: Value nan is not a finite number of 0 or more"
check "an infinite interference scale" 2 "$engine" --interference-scale inf --port 0
check "an interference scale past the range" 2 "$engine" --interference-scale 1e300 --port 0
contains "the range is said" "$tmp/err" "--interference-scale: Value 1e300 is not a finite number in [0.01, 100]"
check "a negative seed" 2 "$engine" --seed -1 --port 0
contains "a negative seed is refused, not wrapped" "$tmp/err" "--seed: Value -1 is not a whole number"
printf '# a comment\n{"response": 3}\n' >"$tmp/bad.jsonl"
check "bad script" 2 "$engine" --script "$tmp/bad.jsonl"
contains "bad script names the line" "$tmp/err" "script line 2: needs a string \"response\""
check "missing script" 2 "$engine" --script "$tmp/none.jsonl"
contains "missing script names the file" "$tmp/err" "cannot read the script"
check "a folder as the script" 2 "$engine" --script "$tmp" --port 0
contains "a folder as the script is said to be one" "$tmp/err" "the script $tmp is a folder, not a file"
check "bad host" 1 "$engine" --host not-an-address
contains "bad host" "$tmp/err" "cannot listen on not-an-address:0"

# A scripted answer, end to end.
cat >"$tmp/script.jsonl" <<'JSONL'
{"contains": "capital of France", "response": "Paris is the capital of France."}
JSONL
mkfifo "$tmp/serve"
"$engine" --port 0 --time-scale 0 --script "$tmp/script.jsonl" --slots 8 >"$tmp/serve" &
pid=$!
exec 3<"$tmp/serve"  # held open: the server's stdout stays writable
line=
read -r -t 20 line <&3  # blocks until it prints its address (or 20 s, a hang guard)
url="$(printf '%s' "$line" | grep -o 'http://[0-9.:]*')"
if [ -z "$url" ]; then
  echo "FAIL the server did not print its address"; fails=$((fails + 1))
else
  check "port in use" 1 "$engine" --port "${url##*:}"
  contains "port in use names the address" "$tmp/err" "cannot listen on 127.0.0.1:${url##*:}"
  if /usr/bin/python3 - "$url" <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
def post(body):
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=10).read().decode()
ask = {"model": "sim", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
whole = json.loads(post(ask))
assert whole["choices"][0]["message"]["content"] == "Paris is the capital of France.", whole
assert whole["choices"][0]["finish_reason"] == "stop", whole
assert whole["usage"]["completion_tokens"] == 6, whole
events = [l[6:] for l in post(dict(ask, stream=True)).splitlines() if l.startswith("data: ")]
assert events[-1] == "[DONE]", events
text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
assert text == "Paris is the capital of France.", text
metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
assert 'vllm:num_requests_running{engine="0",model_name="sim"} 0' in metrics, metrics
assert 'dynrt_sim:max_num_seqs{engine="0",model_name="sim"} 8' in metrics, metrics
assert 'kv_cache_size_tokens="600000"} 1' in metrics, metrics  # vllm:cache_config_info
# Two answers of six tokens, each token a decode step of its own: twelve gaps, as long as the
# steps (25 ms each, at time scale 0 still counted in simulated time).
values = {l.split("{")[0]: float(l.rsplit(" ", 1)[1]) for l in metrics.splitlines()
          if l and not l.startswith("#")}
assert values["vllm:inter_token_latency_seconds_count"] == 12, metrics
assert abs(values["vllm:inter_token_latency_seconds_sum"] - 12 * 0.025) < 1e-6, metrics
assert values["vllm:iteration_tokens_total_count"] == 12, metrics
# A field of the wrong type is a 400 naming it, before a stream opens, and the engine lives on.
import urllib.error
for bad, param in [({"stream": True, "stream_options": {"include_usage": "x"}},
                    "stream_options.include_usage"),
                   ({"max_tokens": -3}, "max_tokens"), ({"max_tokens": "10"}, "max_tokens")]:
    try:
        post(dict(ask, **bad))
        raise AssertionError(f"{bad} was answered")
    except urllib.error.HTTPError as e:
        assert e.code == 400, (bad, e.code)
        error = json.loads(e.read())["error"]
        assert error["param"] == param and param in error["message"], (bad, error)
# A body nested 100,000 levels deep (which the server would overflow its stack writing) too.
deep = b'{"model": "sim", "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}"
try:
    urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", deep,
                                                  {"Content-Type": "application/json"}), timeout=10)
    raise AssertionError("a body nested 100,000 deep was answered")
except urllib.error.HTTPError as e:
    assert e.code == 400, e.code
    message = json.loads(e.read())["error"]["message"]
    assert "nests arrays and objects deeper than 256 levels" in message, message
assert json.loads(post(ask))["choices"][0]["message"]["content"] == "Paris is the capital of France."
PY
  then echo "ok   scripted answers over HTTP"; else echo "FAIL scripted answers over HTTP"; fails=$((fails + 1)); fi
fi
kill -TERM "$pid"
wait "$pid"
status=$?
pid=
if [ "$status" != 0 ]; then echo "FAIL SIGTERM exit $status"; fails=$((fails + 1)); else echo "ok   SIGTERM exits 0"; fi

[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
