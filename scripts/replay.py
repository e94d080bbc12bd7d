#!/usr/bin/env python3
"""Replays traffic recorded by `dynrt serve --record FILE` against a running dynrt serve, to see
what a template (a drafted one, say) would have served on it.

Each recorded run is replayed as its harness sent it: its calls in order, each after the
previous answer, with the recorded pause between them, and runs starting at their recorded
offsets (both divided by --speed). Every call carries its recorded tags and body. The report
gives, per workflow and stage, how the calls were served (X-DynRT-Served: engine, fill,
cache, ...) and how many answers differ from the recorded ones (model calls: the choices'
content, text and tool calls, or an Anthropic message's content blocks and a response's output
items, ids left out; tool calls: the whole answer).

    scripts/replay.py traffic.jsonl --url http://127.0.0.1:8080 [--key KEY] [--json]

Standard library only. Exit status: 0 replayed with every answer as recorded, 1 some answer
differed or a call failed, 2 usage.
"""
import argparse
import collections
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request


def load(path):
    runs = collections.OrderedDict()
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            key = (r["workflow"], r.get("tenant", ""), r["id"])
            if not isinstance(r.get("start_ms"), (int, float)):
                r["start_ms"] = r["ts_ms"] - r.get("latency_ms", 0)
            r["line"] = n
            r["request"], r["stage"], r["endpoint"]
        except (ValueError, KeyError, TypeError):
            print("%s:%d: not a recorded call; skipped" % (path, n), file=sys.stderr)
            continue
        runs.setdefault(key, []).append(r)
    out = []
    for key, calls in runs.items():
        calls.sort(key=lambda c: (c["start_ms"], c["line"]))
        out.append((key, calls))
    out.sort(key=lambda kc: kc[1][0]["start_ms"])
    return out


def without_ids(value):
    """The value with every `id` field dropped: the engine names each answer and tool call anew."""
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k != "id"}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def essence(endpoint, body):
    """What must match: the answer's content, not its ids or timings."""
    if not isinstance(body, dict):
        return body
    if endpoint.startswith("/v1/dynrt/tools/"):
        return body
    if endpoint == "/v1/messages":
        return without_ids({k: body.get(k) for k in ("content", "stop_reason")})
    if endpoint == "/v1/responses":
        return without_ids({k: body.get(k) for k in ("output", "status")})
    return [without_ids({k: c.get(k) for k in ("message", "text", "finish_reason")})
            for c in body.get("choices", [])]


def call(url, key, rec, timeout):
    headers = {"Content-Type": "application/json",
               "X-DynRT-Workflow": rec["workflow"],
               "X-DynRT-Workflow-Id": rec["id"],
               "X-DynRT-Stage": rec["stage"]}
    if key:
        headers["Authorization"] = "Bearer " + key
    body = dict(rec["request"])
    body.pop("stream", None)  # replayed whole: the answer is compared as one document
    body.pop("stream_options", None)
    req = urllib.request.Request(url + rec["endpoint"], data=json.dumps(body).encode(),
                                 headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers.get("X-DynRT-Served", "?"), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-DynRT-Served", "error"), None
    except (urllib.error.URLError, OSError, ValueError) as e:
        return 0, "error: %s" % e, None


def replay(runs, url, key=None, speed=1.0, timeout=300, max_gap_s=30.0):
    """Replays `runs` (from load()) and returns the report as a dict."""
    served = collections.defaultdict(collections.Counter)  # (workflow, stage) -> kind -> n
    differ = collections.Counter()
    failed = collections.Counter()
    lock = threading.Lock()
    t0 = time.monotonic()
    first = runs[0][1][0]["start_ms"] if runs else 0

    def one(calls):
        time.sleep(max(0.0, (calls[0]["start_ms"] - first) / 1000.0 / speed -
                       (time.monotonic() - t0)))
        prev_end = None
        for rec in calls:
            if prev_end is not None:
                gap = (rec["start_ms"] - prev_end) / 1000.0 / speed
                time.sleep(min(max(gap, 0.0), max_gap_s))
            status, how, body = call(url, key, rec, timeout)
            prev_end = rec["start_ms"] + rec.get("latency_ms", 0)
            k = (rec["workflow"], rec["stage"])
            with lock:
                served[k][how if status == 200 else "failed"] += 1
                if status != 200 and rec.get("status", 200) == 200:
                    failed[k] += 1
                elif status == 200 and rec.get("status", 200) == 200 and \
                        essence(rec["endpoint"], body) != essence(rec["endpoint"], rec.get("response")):
                    differ[k] += 1

    threads = [threading.Thread(target=one, args=(calls,)) for _, calls in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stages = []
    for (wf, stage), kinds in sorted(served.items()):
        stages.append({"workflow": wf, "stage": stage, "served": dict(kinds),
                       "differ": differ[(wf, stage)], "failed": failed[(wf, stage)]})
    total = collections.Counter()
    for kinds in served.values():
        total.update(kinds)
    return {"runs": len(runs), "calls": sum(total.values()), "served": dict(total),
            "differ": sum(differ.values()), "failed": sum(failed.values()), "stages": stages,
            "seconds": round(time.monotonic() - t0, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recording")
    ap.add_argument("--url", required=True, help="dynrt serve's base URL")
    ap.add_argument("--key", default=os.environ.get("DYNRT_API_KEY"), help="API key ($DYNRT_API_KEY)")
    ap.add_argument("--speed", type=float, default=1.0, help="divide recorded pauses by this")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    a = ap.parse_args()
    if a.speed <= 0:
        ap.error("--speed must be above 0")
    runs = load(a.recording)
    if not runs:
        print("replay.py: %s holds no recorded call" % a.recording, file=sys.stderr)
        return 2
    report = replay(runs, a.url.rstrip("/"), a.key, a.speed)
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print("%d runs, %d calls in %.1f s: %s; %d answers differ, %d failed" % (
            report["runs"], report["calls"], report["seconds"],
            ", ".join("%s %d" % kv for kv in sorted(report["served"].items())),
            report["differ"], report["failed"]))
        for s in report["stages"]:
            print("  %-12s %-12s %s%s" % (s["workflow"], s["stage"],
                  ", ".join("%s %d" % kv for kv in sorted(s["served"].items())),
                  "; %d differ" % s["differ"] if s["differ"] else ""))
    return 1 if report["differ"] or report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
