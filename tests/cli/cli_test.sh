#!/usr/bin/env bash
# The `dynrt` command as a process: exit codes, output formats, standard input. Run from the
# repository root with the path of the dynrt binary.
set -u
dynrt="$1"
fails=0
check() {  # check NAME EXPECTED_STATUS COMMAND...
  local name="$1" want="$2"
  shift 2
  "$@" >/tmp/dynrt-cli-out.$$ 2>/tmp/dynrt-cli-err.$$
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $got, want $want"
    sed 's/^/  stdout: /' /tmp/dynrt-cli-out.$$ | head -20
    sed 's/^/  stderr: /' /tmp/dynrt-cli-err.$$ | head -20
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
contains() {  # contains NAME FILE TEXT
  if ! grep -qF -- "$3" "$2"; then
    echo "FAIL $1: output lacks: $3"
    fails=$((fails + 1))
  fi
}

check "clean templates exit 0" 0 "$dynrt" lint templates/
[ -s /tmp/dynrt-cli-out.$$ ] && { echo "FAIL clean run printed output"; fails=$((fails + 1)); }

check "errors exit 1" 1 "$dynrt" lint tests/dsl/golden/unknown-ref.yaml
contains "text format" /tmp/dynrt-cli-out.$$ "tests/dsl/golden/unknown-ref.yaml:18:21: error:"

check "warnings exit 0 by default" 0 "$dynrt" lint tests/dsl/golden/unreachable-stage.yaml
check "--fail-on warning" 1 "$dynrt" lint --fail-on warning tests/dsl/golden/unreachable-stage.yaml
check "--fail-on never" 0 "$dynrt" lint --fail-on never tests/dsl/golden/cycle.yaml

check "json format" 1 "$dynrt" lint --format json tests/dsl/golden/cycle.yaml
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["findings"][0]["rule"]=="cycle", d' \
  /tmp/dynrt-cli-out.$$ || { echo "FAIL json output"; fails=$((fails + 1)); }

check "sarif format" 1 "$dynrt" lint -f sarif tests/dsl/golden/cycle.yaml
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["version"]=="2.1.0"; assert d["runs"][0]["results"][0]["ruleId"]=="DT2002", d' \
  /tmp/dynrt-cli-out.$$ || { echo "FAIL sarif output"; fails=$((fails + 1)); }

check "standard input" 1 bash -c "\"$dynrt\" lint - < tests/dsl/golden/cycle.yaml"
contains "stdin name" /tmp/dynrt-cli-out.$$ "<stdin>:12:12: error:"

check "missing path is a usage error" 2 "$dynrt" lint no/such/folder
contains "missing path message" /tmp/dynrt-cli-err.$$ "no/such/folder: no such file or folder"
check "missing path in json" 2 "$dynrt" lint --format json templates/ no/such/folder
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["errors"]==["no/such/folder: no such file or folder"], d' \
  /tmp/dynrt-cli-out.$$ || { echo "FAIL json output names the missing path"; fails=$((fails + 1)); }
check "missing path in sarif" 2 "$dynrt" lint -f sarif no/such/folder
/usr/bin/python3 -c 'import json,sys; i=json.load(open(sys.argv[1]))["runs"][0]["invocations"][0]; assert not i["executionSuccessful"] and "no/such/folder" in i["toolExecutionNotifications"][0]["message"]["text"], i' \
  /tmp/dynrt-cli-out.$$ || { echo "FAIL sarif output names the missing path"; fails=$((fails + 1)); }
check "no path is a usage error" 2 "$dynrt" lint
check "unknown option is a usage error" 2 "$dynrt" lint --frobnicate templates/
check "bad format is a usage error" 2 "$dynrt" lint --format xml templates/
check "no subcommand is a usage error" 2 "$dynrt"
check "help exits 0" 0 "$dynrt" lint --help
check "version exits 0" 0 "$dynrt" --version
check "rule list" 0 "$dynrt" lint --list-rules
contains "rule list content" /tmp/dynrt-cli-out.$$ "DT2001  unknown-ref"

check "schema" 0 "$dynrt" schema
/usr/bin/python3 -c 'import json,sys; assert json.load(open(sys.argv[1])) == json.load(open("docs/template.schema.json"))' \
  /tmp/dynrt-cli-out.$$ || { echo "FAIL schema output differs from docs/template.schema.json"; fails=$((fails + 1)); }

check "bench admission" 0 "$dynrt" bench admission --snapshots 1000 --seed 1
contains "oracle-set match line" /tmp/dynrt-cli-out.$$ "oracle-set match: "
contains "utility line" /tmp/dynrt-cli-out.$$ "utility: "
check "bench needs a subcommand" 2 "$dynrt" bench
check "bench admission rejects a bad count" 2 "$dynrt" bench admission --snapshots 0
check "bench admission rejects crossed bounds" 2 "$dynrt" bench admission --min-candidates 5 --max-candidates 3

# Numbers a flag would refuse are refused, not NaN or infinity let through.
check "bench sweep refuses a NaN interference scale" 2 "$dynrt" bench sweep routing --interference-scale nan --out /tmp/dynrt-cli-nan.$$
contains "says it is not a number" /tmp/dynrt-cli-err.$$ "--interference-scale: Value nan is not a finite number in [0.01, 100]"
check "bench sweep refuses an interference scale past any step the clock holds" 2 "$dynrt" bench sweep routing --interference-scale 1e300 --out /tmp/dynrt-cli-nan.$$
check "bench sweep refuses an infinite saturation rate" 2 "$dynrt" bench sweep routing --saturation inf --out /tmp/dynrt-cli-nan.$$
check "bench refuses a NaN repeat rate" 2 "$dynrt" bench routing --repeat-rate nan --out /tmp/dynrt-cli-nan.$$
check "bench sweep refuses a rate that would take days of simulated time" 2 "$dynrt" bench sweep routing --saturation 1e-9 --out /tmp/dynrt-cli-nan.$$
contains "says how long" /tmp/dynrt-cli-err.$$ "simulated seconds; a cell may span at most"
# The warm-up and the drain are timed: at 1e12 runs/s they would hold trillions of runs.
check "bench sweep refuses a rate whose warm-up would not fit in memory" 2 "$dynrt" bench sweep hci --saturation 1e12 --out /tmp/dynrt-cli-nan.$$
contains "says how many runs" /tmp/dynrt-cli-err.$$ "a cell may hold at most 1e+06 (lower --saturation)"
check "bench bursty refuses it too" 2 "$dynrt" bench bursty hci --saturation 1e12 --out /tmp/dynrt-cli-nan.$$
check "bench sweep refuses a load given twice" 2 "$dynrt" bench sweep routing --loads 0.3,0.5,0.3 --out /tmp/dynrt-cli-nan.$$
contains "names the load" /tmp/dynrt-cli-err.$$ "load 0.3 is given twice"
check "bench sweep refuses an arm given twice" 2 "$dynrt" bench sweep routing --arms full,static,full --out /tmp/dynrt-cli-nan.$$
contains "names the arm" /tmp/dynrt-cli-err.$$ "dynrt bench sweep: arm full is given twice in --arms"
check "bench refuses a rate given twice" 2 "$dynrt" bench routing --rate 0.5,0.5 --out /tmp/dynrt-cli-nan.$$
contains "names the rate" /tmp/dynrt-cli-err.$$ "rate 0.5 is given twice in --rate"
# CLI11 reads -5 into an unsigned option as 2^64 - 5; a seed is a whole number of 0 or more.
check "bench sweep refuses a negative seed" 2 "$dynrt" bench sweep routing --seed -5 --out /tmp/dynrt-cli-nan.$$
contains "says what a seed is" /tmp/dynrt-cli-err.$$ "--seed: Value -5 is not a whole number from 0 to 18446744073709551615"
check "bench admission refuses a negative seed" 2 "$dynrt" bench admission --seed -1
check "bench refuses a fractional seed" 2 "$dynrt" bench routing --seed 1.5 --out /tmp/dynrt-cli-nan.$$
check "bench ablation refuses a load past twice saturation" 2 "$dynrt" bench ablation routing --loads 3 --out /tmp/dynrt-cli-nan.$$
contains "names the command refused" /tmp/dynrt-cli-err.$$ "dynrt bench ablation: a load is a fraction of the saturation rate"
[ -e /tmp/dynrt-cli-nan.$$ ] && { echo "FAIL a refused bench wrote its output folder"; fails=$((fails + 1)); }

# A template folder with an error is refused with the finding, before any cell runs (every run
# would fail: the runtime loads no folder with an error in it).
broken=/tmp/dynrt-cli-broken.$$
mkdir -p "$broken" && cp templates/*.yaml "$broken"/
sed -i '0,/wait_ms:/s/wait_ms: *[0-9]*/wait_ms: -5/' "$broken/routing.yaml"
check "bench sweep refuses a template folder with an error" 2 "$dynrt" bench sweep react --templates "$broken" --seeds 1 --requests 20 --loads 0.3 --saturation 5 --quiet --no-plots --out /tmp/dynrt-cli-bench.$$
contains "names the folder" /tmp/dynrt-cli-err.$$ "dynrt bench sweep: the templates in $broken have errors"
contains "positions the finding" /tmp/dynrt-cli-err.$$ "$broken/routing.yaml:"
check "bench bursty refuses a template folder that is not there" 2 "$dynrt" bench bursty react --templates "$broken/none" --seeds 1 --requests 20 --saturation 5 --quiet --out /tmp/dynrt-cli-bench.$$
contains "says it is not there" /tmp/dynrt-cli-err.$$ "$broken/none: no such file or folder"
# A clean template the trace cannot drive: Routing's router renamed. Every run would be empty.
cp templates/*.yaml "$broken"/
sed -i 's/^  router:/  route:/; s/after: router/after: route/; s/stages: \[router,/stages: [route,/' "$broken/routing.yaml"
check "bench sweep refuses a template its trace cannot drive" 2 "$dynrt" bench sweep routing --templates "$broken" --seeds 1 --requests 20 --loads 0.3 --saturation 5 --quiet --no-plots --out /tmp/dynrt-cli-bench.$$
contains "names the stage the trace calls" /tmp/dynrt-cli-err.$$ "$broken/routing.yaml: the routing template has no stage 'router'"
rm -rf "$broken" /tmp/dynrt-cli-bench.$$

# serve --config: each value is checked as its flag is, and refused at its position before
# anything listens (timeout: a value let through would serve until killed).
cfg=/tmp/dynrt-cli-cfg.$$.yaml
while IFS='|' read -r name yaml where; do
  printf '%b' "$yaml" > "$cfg"
  check "serve --config refuses $name" 2 timeout 20 "$dynrt" serve templates --config "$cfg" --port 0
  contains "$name is positioned" /tmp/dynrt-cli-err.$$ "$cfg:$where"
done <<'CASES'
zero scheduler threads|threads: 0\n|1:10: threads: --threads: Value 0 not in range 1 to 256
negative I/O threads|limits: {}\nio_threads: -2\n|2:13: io_threads:
a NaN time scale|sim:\n  time_scale: .nan\n|2:15: sim.time_scale: --time-scale: Value .nan is not a number
a negative interference scale|sim: {interference_scale: -1}\n|1:27: sim.interference_scale:
zero simulated slots|sim: {slots: 0}\n|1:14: sim.slots:
a negative header timeout|limits: {header_timeout_ms: -5}\n|1:29: limits.header_timeout_ms:
a negative body limit|limits: {max_body_bytes: -1}\n|1:26: limits.max_body_bytes:
zero connections|limits: {max_connections: 0}\n|1:27: limits.max_connections:
an unknown log level|log: {level: loud}\n|1:14: log.level: --log-level: loud not in
a list for a number|threads: [1, 2]\n|1:10: threads must be a single value
a misspelt section|enginse: []\n|1:1: unknown key 'enginse'; did you mean 'engines'?
a misspelt engine key|engines:\n  - url: http://127.0.0.1:8000\n    max_num_seq: 2\n|3:5: engines[]: unknown key 'max_num_seq'; did you mean 'max_num_seqs'?
an unknown limit|limits: {max_body: 5}\n|1:10: limits: unknown key 'max_body' (max_body_bytes,
a list as the whole file|[1, 2]\n|1:1: the configuration must be a map
a word for the compute knee|engines: [{url: "http://127.0.0.1:8000", concurrency: abc}]\n|1:55: engine http://127.0.0.1:8000: concurrency must be a whole number; got 'abc'
one model not in a list|engines: [{url: "http://127.0.0.1:8000", models: m}]\n|1:50: engine http://127.0.0.1:8000: models must be a list
a map for an engine URL|engines: [{url: {host: x}}]\n|1:17: engines: url must be a single value; got a map
a switch that is no boolean|switches: {fills: maybe}\n|1:19: switches.fills must be true or false; got 'maybe'
a word for a tool timeout|tools:\n  allow_hosts: [api.example.com]\n  w: {url: "https://api.example.com", timeout_ms: soon}\n|3:51: tool w: timeout_ms must be a whole number; got 'soon'
CASES
rm -f "$cfg"
check "serve refuses a key file that never ends" 2 timeout 20 "$dynrt" serve templates --keys /dev/zero --port 0
contains "says the key file is over its limit" /tmp/dynrt-cli-err.$$ "the key file /dev/zero is over 1048576 bytes"
check "explain refuses a timeout of 0 (curl would wait for ever)" 2 "$dynrt" explain --timeout 0 run-1
contains "explain says the timeout's range" /tmp/dynrt-cli-err.$$ "--timeout: Value 0 is not a finite number in [0.001, 3600]"
check "serve refuses a --config that is not there" 2 timeout 20 "$dynrt" serve templates --config /tmp/dynrt-cli-none.$$.yaml --port 0
contains "says so" /tmp/dynrt-cli-err.$$ "dynrt serve: cannot read the --config file /tmp/dynrt-cli-none.$$.yaml: No such file or directory"
check "serve refuses a folder as --config" 2 timeout 20 "$dynrt" serve templates --config templates --port 0
contains "says it is a folder" /tmp/dynrt-cli-err.$$ "the --config file templates is a folder, not a file"
check "serve refuses a --config that never ends" 2 timeout 20 "$dynrt" serve templates --config /dev/zero --port 0
contains "says the config is over its limit" /tmp/dynrt-cli-err.$$ "the --config file /dev/zero is over 1048576 bytes"
printf 'engines: %s\n' "$(printf '[%.0s' $(seq 3000))" > /tmp/dynrt-cli-deep.$$.yaml
check "serve refuses a --config nested too deep" 2 timeout 20 "$dynrt" serve templates --config /tmp/dynrt-cli-deep.$$.yaml --port 0
contains "says it is nested too deep" /tmp/dynrt-cli-err.$$ "nested deeper than the YAML reader allows"
rm -f /tmp/dynrt-cli-deep.$$.yaml
# A folder opens as a stream on Linux: reading it threw (exit 3), or read as an empty file.
check "serve refuses a folder as --corpus" 2 timeout 20 "$dynrt" serve templates --corpus templates --port 0
contains "says the corpus is a folder" /tmp/dynrt-cli-err.$$ "the corpus templates is a folder, not a file"
check "serve refuses a folder as --script" 2 timeout 20 "$dynrt" serve templates --script templates --port 0
check "template draft refuses a folder as --corpus" 2 "$dynrt" template draft --corpus templates /dev/null
check "serve refuses an empty model list" 2 timeout 20 "$dynrt" serve templates --engine =http://127.0.0.1:8000 --port 0
contains "says what to give" /tmp/dynrt-cli-err.$$ "no model name before '='"
check "serve refuses an engine URL without a host" 2 timeout 20 "$dynrt" serve templates --engine http:// --port 0
contains "says the host is missing" /tmp/dynrt-cli-err.$$ 'engine "http://" is not a URL: No host part in the URL'
check "serve refuses an engine URL with credentials" 2 timeout 20 "$dynrt" serve templates --engine http://me:s3cret@127.0.0.1:8000 --port 0
grep -q s3cret /tmp/dynrt-cli-err.$$ && { echo "FAIL the refusal repeats the password"; fails=$((fails + 1)); }

# template draft: a recording of two workflows, a line that is not a call, usage errors.
rec=/tmp/dynrt-cli-rec.$$.jsonl
drafts=/tmp/dynrt-cli-drafts.$$
/usr/bin/python3 - "$rec" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    f.write("not json\n")
    for i in range(6):
        for wf, stage, text in (("echo", "say", "hello %d" % i), ("greet", "hi", "hi")):
            f.write(json.dumps({"workflow": wf, "id": "r%d" % i, "stage": stage,
                                "endpoint": "/v1/chat/completions", "status": 200,
                                "latency_ms": 5, "ts_ms": 1000 * i + 10,
                                "request": {"model": "m", "temperature": 0,
                                            "messages": [{"role": "user", "content": text}]},
                                "response": {"choices": [{"message": {"content": "ok"}}]}}) + "\n")
PY
check "template draft needs --out for two workflows" 2 "$dynrt" template draft "$rec"
contains "names the fix" /tmp/dynrt-cli-err.$$ "--out DIR"
check "template draft writes each workflow" 0 "$dynrt" template draft "$rec" --out "$drafts"
contains "skipped line is positioned" /tmp/dynrt-cli-err.$$ "$rec:1: not a recorded call"
check "drafts lint clean" 0 "$dynrt" lint --fail-on warning "$drafts"
contains "the input is bound" "$drafts/echo.yaml" 'regex: "^hello (.*)$"'
printf 'tools:\n  lookup:\n    url: http://127.0.0.1:9/lookup\n    reads: ["kb:{{q}}"]\n' > "$drafts.yaml"
/usr/bin/python3 - "$rec" <<'PY'
import json, sys
with open(sys.argv[1], "a") as f:
    for i in range(6):
        f.write(json.dumps({"workflow": "look", "id": "l%d" % i, "stage": "find",
                            "endpoint": "/v1/dynrt/tools/lookup", "status": 200,
                            "latency_ms": 5, "ts_ms": 1000 * i + 10, "request": {"q": "x%d" % i},
                            "response": {"hit": i}}) + "\n")
PY
check "template draft reads read-only tools from --config" 0 "$dynrt" template draft "$rec" --config "$drafts.yaml" --out "$drafts"
contains "the tool reads what its argument names" "$drafts/look.yaml" 'reads: ["kb:{{input}}"]'
contains "the read-only tool is speculable" "$drafts/look.yaml" "speculable: true"
rm -f "$drafts.yaml"
check "template draft of a missing file" 2 "$dynrt" template draft /nonexistent.jsonl
echo "nothing" > "$rec"
check "template draft of nothing recorded" 1 "$dynrt" template draft "$rec"
check "template needs a subcommand" 2 "$dynrt" template
rm -rf "$rec" "$drafts"

rm -f /tmp/dynrt-cli-out.$$ /tmp/dynrt-cli-err.$$
[ "$fails" = 0 ] && echo "all CLI checks passed" || echo "$fails CLI check(s) failed"
exit $((fails > 0))
