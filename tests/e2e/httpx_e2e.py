#!/usr/bin/env python3
"""The Python interceptor (clients/python/dynrt_httpx.py) against `dynrt serve` and
`dynrt-sim-engine`: an httpx client whose calls declare their stage in one line each.
- A Routing turn made through DynrtTransport is tagged (router on the engine, the handler by
  fill, as hand-set headers get), with the engine's answer byte for byte.
- Two runs at once on AsyncDynrtTransport (asyncio tasks, decorated coroutines) keep their own
  run ids; a call outside a stage goes untagged; headers the caller set win.
usage: httpx_e2e.py DYNRT SIM   (run from the repository root; skipped without python3-httpx)
"""
import asyncio
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
from routing import ROUTER_SYSTEM, chat, content, handler_system, write_script  # noqa: E402
from checks import check, launch, request, stop, summary  # noqa: E402

try:
    import httpx
    import dynrt_httpx
except ImportError as e:
    print("skipped: %s (scripts/install-deps.sh installs python3-httpx)" % e)
    sys.exit(77)

DYNRT, SIM = sys.argv[1], sys.argv[2]


class Recording(httpx.BaseTransport):
    """The real transport, keeping the tags each request was sent with."""

    def __init__(self, sent):
        self.inner, self.sent = httpx.HTTPTransport(), sent

    def handle_request(self, req):
        self.sent.append({k: req.headers.get(k) for k in
                          ("X-DynRT-Workflow", "X-DynRT-Workflow-Id", "X-DynRT-Stage")})
        return self.inner.handle_request(req)


class AsyncRecording(httpx.AsyncBaseTransport):
    def __init__(self, sent):
        self.inner, self.sent = httpx.AsyncHTTPTransport(), sent

    async def handle_async_request(self, req):
        self.sent.append({k: req.headers.get(k) for k in
                          ("X-DynRT-Workflow", "X-DynRT-Workflow-Id", "X-DynRT-Stage")})
        return await self.inner.handle_async_request(req)


def main():
    tmp = tempfile.mkdtemp(prefix="dynrt-httpx-")
    script = os.path.join(tmp, "script.jsonl")
    write_script(script)
    engine, engine_port = launch([SIM, "--port", "0", "--time-scale", "20", "--script", script],
                                 r":(\d+)")[:2]
    try:
        serve, port, _ = launch([DYNRT, "serve", "templates", "--port", "0", "--engine",
                                 "qwen3-32b=http://127.0.0.1:%d" % engine_port], r":(\d+) ")
    except SystemExit:
        engine.terminate()
        raise
    base = "http://127.0.0.1:%d" % port
    try:
        sync_turn(base, engine_port)
        asyncio.run(async_runs(base))
    finally:
        stop(serve)
        engine.terminate()
        engine.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("httpx_e2e")


def sync_turn(base, engine_port):
    sent = []
    client = httpx.Client(base_url=base, transport=dynrt_httpx.DynrtTransport(Recording(sent)),
                          timeout=60)
    query = "[route calendar] move my 3pm"
    with dynrt_httpx.run("routing") as run_id:
        with dynrt_httpx.stage("router"):
            r = client.post("/v1/chat/completions", json=chat(ROUTER_SYSTEM, query, 512))
        handler = re.findall(r"HANDLER:\s*(\w+)", content(r.text))[-1]
        with dynrt_httpx.stage("handle"):
            h = client.post("/v1/chat/completions", json=chat(handler_system(handler), query, 256))
        # Outside any stage: untagged.
        client.post("/v1/chat/completions", json=chat("Answer briefly.", "hello", 8))
    served = [r.headers.get("X-DynRT-Served"), h.headers.get("X-DynRT-Served")]
    print("sync: served %s" % served, flush=True)
    check(served == ["engine", "fill"], "the router runs on the engine, the handler by fill: %s" %
          served)
    check(sent[0] == {"X-DynRT-Workflow": "routing", "X-DynRT-Workflow-Id": run_id,
                      "X-DynRT-Stage": "router"}, "the router call carries the tags: %s" % sent[0])
    check(sent[1]["X-DynRT-Stage"] == "handle" and sent[1]["X-DynRT-Workflow-Id"] == run_id,
          "the handler call carries its stage and the run's id: %s" % sent[1])
    check(sent[2] == {"X-DynRT-Workflow": None, "X-DynRT-Workflow-Id": None,
                      "X-DynRT-Stage": None}, "a call outside a stage is untagged: %s" % sent[2])
    _, _, direct = request(engine_port, "POST", "/v1/chat/completions",
                           chat(handler_system(handler), query, 256))
    check(content(h.text) == content(direct), "the handler's answer is the engine's, byte for byte")


async def async_runs(base):
    sent = []
    client = httpx.AsyncClient(base_url=base, timeout=60,
                               transport=dynrt_httpx.AsyncDynrtTransport(AsyncRecording(sent)))

    @dynrt_httpx.stage("router")
    async def router(query):
        r = await client.post("/v1/chat/completions", json=chat(ROUTER_SYSTEM, query, 512))
        return r.status_code

    async def one(query, run_id=None):
        with dynrt_httpx.run("routing", run_id):
            return await router(query)

    statuses = await asyncio.gather(one("[route weather] rain?"), one("[route email] mail Bo"),
                                    one("[route email] mail Cy", "my-own-id"))
    # The caller's own header wins over the context's.
    with dynrt_httpx.run("routing"):
        with dynrt_httpx.stage("router"):
            await client.post("/v1/chat/completions", headers={"X-DynRT-Workflow-Id": "mine"},
                              json=chat(ROUTER_SYSTEM, "[route weather] wind?", 512))
    await client.aclose()
    ids = [s["X-DynRT-Workflow-Id"] for s in sent]
    check(statuses == [200, 200, 200], "the concurrent runs are answered: %s" % statuses)
    check(len(set(ids[:3])) == 3 and "my-own-id" in ids[:3] and all(ids),
          "three runs at once, three run ids (one given): %s" % ids)
    check(all(s["X-DynRT-Stage"] == "router" for s in sent),
          "the decorated coroutine tags its stage")
    check(ids[3] == "mine", "a header the caller set wins: %s" % ids[3])


if __name__ == "__main__":
    sys.exit(main())
