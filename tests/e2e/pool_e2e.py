#!/usr/bin/env python3
"""End to end: one `dynrt serve` in front of a pool of two `dynrt-sim-engine` replicas of one
model (`--engine MODEL=URL1,URL2`).
- By reported load: while replica B is busy with requests sent to it directly (dynrt's own
  count of B is zero, so only B's /metrics can say so), dynrt sends its calls to A.
- Spread: concurrent Routing runs through dynrt reach both replicas.
- Failover: replica B killed (SIGKILL) in the middle of concurrent runs: not one request fails,
  every answer is the one A gives directly for the same body, B is taken out (its circuit
  open) and the calls that found it dead moved to A; a streamed call afterwards works.
- Every dynrt_engine_replica_ metric and dynrt_engine_failovers_total have their values.
- The configuration file's `urls:` makes the same pool; `urls` with `url`, and a URL listed
  twice, are refused with the file's position or the URL.
usage: pool_e2e.py DYNRT SIM   (run from the repository root)
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from routing import ROUTER_SYSTEM, chat, content, handler_system, write_script
from checks import check, launch, metrics, request, stop, summary, until

DYNRT, SIM = sys.argv[1], sys.argv[2]
MODEL = "qwen3-32b"


def tags(run, stage):
    return {"X-DynRT-Workflow": "routing", "X-DynRT-Workflow-Id": run, "X-DynRT-Stage": stage}


def turn(port, run, query, log):
    """One Routing turn (router, handler) through dynrt; each call's (body, status, answer)
    goes to `log`."""
    body = chat(ROUTER_SYSTEM, query, 512)
    s, _, b = request(port, "POST", "/v1/chat/completions", body, tags(run, "router"))
    log.append((body, s, b))
    if s != 200:
        return
    handler = re.findall(r"HANDLER:\s*(weather|calendar|email)", content(b))[-1]
    body = chat(handler_system(handler), query, 256)
    s, _, b = request(port, "POST", "/v1/chat/completions", body, tags(run, "handle"))
    log.append((body, s, b))


def replica_metric(m, name, url, kind=None):
    total = 0.0
    for k, v in m.items():
        if k.startswith(name + "{") and 'replica="%s"' % url in k and \
                (kind is None or 'kind="%s"' % kind in k):
            total += v
    return total


def engine_running(port):
    _, _, text = request(port, "GET", "/metrics")
    m = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)", text, re.M)
    return float(m.group(1)) if m else 0


def concurrent_turns(port, runs, turns, prefix, log, after_first=None):
    threads = []
    started = threading.Event()

    def driver(i):
        for t in range(turns):
            turn(port, "%s-%d-%d" % (prefix, i, t), "Request %d.%d [route %s]" %
                 (i, t, ("weather", "calendar", "email")[(i + t) % 3]), log)
            started.set()

    for i in range(runs):
        threads.append(threading.Thread(target=driver, args=(i,)))
        threads[-1].start()
    if after_first:
        started.wait(60)
        after_first()
    for t in threads:
        t.join()


def configured(url_a, url_b):
    """The pool from a configuration file, and the mistakes it refuses."""
    tmp = tempfile.mkdtemp(prefix="dynrt-pool-config-")
    path = lambda name: os.path.join(tmp, name)
    with open(path("pool.yaml"), "w") as f:
        f.write("engines:\n  - urls: [%s, %s]\n    models: [%s]\n" % (url_a, url_b, MODEL))
    d, _, line = launch([DYNRT, "serve", "templates", "--port", "0", "--config", path("pool.yaml")],
                        r":(\d+) ")
    check("%s,%s" % (url_a, url_b) in line, "urls: in the file makes the pool: " + line)
    stop(d)
    with open(path("both.yaml"), "w") as f:
        f.write("engines:\n  - url: %s\n    urls: [%s]\n" % (url_a, url_b))
    with open(path("twice.yaml"), "w") as f:
        f.write("engines:\n  - urls: [%s, %s]\n" % (url_a, url_a))
    for name, expect in (("both.yaml", "both.yaml:3:"), ("twice.yaml", "listed twice")):
        r = subprocess.run([DYNRT, "serve", "templates", "--port", "0", "--config", path(name)],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and expect in r.stderr,
              "%s is refused (%d %s)" % (name, r.returncode, r.stderr[:200]))
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    tmp = tempfile.mkdtemp(prefix="dynrt-pool-")
    script = os.path.join(tmp, "script.jsonl")
    # "[long]": about 2 s of decode at this time scale, what keeps replica B busy.
    write_script(script, [("[long]", " ".join(["word"] * 3000))])
    try:
        return run(script)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(script):
    sim = ["--port", "0", "--time-scale", "20", "--script", script, "--model", MODEL]
    a, a_port = launch([SIM] + sim, r":(\d+)")[:2]
    b, b_port = launch([SIM] + sim, r":(\d+)")[:2]
    url_a, url_b = "http://127.0.0.1:%d" % a_port, "http://127.0.0.1:%d" % b_port
    try:
        d, port, line = launch([DYNRT, "serve", "templates", "--port", "0", "--engine",
                                "%s=%s,%s" % (MODEL, url_a, url_b)], r":(\d+) ")
    except SystemExit:
        a.kill()
        b.kill()
        raise
    try:
        check(url_a in line and url_b in line, "the start line names both replicas: " + line)
        configured(url_a, url_b)

        # -- by reported load ---------------------------------------------------------------
        # B busy with long requests that do not go through dynrt.
        busy = []
        for i in range(6):
            t = threading.Thread(target=request, args=(
                b_port, "POST", "/v1/chat/completions",
                chat("Write at length.", "[long] %d" % i, 4000)))
            t.start()
            busy.append(t)
        check(until(lambda: engine_running(b_port) >= 6), "B reports its 6 requests running")
        check(until(lambda: replica_metric(metrics(port), "dynrt_engine_replica_load", url_b) >
                    replica_metric(metrics(port), "dynrt_engine_replica_load", url_a)),
              "dynrt reads B's reported load")
        before = metrics(port)
        for i in range(6):  # one at a time: dynrt's own count of each replica stays 0 or 1
            s, _, _ = request(port, "POST", "/v1/chat/completions",
                              chat("Answer briefly.", "quick %d" % i, 16))
            check(s == 200, "a call while B is busy is answered (%d)" % s)
        after = metrics(port)
        sent_a = replica_metric(after, "dynrt_engine_replica_requests_total", url_a) - \
            replica_metric(before, "dynrt_engine_replica_requests_total", url_a)
        sent_b = replica_metric(after, "dynrt_engine_replica_requests_total", url_b) - \
            replica_metric(before, "dynrt_engine_replica_requests_total", url_b)
        check(sent_a == 6 and sent_b == 0,
              "every call went to the idle replica A (A %d, B %d)" % (sent_a, sent_b))
        for t in busy:
            t.join()

        # -- spread ---------------------------------------------------------------------------
        check(until(lambda: engine_running(b_port) == 0), "B is idle again")
        check(until(lambda: replica_metric(metrics(port), "dynrt_engine_replica_load", url_b) == 0),
              "dynrt reads B idle again")
        before = metrics(port)
        log = []
        concurrent_turns(port, 8, 3, "spread", log)
        check(all(s == 200 for _, s, _ in log), "every call of the concurrent runs is answered")
        after = metrics(port)
        got = [replica_metric(after, "dynrt_engine_replica_requests_total", u, "canonical") -
               replica_metric(before, "dynrt_engine_replica_requests_total", u, "canonical")
               for u in (url_a, url_b)]
        print("spread: A %d, B %d canonical requests" % tuple(got), flush=True)
        check(min(got) >= 0.25 * sum(got) and sum(got) > 0,
              "concurrent runs reach both replicas (A %d, B %d canonical)" % tuple(got))

        # -- failover -------------------------------------------------------------------------
        log = []
        killed = []

        def kill_b():
            # Some calls are in flight on B now (the runs are concurrent and spread).
            until(lambda: engine_running(b_port) > 0, 10)
            b.send_signal(signal.SIGKILL)
            b.wait()
            killed.append(True)

        concurrent_turns(port, 8, 4, "kill", log, kill_b)
        check(killed == [True], "B was killed in the middle of the runs")
        # Should no call have reached B between the kill and the end of the runs (they may all
        # have been on A then), bursts of concurrent calls go on until one finds B dead: the
        # pool spreads concurrent calls, so B's turn comes.
        extra = []

        def burst(n):
            def one(k):
                body = chat("Answer briefly.", "after the kill %d.%d" % (n, k), 8)
                s, _, answer = request(port, "POST", "/v1/chat/completions", body)
                extra.append((body, s, answer))
            threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        for n in range(25):
            if replica_metric(metrics(port), "dynrt_engine_replica_failures_total", url_b) >= 1:
                break
            burst(n)
        check(all(s == 200 for _, s, _ in extra),
              "calls after the kill are answered (%d made)" % len(extra))
        # One more call: should B's cooldown be over, it probes B, fails over and reopens B's
        # circuit; either way B is out right after it.
        s, _, _ = request(port, "POST", "/v1/chat/completions", chat("Answer briefly.", "x", 8))
        check(s == 200, "a call after the runs is answered (%d)" % s)
        m = metrics(port)
        check(replica_metric(m, "dynrt_engine_replica_available", url_b) == 0,
              "B is out of the pool (its circuit is open)")
        check(replica_metric(m, "dynrt_engine_replica_available", url_a) == 1, "A is in")
        failed = [(s, body[:200]) for _, s, body in log if s != 200]
        check(not failed, "no request failed while B died (%d of %d failed: %s)" %
              (len(failed), len(log), failed[:3]))
        check(len(log) == 8 * 4 * 2, "every call was made (%d)" % len(log))
        # The answers are A's for the same body (the replicas are one model: exactness holds).
        differ = 0
        for body, s, answer in log + extra:
            if s == 200:
                s2, _, direct = request(a_port, "POST", "/v1/chat/completions", body)
                if s2 != 200 or content(direct) != content(answer):
                    differ += 1
        check(differ == 0, "every answer is the one A gives directly (%d differ)" % differ)
        m = metrics(port)
        check(replica_metric(m, "dynrt_engine_replica_failures_total", url_b) >= 1,
              "B's failures are counted")
        check(replica_metric(m, "dynrt_engine_replica_failures_total", url_a) == 0,
              "A never failed")
        failovers = sum(v for k, v in m.items() if k.startswith("dynrt_engine_failovers_total{"))
        print("after B died: %d calls, %d failovers, B failures %d" % (
            len(log), failovers, replica_metric(m, "dynrt_engine_replica_failures_total", url_b)),
            flush=True)
        check(failovers >= 1, "calls that found B dead moved to A (%d)" % failovers)
        check(replica_metric(m, "dynrt_engine_replica_in_flight", url_a) == 0 and
              replica_metric(m, "dynrt_engine_replica_in_flight", url_b) == 0,
              "nothing is left in flight on either replica")
        check(replica_metric(m, "dynrt_engine_replica_requests_total", url_b, "fill") >= 0 and
              replica_metric(m, "dynrt_engine_replica_requests_total", url_a, "fill") > 0,
              "fills ran on the pool")
        for name in ("dynrt_engine_replica_requests_total", "dynrt_engine_replica_failures_total",
                     "dynrt_engine_replica_in_flight", "dynrt_engine_replica_load",
                     "dynrt_engine_replica_available"):
            check(sum(1 for k in m if k.startswith(name + "{")) >= 2,
                  "%s is exported for each replica" % name)

        # A streamed call after the kill: served by A, whole.
        body = dict(chat("Answer briefly.", "after", 16), stream=True)
        s, _, text = request(port, "POST", "/v1/chat/completions", body)
        check(s == 200 and text.rstrip().endswith("data: [DONE]"),
              "a streamed call after B died is answered whole (%d)" % s)
    finally:
        stop(d)
        for p in (a, b):
            if p.poll() is None:
                p.terminate()
                p.wait()
    return summary("pool_e2e")


if __name__ == "__main__":
    sys.exit(main())
