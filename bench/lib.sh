# Shell helpers the loopback benchmarks share (sourced by serve_load.sh and soak.sh).

# port_of PID FILE: the port from the first line a server prints ("... listening on
# http://HOST:PORT ..."), waiting up to 30 s; fails if the process ends first.
port_of() {
  for _ in $(seq 1 300); do
    local p
    p="$(grep -o 'http://[0-9.]*:[0-9]*' "$2" 2>/dev/null | head -1 | sed 's/.*://')"
    [ -n "$p" ] && { echo "$p"; return 0; }
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
