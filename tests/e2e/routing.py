"""The Routing workflow as the end-to-end scripts drive it: its prompts, its requests and the
engine script that makes the router pick the handler a query names ("[route weather]")."""
import json

HANDLERS = ("weather", "calendar", "email")
ROUTER_SYSTEM = ("You route requests to handlers. Think step by step, then end with one line "
                 "`HANDLER: <name>`, where <name> is weather, calendar or email.")


def chat(system, user, max_tokens):
    return {"model": "qwen3-32b", "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def handler_system(h):
    return ("You are the %s handler. Reply with exactly one JSON object {\"function\": ..., "
            "\"arguments\": {...}} that calls the %s API." % (h, h))


def content(body):
    """The first choice's text of a chat completion body."""
    return json.loads(body)["choices"][0]["message"]["content"]


def write_script(path, extra=()):
    """The engine's response script: the router reasons, then names the handler the query
    asks for; `extra` adds (contains, response) pairs."""
    reasoning = " ".join(["step"] * 60)
    with open(path, "w") as f:
        for h in HANDLERS:
            f.write(json.dumps({"contains": "[route %s]" % h,
                                "response": reasoning + "\nHANDLER: " + h}) + "\n")
        for contains, response in extra:
            f.write(json.dumps({"contains": contains, "response": response}) + "\n")
