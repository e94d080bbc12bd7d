"""Tags a harness's model calls for dynrt without touching each call: an httpx transport that
adds X-DynRT-Workflow, X-DynRT-Workflow-Id and X-DynRT-Stage from the current context.

    import httpx, openai
    from dynrt_httpx import DynrtTransport, run, stage

    client = openai.OpenAI(base_url="http://dynrt:8080/v1",
                           http_client=httpx.Client(transport=DynrtTransport()))
    with run("routing"):                 # one workflow run, a fresh id (or run("routing", id))
        with stage("router"):            # one line per node
            client.chat.completions.create(...)

`stage` is also a decorator (`@stage("router")`), for sync and async functions alike, and
`AsyncDynrtTransport` serves `httpx.AsyncClient`. The context is a `contextvars.ContextVar`, so
it follows asyncio tasks and threads started with `contextvars.copy_context()`; concurrent runs
keep their own ids. A call made outside a stage is sent untagged (dynrt forwards it unchanged);
headers the caller set itself win. Needs httpx (Debian: python3-httpx).
"""
import contextlib
import contextvars
import functools
import inspect
import uuid

import httpx

_TAGS = contextvars.ContextVar("dynrt_tags", default=None)


@contextlib.contextmanager
def run(workflow, run_id=None):
    """The calls inside are one workflow run of `workflow` (a new UUID as its id by default)."""
    token = _TAGS.set({"workflow": workflow, "id": run_id or str(uuid.uuid4()), "stage": None})
    try:
        yield _TAGS.get()["id"]
    finally:
        _TAGS.reset(token)


class stage(contextlib.ContextDecorator):  # noqa: N801 (used like a function)
    """The calls inside are stage `name` of the current run; outside a run, untagged."""

    def __init__(self, name):
        self.name, self._tokens = name, []

    def __enter__(self):
        current = _TAGS.get()
        self._tokens.append(_TAGS.set(dict(current, stage=self.name)) if current else None)
        return self

    def __exit__(self, *exc):
        token = self._tokens.pop()
        if token is not None:
            _TAGS.reset(token)
        return False

    def _recreate_cm(self):
        # A decorated function gets a fresh context manager per call: concurrent calls (threads,
        # recursion) must not share one stack of tokens.
        return stage(self.name)

    def __call__(self, fn):
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def wrapper(*args, **kwargs):
                with stage(self.name):
                    return await fn(*args, **kwargs)
            return wrapper
        return super().__call__(fn)


def current_tags():
    """The current tags ({workflow, id, stage}), or None outside a stage."""
    tags = _TAGS.get()
    return dict(tags) if tags and tags["stage"] else None


def _tag(request):
    tags = current_tags()
    if tags:
        for header, key in (("X-DynRT-Workflow", "workflow"), ("X-DynRT-Workflow-Id", "id"),
                            ("X-DynRT-Stage", "stage")):
            if header not in request.headers:
                request.headers[header] = tags[key]


class DynrtTransport(httpx.BaseTransport):
    """Wraps `transport` (a new httpx.HTTPTransport by default) and tags each request."""

    def __init__(self, transport=None):
        self._inner = transport or httpx.HTTPTransport()

    def handle_request(self, request):
        _tag(request)
        return self._inner.handle_request(request)

    def close(self):
        self._inner.close()


class AsyncDynrtTransport(httpx.AsyncBaseTransport):
    """DynrtTransport for httpx.AsyncClient."""

    def __init__(self, transport=None):
        self._inner = transport or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request):
        _tag(request)
        return await self._inner.handle_async_request(request)

    async def aclose(self):
        await self._inner.aclose()
