#!/usr/bin/env python3
"""End to end: the real `dynrt serve` on port 0 in front of `dynrt-sim-engine`, driven over HTTP
with the Python standard library, for the Routing and HCI workflows.

Checks: responses byte-identical to the floor (a second `dynrt serve` with --no-reuse
--no-fills in front of the same engine), fills served (X-DynRT-Served: fill), streaming (SSE
chunks, [DONE], the served header, the same text), a streamed router's pick read as it is
decoded (resolve on emission), a write invalidates (the next demand runs
on the engine), a client disconnect cancels the engine request, and the error statuses.

usage: serve_e2e.py DYNRT DYNRT_SIM_ENGINE   (run from the repository root)
"""
import http.client
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time

from checks import check, launch, scratch, stop, summary

DYNRT, SIM = sys.argv[1], sys.argv[2]


def start(cmd, pattern):
    proc, port, start.last_line = launch(cmd, pattern)
    return proc, port


def request(port, method, path, body=None, headers=None, raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers=headers or {})
    resp = conn.getresponse()
    out = resp.status, dict(resp.getheaders()), resp.read().decode()
    conn.close()
    return out


def tags(workflow, run, stage):
    return {"X-DynRT-Workflow": workflow, "X-DynRT-Workflow-Id": run, "X-DynRT-Stage": stage,
            "Content-Type": "application/json"}


def chat(system, user, max_tokens, **extra):
    body = {"model": "qwen3-32b", "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    body.update(extra)
    return body


ROUTER_SYSTEM = ("You route requests to handlers. Think step by step, then end with one line "
                 "`HANDLER: <name>`, where <name> is weather, calendar or email.")


def handler_system(h):
    return ("You are the %s handler. Reply with exactly one JSON object {\"function\": ..., "
            "\"arguments\": {...}} that calls the %s API." % (h, h))


def content(body):
    return json.loads(body)["choices"][0]["message"]["content"]


def routing_run(port, run, query, stream=False):
    """One Routing turn as a harness sends it; returns [(stage, status, headers, body)]."""
    out = []
    s, h, b = request(port, "POST", "/v1/chat/completions", chat(ROUTER_SYSTEM, query, 512),
                      tags("routing", run, "router"))
    out.append(("router", s, h, b))
    handler = re.findall(r"HANDLER:\s*(weather|calendar|email)", content(b))[-1]
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    s, h, b = request(port, "POST", "/v1/chat/completions",
                      chat(handler_system(handler), query, 256, **extra),
                      tags("routing", run, "handle"))
    out.append(("handle", s, h, b))
    if stream:
        text, done = "", False
        for line in b.split("\n"):
            if line.startswith("data: "):
                payload = line[6:]
                if payload == "[DONE]":
                    done = True
                    continue
                chunk = json.loads(payload)
                if chunk.get("choices") and "content" in chunk["choices"][0].get("delta", {}):
                    text += chunk["choices"][0]["delta"]["content"]
        check(done, "a streamed answer ends with [DONE]")
        api_call = text
    else:
        api_call = content(b)
    s, h, b = request(port, "POST", "/v1/dynrt/tools/call_api",
                      {"api": handler, "call": api_call}, tags("routing", run, "execute"))
    out.append(("execute", s, h, b))
    return out


def hci_run(port, run, dialog, pick):
    out = []
    s, h, b = request(port, "POST", "/v1/chat/completions",
                      chat('Offer the user three next actions as JSON {"actions": [...]}, best first.',
                           dialog, 200), tags("hci", run, "offer"))
    out.append(("offer", s, h, b))
    action = json.loads(content(b))["actions"][pick]
    time.sleep(0.05)  # the user's think time: the offers fill meanwhile
    s, h, b = request(port, "POST", "/v1/chat/completions",
                      chat("You are an assistant. The user said: " + dialog, "Do: " + action, 400),
                      tags("hci", run, "act"))
    out.append(("act", s, h, b))
    return out


def metric(port, name):
    _, _, text = request(port, "GET", "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    tmp = scratch("dynrt-e2e-")
    reasoning = " ".join(["step"] * 250)
    with open(os.path.join(tmp, "script.jsonl"), "w") as f:
        for h in ("weather", "calendar", "email"):
            f.write(json.dumps({"contains": "[route %s]" % h,
                                "response": reasoning + "\nHANDLER: " + h}) + "\n")
        # A router that names its pick first, then reasons: its stream shows the pick early.
        f.write(json.dumps({"contains": "[pick first]",
                            "response": "HANDLER: calendar\n" + reasoning}) + "\n")
        f.write(json.dumps({"contains": "[offer]", "response": json.dumps(
            {"actions": ["book a flight", "find a hotel", "rent a car"]})}) + "\n")
    with open(os.path.join(tmp, "corpus.json"), "w") as f:
        json.dump({"documents": [{"key": "api:" + h, "text": h + " API: ok"}
                                 for h in ("weather", "calendar", "email")],
                   "tools": {"call_api": "api:{{api}}"}}, f)
    sim, sim_port = start([SIM, "--port", "0", "--model", "Qwen/Qwen3-32B", "--time-scale", "10", "--script",
                           os.path.join(tmp, "script.jsonl")], r":(\d+)")
    url = "qwen3-32b=http://127.0.0.1:%d" % sim_port
    common = ["templates", "--port", "0", "--engine", url, "--corpus",
              os.path.join(tmp, "corpus.json")]
    # A template with an error: dynrt serve refuses to start and prints the finding.
    bad = os.path.join(tmp, "bad")
    os.mkdir(bad)
    with open(os.path.join(bad, "w.yaml"), "w") as f:
        f.write("version: 1\nworkflow: w\nstages:\n  a: {kind: model, model: m, request: {prompt: '{{nope}}'}}\n")
    refused = subprocess.run([DYNRT, "serve", bad, "--port", "0"], capture_output=True, text=True,
                             timeout=30)
    check(refused.returncode == 1 and "w.yaml:" in refused.stderr and "error" in refused.stderr,
          "dynrt serve refuses templates with errors: %d %s" % (refused.returncode, refused.stderr[:200]))
    # A connection cap the descriptor limit cannot hold: refused at start, naming both.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 10_000_000:
        capped = subprocess.run([DYNRT, "serve", "templates", "--port", "0", "--max-connections",
                                 "10000000"], capture_output=True, text=True, timeout=30)
        check(capped.returncode == 2 and "RLIMIT_NOFILE" in capped.stderr,
              "dynrt serve refuses a cap over the descriptor limit: %d %s" %
              (capped.returncode, capped.stderr[:200]))
    # An engine whose compute knee is above its slots: refused, with the file's position.
    with open(os.path.join(tmp, "knee.yaml"), "w") as f:
        f.write("engines:\n  - url: %s\n    max_num_seqs: 64\n    concurrency: 65\n" % url)
    knee = subprocess.run([DYNRT, "serve", "templates", "--port", "0", "--config",
                           os.path.join(tmp, "knee.yaml")], capture_output=True, text=True,
                          timeout=30)
    check(knee.returncode != 0 and "knee.yaml:4:" in knee.stderr and "concurrency" in knee.stderr,
          "dynrt serve refuses a concurrency above max_num_seqs: %d %s" %
          (knee.returncode, knee.stderr[:200]))
    # A negative prefill time and a zero batch count: refused, each at its key.
    for name, body, key in (("prefill", "    prefill_ms_per_token: -0.2\n", "prefill_ms_per_token"),
                            ("lone", "    lone_token_ms: -1\n", "lone_token_ms"),
                            ("batches", "    batches: 0\n", "batches")):
        with open(os.path.join(tmp, name + ".yaml"), "w") as f:
            f.write("engines:\n  - url: %s\n    max_num_seqs: 64\n%s" % (url, body))
        bad = subprocess.run([DYNRT, "serve", "templates", "--port", "0", "--config",
                              os.path.join(tmp, name + ".yaml")], capture_output=True, text=True,
                             timeout=30)
        check(bad.returncode != 0 and (name + ".yaml:4:") in bad.stderr and key in bad.stderr,
              "dynrt serve refuses a bad %s: %d %s" % (key, bad.returncode, bad.stderr[:200]))
    full, full_port = start([DYNRT, "serve"] + common + ["--header-timeout-ms", "1000"], r":(\d+) ")
    # The floor from a configuration file: both switches off.
    with open(os.path.join(tmp, "floor.yaml"), "w") as f:
        f.write("switches: {reuse: false, fills: false}\nlisten: {port: 0}\n")
    floor, floor_port = start([DYNRT, "serve", "templates", "--config", os.path.join(tmp, "floor.yaml"),
                               "--engine", url, "--corpus", os.path.join(tmp, "corpus.json")],
                              r":(\d+) ")
    check("reuse off, fills off" in start.last_line, "the configuration file's switches apply: " +
          start.last_line)
    try:
        # -- Routing and HCI: byte-identical to the floor; fills served --------------------------
        runs = [("routing", "r1", "Plan my day [route weather]"),
                ("routing", "r2", "Mail my boss [route email]"),
                ("hci", "h1", "Trip to Oslo [offer]")]
        for workflow, run, text in runs:
            a = routing_run(floor_port, run, text) if workflow == "routing" else hci_run(floor_port, run, text, 0)
            b = routing_run(full_port, run, text) if workflow == "routing" else hci_run(full_port, run, text, 0)
            for (stage, s1, h1, b1), (_, s2, h2, b2) in zip(a, b):
                check(s1 == 200 and s2 == 200, "%s %s answered 200 (%d, %d)" % (run, stage, s1, s2))
                check(b1 == b2, "%s %s: byte-identical to the floor" % (run, stage))
                check(h1.get("X-DynRT-Served") == "engine", "the floor runs %s on the engine" % stage)
                if stage in ("handle", "execute", "act"):
                    check(h2.get("X-DynRT-Served") == "fill",
                          "%s %s served from a fill (got %s)" % (run, stage, h2.get("X-DynRT-Served")))
        # -- streaming: a fill replayed as SSE --------------------------------------------------
        a = routing_run(floor_port, "s1", "Weather again [route weather]", stream=True)
        b = routing_run(full_port, "s1", "Weather again [route weather]", stream=True)
        check(b[1][2].get("Content-Type") == "text/event-stream", "the handler streams")
        check(b[1][2].get("X-DynRT-Served") == "fill",
              "the streamed handler is served from a fill (got %s)" % b[1][2].get("X-DynRT-Served"))
        check(a[2][3] == b[2][3], "the executor after a streamed handler matches the floor")
        # -- resolve on emission: a streamed router's pick, read as it is decoded ---------------
        check(metric(full_port, "dynrt_selections_emitted_total") == 0,
              "no pick was emitted before the end of a decode so far (every router named it last)")
        query = "Book it [pick first]"
        streamed = {"stream": True}
        s1, _, b1 = request(floor_port, "POST", "/v1/chat/completions",
                            chat(ROUTER_SYSTEM, query, 512, **streamed), tags("routing", "e1", "router"))
        s2, h2, b2 = request(full_port, "POST", "/v1/chat/completions",
                             chat(ROUTER_SYSTEM, query, 512, **streamed), tags("routing", "e1", "router"))
        check(s1 == 200 and s2 == 200 and h2.get("Content-Type") == "text/event-stream",
              "the router streams (%d, %d)" % (s1, s2))
        text = lambda sse: "".join(
            json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            for line in sse.splitlines()
            if line.startswith("data: {") and json.loads(line[6:])["choices"])
        check(text(b1) == text(b2) and text(b2).startswith("HANDLER: calendar\n"),
              "the streamed router's text is the floor's")
        check(metric(full_port, "dynrt_selections_emitted_total") == 1,
              "the streamed router's pick was read before its decode ended")
        # Switched off in the configuration file: the same streamed call, no emission.
        with open(os.path.join(tmp, "late.yaml"), "w") as f:
            f.write("switches: {emission: false}\nlisten: {port: 0}\n")
        late, late_port = start([DYNRT, "serve", "templates", "--config",
                                 os.path.join(tmp, "late.yaml"), "--engine", url], r":(\d+) ")
        try:
            s3, _, b3 = request(late_port, "POST", "/v1/chat/completions",
                                chat(ROUTER_SYSTEM, query, 512, **streamed),
                                tags("routing", "e1", "router"))
            check(s3 == 200 and text(b3) == text(b1) and
                  metric(late_port, "dynrt_selections_emitted_total") == 0,
                  "switches.emission: false reads no pick before the end of the decode")
        finally:
            stop(late)
        s1, _, b1 = request(floor_port, "POST", "/v1/chat/completions",
                            chat(handler_system("calendar"), query, 256), tags("routing", "e1", "handle"))
        s2, h2, b2 = request(full_port, "POST", "/v1/chat/completions",
                             chat(handler_system("calendar"), query, 256), tags("routing", "e1", "handle"))
        check(s2 == 200 and b1 == b2 and h2.get("X-DynRT-Served") == "fill",
              "after the emission the winner's fill serves the handler, byte-identical (got %s)" %
              h2.get("X-DynRT-Served"))
        # -- a write invalidates ----------------------------------------------------------------
        again = routing_run(full_port, "r3", "Plan my day [route weather]")
        check(again[2][2].get("X-DynRT-Served") in ("cache", "fill"),
              "the same executor call again is reused")
        s, _, b = request(full_port, "POST", "/v1/dynrt/writes", {"keys": ["api:weather"]},
                          {"Content-Type": "application/json"})
        check(s == 200 and json.loads(b)["invalidated"] >= 1, "the write invalidated entries: " + b)
        after = routing_run(full_port, "r4", "Plan my day [route weather]")
        # Not the invalidated entry: run again, on the engine or by this run's own fill (which
        # started after the write).
        check(after[2][2].get("X-DynRT-Served") != "cache",
              "after the write the executor is not served from the library")
        check(metric(full_port, "dynrt_csl_invalidations_total") >= 1, "the write is counted")
        # -- a disconnect cancels ---------------------------------------------------------------
        before = metric(sim_port, "dynrt_sim:wasted_seconds_total")
        sock = socket.create_connection(("127.0.0.1", full_port))
        body = json.dumps(chat("Talk.", "A long story please", 4000, stream=True))
        sock.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
        sock.recv(4096)  # the headers and the first chunks: the request is running
        sock.close()
        deadline = time.time() + 20
        while time.time() < deadline and metric(sim_port, "vllm:num_requests_running") > 0:
            time.sleep(0.05)
        check(metric(sim_port, "vllm:num_requests_running") == 0, "the engine request was cancelled")
        check(metric(sim_port, "dynrt_sim:wasted_seconds_total") > before,
              "the engine counted the cancelled request's work as wasted")
        # -- errors -----------------------------------------------------------------------------
        s, _, b = request(full_port, "POST", "/v1/chat/completions", raw="{not json")
        check(s == 400 and json.loads(b)["error"]["type"] == "invalid_request_error", "400 on bad JSON")
        s, _, _ = request(full_port, "POST", "/v1/chat/completions",
                          {"model": "m", "messages": [], "stream": "yes"})
        check(s == 400, "400 when stream is not a boolean")
        s, _, _ = request(full_port, "GET", "/v1/nothing")
        check(s == 404, "404 on an unknown route")
        s, _, _ = request(full_port, "GET", "/v1/chat/completions")
        check(s == 405, "405 on a wrong method")
        # Over the limit by its Content-Length: refused before any of the body is read.
        sock = socket.create_connection(("127.0.0.1", full_port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 9437184\r\n\r\n{")
        head = sock.recv(4096).decode(errors="replace")
        sock.close()
        check(head.startswith("HTTP/1.1 413"), "413 on a body over 8 MiB: " + head[:40])
        s, _, _ = request(full_port, "GET", "/healthz", headers={"X-Big": "y" * 20000})
        check(s == 431, "431 on headers over the limit")
        # A client that stops sending mid-request gets 408 at the deadline (1 s here).
        sock = socket.create_connection(("127.0.0.1", full_port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(20)
        head = sock.recv(4096).decode(errors="replace")
        sock.close()
        check(head.startswith("HTTP/1.1 408"), "408 when the request does not arrive: " + head[:40])
        # The engine's own list (its name for the model, with its fields), then the name the
        # configuration maps to it.
        s, _, b = request(full_port, "GET", "/v1/models")
        ids = [m["id"] for m in json.loads(b)["data"]] if s == 200 else []
        check(ids == ["Qwen/Qwen3-32B", "qwen3-32b"], "/v1/models lists the engine's and the mapped models: %s" % b[:300])
        check(s == 200 and json.loads(b)["data"][0].get("owned_by") != "dynrt",
              "the engine's entry is the engine's own: %s" % b[:300])
        check(metric(full_port, "dynrt_requests_total") > 0, "/metrics counts requests")
        # Engine time saved is the engine's wall time for each answer served without it (the
        # adapter's measure for a URL engine), and each stage served by a fill counts as consumed.
        served_fill = metric(full_port, 'dynrt_requests_total{served="fill"}')
        saved = metric(full_port, "dynrt_engine_saved_seconds_total")
        check(saved > 0.05 * served_fill and served_fill > 0,
              "engine time saved is counted for a URL engine: %.3f s for %d fill answers" % (saved, served_fill))
        check(metric(full_port, "dynrt_fills_consumed_total") == served_fill,
              "every fill answer is a consumed fill: %d vs %d" % (metric(full_port, "dynrt_fills_consumed_total"), served_fill))
    finally:
        stop(full, floor)
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=20)
    return summary("serve_e2e")


if __name__ == "__main__":
    sys.exit(main())
