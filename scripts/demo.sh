#!/usr/bin/env bash
# The main job on the embedded simulated engine: start `dynrt serve templates/` (no GPU, no
# model server needed), drive one Routing workflow through it over HTTP with
# examples/harness.py, print how each call was served, and stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
./build/dynrt serve templates/ --port 0 --time-scale 20 --corpus examples/corpus.json \
  --script examples/script.jsonl >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
  grep -q "listening on" "$log" && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
cat "$log"
port=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | sed 's/.*://')
python3 examples/harness.py --port "$port"
curl -s "localhost:$port/metrics" | grep -E '^dynrt_(requests_total|fills_issued_total|fills_consumed_total)'
