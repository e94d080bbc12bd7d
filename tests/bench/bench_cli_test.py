#!/usr/bin/python3
"""`dynrt bench` as a user runs it, on a tiny trace: every arm completes every request, the
dynrt arms answer byte-for-byte like the floor (accuracy 1.0), the JSON has the documented
record fields, the trace file lists the runs, and bad options are refused with exit 2 and a
clear message; and, since a cell runs in simulated time, the same options give the same figures
twice over. No wall time is asserted."""
import json
import os
import subprocess
import sys
import tempfile

DYNRT = sys.argv[1]
FIELDS = ["workload", "rate", "arm", "mean_s", "p50_s", "p99_s", "ratio_to_floor", "accuracy",
          "fills_issued_per_request", "fills_consumed_per_request",
          "fills_discarded_per_request", "speculative_engine_s_per_request", "failures"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def bench(*args):
    return subprocess.run([DYNRT, "bench", *args], capture_output=True, text=True, timeout=600)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "out")
    r = bench("subagent", "--requests", "3", "--rate", "2", "--quiet", "--no-plots", "--out", out)
    check(r.returncode == 0, "bench subagent exits 0 (stderr: %s)" % r.stderr[-400:])
    with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
    records = doc["records"]
    arms = {rec["arm"] for rec in records}
    check(arms == {"floor", "c1-only", "c2-only", "full", "instcache", "helium+", "spagent",
                   "dsp", "static", "always"}, "every arm has a record: %s" % sorted(arms))
    for rec in records:
        missing = [k for k in FIELDS if k not in rec]
        check(not missing, "%s has every field (missing %s)" % (rec["arm"], missing))
        check(rec["failures"] == 0 and rec["completed"] == 3, "%s completed 3/3" % rec["arm"])
        check(rec["accuracy"] == 1.0, "%s answers like the floor (accuracy %s)" %
              (rec["arm"], rec["accuracy"]))
        check(rec["workload"] == "subagent" and rec["rate"] == 2, "%s names its cell" % rec["arm"])
    floor = [rec for rec in records if rec["arm"] == "floor"][0]
    check(floor["ratio_to_floor"] == 1.0, "the floor's ratio is 1")
    check(floor["fills_issued_per_request"] == 0, "the floor issues no fills")
    with open(os.path.join(out, "traces", "subagent.jsonl")) as f:
        runs = [json.loads(line) for line in f]
    check(len(runs) == 3 and all("picks" in x and "arrival_s" in x for x in runs),
          "the trace lists the three runs with their picks and arrivals")
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    check("## subagent" in md and "## Targets" in md, "results.md has the table and targets")

    # Simulated time: a second run of the same options gives the same records (wall time aside).
    def figures(path):
        with open(os.path.join(path, "results.json")) as f:
            recs = json.load(f)["records"]
        for rec in recs:
            rec.pop("wall_s", None)
        return recs
    again = os.path.join(tmp, "again")
    args = ["routing", "--requests", "12", "--rate", "0.8", "--arms", "full,always,helium+",
            "--seed", "5", "--quiet", "--no-plots"]
    r1 = bench(*args, "--out", os.path.join(tmp, "once"))
    r2 = bench(*args, "--out", again)
    check(r1.returncode == 0 and r2.returncode == 0, "the repeated runs exit 0")
    check(figures(os.path.join(tmp, "once")) == figures(again),
          "the same seed gives the same figures run after run")
    check(any(rec["arm"] == "full" and rec["fills_issued_per_request"] > 0
              for rec in figures(again)), "full issues fills in the repeated run")

    # The load sweep and the bursty trace, small: the documented record fields, a measured
    # saturation rate, every run answered like the floor. HCI: of the four workloads, the one
    # whose saturation bursts cost least, and these two sweeps each measure one.
    sweep_out = os.path.join(tmp, "sweep")
    r = bench("sweep", "hci", "--seeds", "2", "--loads", "0.05,0.1", "--requests", "40",
              "--arms", "full,always", "--quiet", "--no-plots", "--out", sweep_out)
    check(r.returncode == 0, "bench sweep exits 0 (stderr: %s)" % r.stderr[-400:])
    with open(os.path.join(sweep_out, "results.json")) as f:
        doc = json.load(f)
    sweep_fields = ["workload", "profile", "load", "rate", "arm", "seed", "mean_s", "p99_s",
                    "accuracy", "fills_issued", "fills_consumed", "wasted_engine_s"]
    check(len(doc["records"]) == 2 * 2 * 3, "one record per load, seed and arm")
    # A seed's records do not depend on the seed the run started from: the saturation rate is
    # measured on a trace of its own, so seed 2 alone writes what it wrote as the second seed.
    alone_out = os.path.join(tmp, "sweep-seed2")
    r = bench("sweep", "hci", "--seeds", "1", "--seed", "2", "--loads", "0.05,0.1",
              "--requests", "40", "--arms", "full,always", "--quiet", "--no-plots", "--out",
              alone_out)
    with open(os.path.join(alone_out, "results.json")) as f:
        alone = json.load(f)

    def seed_records(d, seed):
        recs = [dict(rec) for rec in d["records"] if rec["seed"] == seed]
        for rec in recs:
            rec.pop("wall_s", None)
        return recs
    check(r.returncode == 0 and alone["saturation"] == doc["saturation"],
          "the saturation rate does not depend on --seed")
    check(seed_records(alone, 2) == seed_records(doc, 2),
          "seed 2 alone writes the records it wrote as the second of two seeds")
    for rec in doc["records"]:
        missing = [k for k in sweep_fields if k not in rec]
        check(not missing, "sweep record %s/%s has every field (missing %s)" %
              (rec["arm"], rec["load"], missing))
        check(rec["accuracy"] == 1.0 and rec["failures"] == 0,
              "sweep %s at %s answers like the floor" % (rec["arm"], rec["load"]))
    # Where the answer time went: per stage and how each call was served, over the measured
    # runs. The floor runs everything on the engine; full serves some calls from fills.
    served_fill = False
    for rec in doc["records"]:
        stages = rec.get("stages", [])
        check(stages and all(abs(s["s_per_run"] - s["calls_per_run"] * s["mean_s"]) < 1e-9
                             for s in stages),
              "sweep record %s/%s says where its time went" % (rec["arm"], rec["load"]))
        if rec["arm"] == "floor":
            check({s["served"] for s in stages} == {"engine"},
                  "the floor's calls all ran on the engine")
        served_fill = served_fill or any(s["served"] == "fill" and s["calls_per_run"] > 0
                                         for s in stages)
    check(served_fill, "some of full's calls are served by fills")
    # The fill gate's calibration: the mean p of the fills it admitted, and the share used.
    for rec in doc["records"]:
        if rec["arm"] == "floor":
            check(rec["fill_p"] == -1 and rec["fill_used_share"] == -1,
                  "the floor admits no fill, so it has no p")
        elif rec["fills_issued"] > 0:
            check(0 < rec["fill_p"] <= 1 and 0 <= rec["fill_used_share"] <= 1,
                  "%s at %s says its fills' mean p (%s) and the share used (%s)" %
                  (rec["arm"], rec["load"], rec["fill_p"], rec["fill_used_share"]))
    check(all("stages" in p for p in doc["points"]), "every point says where its time went")
    with open(os.path.join(sweep_out, "results.md")) as f:
        md = f.read()
    check("Answer time per run at load 0.1, by stage" in md,
          "results.md tables the answer time at the highest load swept")
    check(doc["trimmed"].get("drain_min_s") == 30 and "the last 10% would arrive within 30" in md,
          "the sweep says it holds the load 30 simulated seconds past the measured runs")
    sat = doc["saturation"]["hci"]["rate"]
    check(sat > 0, "the floor's saturation rate is measured (%s runs/s)" % sat)
    check(all(abs(rec["rate"] - rec["load"] * sat) < 1e-9 for rec in doc["records"]),
          "each rate is its load times the saturation rate")
    check(doc["profile"] == "h200x4-32b" and len(doc["points"]) == 2 * 3,
          "the sweep runs the paper's testbed by default and reports a point per load and arm")
    # Resolve on emission, on the trace whose deciders name their pick first: the losers' fills
    # stop early, and only when it is on.
    emitted = {}
    for flag in ["", "--no-emission"]:
        out = os.path.join(tmp, "emission" + flag)
        r = bench("sweep", "routing", "--seeds", "1", "--loads", "0.3", "--requests", "40",
                  "--arms", "full", "--selection-first", "--saturation", "10", "--quiet",
                  "--no-plots", "--out", out, *([flag] if flag else []))
        check(r.returncode == 0, "bench sweep --selection-first %s exits 0 (stderr: %s)" %
              (flag, r.stderr[-400:]))
        with open(os.path.join(out, "results.json")) as f:
            doc = json.load(f)
        check(doc["selection_first"] and doc["emission"] == (flag == ""),
              "the report says which trace and rule it ran")
        full = [rec for rec in doc["records"] if rec["arm"] == "full"][0]
        check(full["accuracy"] == 1.0, "full answers like the floor %s" % flag)
        emitted[flag] = full["fills_outrun"]
    check(emitted[""] > 0 and emitted["--no-emission"] == 0,
          "fills are stopped on emission only when it is on (%s)" % emitted)
    # Paper-sized prompts: the report says so, and the handler's prompt is several times the
    # compact trace's (about 263 tokens at p50, section 2.2's F2).
    handler_tokens, kv_use = {}, {}
    for contexts in ["compact", "paper"]:
        out = os.path.join(tmp, "contexts-" + contexts)
        r = bench("sweep", "routing", "--seeds", "1", "--loads", "0.3", "--requests", "40",
                  "--arms", "full", "--contexts", contexts, "--saturation", "10", "--quiet",
                  "--no-plots", "--out", out)
        check(r.returncode == 0, "bench sweep --contexts %s exits 0 (stderr: %s)" %
              (contexts, r.stderr[-400:]))
        with open(os.path.join(out, "results.json")) as f:
            doc = json.load(f)
        check(doc["contexts"] == contexts, "the report says which prompt sizes it ran")
        floor = [rec for rec in doc["records"] if rec["arm"] == "floor"][0]
        handler_tokens[contexts] = [s["prompt_tokens"] for s in floor["stages"]
                                    if s["stage"] == "handle"][0]
        kv_use[contexts] = floor["kv_use"]
        check(0 <= floor["kv_wait_share"] <= 1, "the share of time spent waiting for KV")
        check(all(rec["accuracy"] == 1.0 for rec in doc["records"]),
              "full answers like the floor with %s prompts" % contexts)
    check(handler_tokens["compact"] < 80 and 230 < handler_tokens["paper"] < 320,
          "the handler's prompt tokens per call, compact and paper: %s" % handler_tokens)
    check(0 < kv_use["compact"] < kv_use["paper"] < 1,
          "longer prompts hold more of the KV pools: %s" % kv_use)
    r = bench("sweep", "routing", "--contexts", "huge", "--out", os.path.join(tmp, "bad"))
    check(r.returncode == 2 and "--contexts" in r.stderr,
          "an unknown prompt size is refused: %r" % r.stderr[-200:])
    bursty_out = os.path.join(tmp, "bursty")
    # Given a saturation rate, the bursty trace and the ablation skip measuring it.
    r = bench("bursty", "hci", "--seeds", "1", "--requests", "40", "--arms", "full",
              "--saturation", "10", "--quiet", "--no-plots", "--out", bursty_out)
    check(r.returncode == 0, "bench bursty exits 0 (stderr: %s)" % r.stderr[-400:])
    with open(os.path.join(bursty_out, "results.json")) as f:
        doc = json.load(f)
    check(doc["saturation"]["hci"]["rate"] == 10 and doc["saturation"]["hci"]["burst_runs"] == 0,
          "a given saturation rate is used, not measured")
    check([p["name"] for p in doc["phases"]] == ["A", "B", "C", "D"] and
          all(len(p["phase_mean_s"]) == 4 for p in doc["points"]),
          "the bursty trace reports its four phases")
    ablation_out = os.path.join(tmp, "ablation")
    r = bench("ablation", "react", "--seeds", "1", "--requests", "30", "--loads", "0.5",
              "--arms", "full,priced-fills,always,p=0.8", "--saturation", "2", "--quiet",
              "--no-plots",
              "--out", ablation_out)
    check(r.returncode == 0, "bench ablation exits 0 (stderr: %s)" % r.stderr[-400:])
    with open(os.path.join(ablation_out, "results.json")) as f:
        doc = json.load(f)
    check(sorted({rec["arm"] for rec in doc["records"]}) ==
          ["always", "floor", "full", "p=0.8", "priced-fills"],
          "the ablation runs its arms and the floor")
    check(all(rec["accuracy"] == 1.0 for rec in doc["records"]),
          "every ablation arm answers like the floor")
    # ReAct with a drafter: its samples are scripted, cost engine time, and are counted; a gate
    # that opens draws them, answers stay the floor's.
    drafter_out = os.path.join(tmp, "drafter")
    r = bench("ablation", "react", "--seeds", "1", "--requests", "30", "--loads", "0.5",
              "--arms", "full,always", "--saturation", "2", "--quiet", "--no-plots",
              "--templates", os.path.join("bench", "templates", "drafter"),
              "--out", drafter_out)
    check(r.returncode == 0, "bench ablation with a drafter exits 0 (stderr: %s)" % r.stderr[-400:])
    with open(os.path.join(drafter_out, "results.json")) as f:
        doc = json.load(f)
    drafting = [rec for rec in doc["records"] if rec["arm"] == "always"]
    check(drafting and all(rec["draft_samples"] > 0 and rec["drafting_engine_s"] > 0
                           for rec in drafting),
          "the drafter's samples run and cost engine time: %s" %
          [(rec["draft_samples"], rec["drafting_engine_s"]) for rec in drafting])
    check(all(rec["accuracy"] == 1.0 for rec in doc["records"]),
          "every arm with a drafter answers like the floor")
    check(all(rec["draft_samples"] == 0 for rec in doc["records"] if rec["arm"] == "floor"),
          "the floor drafts nothing")
    with open(os.path.join(drafter_out, "results.md")) as f:
        check("Drafter samples and their engine-seconds" in f.read(),
              "the report shows the drafter's cost")
    r = bench("ablation", "react", "--arms", "p=2", "--out", os.path.join(tmp, "bad"))
    check(r.returncode == 2 and "unknown arm" in r.stderr, "a threshold above 1 is refused")
    r = bench("sweep", "routing", "--loads", "0", "--out", os.path.join(tmp, "bad"))
    check(r.returncode == 2 and "fraction of the saturation rate" in r.stderr,
          "a load of 0 is refused: %r" % r.stderr[-200:])
    r = bench("sweep", "nosuch", "--out", os.path.join(tmp, "bad"))
    check(r.returncode == 2 and "unknown workload" in r.stderr, "an unknown workload is refused")

    # Bad options: exit 2, a specific message, nothing run.
    r = bench("routing", "--arms", "floor,warp-drive", "--out", os.path.join(tmp, "bad"))
    check(r.returncode == 2 and "unknown arm \"warp-drive\"" in r.stderr,
          "an unknown arm is refused: %r" % r.stderr[-200:])
    r = bench("routing", "--time-scale", "2")
    check(r.returncode == 2, "--time-scale is gone: the bench runs in simulated time")
    r = bench("routing", "--rate", "-1")
    check(r.returncode == 2, "a negative rate is refused")
    r = bench("nosuch")
    check(r.returncode == 2, "an unknown workload is refused")

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
