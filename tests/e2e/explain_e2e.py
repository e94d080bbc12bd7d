#!/usr/bin/env python3
"""End to end: `dynrt explain` against the real `dynrt serve` and `dynrt-sim-engine`.
- A Routing run whose handler request renames one field (max_tokens -> max_completion_tokens,
  as LangChain JS does for some model names): the handler runs on the engine, and
  GET /v1/dynrt/runs/{id} names both paths, with what the fill rendered and what was sent.
- `dynrt explain --url URL RUN_ID` prints the same (text and --format json); an unknown run is
  exit 1 with the server's 404 message.
- `--log-level debug --log-format json` logs one JSON line per near miss, naming the path.
- Calls whose tags name nothing loaded (a misspelt workflow or stage, a workflow without a run
  id) pass through, are counted by reason in /metrics, and are logged once per kind at warn,
  with the closest loaded name; a misspelt stage is also a near miss of its run.
- With keys: a key reads its own tenant's runs only; another tenant's key gets 404, and
  ?tenant= of another tenant is 403 unless the key is an admin's.
usage: explain_e2e.py DYNRT SIM   (run from the repository root)
"""
import hashlib
import http.client
import json
import os
import re
import subprocess
import sys
import time

from checks import Output, check, launch, metrics, scratch, stop, summary

DYNRT, SIM = sys.argv[1], sys.argv[2]
ROUTER_SYSTEM = ("You route requests to handlers. Think step by step, then end with one line "
                 "`HANDLER: <name>`, where <name> is weather, calendar or email.")


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = dict(headers or {})
    if body is not None:
        h["Content-Type"] = "application/json"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    resp = conn.getresponse()
    out = resp.status, dict(resp.getheaders()), resp.read().decode()
    conn.close()
    return out


def chat(system, user, **params):
    body = {"model": "qwen3-32b", "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    body.update(params)
    return body


def tagged(run, stage, key=None):
    h = {"X-DynRT-Workflow": "routing", "X-DynRT-Workflow-Id": run, "X-DynRT-Stage": stage}
    if key:
        h["Authorization"] = "Bearer " + key
    return h


def routing_turn(port, run, query, key=None):
    """Router, then a handler request that says max_completion_tokens where the template says
    max_tokens. Returns the handler's X-DynRT-Served."""
    s, _, b = request(port, "POST", "/v1/chat/completions", chat(ROUTER_SYSTEM, query, max_tokens=512),
                      tagged(run, "router", key))
    check(s == 200, "router answered: %d %s" % (s, b[:200]))
    text = json.loads(b)["choices"][0]["message"]["content"]
    handler = re.findall(r"HANDLER:\s*(weather|calendar|email)", text)[-1]
    time.sleep(0.3)  # the handler fills finish meanwhile
    system = ("You are the %s handler. Reply with exactly one JSON object {\"function\": ..., "
              "\"arguments\": {...}} that calls the %s API." % (handler, handler))
    s, h, b = request(port, "POST", "/v1/chat/completions",
                      chat(system, query, max_completion_tokens=256), tagged(run, "handle", key))
    check(s == 200, "handler answered: %d %s" % (s, b[:200]))
    return h.get("X-DynRT-Served")


def main():
    tmp = scratch("dynrt-explain-")
    reasoning = " ".join(["step"] * 200)
    with open(os.path.join(tmp, "script.jsonl"), "w") as f:
        for h in ("weather", "calendar", "email"):
            f.write(json.dumps({"contains": "[route %s]" % h,
                                "response": reasoning + "\nHANDLER: " + h}) + "\n")
    sim, sim_port = launch([SIM, "--port", "0", "--time-scale", "10", "--script",
                            os.path.join(tmp, "script.jsonl")], r":(\d+)")[:2]
    url = "qwen3-32b=http://127.0.0.1:%d" % sim_port
    record = os.path.join(tmp, "traffic.jsonl")
    gw, port, _ = launch([DYNRT, "serve", "templates", "--port", "0", "--engine", url,
                          "--log-level", "debug", "--log-format", "json", "--record", record],
                         r":(\d+) ")
    log = Output(gw.stderr)

    served = routing_turn(port, "ticket-1", "[route email] mail the team")
    check(served == "engine", "the renamed field keeps the handler off the fills (got %s)" % served)
    s, _, b = request(port, "GET", "/v1/dynrt/runs/ticket-1")
    check(s == 200, "GET /v1/dynrt/runs/ticket-1: %d %s" % (s, b[:300]))
    runs = json.loads(b)["data"] if s == 200 else []
    check(len(runs) == 1 and runs[0]["workflow"] == "routing" and runs[0]["live"],
          "one live routing run: %s" % b[:300])
    calls = runs[0]["calls"] if runs else []
    check([c["stage"] for c in calls] == ["router", "handle"], "both calls in order: %s" % calls)
    handle = calls[1] if len(calls) == 2 else {}
    why = handle.get("why", {})
    check(why.get("reason") == "body_differed", "the handler's miss is a differing body: %s" % why)
    paths = {d["path"]: d for d in why.get("diff", [])}
    check(set(paths) == {"/max_tokens", "/max_completion_tokens"},
          "the diff names exactly the two paths: %s" % why.get("diff"))
    check(paths.get("/max_tokens", {}).get("expected") == 256 and
          "sent" not in paths.get("/max_tokens", {}) and
          paths.get("/max_completion_tokens", {}).get("sent") == 256,
          "expected and sent on each side: %s" % paths)

    # The CLI, text and JSON.
    out = subprocess.run([DYNRT, "explain", "--url", "http://127.0.0.1:%d" % port, "ticket-1"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0 and "body_differed" in out.stdout and "/max_completion_tokens" in
          out.stdout and "/max_tokens" in out.stdout,
          "dynrt explain prints the reason and the paths: %d %s %s" %
          (out.returncode, out.stdout[:600], out.stderr[:200]))
    out = subprocess.run([DYNRT, "explain", "--url", "http://127.0.0.1:%d/" % port, "--format",
                          "json", "--workflow", "routing", "ticket-1"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0 and json.loads(out.stdout or "[]")[0]["calls"][1]["why"]["reason"]
          == "body_differed", "dynrt explain --format json: %d %s" % (out.returncode, out.stdout[:300]))
    out = subprocess.run([DYNRT, "explain", "--url", "http://127.0.0.1:%d" % port, "nobody"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 1 and "404" in out.stderr and "nobody" in out.stderr,
          "an unknown run is exit 1 with the 404: %d %s" % (out.returncode, out.stderr[:300]))
    s, _, b = request(port, "GET", "/v1/dynrt/runs/ticket-1?colour=red")
    check(s == 400 and "colour" in b, "an unknown query parameter is a 400: %d %s" % (s, b[:200]))
    s, _, _ = request(port, "POST", "/v1/dynrt/runs/ticket-1", {})
    check(s == 405, "the route is GET only: %d" % s)

    # One JSON log line per near miss, naming the path.
    log.wait_for('"msg":"near miss"')
    lines = [json.loads(l) for l in log.text.splitlines() if l.startswith("{")]
    misses = [l for l in lines if l.get("msg") == "near miss" and l["call"]["stage"] == "handle"]
    check(len(misses) == 1 and misses[0]["id"] == "ticket-1" and
          any(d["path"] == "/max_completion_tokens" for d in misses[0]["call"]["why"]["diff"]),
          "one near-miss line for the handler, with its diff: %s" % misses)

    # Tags that name nothing loaded: the calls pass through, counted; each kind is logged once.
    body = chat(ROUTER_SYSTEM, "[route email] hello", max_tokens=512)
    sent = [({"X-DynRT-Workflow": "routng", "X-DynRT-Workflow-Id": "t-2", "X-DynRT-Stage": "router"}, 2),
            ({"X-DynRT-Workflow": "routing", "X-DynRT-Stage": "router"}, 1),
            ({"X-DynRT-Workflow": "routing", "X-DynRT-Workflow-Id": "t-3", "X-DynRT-Stage": "routr"}, 1)]
    for headers, times in sent:
        for _ in range(times):
            s, h, b = request(port, "POST", "/v1/chat/completions", body, headers)
            check(s == 200 and h.get("X-DynRT-Served") == "engine",
                  "a call tagged %s passes through: %d %s" % (headers, s, b[:200]))
    m = metrics(port)
    check(m.get('dynrt_tags_ignored_total{reason="unknown_workflow"}') == 2 and
          m.get('dynrt_tags_ignored_total{reason="no_workflow_id"}') == 1 and
          m.get('dynrt_tags_ignored_total{reason="unknown_stage"}') == 1,
          "/metrics counts each call by reason: %s" %
          {k: v for k, v in m.items() if k.startswith("dynrt_tags_ignored_total")})
    log.wait_for('"id":"t-3"')  # the near miss, logged after the stage's warn line
    lines = [json.loads(l) for l in log.text.splitlines() if l.startswith("{")]
    told = [l for l in lines if l.get("msg") == "tags ignored"]
    check(sorted(l["reason"] for l in told) == ["no_workflow_id", "unknown_stage", "unknown_workflow"]
          and all(l["level"] == "warn" for l in told),
          "one warn line per kind, the repeated call not again: %s" % told)
    by_reason = {l["reason"]: l for l in told}
    check("'routng'" in by_reason.get("unknown_workflow", {}).get("detail", "") and
          "did you mean 'routing'?" in by_reason.get("unknown_workflow", {}).get("detail", ""),
          "the misspelt workflow's line names it and the closest loaded one: %s" %
          by_reason.get("unknown_workflow"))
    check("did you mean 'router'?" in by_reason.get("unknown_stage", {}).get("detail", ""),
          "the misspelt stage's line names the closest stage: %s" % by_reason.get("unknown_stage"))
    misses = [l for l in lines if l.get("msg") == "near miss" and l.get("id") == "t-3"]
    check(len(misses) == 1 and misses[0]["call"]["why"]["reason"] == "unknown_stage",
          "the misspelt stage is a near miss of its run: %s" % misses)
    stop(gw)
    # --record: each tagged call, in order, with its request and response as they went.
    with open(record) as f:
        recorded = [r for r in map(json.loads, filter(str.strip, f)) if r.get("id") == "ticket-1"]
    check([(r["id"], r["stage"]) for r in recorded] == [("ticket-1", "router"), ("ticket-1", "handle")],
          "the two tagged calls are recorded: %s" % [(r["id"], r["stage"]) for r in recorded])
    if len(recorded) == 2:
        check(recorded[1]["request"].get("max_completion_tokens") == 256 and
              recorded[1]["served"] == "engine" and recorded[1]["status"] == 200 and
              "choices" in recorded[1]["response"] and recorded[0]["latency_ms"] > 0,
              "a record holds the request, how it was served and the response: %s" %
              json.dumps(recorded[1])[:300])

    # Keys: a tenant reads its own runs only.
    keys = {"acme": "sk-acme-e2e-1", "beta": "sk-beta-e2e-2", "root": "sk-root-e2e-3"}
    with open(os.path.join(tmp, "keys.yaml"), "w") as f:
        f.write("keys:\n")
        for name, key in keys.items():
            scopes = "[admin]" if name == "root" else "[infer]"
            tenant = "ops" if name == "root" else name
            f.write("  - {name: %s, key_sha256: %s, tenant: %s, scopes: %s}\n" %
                    (name, hashlib.sha256(key.encode()).hexdigest(), tenant, scopes))
    keyed_record = os.path.join(tmp, "keyed.jsonl")
    gw, port, _ = launch([DYNRT, "serve", "templates", "--port", "0", "--engine", url, "--keys",
                          os.path.join(tmp, "keys.yaml"), "--record", keyed_record], r":(\d+) ")
    routing_turn(port, "shared-id", "[route weather] rain?", keys["acme"])
    auth = lambda k: {"Authorization": "Bearer " + keys[k]}
    s, _, b = request(port, "GET", "/v1/dynrt/runs/shared-id", headers=auth("acme"))
    check(s == 200 and len(json.loads(b)["data"]) == 1, "acme reads its run: %d %s" % (s, b[:200]))
    s, _, b = request(port, "GET", "/v1/dynrt/runs/shared-id", headers=auth("beta"))
    check(s == 404, "beta does not see acme's run: %d %s" % (s, b[:200]))
    s, _, b = request(port, "GET", "/v1/dynrt/runs/shared-id?tenant=acme", headers=auth("beta"))
    check(s == 403, "beta may not name acme: %d %s" % (s, b[:200]))
    s, _, b = request(port, "GET", "/v1/dynrt/runs/shared-id?tenant=acme", headers=auth("root"))
    check(s == 200, "an admin may: %d %s" % (s, b[:200]))
    s, _, _ = request(port, "GET", "/v1/dynrt/runs/shared-id")
    check(s == 401, "no key, no runs: %d" % s)
    out = subprocess.run([DYNRT, "explain", "--url", "http://127.0.0.1:%d" % port, "shared-id"],
                         capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, DYNRT_API_KEY=keys["acme"]))
    check(out.returncode == 0 and "routing/shared-id" in out.stdout,
          "dynrt explain takes the key from DYNRT_API_KEY: %d %s %s" %
          (out.returncode, out.stdout[:300], out.stderr[:300]))
    stop(gw)
    with open(keyed_record) as f:
        text = f.read()
    check('"tenant":"acme"' in text and "sk-" not in text and "Bearer" not in text,
          "a record names the tenant, never a key: %s" % text[:300])
    sim.terminate()
    sim.wait(timeout=20)
    return summary("explain e2e")


if __name__ == "__main__":
    sys.exit(main())
