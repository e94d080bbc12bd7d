"""What the end-to-end scripts share: checks that note a failure and go on, stopping
`dynrt serve` as an operator does, and the summary that becomes the exit status."""
import re
import signal
import subprocess

FAILURES = []


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
    return 0
