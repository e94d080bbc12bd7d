// dynrt::Runtime: the embedding API. A C++ service includes this header, constructs a Runtime
// with its engines and templates, and sends its model and tool calls through it; the Runtime
// assembles the actor graph (docs/architecture.md) and answers each call exactly as the engine
// would have, faster when a fill or a reusable result already holds the answer.
//
//   auto rt = dynrt::Runtime::create(config);          // lints and compiles the templates
//   if (!rt) { std::cerr << rt.error().message; ... }
//   auto reply = (*rt)->complete({"/v1/chat/completions", body, {"routing", "run-1", "router"}});
//   reply.get().body;                                  // the engine's exact response
//
// Tags name the workflow template, one run of it (the workflow id) and the stage; a call
// without tags, or naming a workflow or stage no template has, passes straight through to its
// engine. Switches turn exact reuse (C1) and fills (C2) on and off independently: with both
// off the Runtime is the no-reuse floor.
//
// Threading: every method may be called from any thread and none blocks on engine work or on
// the actor graph (stats() reads what the actors last published); only the futures the caller
// waits on block. Callbacks run
// on an engine's or an actor's thread; they must not block. shutdown() (and the destructor)
// cancels work in flight and completes every unanswered call with an error; it never hangs on
// an engine.
#pragma once

#include "engines/engine.hpp"
#include "engines/tools/tool.hpp"
#include "runtime/admission/controller.hpp"
#include "runtime/admission/cost_model.hpp"
#include "runtime/csl/store.hpp"
#include "runtime/expected.hpp"
#include "runtime/tenancy.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
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

using CallId = std::uint64_t;

struct EngineBinding {
  std::string name;  // for logs and stats
  std::shared_ptr<engines::Engine> engine;
  std::vector<std::string> models;  // models it serves; the first binding also takes the rest
};

struct RuntimeConfig {
  std::vector<EngineBinding> engines;                               // at least one
  std::shared_ptr<engines::ToolEngine> tools;                       // tool stages and tool() calls
  std::vector<std::string> template_paths;                          // files or folders, linted
  std::vector<std::pair<std::string, std::string>> template_texts;  // (name, YAML) in memory
  // Stages whose results serve every tenant, as if their template said `share: global`
  // ("workflow.stage"; for templates one does not own). A name no template defines is an error.
  std::vector<std::string> shared_stages;
  bool reuse = true;                                // C1: serve confirmed results across requests
  bool fills = true;                                // C2: run fills while branches resolve
  int threads = 2;                                  // CAF scheduler threads
  std::chrono::milliseconds workflow_idle{60'000};  // a run's actor ends after this much quiet
  // Live workflow runs at most; a new run beyond it retires the least recently demanded one
  // (which loses its speculation, never a result: its calls in flight are still answered).
  std::size_t max_live_runs = 10'000;
  std::chrono::milliseconds settle_after{30'000};  // a resolved branch stops waiting for its demand
  int fill_priority = 10;  // engine priority of fills (canonical requests use 0)
  // Policy knobs that `dynrt bench` uses for its sweeps and baselines; the defaults are dynrt.
  int fanout = -1;             // most fills per branch; -1: each decision's max_fills
  int fill_depth = 0;          // stages a fill runs down its chain; 0: the whole speculable chain
  bool private_fills = false;  // a fill's result serves only demands of the run that made it
  int decode_slots = 0;        // the engines' decode slots for pricing; 0: from the engine's load
  double kv_tokens = 0;        // the engines' KV pool in tokens for pricing; 0: from the engine
  csl::Limits csl;
  admission::AdmissionConfig admission;
  admission::CostModelConfig costs;
};

struct RuntimeStats {
  // demands
  std::uint64_t requests = 0;
  std::uint64_t served_engine = 0;
  std::uint64_t served_fill = 0;
  std::uint64_t served_cache = 0;
  std::uint64_t passthrough = 0;  // untagged or unknown workflow or stage
  std::uint64_t errors = 0;
  std::uint64_t waits = 0;          // demands that waited for an in-flight fill
  std::uint64_t wait_timeouts = 0;  // ... and ran normally after the bound
  std::uint64_t coalesced = 0;      // demands that joined an identical one in flight
  // branches and fills
  std::uint64_t branches_opened = 0;  // a decision point was reached with candidates
  std::uint64_t branches_gated = 0;   // Action 0 kept it closed
  std::uint64_t branches_settled = 0;
  std::uint64_t fills_issued = 0;
  std::uint64_t fills_suppressed = 0;  // a library hit made the fill unnecessary
  std::uint64_t fills_completed = 0;
  std::uint64_t fills_failed = 0;
  std::uint64_t fills_cancelled = 0;
  std::uint64_t fills_consumed = 0;
  std::uint64_t shadows_stored = 0;
  std::uint64_t shadows_discarded = 0;
  double engine_ms_saved = 0;   // engine time of results served without execution
  double engine_ms_wasted = 0;  // engine time of fills nobody consumed
  // writes
  std::uint64_t writes = 0;
  // library and admission
  csl::Stats csl;
  std::size_t csl_entries = 0;
  std::size_t csl_shadows = 0;
  std::size_t csl_bytes = 0;
  admission::AdmissionStats admission;
  double envelope = 0;              // the causal envelope rho_H now
  int fills_in_flight = 0;          // fill reservations the pricing actor holds
  double kv_reserved = 0;           // ... and their KV share
  std::size_t branches_open = 0;    // branches the pricing actor opened and has not settled
  std::uint64_t fills_running = 0;  // fill actors alive
  // workflow runs
  std::uint64_t workflows_live = 0;  // workflow actors alive (in the table or retiring)
  std::uint64_t runs_evicted = 0;    // retired to stay within max_live_runs
  std::uint64_t runs_expired = 0;    // ended after workflow_idle of quiet
  std::uint64_t runs_refused = 0;    // new runs refused (429): their key held its limit
  std::size_t actors_running = 0;    // every actor of the graph (root, engines, csl, pricing...)
};

class Runtime {
 public:
  // Lints and compiles the templates (an error-severity finding refuses them, with the
  // findings in the message), then starts the actor graph.
  static Expected<std::unique_ptr<Runtime>> create(RuntimeConfig config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  CallId complete(Request request, ReplyCallbacks callbacks);
  std::future<Reply> complete(Request request);
  // The caller has gone (a client disconnected): the engine request running for the call, if
  // any, is aborted (its on_done then reports the cancellation); a call served otherwise still
  // completes. Unknown and finished calls are ignored.
  void cancel(CallId call);
  // A tool call: the same as complete() with endpoint /v1/dynrt/tools/<name>.
  CallId tool(std::string name, nlohmann::json arguments, Tags tags, ReplyCallbacks callbacks,
              Caller caller = {});
  std::future<Reply> tool(std::string name, nlohmann::json arguments, Tags tags = {},
                          Caller caller = {});
  // External records were written: every result that read an older version (and whatever
  // descends from one) is removed before the future is ready. Returns the entries removed.
  // By default the write reaches every tenant; WriteScope::of(tenant) reaches that tenant's
  // results and the shared (`share: global`) ones only (runtime/tenancy.hpp).
  std::future<std::size_t> write(std::vector<std::string> keys,
                                 tenancy::WriteScope scope = tenancy::WriteScope::all());
  // The same, answered by callback (from an actor's thread) instead of a future.
  void write(std::vector<std::string> keys, std::function<void(std::size_t)> done,
             tenancy::WriteScope scope = tenancy::WriteScope::all());

  RuntimeStats stats() const;
  std::vector<std::string> workflows() const;  // the loaded templates' names

  // Lints and compiles the configured templates again (template_paths are read anew) and, if
  // they lint clean, serves new workflow runs from them; returns the workflows now loaded.
  // Runs already in progress finish on the graph they started with. On any error-severity
  // finding nothing changes (the old graphs keep serving) and the findings are the error.
  // Results in the library stay valid: a stage's reuse name covers its definition, so an
  // edited stage simply misses. Blocks the caller while it reads and lints the files.
  Expected<std::vector<std::string>> reload();
  const RuntimeConfig& config() const;

  // Stops the actor graph: fills are cancelled, unanswered calls complete with an error
  // (status 503). Idempotent; the destructor calls it.
  void shutdown();

 private:
  struct Impl;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynrt
