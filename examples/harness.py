#!/usr/bin/env python3
"""A harness that runs the Routing workflow through `dynrt serve`, using only the Python
standard library. It sends each stage's request exactly as templates/routing.yaml renders it,
tagged with the three X-DynRT headers, and prints how dynrt served each answer.

    ./build/dynrt serve templates/ --port 8080 --corpus examples/corpus.json &
    python3 examples/harness.py --port 8080

Any OpenAI-compatible client works the same way: point its base URL at dynrt and add the
headers (docs/harnesses.md shows the OpenAI SDKs, LangGraph and AutoGen).
"""
import argparse
import http.client
import json
import re
import sys
import uuid

ROUTER_SYSTEM = ("You route requests to handlers. Think step by step, then end with one line "
                 "`HANDLER: <name>`, where <name> is weather, calendar or email.")


def post(port, path, body, workflow, run, stage):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", path, body=json.dumps(body), headers={
        "Content-Type": "application/json",
        "X-DynRT-Workflow": workflow,    # the template
        "X-DynRT-Workflow-Id": run,      # this run of it
        "X-DynRT-Stage": stage,          # the stage this call is
    })
    resp = conn.getresponse()
    data = resp.read().decode()
    if resp.status != 200:
        sys.exit("%s answered %d: %s" % (stage, resp.status, data))
    return resp.getheader("X-DynRT-Served"), json.loads(data)


def chat(system, user, max_tokens):
    return {"model": "qwen3-32b", "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--query", default="What's the weather in Lisbon tomorrow?")
    args = parser.parse_args()
    run = "harness-" + uuid.uuid4().hex[:8]

    # The router decides; while it decodes, dynrt fills the likely handlers.
    served, answer = post(args.port, "/v1/chat/completions", chat(ROUTER_SYSTEM, args.query, 512),
                          "routing", run, "router")
    text = answer["choices"][0]["message"]["content"]
    picks = re.findall(r"HANDLER:\s*(weather|calendar|email)", text)
    print("router   served by %-6s -> %s" % (served, picks[-1] if picks else "no handler"))
    if not picks:
        print("the router named no handler; a real harness would ask again")
        return 0
    handler = picks[-1]

    # The handler the router picked: served from its fill when the fill finished in time.
    system = ("You are the %s handler. Reply with exactly one JSON object {\"function\": ..., "
              "\"arguments\": {...}} that calls the %s API." % (handler, handler))
    served, answer = post(args.port, "/v1/chat/completions", chat(system, args.query, 256),
                          "routing", run, "handle")
    api_call = answer["choices"][0]["message"]["content"]
    print("handle   served by %-6s -> %d characters" % (served, len(api_call)))

    # The executor: a tool call through dynrt's tool endpoint.
    served, answer = post(args.port, "/v1/dynrt/tools/call_api",
                          {"api": handler, "call": api_call}, "routing", run, "execute")
    print("execute  served by %-6s -> %s" % (served, json.dumps(answer)[:60]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
