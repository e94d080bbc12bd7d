#!/usr/bin/env python3
"""End to end: API keys, scopes and tenants in the real `dynrt serve`.

- Without keys it refuses to listen on 0.0.0.0 (exit 2, a message naming --keys); with
  --insecure-no-auth it starts. A --share-stage that names no stage refuses the start.
- With --keys: /healthz is open; no key or an unknown key is 401 (authentication_error), a key
  without the route's scope 403 (permission_error), a key over its rate 429 with Retry-After.
- Tenants: a tagged call repeated by a second key of the same tenant is served from the
  library; the same call by another tenant runs on the engine.
- SIGHUP reloads the key file: a new key works at once; a broken file is refused with its
  position and the keys in force keep working.
- Keys in the auth section of a --config given through a pipe are in force; a SIGHUP that
  finds the pipe drained keeps them.
- No key ever appears in the server's output or in /metrics.

usage: auth_e2e.py DYNRT   (run from the repository root)
"""
import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys

from checks import Output, check, launch, scratch, stop, summary

DYNRT = sys.argv[1]
KEYS = {"acme-1": "sk-acme-one-7f3a", "acme-2": "sk-acme-two-91bc", "beta-1": "sk-beta-one-2d44",
        "scraper": "sk-scrape-5e61", "slow": "sk-slow-0a9f", "late": "sk-late-c3d2"}


def request(port, method, path, body=None, key=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = dict(headers or {})
    if key is not None:
        h["Authorization"] = "Bearer " + key
    if body is not None:
        h["Content-Type"] = "application/json"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    resp = conn.getresponse()
    out = resp.status, dict(resp.getheaders()), resp.read().decode()
    conn.close()
    return out


def error_type(body):
    try:
        return json.loads(body)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def key_file(path, names, broken=False):
    lines = ["defaults: {rps: 1000}", "keys:"]
    scopes = {"acme-1": "[infer]", "acme-2": "[infer, write]", "beta-1": "[infer]",
              "scraper": "[metrics]", "slow": "[infer]", "late": "[infer]"}
    tenants = {"acme-1": "acme", "acme-2": "acme", "beta-1": "beta", "scraper": "ops",
               "slow": "acme", "late": "beta"}
    for n in names:
        limits = ", limits: {rps: 0.001, burst: 2}" if n == "slow" else ""
        lines.append("  - {name: %s, key_sha256: %s, tenant: %s, scopes: %s%s}"
                     % (n, sha(KEYS[n]), tenants[n], scopes[n], limits))
    if broken:
        lines.append("  - {name: torn, key_sha256: 12ab, tenant: t, scopes: [infer]}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


ROUTER = {"model": "qwen3-32b", "temperature": 0, "max_tokens": 8,
          "messages": [{"role": "user", "content": "Route this: my invoice is wrong"}]}


def tagged(port, key, run):
    return request(port, "POST", "/v1/chat/completions", ROUTER, key,
                   {"X-DynRT-Workflow": "routing", "X-DynRT-Workflow-Id": run,
                    "X-DynRT-Stage": "router"})


def main():
    # Safe start: no keys, not loopback.
    r = subprocess.run([DYNRT, "serve", "templates", "--host", "0.0.0.0", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2, "0.0.0.0 without keys exits 2 (got %d)" % r.returncode)
    check("--keys" in r.stderr and "0.0.0.0" in r.stderr, "the refusal says why: %r" % r.stderr)
    r = subprocess.run([DYNRT, "serve", "templates", "--port", "0", "--share-stage",
                        "routing.nope"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "routing.nope" in r.stderr,
          "a shared stage that is no stage refuses the start: %d %r" % (r.returncode, r.stderr))
    p, _, _ = launch([DYNRT, "serve", "templates", "--host", "0.0.0.0", "--port", "0",
                      "--insecure-no-auth"], r"listening on http://0\.0\.0\.0:(\d+)")
    stop(p)

    tmp = scratch("dynrt-auth-")
    keys = os.path.join(tmp, "keys.yaml")
    key_file(keys, ["acme-1", "acme-2", "beta-1", "scraper", "slow"])
    proc, port, line = launch([DYNRT, "serve", "templates", "--port", "0", "--time-scale", "0",
                               "--keys", keys])
    out, err = Output(proc.stdout), Output(proc.stderr)
    out.text += line
    try:
        check(request(port, "GET", "/healthz")[0] == 200, "/healthz needs no key")
        for key in (None, "sk-unknown", ""):
            status, headers, body = request(port, "POST", "/v1/chat/completions", ROUTER, key)
            check(status == 401 and error_type(body) == "authentication_error",
                  "key %r: 401 authentication_error (got %d %s)" % (key, status, body[:200]))
            check(headers.get("WWW-Authenticate") == "Bearer", "401 says Bearer")
        status, _, body = request(port, "GET", "/metrics", key=KEYS["acme-1"])
        check(status == 403 and error_type(body) == "permission_error",
              "an infer key on /metrics: 403 (got %d)" % status)
        status, _, body = request(port, "POST", "/v1/dynrt/writes", {"keys": ["doc:x"]},
                                  KEYS["acme-1"])
        check(status == 403, "an infer key cannot write (got %d)" % status)
        status, _, body = request(port, "POST", "/v1/dynrt/writes", {"keys": ["doc:x"]},
                                  KEYS["acme-2"])
        check(status == 200, "a write key writes (got %d %s)" % (status, body[:200]))

        s1, h1, b1 = tagged(port, KEYS["acme-1"], "run-1")
        check(s1 == 200 and h1.get("X-DynRT-Served") == "engine", "acme's first call runs")
        s2, h2, b2 = tagged(port, KEYS["acme-2"], "run-2")
        check(h2.get("X-DynRT-Served") == "cache" and b2 == b1,
              "acme's second key is served acme's result (got %s)" % h2.get("X-DynRT-Served"))
        s3, h3, b3 = tagged(port, KEYS["beta-1"], "run-1")
        check(h3.get("X-DynRT-Served") == "engine" and b3 == b1,
              "beta's identical call runs on the engine (got %s)" % h3.get("X-DynRT-Served"))

        statuses = [request(port, "GET", "/v1/models", key=KEYS["slow"]) for _ in range(3)]
        check([s for s, _, _ in statuses] == [200, 200, 429],
              "a key over its rate gets 429 (got %s)" % [s for s, _, _ in statuses])
        check(error_type(statuses[2][2]) == "rate_limit_exceeded"
              and int(statuses[2][1].get("Retry-After", "0")) >= 1, "429 with Retry-After")

        # SIGHUP: a new key, then a broken file.
        check(request(port, "GET", "/v1/models", key=KEYS["late"])[0] == 401, "late: not yet")
        key_file(keys, ["acme-1", "acme-2", "beta-1", "scraper", "slow", "late"])
        proc.send_signal(signal.SIGHUP)
        err.wait_for("reloaded 6 API key(s)")
        check(request(port, "GET", "/v1/models", key=KEYS["late"])[0] == 200, "late works")
        key_file(keys, ["acme-1"], broken=True)
        proc.send_signal(signal.SIGHUP)
        err.wait_for("key reload refused")
        err.wait_for("keys.yaml:")
        check(request(port, "GET", "/v1/models", key=KEYS["late"])[0] == 200,
              "after a refused reload the keys in force still work")

        status, _, metrics = request(port, "GET", "/metrics", key=KEYS["scraper"])
        check(status == 200, "a metrics key scrapes")
        for name, key in KEYS.items():
            check(key not in metrics, "key %s is not in /metrics" % name)
    finally:
        stop(proc)

    # A configuration given through a pipe (`--config <(vault read ...)`) is read once: the keys
    # of its auth section are in force (they were read from the drained pipe, found missing, and
    # the start refused), and a SIGHUP, with nothing left to read, keeps them.
    cfg = os.path.join(tmp, "keys-in-config.yaml")
    key_file(cfg, ["acme-1"])
    with open(cfg) as f:
        section = "auth:\n" + "".join("  " + line for line in f)
    with open(cfg, "w") as f:
        f.write(section)
    piped, pport, pline = launch(["bash", "-c", 'exec "$0" serve templates --port 0 '
                                  '--time-scale 0 --config <(cat "$1")', DYNRT, cfg])
    perr = Output(piped.stderr)
    try:
        check("1 API keys" in pline, "a piped config's keys are in force: %r" % pline)
        check(request(pport, "GET", "/v1/models", key=KEYS["acme-1"])[0] == 200,
              "the piped config's key works")
        check(request(pport, "GET", "/v1/models")[0] == 401, "no key: 401")
        piped.send_signal(signal.SIGHUP)
        perr.wait_for("key reload refused")
        check(request(pport, "GET", "/v1/models", key=KEYS["acme-1"])[0] == 200,
              "after a SIGHUP with the pipe drained the keys in force still work")
    finally:
        stop(piped)
    with out.cond, err.cond:
        text = out.text + err.text
    for name, key in KEYS.items():
        check(key not in text, "key %s never appears in the server's output" % name)
        check(sha(key) not in text, "the digest of key %s never appears either" % name)
    return summary("auth e2e")


if __name__ == "__main__":
    sys.exit(main())
