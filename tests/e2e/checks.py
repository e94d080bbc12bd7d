"""What the end-to-end scripts share: checks that note a failure and go on, stopping
`dynrt serve` as an operator does, and the summary that becomes the exit status."""
import atexit
import http.client
import json
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

FAILURES = []
PASSED = []  # set by summary() when every check passed


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def launch(cmd, pattern=r"127\.0\.0\.1:(\d+)"):
    """Starts a server that prints where it listens on its first line: (process, port, line).
    Exits the script, with the server's stderr, if it does not start."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(pattern, line)
    if not m:
        proc.kill()
        raise SystemExit("did not start: %s: %r %s" % (cmd, line, proc.stderr.read()))
    return proc, int(m.group(1)), line


def stop(*procs):
    """SIGTERM to each, as an operator stops them: each has to exit 0 within 20 s."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            check(p.wait(timeout=20) == 0, "dynrt serve exits 0 on SIGTERM")
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, "dynrt serve stops within 20 s of SIGTERM")


def summary(name):
    """The exit status: 1 when a check failed."""
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("%s: all checks passed" % name)
    PASSED.append(name)
    return 0


def scratch(prefix):
    """A fresh temporary folder for the script's files: removed when the script ends with
    every check passed, kept (and its path printed) for a look when it did not."""
    path = tempfile.mkdtemp(prefix=prefix)

    def done():
        if PASSED and not FAILURES:
            shutil.rmtree(path, ignore_errors=True)
        else:
            print("files kept in", path, flush=True)

    atexit.register(done)
    return path


class Output:
    """A stream of the server's, read by a thread (a pipe must not block the checks)."""

    def __init__(self, stream):
        self.text, self.cond = "", threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.text += line
                self.cond.notify_all()

    def wait_for(self, needle, seconds=30):
        with self.cond:
            found = self.cond.wait_for(lambda: needle in self.text, seconds)
        check(found, "dynrt serve printed %r (got %r)" % (needle, self.text[-400:]))
        return found


def request(port, method, path, body=None, headers=None, timeout=60):
    """One HTTP exchange on loopback: (status, headers, body text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    if body is not None:
        h["Content-Type"] = "application/json"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    resp = conn.getresponse()
    out = resp.status, dict(resp.getheaders()), resp.read().decode()
    conn.close()
    return out


def metrics(port):
    """The dynrt_ series of a /metrics page: {name with labels: value}."""
    _, _, text = request(port, "GET", "/metrics")
    got = {}
    for line in text.splitlines():
        if line.startswith("dynrt_"):
            name, value = line.rsplit(" ", 1)
            got[name] = float(value)
    return got


def until(predicate, seconds=20):
    """Polls `predicate` (a state the servers reach by themselves, e.g. a reconnection)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
