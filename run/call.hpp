// The vocabulary of one call through dynrt, shared by the embedding API (actors/runtime.hpp),
// the run-level lifecycles (run/) and the gateway: who calls, with which tags, what it asks
// and how it was answered. Plain data, no behaviour beyond building replies.
#pragma once

#include "engines/engine.hpp"
#include "runtime/endpoints.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dynrt {

struct Tags {
  std::string workflow;     // X-DynRT-Workflow: the template's workflow name
  std::string workflow_id;  // X-DynRT-Workflow-Id: one run of it
  std::string stage;        // X-DynRT-Stage: the stage this call is
  bool empty() const { return workflow.empty() && workflow_id.empty() && stage.empty(); }
};

// Who is calling, as far as sharing and limits go (runtime/tenancy.hpp). A call is served only
// results its own tenant's calls caused, except from stages declared `share: global`; its
// workflow ids are its tenant's own (two tenants using the same id never meet). The gateway
// fills this from the caller's key; an embedder that does not partition leaves it empty: one
// tenant, as with no keys.
struct Caller {
  std::string tenant;  // "" is the default tenant
  std::string key;     // the key's name, for per-key limits (never the key itself)
  // Live workflow runs this key may hold at once; 0: no limit of its own (max_live_runs
  // bounds all runs together). A new run beyond it is refused with 429 and Retry-After.
  std::size_t max_live_runs = 0;
  // The fraction of the fill budget (fill slots and KV reservation) its tenant's speculation
  // may hold at once, in (0, 1].
  double fill_share = 1.0;
};

struct Request {
  std::string endpoint = "/v1/chat/completions";  // or /v1/completions, /v1/dynrt/tools/<name>
  nlohmann::json body;                            // the exact body (tool calls: the arguments)
  Tags tags;
  Caller caller = {};  // whose call it is (default: the default tenant, no limits of its own)
  // A call the gateway translated (Anthropic Messages, OpenAI Responses): its body as the
  // caller sent it, which `body`, the chat completion dynrt runs, translates; null otherwise.
  // A stage written in that protocol binds its variables from it.
  nlohmann::json wire = nullptr;
  // The path the call arrived on when that is not `endpoint`: /v1/messages or /v1/responses
  // for a translated call. Empty otherwise.
  std::string route = {};
  // The caller's HTTP headers, names lower-case. Read only to recognize an untagged call's run
  // by a header its template names (dsl/recognize.hpp); the gateway fills them for untagged
  // calls.
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// How an answer was produced. The body never says; only this does.
enum class Served {
  engine,  ///< executed on the engine for this call (including pass-through)
  fill,    ///< a speculative fill's result, promoted by this exact call
  cache,   ///< a confirmed result from the Completed-Subgraph Library
};
std::string_view to_string(Served s);

struct Reply {
  int status = 200;  // the engine's status, or 502/504/503/400 for dynrt's own errors
  std::string body;  // the complete response (for streamed calls too), or an OpenAI error body
  engines::Usage usage;
  std::string finish_reason;
  Served served = Served::engine;
  std::string error;  // empty when ok; otherwise what went wrong, for logs
  // With an error: when to try again, for a Retry-After header (the engine's own, as it sent
  // it; whole seconds on dynrt's own 503s); empty when there is no advice.
  std::string retry_after;
  bool ok() const { return error.empty(); }
};

// on_start: once, before the first chunk or the answer, with how the call is being served
// (a gateway puts it in a response header before streaming). on_chunk: one SSE data payload
// of a streamed call (`"stream": true`), in order; a result served from a fill or the library
// is replayed in the same chunk shape. on_done: exactly once.
struct ReplyCallbacks {
  std::function<void(std::string_view)> on_chunk;
  std::function<void(Reply)> on_done;
  std::function<void(Served)> on_start;
};

// The answers dynrt gives of its own, and the one conversion from what an engine said.
// {"error": {"message", "type", "param", "code"}}.
std::string error_body(std::string_view message, std::string_view type, int code);
// dynrt's own error. A 503 (shutting down, stopped, cancelled with the runtime) carries
// `Retry-After: 1`: the call itself was fine, and another try may well succeed.
Reply error_reply(int status, std::string_view type, std::string message);
// An engine failure as a Reply: the engine's own status, body and Retry-After for an HTTP
// error, and its status and error payload as sent for an error inside a 200 response; 504 for
// a timeout, 502 for the rest, 503 for a cancelled or stopped request.
Reply error_reply(const engines::EngineError& error);
// An engine's answer as a Reply, served by the engine.
Reply to_reply(engines::EngineResult result);

}  // namespace dynrt
