#!/usr/bin/python3
"""`dynrt bench sweep --http` as a user runs it, on a tiny trace: the cells of the floor and full
dynrt run a second time through a real `dynrt serve` in front of a real `dynrt-sim-engine`
(child processes on free loopback ports), every run completes there, every answer over HTTP is
byte-identical to the floor's in process (accuracy 1.0), fills are issued and consumed over
HTTP as dynrt's /metrics reports them, and the report compares the two; the same for HCI,
whose user think time is a timer on the harness's loop. And without
dynrt-sim-engine beside dynrt or on PATH, --http is refused with exit 2 and says why. No wall
time is asserted: the HTTP cells run at 100 real ms per simulated second only to be quick."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

DYNRT = sys.argv[1]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


# --saturation: the floor's rate on h200x4-32b with the default (paper-sized) prompts, given so
# that no saturation burst runs.
def sweep(dynrt, out, env=None, workload="routing", saturation="15"):
    return subprocess.run([dynrt, "bench", "sweep", workload, "--saturation", saturation, "--loads",
                           "0.05", "--seeds", "1", "--requests", "20", "--arms", "full",
                           "--http", "--http-time-scale", "100", "--quiet", "--no-plots",
                           "--out", out], capture_output=True, text=True, timeout=600, env=env)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "out")
    r = sweep(DYNRT, out)
    check(r.returncode == 0, "sweep --http exits 0 (stderr: %s)" % r.stderr[-600:])
    with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
    records = {rec["arm"]: rec for rec in doc["records"]}
    check(set(records) == {"floor", "full"}, "a record per arm: %s" % sorted(records))
    for arm, rec in records.items():
        http = rec.get("http")
        check(http is not None, "%s ran over HTTP too" % arm)
        if http is None:
            continue
        check(http["failures"] == 0 and http["completed"] == rec["completed"],
              "%s: every run completed over HTTP (%s failed: %s)" %
              (arm, http["failures"], http.get("first_failure")))
        check(http["accuracy"] == 1.0,
              "%s: every answer over HTTP is the floor's in process (accuracy %s)" %
              (arm, http["accuracy"]))
        check(http["mean_s"] > 0, "%s: a latency over HTTP (%s s)" % (arm, http["mean_s"]))
    full = records.get("full", {}).get("http", {})
    check(full.get("fills_issued", 0) > 0 and full.get("fills_consumed", 0) > 0,
          "full issues and consumes fills over HTTP (%s / %s per run)" %
          (full.get("fills_issued"), full.get("fills_consumed")))
    check(full.get("served_fill", 0) > 0, "demands are served by fills over HTTP")
    floor = records.get("floor", {}).get("http", {})
    check(floor.get("fills_issued", 1) == 0, "the floor issues no fills over HTTP")
    points = [p for p in doc["points"] if "http" in p]
    check(len(points) == 2, "a point over HTTP per arm")
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    check("over HTTP" in md and "| 0.05 | full |" in md, "results.md compares the two per cell")
    for arm in ("floor", "full"):
        d = os.path.join(out, "http", "routing-" + arm)
        check(os.path.exists(os.path.join(d, "serve.log")) and
              os.path.exists(os.path.join(d, "script.jsonl")),
              "%s: its script and the children's logs are kept under OUT/http" % arm)

    # HCI: the user's think time between the offer and the pick is a timer on the harness's
    # loop; the user turn is what is measured.
    hci_out = os.path.join(tmp, "hci")
    r = sweep(DYNRT, hci_out, workload="hci", saturation="41")
    check(r.returncode == 0, "sweep hci --http exits 0 (stderr: %s)" % r.stderr[-600:])
    with open(os.path.join(hci_out, "results.json")) as f:
        hci = {rec["arm"]: rec.get("http", {}) for rec in json.load(f)["records"]}
    for arm in ("floor", "full"):
        h = hci.get(arm, {})
        check(h.get("failures") == 0 and h.get("accuracy") == 1.0 and h.get("mean_s", 0) > 0,
              "hci %s over HTTP: every run completed like the floor (%s)" % (arm, h))
    check(hci.get("full", {}).get("served_fill", 0) > 0, "hci: the pick is served by a fill")

    # Without dynrt-sim-engine next to dynrt or on PATH: refused, and it says what is missing.
    alone = os.path.join(tmp, "alone")
    os.mkdir(alone)
    shutil.copy(DYNRT, os.path.join(alone, "dynrt"))
    env = dict(os.environ, PATH="/usr/bin:/bin")
    r = sweep(os.path.join(alone, "dynrt"), os.path.join(tmp, "bad"), env)
    check(r.returncode == 2 and "dynrt-sim-engine was not found" in r.stderr,
          "--http without dynrt-sim-engine exits 2 and says so (%s: %s)" %
          (r.returncode, r.stderr.strip()[-200:]))

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
