"""The JavaScript clients of docs/harnesses.md, run through `dynrt serve` in front of
`dynrt-sim-engine`: the official OpenAI Node SDK (tests/e2e/sdk/openai_node.mjs) and LangGraph.js
with LangChain JS's ChatOpenAI (tests/e2e/sdk/langgraph.mjs), each a Routing run as the docs
write it; and the Anthropic SDK's Messages and the OpenAI SDK's Responses calls, whole and
streamed, made once to the engine and once through dynrt with nothing changed but the base URL
(tests/e2e/sdk/protocols.mjs), which must answer the same content. Checks that the calls arrive tagged, that the handler calls (the template's `max_tokens`
as each client sends it; streamed, for LangChain) are served by fill, that a repeated run is
served from the library, and that every answer is the engine's own, byte for byte.

The pinned packages of tests/e2e/sdk/package.json are installed from npm once into
$DYNRT_SDK_CACHE (default ~/.cache/dynrt-sdk-tests). Without node, npm or the registry the test
is skipped (exit 77), saying so.

    sdk_e2e.py DYNRT SIM_ENGINE
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from checks import check, launch, metrics, stop, summary  # noqa: E402
import replay  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def install():
    """The folder with the pinned packages installed, or None (and why) when it cannot be."""
    if not shutil.which("node") or not shutil.which("npm"):
        return None, "node and npm are not installed"
    cache = os.environ.get("DYNRT_SDK_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "dynrt-sdk-tests"))
    os.makedirs(cache, exist_ok=True)
    wanted = open(os.path.join(HERE, "sdk", "package.json")).read()
    manifest = os.path.join(cache, "package.json")
    have = open(manifest).read() if os.path.exists(manifest) else ""
    if have != wanted or not os.path.isdir(os.path.join(cache, "node_modules")):
        with open(manifest, "w") as f:
            f.write(wanted)
        try:
            p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                               cwd=cache, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return None, "npm install timed out"
        if p.returncode != 0:
            os.remove(manifest)
            return None, "npm install failed: " + p.stderr[-400:]
    for script in ("openai_node.mjs", "langgraph.mjs", "langgraph_interceptor.mjs", "routing.mjs",
                   "protocols.mjs", "protocols_tagged.mjs", "coding_agent.mjs"):
        shutil.copy(os.path.join(HERE, "sdk", script), cache)
    shutil.copy(os.path.join(HERE, "..", "..", "clients", "node", "dynrt-fetch.mjs"), cache)
    return cache, ""


def node(cache, script, *args):
    p = subprocess.run(["node", os.path.join(cache, script)] + list(args), capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0, "%s exits 0: %s" % (script, p.stderr[-800:]))
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        check(False, "%s prints its result: %r" % (script, p.stdout[-300:]))
        return {}


def direct(port, system, query, max_tokens):
    """The same chat call made to the engine itself: what dynrt's answer must equal."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"model": "qwen3-32b", "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": query}]}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = json.loads(r.read())["choices"][0]["message"]["content"]
    conn.close()
    return text


ROUTER_SYSTEM = ("You route requests to handlers. Think step by step, then end with one line "
                 "`HANDLER: <name>`, where <name> is weather, calendar or email.")


def handler_system(h):
    return ("You are the %s handler. Reply with exactly one JSON object {\"function\": ..., "
            "\"arguments\": {...}} that calls the %s API." % (h, h))


def protocols(cache, engine_base, base):
    """The Anthropic and OpenAI Responses SDKs, base URL only: the same content from the engine
    and through dynrt, whole and streamed, and the same refusals."""
    want = node(cache, "protocols.mjs", engine_base)
    got = node(cache, "protocols.mjs", base)
    print("protocols: through dynrt %s" % json.dumps(got)[:600], flush=True)
    for name in ("messages", "responses"):
        whole = got.get(name + "_whole", {})
        check(whole.get("text") and whole.get("text") == want.get(name + "_whole", {}).get("text"),
              "%s SDK: the whole answer through dynrt is the engine's, byte for byte: %r vs %r" %
              (name, whole.get("text", "")[:80], want.get(name + "_whole", {}).get("text", "")[:80]))
        check(whole.get("usage") == want.get(name + "_whole", {}).get("usage"),
              "%s SDK: the usage is the engine's: %s" % (name, whole.get("usage")))
        check(whole.get("id") == want.get(name + "_whole", {}).get("id"),
              "%s SDK: the id is the engine's: %s" % (name, whole.get("id")))
        check(whole.get("served") == "engine" and want.get(name + "_whole", {}).get("served") is None,
              "%s SDK: untagged, the call passes through to the engine: %s" %
              (name, whole.get("served")))
    m = got.get("messages_stream", {})
    check(m.get("text") == got.get("messages_whole", {}).get("text") and m.get("deltas") == m.get("text"),
          "Anthropic SDK: the streamed message (its text events and the accumulated message) "
          "equals the whole one")
    check(m.get("stop_reason") == want.get("messages_stream", {}).get("stop_reason") and
          m.get("usage") == want.get("messages_stream", {}).get("usage"),
          "Anthropic SDK: the streamed stop reason and usage are the engine's: %s %s" %
          (m.get("stop_reason"), m.get("usage")))
    ev = got.get("messages_events", {})
    check(ev.get("types") == ["message_start", "content_block_start", "content_block_delta",
                              "content_block_stop", "message_delta", "message_stop"],
          "Anthropic SDK: the raw stream's event types, in order: %s" % ev.get("types"))
    check(ev.get("text") == m.get("text"), "Anthropic SDK: the raw text deltas add up to the text")
    r = got.get("messages_refused", {})
    check(r.get("status") == 400 and r.get("type") == "invalid_request_error" and
          r == want.get("messages_refused"),
          "Anthropic SDK: a request with thinking is refused alike, 400 in Anthropic's shape: %s" % r)
    s = got.get("responses_stream", {})
    check(s.get("deltas") == got.get("responses_whole", {}).get("text") and s.get("text") == s.get("deltas"),
          "Responses: the streamed deltas and response.completed equal the whole answer")
    check(s.get("types", [])[:2] == ["response.created", "response.in_progress"] and
          s.get("types", [])[-1:] in (["response.completed"], ["response.incomplete"]),
          "Responses: the stream opens with response.created and ends with its completion: %s" %
          s.get("types"))
    check(s.get("usage") == want.get("responses_stream", {}).get("usage"),
          "Responses: the streamed usage is the engine's")
    check(got.get("responses_helper", {}).get("text") == s.get("deltas"),
          "Responses: the SDK's streaming helper assembles the same text")
    t = got.get("messages_tool", {})
    calls = [b for b in t.get("content", []) if b.get("type") == "tool_use"]
    check(len(calls) == 1 and calls[0].get("name") == "read_file" and
          calls[0].get("input") == {"path": "parser.c"} and t.get("stop_reason") == "tool_use",
          "Anthropic SDK: the engine's tool call arrives as a tool_use block: %s" % t.get("content"))
    check(t == want.get("messages_tool"), "Anthropic SDK: the tool-calling answer is the engine's")
    check(t.get("streamed") == t.get("content"),
          "Anthropic SDK: the streamed tool call (input_json_delta) accumulates to the whole one")
    t = got.get("responses_tool", {})
    items = [i for i in t.get("output", []) if i.get("type") == "function_call"]
    check(len(items) == 1 and items[0].get("name") == "read_file" and
          json.loads(items[0].get("arguments", "null")) == {"path": "parser.c"},
          "Responses: the engine's tool call arrives as a function_call item: %s" % t.get("output"))
    check(t == want.get("responses_tool"), "Responses: the tool-calling answer is the engine's")
    check(t.get("streamed") == t.get("output"),
          "Responses: the streamed response.completed carries the same output items")
    r = got.get("responses_refused", {})
    check(r.get("status") == 400 and r.get("param") == "previous_response_id" and
          r == want.get("responses_refused"),
          "Responses: previous_response_id is refused alike, 400 naming the field: %s" % r)


def wire(port, path, body):
    """A Messages or Responses call made to the engine itself; the answer's text."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    conn.close()
    if path == "/v1/messages":
        return "".join(b.get("text", "") for b in answer["content"])
    return "".join(c["text"] for item in answer["output"] for c in item.get("content", []))


TRIAGE_HANDLER = "You are the %s handler. Answer in one short paragraph."


def templated(cache, engine_port, base):
    """Stages written in the Messages and Responses protocols (tests/e2e/data/protocols): the
    router runs on the engine, the streamed handler is served by fill, a new run's router from
    the library, every answer the engine's own."""
    query = "[route weather] is it windy in Faro"
    first = node(cache, "protocols_tagged.mjs", base, "proto-run-1", query)
    again = node(cache, "protocols_tagged.mjs", base, "proto-run-2", query)
    print("protocols, tagged: %s" % json.dumps(first)[:400], flush=True)
    for name, path in (("messages", "/v1/messages"), ("responses", "/v1/responses")):
        run = first.get(name, {})
        check(run.get("handler") == "weather", "%s template: the router picked weather" % name)
        check(run.get("served") == ["engine", "fill"],
              "%s template: router on the engine, the streamed handler by fill: %s" %
              (name, run.get("served")))
        check(again.get(name, {}).get("served", [None])[0] == "cache",
              "%s template: a new run's router comes from the library: %s" %
              (name, again.get(name, {}).get("served")))
        limit = "max_tokens" if name == "messages" else "max_output_tokens"
        body = {"model": "qwen3-32b", "temperature": 0, limit: 256}
        if name == "messages":
            body.update(system=TRIAGE_HANDLER % "weather",
                        messages=[{"role": "user", "content": query}])
        else:
            body.update(instructions=TRIAGE_HANDLER % "weather", input=query)
        check(run.get("handle") and run.get("handle") == wire(engine_port, path, body),
              "%s template: the handler answer served by fill is the engine's, byte for byte" %
              name)
        check(again.get(name, {}).get("router") == run.get("router"),
              "%s template: the library's router answer is the first one" % name)


AGENT_TASK = "Make the tests pass (session %d)"


def agent_script():
    """The engine's side of a coding-agent session (tests/e2e/sdk/coding_agent.mjs)."""
    options = ["Patch add in place", "Rewrite calc.py", "Add a failing test first"]
    entries = [
        ("Make the tests pass", "I will read the failing module first.",
         [{"name": "read_file", "arguments": {"path": "calc.py"}}]),
        ("def add(a, b): return a - b", "add subtracts. How should I fix it?",
         [{"name": "ask_user", "arguments": {"question": "How should I fix add?",
                                             "options": options}}]),
        (options[0], "Patching add.",
         [{"name": "edit_file", "arguments": {"path": "calc.py", "old": "a - b", "new": "a + b"}}]),
        (options[1], "Rewriting calc.py.",
         [{"name": "edit_file", "arguments": {"path": "calc.py", "old": "", "new": "..."}}]),
        (options[2], "Writing a test.",
         [{"name": "edit_file", "arguments": {"path": "test_calc.py", "old": "", "new": "..."}}]),
        ("calc.py was edited", "Done: add adds, and the tests pass.", None),
    ]
    for needle, text, calls in entries:
        entry = {"contains": needle, "response": text}
        if calls:
            entry["tool_calls"] = calls
        yield json.dumps(entry)


def coding_agent(cache, engine_base, base, port):
    """templates/coding-agent.yaml with the Anthropic SDK: one session tagged by hand and one
    with no dynrt header at all, recognized by the template's match rules. Both are served
    alike (the pick's turn by the fill made during the person's wait, a repeat from the
    library), and every answer is the engine's own, byte for byte."""
    floor_1 = node(cache, "coding_agent.mjs", engine_base, AGENT_TASK % 1)
    floor_2 = node(cache, "coding_agent.mjs", engine_base, AGENT_TASK % 2)
    tagged = node(cache, "coding_agent.mjs", base, AGENT_TASK % 1, "agent-run-1")
    untagged = node(cache, "coding_agent.mjs", base, AGENT_TASK % 2)
    tagged_again = node(cache, "coding_agent.mjs", base, AGENT_TASK % 1, "agent-run-2")
    untagged_again = node(cache, "coding_agent.mjs", base, AGENT_TASK % 2)
    print("coding agent, served: tagged %s, untagged %s; again: tagged %s, untagged %s" %
          (tagged.get("served"), untagged.get("served"), tagged_again.get("served"),
           untagged_again.get("served")), flush=True)
    check(len(floor_1.get("content", [])) == 4,
          "coding agent: the session reads, asks, edits and ends: %s" % floor_1)
    check(tagged.get("served") == ["engine", "engine", "fill", "engine"],
          "coding agent, tagged: the turn after the pick is served by fill: %s" %
          tagged.get("served"))
    check(untagged.get("served") == tagged.get("served"),
          "coding agent, no dynrt header: served as the tagged session is: %s" %
          untagged.get("served"))
    check(tagged_again.get("served") == ["cache"] * 4 and
          untagged_again.get("served") == ["cache"] * 4,
          "coding agent: a repeated session comes from the library, tagged or not: %s %s" %
          (tagged_again.get("served"), untagged_again.get("served")))
    for name, run, floor in (("tagged", tagged, floor_1), ("untagged", untagged, floor_2),
                             ("tagged again", tagged_again, floor_1),
                             ("untagged again", untagged_again, floor_2)):
        check(run.get("content") == floor.get("content"),
              "coding agent, %s: every answer (text and tool calls) is the engine's" % name)
    check(untagged.get("options_filled") is True,
          "coding agent: the options were filled during the person's wait")
    m = metrics(port)
    turn = 'dynrt_recognized_total{workflow="coding-agent",stage="turn"}'
    answer = 'dynrt_recognized_total{workflow="coding-agent",stage="answer"}'
    check(m.get(turn) == 6 and m.get(answer) == 2,
          "coding agent: /metrics counts the recognized calls by stage: %s %s" %
          (m.get(turn), m.get(answer)))


def drafted_agent(dynrt, cache, engine_base, recording, tmp):
    """`dynrt template draft` on what `dynrt serve --record` wrote of the tagged coding-agent
    sessions (the Anthropic SDK's calls, recorded as it sent them): each turn resends the
    conversation, and the turn after the pick carries it on. The draft speaks Anthropic
    Messages, lints clean, binds the list whole and splices it into the next turn; a serve of
    the draft alone answers a repeated session from the library with the engine's own answers,
    and replays the recorded sessions with every answer as recorded."""
    drafts = os.path.join(tmp, "drafts")
    p = subprocess.run([dynrt, "template", "draft", recording, "--out", drafts],
                       capture_output=True, text=True, timeout=60)
    drafted = os.path.join(drafts, "coding-agent.yaml")
    check(p.returncode == 0 and os.path.exists(drafted),
          "drafted agent: template draft exits 0 and writes coding-agent.yaml: %s" % p.stderr[-500:])
    if not os.path.exists(drafted):
        return
    text = open(drafted).read()
    lint = subprocess.run([dynrt, "lint", drafted], capture_output=True, text=True)
    check(lint.returncode == 0 and not lint.stdout.strip(),
          "drafted agent: the draft lints clean: %s" % lint.stdout[-1500:])
    check('messages: "{{history}}"' in text and '"$splice": "{{history}}"' in text,
          "drafted agent: turns bind the resent conversation, the answer splices it in:\n" + text)
    check("api: messages" in text,
          "drafted agent: recorded as the SDK sent them, its stages speak Anthropic Messages")
    only = os.path.join(tmp, "drafted-agent")
    os.makedirs(only, exist_ok=True)
    shutil.copy(drafted, only)
    serve, port, _ = launch([dynrt, "serve", only, "--port", "0", "--engine",
                             "qwen3-32b=" + engine_base], r":(\d+) ")
    try:
        base = "http://127.0.0.1:%d" % port
        floor = node(cache, "coding_agent.mjs", engine_base, AGENT_TASK % 3)
        first = node(cache, "coding_agent.mjs", base, AGENT_TASK % 3, "drafted-run-1")
        again = node(cache, "coding_agent.mjs", base, AGENT_TASK % 3, "drafted-run-2")
        print("drafted agent, served: %s; again: %s" % (first.get("served"), again.get("served")),
              flush=True)
        check(again.get("served") == ["cache"] * 4,
              "drafted agent: a repeated session comes from the library: %s" % again.get("served"))
        for name, run in (("first", first), ("again", again)):
            check(run.get("content") == floor.get("content"),
                  "drafted agent, %s: every answer is the engine's" % name)
        # The recorded sessions replayed through the draft, as the SDK sent them.
        sessions = os.path.join(tmp, "agent-traffic.jsonl")
        with open(recording) as src, open(sessions, "w") as dst:
            for line in src:
                if json.loads(line).get("workflow") == "coding-agent":
                    dst.write(line)
        report = replay.replay(replay.load(sessions), base)
        check(report["calls"] == 8 and report["differ"] == 0 and report["failed"] == 0,
              "drafted agent: the recorded sessions replay with every answer as recorded: %s" %
              {k: report[k] for k in ("calls", "differ", "failed")})
    finally:
        stop(serve)


def main():
    dynrt, sim = sys.argv[1], sys.argv[2]
    cache, why = install()
    if not cache:
        print("skipped: " + why)
        return SKIP
    tmp = tempfile.mkdtemp(prefix="dynrt-sdk-")
    reasoning = " ".join(["step"] * 250)
    with open(os.path.join(tmp, "script.jsonl"), "w") as f:
        for h in ("weather", "calendar", "email"):
            f.write(json.dumps({"contains": "[route %s]" % h,
                                "response": reasoning + "\nHANDLER: " + h}) + "\n")
        f.write(json.dumps({"contains": "[tool read]", "response": "I will read the file.",
                            "tool_calls": [{"name": "read_file",
                                            "arguments": {"path": "parser.c"}}]}) + "\n")
        for line in agent_script():
            f.write(line + "\n")
    with open(os.path.join(tmp, "corpus.json"), "w") as f:
        json.dump({"documents": [{"key": "api:" + h, "text": h + " API: ok"}
                                 for h in ("weather", "calendar", "email")],
                   "tools": {"call_api": "api:{{api}}"}}, f)
    engine, engine_port, _ = launch([sim, "--port", "0", "--time-scale", "10", "--script",
                                     os.path.join(tmp, "script.jsonl")])
    recording = os.path.join(tmp, "traffic.jsonl")
    serve, port, _ = launch([dynrt, "serve", "templates", os.path.join(HERE, "data", "protocols"),
                             "--record", recording,
                             "--port", "0", "--engine",
                             "qwen3-32b=http://127.0.0.1:%d" % engine_port, "--corpus",
                             os.path.join(tmp, "corpus.json")], r":(\d+) ")
    base = "http://127.0.0.1:%d" % port
    try:
        # The OpenAI Node SDK: router, handler, tool and a write, as the docs write them.
        query = "[route calendar] book the review for Tuesday"
        first = node(cache, "openai_node.mjs", base, "sdk-run-1", query)
        served = first.get("served", {})
        check(served.get("router") == "engine", "SDK: the router runs on the engine: %s" % served)
        check(served.get("handle") == "fill", "SDK: the handler is served by fill: %s" % served)
        check(served.get("execute") in ("fill", "engine"), "SDK: the tool call is tagged: %s" % served)
        check(first.get("written", {}).get("written") == 1, "SDK: the write is acknowledged: %s" %
              first.get("written"))
        handler = first.get("handler", "")
        check(handler == "calendar", "SDK: the router picked calendar: %r" % handler)
        check(first.get("router") == direct(engine_port, ROUTER_SYSTEM, query, 512),
              "SDK: the router's answer is the engine's, byte for byte")
        check(first.get("handle") == direct(engine_port, handler_system(handler), query, 256),
              "SDK: the handler's answer (served by fill) is the engine's, byte for byte")
        again = node(cache, "openai_node.mjs", base, "sdk-run-2", query)
        check(again.get("served", {}).get("router") == "cache",
              "SDK: the same router call in a new run comes from the library: %s" % again.get("served"))
        check(again.get("handle") == first.get("handle"), "SDK: the repeat answers the same")

        # LangGraph.js with ChatOpenAI: a router node, then a streamed handler node.
        query = "[route weather] will it rain in Porto"
        graph = node(cache, "langgraph.mjs", base, "graph-run-1", query)
        check(graph.get("served") == ["engine", "fill"],
              "LangGraph.js: router on the engine, the streamed handler by fill (max_tokens and "
              "headers as the docs say): %s" % graph.get("served"))
        handler = graph.get("handler", "")
        check(handler == "weather", "LangGraph.js: the router picked weather: %r" % handler)
        check(graph.get("handle") == direct(engine_port, handler_system(handler), query, 256),
              "LangGraph.js: the streamed handler answer is the engine's, byte for byte")
        # The same graph tagged by the interceptor: one line per node, the run id per invocation.
        query = "[route email] tell Ana I am late"
        tagged = node(cache, "langgraph_interceptor.mjs", base, query)
        print("interceptor: served %s" % tagged.get("served"), flush=True)
        ids = tagged.get("ids", [])
        check(len(ids) == 4 and len(set(ids)) == 2 and all(ids),
              "interceptor: two concurrent invocations, two calls each, two run ids: %s" % ids)
        check(tagged.get("served", [])[:1] != ["untagged"] and
              "untagged" not in tagged.get("served", []),
              "interceptor: every call is tagged: %s" % tagged.get("served"))
        check("fill" in tagged.get("served", []),
              "interceptor: a handler is served by fill, as with hand-set headers: %s" %
              tagged.get("served"))
        handler = tagged.get("handler", "")
        check(tagged.get("handle") == direct(engine_port, handler_system(handler), query, 256),
              "interceptor: the streamed handler answer is the engine's, byte for byte")

        protocols(cache, "http://127.0.0.1:%d" % engine_port, base)
        templated(cache, engine_port, base)
        coding_agent(cache, "http://127.0.0.1:%d" % engine_port, base, port)
        drafted_agent(dynrt, cache, "http://127.0.0.1:%d" % engine_port, recording, tmp)
    finally:
        stop(serve)
        engine.terminate()
        engine.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("sdk_e2e")


if __name__ == "__main__":
    sys.exit(main())
