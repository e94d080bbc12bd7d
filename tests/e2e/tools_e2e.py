#!/usr/bin/env python3
"""End to end: tools declared in `dynrt serve`'s configuration, against a real HTTP server.
- A tagged call's arguments are the JSON body (with the configured headers); its output is the
  response. A repeat is served from the library; a tagged call of a tool that writes (PUT)
  invalidates what read the record, so the next read runs again and sees the new text.
- An untagged call to a tool that writes is refused (400): nothing would invalidate what it
  wrote. An error is never stored: the same call runs again.
- Limits: a response over max_response_bytes, a call over timeout_ms and a redirect are errors.
- Start-up refusals, each naming the file and position: a host not on tools.allow_hosts, a
  loopback host not listed, and a speculable stage calling a tool that writes.
usage: tools_e2e.py DYNRT   (run from the repository root)
"""
import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import time

from checks import check, launch, scratch, stop, summary

DYNRT = sys.argv[1]
TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "notes.yaml")


class ToolServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.notes = {"n1": "v1"}
        self.calls = []  # (method, path, headers, body)
        self.failed_once = set()
        self.lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"null")
        srv = self.server
        with srv.lock:
            srv.calls.append((self.command, self.path, dict(self.headers), body))
        if self.path == "/read":
            if body["id"] == "bad" and "bad" not in srv.failed_once:
                srv.failed_once.add("bad")
                return self.reply(500, {"error": "try again"})
            return self.reply(200, {"text": srv.notes.get(body["id"], "")})
        if self.path == "/save":
            srv.notes[body["id"]] = body["text"]
            return self.reply(200, {"saved": True})
        if self.path == "/big":
            return self.reply(200, {"blob": "x" * 5000})
        if self.path == "/slow":
            time.sleep(2)
            return self.reply(200, {"late": True})
        if self.path == "/moved":
            return self.reply(302, {}, [("Location", "http://example.org/elsewhere")])
        return self.reply(404, {"error": "no such tool"})

    do_POST = do_PUT = handle_any


def call(port, tool, args, run=None, stage=None):
    h = {"Content-Type": "application/json"}
    if run:
        h.update({"X-DynRT-Workflow": "notes", "X-DynRT-Workflow-Id": run, "X-DynRT-Stage": stage})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/dynrt/tools/" + tool, body=json.dumps(args), headers=h)
    r = conn.getresponse()
    out = r.status, r.getheader("X-DynRT-Served"), r.read().decode()
    conn.close()
    return out


def refused(tmp, config_text, needle, what, where="refused.yaml:"):
    path = os.path.join(tmp, "refused.yaml")
    with open(path, "w") as f:
        f.write(config_text)
    p = subprocess.run([DYNRT, "serve", TEMPLATE, "--port", "0", "--config", path],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 2 and where in p.stderr and needle in p.stderr,
          "%s: %d %s" % (what, p.returncode, p.stderr[:300]))


def main():
    tmp = scratch("dynrt-tools-")
    srv = ToolServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d" % srv.server_port
    config = os.path.join(tmp, "dynrt.yaml")
    with open(config, "w") as f:
        f.write("""tools:
  allow_hosts: ["127.0.0.1:%(port)d"]
  read_note: {url: %(base)s/read, headers: {X-Token: t1}, reads: ["note:{{id}}"]}
  save_note: {url: %(base)s/save, method: PUT, writes: ["note:{{id}}"]}
  big: {url: %(base)s/big, max_response_bytes: 1000}
  slow: {url: %(base)s/slow, timeout_ms: 300}
  moved: {url: %(base)s/moved}
""" % {"port": srv.server_port, "base": base})
    gw, port, _ = launch([DYNRT, "serve", TEMPLATE, "--port", "0", "--config", config], r":(\d+) ")

    s, served, b = call(port, "read_note", {"id": "n1"}, "r1", "read")
    check(s == 200 and served == "engine" and json.loads(b) == {"text": "v1"},
          "a tagged read runs the tool: %d %s %s" % (s, served, b))
    method, path, headers, body = srv.calls[-1]
    check(method == "POST" and path == "/read" and body == {"id": "n1"} and
          headers.get("X-Token") == "t1", "the arguments are the body, with the headers: %s" %
          (srv.calls[-1],))
    n = len(srv.calls)
    s, served, b = call(port, "read_note", {"id": "n1"}, "r2", "read")
    check(served == "cache" and len(srv.calls) == n and json.loads(b) == {"text": "v1"},
          "the same read again is served from the library: %s" % served)
    s, served, b = call(port, "save_note", {"id": "n1", "text": "v2"}, "r2", "save")
    check(s == 200 and srv.calls[-1][0] == "PUT", "a tagged save runs (PUT): %d %s" % (s, b))
    s, served, b = call(port, "read_note", {"id": "n1"}, "r3", "read")
    check(served == "engine" and json.loads(b) == {"text": "v2"},
          "the save invalidated the read: %s %s" % (served, b))

    n = len(srv.calls)
    s, _, b = call(port, "save_note", {"id": "n1", "text": "v3"})
    check(s == 400 and "writes records" in b and len(srv.calls) == n,
          "an untagged call to a writing tool is refused before it runs: %d %s" % (s, b))
    s, _, b = call(port, "read_note", {"id": "bad"}, "r4", "read")
    check(s == 500, "the tool's error reaches the caller: %d %s" % (s, b))
    s, served, b = call(port, "read_note", {"id": "bad"}, "r5", "read")
    check(s == 200 and served == "engine", "an error is never stored: %d %s" % (s, served))

    s, _, b = call(port, "big", {})
    check(s >= 500 and "larger than 1000 bytes" in b, "a response over the limit: %d %s" % (s, b))
    started = time.time()
    s, _, b = call(port, "slow", {})
    check(s == 504 and time.time() - started < 1.5, "a call over timeout_ms: %d %s" % (s, b))
    s, _, b = call(port, "moved", {})
    check(s >= 500 and "redirect" in b and "example.org" in b, "a redirect is not followed: %d %s" % (s, b))
    stop(gw)

    refused(tmp, "tools:\n  allow_hosts: [api.example.com]\n  t: {url: %s/read}\n" % base,
            "not on tools.allow_hosts", "a host not on the allowlist refuses the start")
    refused(tmp, "tools:\n  allow_hosts: [localhost]\n  t: {url: %s/read}\n" % base,
            "loopback", "a loopback address must be listed as it is")
    refused(tmp, "tools:\n  allow_hosts: [\"127.0.0.1\"]\n  read_note: {url: %s/read, writes: [\"note:{{id}}\"]}\n"
            % base, "speculable", "a speculable stage may not call a tool that writes", "notes.yaml")
    srv.shutdown()
    return summary("tools e2e")


if __name__ == "__main__":
    sys.exit(main())
