#!/usr/bin/env python3
"""End to end: `dynrt serve` reloads its templates on SIGHUP.

A template folder with the Routing template; a tagged call is claimed by it (not counted as a
pass-through). Then: a torn write (half the file) and SIGHUP -> the reload is refused with the
finding on stderr and the old graph keeps serving. The workflow
renamed and SIGHUP -> new runs of the new name are claimed and the old name passes through.

usage: reload_e2e.py DYNRT   (run from the repository root)
"""
import http.client
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from checks import check, launch, stop, summary

DYNRT = sys.argv[1]


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers=headers or {})
    resp = conn.getresponse()
    out = resp.status, resp.read().decode()
    conn.close()
    return out


def passthrough(port):
    _, text = request(port, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith("dynrt_passthrough_total "):
            return float(line.split()[1])
    raise SystemExit("no dynrt_passthrough_total in /metrics")


RUNS = [0]


def claimed(port, workflow):
    """Calls `workflow`'s router in a fresh run; True when a template claimed the call."""
    before = passthrough(port)
    RUNS[0] += 1
    status, body = request(
        port, "POST", "/v1/chat/completions",
        {"model": "qwen3-32b", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        {"X-DynRT-Workflow": workflow, "X-DynRT-Workflow-Id": "run-%d" % RUNS[0],
         "X-DynRT-Stage": "router", "Content-Type": "application/json"})
    check(status == 200, "the call is answered 200: %d %s" % (status, body[:200]))
    return passthrough(port) == before


class Lines:
    """The server's stderr, read by a thread (a pipe must not block the checks)."""

    def __init__(self, stream):
        self.lines, self.cond = [], threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_for(self, needle, seconds=30):
        """Waits for a line containing `needle` that was not consumed yet."""
        with self.cond:
            found = self.cond.wait_for(lambda: any(needle in l for l in self.lines), seconds)
            seen = "".join(self.lines)
            if found:
                i = next(i for i, l in enumerate(self.lines) if needle in l)
                del self.lines[: i + 1]
        check(found, "dynrt serve printed %r (stderr: %r)" % (needle, seen[-400:]))


def main():
    tmp = tempfile.mkdtemp(prefix="dynrt-reload-")
    folder = os.path.join(tmp, "templates")
    os.mkdir(folder)
    with open("templates/routing.yaml") as f:
        routing = f.read()
    path = os.path.join(folder, "routing.yaml")
    with open(path, "w") as f:
        f.write(routing)
    proc, port, _ = launch([DYNRT, "serve", folder, "--port", "0", "--time-scale", "1"])
    err = Lines(proc.stderr)
    try:
        check(claimed(port, "routing"), "the routing template claims its calls")
        with open(path, "w") as f:
            f.write(routing[: len(routing) // 2])  # a torn write
        proc.send_signal(signal.SIGHUP)
        err.wait_for("reload refused")
        err.wait_for("routing.yaml:")
        check(claimed(port, "routing"), "after a refused reload the old graph keeps serving")
        with open(path, "w") as f:
            f.write(routing.replace("\nworkflow: routing\n", "\nworkflow: routing2\n"))
        proc.send_signal(signal.SIGHUP)
        err.wait_for("reloaded 1 workflow(s): routing2")
        check(claimed(port, "routing2"), "after the reload the new workflow is claimed")
        check(not claimed(port, "routing"), "the removed workflow passes through")
    finally:
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("reload_e2e")


if __name__ == "__main__":
    sys.exit(main())
