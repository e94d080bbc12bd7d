#!/usr/bin/env python3
"""End to end: two `dynrt serve` replicas sharing their library through a real `redis-server`
(started here on a free loopback port, in a temporary directory, without persistence), in front
of one `dynrt-sim-engine`.
- A Routing turn computed through replica A is served by replica B from the shared tier
  (X-DynRT-Served: cache on every stage), byte-identical.
- A write through B (answered "shared": true) makes A's next identical turn run the stage that
  read the written record on the engine, while the stages that read nothing stay served.
- Every dynrt_shared_ metric has its value after that script, on both replicas.
- Redis killed in the middle of a run of turns through both replicas, with writes: no request
  fails; a write taken then answers "shared": false and is in force on its replica; a result
  that read records is never served from the library while the tier cannot vouch for it.
- Redis restarted on the same port (empty): both replicas reconnect, the deferred write is
  sent, and sharing resumes (a turn through A is served by B from the tier).
- A run whose calls are split across the replicas (no affinity) gets the same answers: only
  speculation is lost.
usage: replicas_e2e.py DYNRT SIM   (run from the repository root)
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from routing import ROUTER_SYSTEM, chat, handler_system, write_script
from checks import check, launch, metrics, request, scratch, stop, summary, until

DYNRT, SIM = sys.argv[1], sys.argv[2]


def tags(run, stage):
    return {"X-DynRT-Workflow": "routing", "X-DynRT-Workflow-Id": run, "X-DynRT-Stage": stage}


def turn(ports, run, query):
    """One Routing turn: router, handler, API call; stage i goes to ports[i % len(ports)].
    Returns {stage: (status, served, body)} and the handler picked."""
    out = {}
    p = lambda i: ports[i % len(ports)]
    s, h, b = request(p(0), "POST", "/v1/chat/completions", chat(ROUTER_SYSTEM, query, 512),
                      tags(run, "router"))
    out["router"] = (s, h.get("X-DynRT-Served"), b)
    if s != 200:
        return out, None
    handler = re.findall(r"HANDLER:\s*(weather|calendar|email)",
                         json.loads(b)["choices"][0]["message"]["content"])[-1]
    s, h, b = request(p(1), "POST", "/v1/chat/completions",
                      chat(handler_system(handler), query, 256), tags(run, "handle"))
    out["handle"] = (s, h.get("X-DynRT-Served"), b)
    if s != 200:
        return out, handler
    call = json.loads(b)["choices"][0]["message"]["content"]
    s, h, b = request(p(2), "POST", "/v1/dynrt/tools/call_api", {"api": handler, "call": call},
                      tags(run, "execute"))
    out["execute"] = (s, h.get("X-DynRT-Served"), b)
    return out, handler


def write(port, keys):
    s, _, b = request(port, "POST", "/v1/dynrt/writes", {"keys": keys})
    check(s == 200, "the write is answered: %d %s" % (s, b[:200]))
    return json.loads(b) if s == 200 else {}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A redis-server of this test's own: loopback, a temporary directory, no persistence."""

    def __init__(self, tmp):
        self.dir, self.port, self.proc = tmp, free_port(), None

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):  # up to 5 s for it to take connections
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.01)
        raise SystemExit("redis-server did not start on port %d" % self.port)

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def written_through(port, puts):
    """Results are written through in the background once answered: waits until `port` has."""
    check(until(lambda: metrics(port).get("dynrt_shared_puts_total", 0) >= puts),
          "the replica wrote its results through (%d)" % puts)


def main():
    if not shutil.which("redis-server"):
        print("redis-server is not installed (scripts/install-deps.sh installs it)")
        return 77
    tmp = scratch("dynrt-replicas-")
    write_script(os.path.join(tmp, "script.jsonl"))
    with open(os.path.join(tmp, "corpus.json"), "w") as f:
        json.dump({"documents": [{"key": "api:" + h, "text": h + " API: ok"}
                                 for h in ("weather", "calendar", "email")],
                   "tools": {"call_api": "api:{{api}}"}}, f)
    redis = Redis(tmp)
    redis.start()
    try:
        return run(tmp, redis)
    finally:
        if redis.proc and redis.proc.poll() is None:
            redis.kill()


def run(tmp, redis):
    sim, sim_port = launch([SIM, "--port", "0", "--time-scale", "20", "--script",
                            os.path.join(tmp, "script.jsonl")], r":(\d+)")[:2]
    common = ["serve", "templates", "--port", "0", "--engine",
              "qwen3-32b=http://127.0.0.1:%d" % sim_port, "--corpus",
              os.path.join(tmp, "corpus.json"), "--library", "redis://127.0.0.1:%d" % redis.port]
    try:
        a, a_port, _ = launch([DYNRT] + common, r":(\d+) ")
    except SystemExit:
        sim.terminate()
        raise
    try:
        b, b_port, _ = launch([DYNRT] + common, r":(\d+) ")
    except SystemExit:
        stop(a)
        sim.terminate()
        raise
    try:
        check(until(lambda: metrics(a_port).get("dynrt_shared_connected") == 1 and
                    metrics(b_port).get("dynrt_shared_connected") == 1),
              "both replicas reach Redis")

        # -- computed through A, served by B --------------------------------------------------
        first, picked = turn([a_port], "a-1", "Plan my day [route weather]")
        written_through(a_port, 3)
        check(picked == "weather", "the router picked weather: %s" % picked)
        check(all(s == 200 for s, _, _ in first.values()), "A answered every stage")
        again, _ = turn([b_port], "b-1", "Plan my day [route weather]")
        for stage in ("router", "handle", "execute"):
            check(again[stage][1] == "cache",
                  "B serves %s from the shared tier (got %s)" % (stage, again[stage][1]))
            check(again[stage][2] == first[stage][2], "B's %s is byte-identical to A's" % stage)

        # -- a write through B reaches A --------------------------------------------------------
        w = write(b_port, ["api:weather"])
        check(w.get("shared") is True, "the write reached the shared tier: %s" % w)
        after, _ = turn([a_port], "a-2", "Plan my day [route weather]")
        check(after["router"][1] == "cache" and after["handle"][1] == "cache",
              "A still serves what read no record: %s" % {k: v[1] for k, v in after.items()})
        check(after["execute"][1] in ("engine", "fill"),
              "A runs the API call that read api:weather again, by fill or on demand (got %s)" %
              after["execute"][1])
        check(after["execute"][2] == first["execute"][2], "... with the same answer")

        # -- every shared metric, on both replicas ----------------------------------------------
        ma, mb = metrics(a_port), metrics(b_port)
        # A: computed 3 results and wrote them through (the executor twice); B served 3 from
        # the tier; B's write reached A.
        check(ma.get("dynrt_shared_puts_total", 0) >= 3 and ma.get("dynrt_shared_hits_total") == 0,
              "A wrote its results through and imported none: %s" %
              {k: v for k, v in ma.items() if "shared" in k})
        check(mb.get("dynrt_shared_hits_total") == 3, "B served 3 results from the tier: %s" %
              {k: v for k, v in mb.items() if "shared" in k})
        check(mb.get("dynrt_shared_writes_total") == 1 and ma.get("dynrt_shared_writes_total") == 0,
              "one write reached the tier, through B")
        check(until(lambda: metrics(a_port).get("dynrt_shared_invalidations_total") == 1),
              "A applied B's write")
        check(mb.get("dynrt_shared_writes_deferred_total") == 0 and
              mb.get("dynrt_shared_pending_writes") == 0, "nothing was deferred")
        check(ma.get("dynrt_shared_errors_total") == 0 and mb.get("dynrt_shared_errors_total") == 0,
              "no tier request failed")
        check(ma.get("dynrt_shared_epoch_changes_total") == 0, "the epoch held")
        check(ma.get("dynrt_shared_reconnects_total") == 1, "A connected once")

        # -- split runs: exact answers, only speculation lost ----------------------------------
        split, _ = turn([a_port, b_port], "split-1", "Mail my boss [route email]")
        whole, _ = turn([b_port], "whole-1", "Mail my boss [route email]")
        check(all(split[s][0] == 200 for s in split), "a run split across replicas is answered")
        check(all(split[s][2] == whole[s][2] for s in split),
              "a split run's answers are the same as a whole one's")

        # -- Redis killed mid-run --------------------------------------------------------------
        failures, deferred = [], None
        for i in range(6):
            if i == 2:
                redis.kill()
            if i == 3:
                deferred = write(a_port, ["api:calendar"])
            out, _ = turn([a_port, b_port][i % 2:] + [a_port, b_port][:i % 2],
                          "outage-%d" % i, "Book a room [route calendar]")
            failures += [(i, st, v[0]) for st, v in out.items() if v[0] != 200]
        check(not failures, "no request failed while Redis was down: %s" % failures)
        check(deferred.get("shared") is False, "a write during the outage is not shared: %s" %
              deferred)
        out, _ = turn([a_port], "outage-after-write", "Book a room [route calendar]")
        check(out["execute"][1] == "engine",
              "a result that read a record is not served while Redis is down (got %s)" %
              out["execute"][1])
        check(metrics(a_port).get("dynrt_shared_connected") == 0, "A reports Redis unreachable")
        check(metrics(a_port).get("dynrt_shared_pending_writes") == 1, "A keeps the write to send")

        # -- restarted: reconnect, send the deferred write, share again -------------------------
        redis.start()
        check(until(lambda: metrics(a_port).get("dynrt_shared_connected") == 1 and
                    metrics(b_port).get("dynrt_shared_connected") == 1),
              "both replicas reconnect")
        check(until(lambda: metrics(a_port).get("dynrt_shared_pending_writes") == 0),
              "A sent the deferred write")
        check(metrics(a_port).get("dynrt_shared_epoch_changes_total", 0) >= 1,
              "A saw that Redis came back empty")
        puts = metrics(a_port).get("dynrt_shared_puts_total", 0)
        fresh, _ = turn([a_port], "a-3", "Check my inbox [route email] again")
        written_through(a_port, puts + 3)
        shared, _ = turn([b_port], "b-3", "Check my inbox [route email] again")
        check(all(shared[s][1] == "cache" for s in shared),
              "sharing resumes after the restart: %s" % {k: v[1] for k, v in shared.items()})
        check(all(shared[s][2] == fresh[s][2] for s in shared), "... byte-identical")
    finally:
        stop(a, b)
        sim.terminate()
        sim.wait()
    return summary("replicas_e2e")


if __name__ == "__main__":
    sys.exit(main())
