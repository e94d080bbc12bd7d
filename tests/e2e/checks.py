"""What the end-to-end scripts share: checks that note a failure and go on, stopping
`dynrt serve` as an operator does, and the summary that becomes the exit status."""
import signal
import subprocess

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


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
