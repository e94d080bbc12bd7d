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

#include "actors/time.hpp"
#include "engines/engine.hpp"
#include "engines/pool.hpp"
#include "engines/tools/tool.hpp"
#include "run/call.hpp"
#include "run/stage.hpp"
#include "runtime/admission/controller.hpp"
#include "runtime/admission/cost_model.hpp"
#include "runtime/csl/store.hpp"
#include "runtime/expected.hpp"
#include "runtime/tenancy.hpp"
#include "store/shared_tier.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt {

namespace dsl {
struct LintReport;
}

using CallId = std::uint64_t;

struct EngineBinding {
  std::string name;  // for logs and stats
  std::shared_ptr<engines::Engine> engine;
  std::vector<std::string> models;  // models it serves; the first binding also takes the rest
};

// What a write did: the entries it removed here and, with a shared library tier, whether the
// tier had it before the answer (false: it is in force on this replica only, and goes to the
// tier when it is back; docs/scaling.md). Always false without a tier.
struct WriteResult {
  std::size_t removed = 0;
  bool shared = false;
};

struct RuntimeConfig {
  std::vector<EngineBinding> engines;          // at least one
  std::shared_ptr<engines::ToolEngine> tools;  // tool stages and tool() calls
  // The records configured tools read and write, as key templates over a call's arguments (a
  // tagged call's are snapshotted and invalidated as a stage's `reads` and `writes` are; an
  // untagged call to a tool that writes is refused: nothing would invalidate what it wrote).
  std::map<std::string, run::ToolRecords, std::less<>> tool_records;
  std::vector<std::string> template_paths;                          // files or folders, linted
  std::vector<std::pair<std::string, std::string>> template_texts;  // (name, YAML) in memory
  // Stages whose results serve every tenant, as if their template said `share: global`
  // ("workflow.stage"; for templates one does not own). A name no template defines is an error.
  std::vector<std::string> shared_stages;
  bool reuse = true;  // C1: serve confirmed results across requests
  bool fills = true;  // C2: run fills while branches resolve
  int threads = 2;    // CAF scheduler threads
  // The actor graph runs only inside Runtime::run_pending(), on the thread that calls it (CAF's
  // deterministic coordinator), instead of on `threads` scheduler threads. With a ManualTime
  // and engines advanced by the same loop, a simulation then runs in CPU time and gives the
  // same result every time (`dynrt bench`). Every call into such a Runtime, and every engine
  // callback, must come from that one thread.
  bool stepped = false;
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
  // Resolve on emission: stop the other candidates' fills as soon as a decider's selection can
  // be read from its decode (streamed calls, or engines that report progress), not at its end.
  bool emission = true;
  // `dynrt explain`: each run keeps a journal of its calls (how each was served, and why a call
  // no fill or library entry served was not), readable with explain() while the run lives and
  // for `explain_keep` after it ends, for at most `explain_runs` ended runs (the oldest go
  // first). 0 runs: no journals.
  std::size_t explain_runs = 1000;
  std::chrono::milliseconds explain_keep{600'000};
  // Hears of each near miss: a call served by the engine that a fill or the library might
  // have served, had the template, the request or the load been otherwise (the journal's
  // reasons but not_reusable, not_downstream, no_branch, no_candidates and unresolved, or any
  // call whose body differs from what the template renders). Gets {workflow, id, tenant,
  // call} with the call as explain() reports it. Runs on an actor's thread: must not block.
  std::function<void(const nlohmann::json&)> on_near_miss;
  // Hears of a tagged call whose tags name nothing loaded, so that it passed through to its
  // engine unchanged, with no fills and no reuse (run/misdirected.hpp): {reason, workflow,
  // stage, detail}, reason one of no_workflow, unknown_workflow, no_workflow_id and
  // unknown_stage, detail a sentence naming what was sent and what would be accepted. Once
  // per reason, workflow and stage, for the first kMisdirectedKindsTold of those (RuntimeStats
  // counts every call). Runs on the caller's thread or an actor's: must not block.
  std::function<void(const nlohmann::json&)> on_misdirected;
  static constexpr std::size_t kMisdirectedKindsTold = 256;
  int decode_slots = 0;  // the engines' decode slots for pricing; 0: from the engine's load
  double kv_tokens = 0;  // the engines' KV pool in tokens for pricing; 0: from the engine
  csl::Limits csl;
  // A library tier shared with other replicas through Redis (store/shared_tier.hpp; `dynrt
  // serve --library redis://...`): confirmed results are written through to it, a miss here
  // looks there, results that read records are checked against it before they serve, and
  // writes reach it before they are answered. None: this process's library only. One Runtime
  // per tier.
  std::shared_ptr<store::SharedTier> shared_library;
  admission::AdmissionConfig admission;
  admission::CostModelConfig costs;
  // The clock and timer service every deadline, TTL and wait of the graph uses (actors/time.hpp);
  // null: a SystemTime of the Runtime's own. A ManualTime lets a test or a simulation move time.
  std::shared_ptr<TimeService> time;
};

struct RuntimeStats {
  // demands
  std::uint64_t requests = 0;
  std::uint64_t served_engine = 0;
  std::uint64_t served_fill = 0;
  std::uint64_t served_cache = 0;
  std::uint64_t passthrough = 0;  // untagged or unknown workflow or stage
  // Of those, tagged calls whose tags named nothing loaded (RuntimeConfig::on_misdirected).
  std::uint64_t tags_no_workflow = 0;       // a run id or stage without a workflow
  std::uint64_t tags_unknown_workflow = 0;  // a workflow no template defines
  std::uint64_t tags_no_run_id = 0;         // a loaded workflow without a run id
  std::uint64_t tags_unknown_stage = 0;     // a stage the workflow does not have
  std::uint64_t errors = 0;
  std::uint64_t waits = 0;          // demands that waited for an in-flight fill
  std::uint64_t wait_timeouts = 0;  // ... and ran themselves after the bound
  std::uint64_t hedge_fills = 0;    // ... and were answered by the fill all the same
  std::uint64_t coalesced = 0;      // demands that joined an identical one in flight
  // branches and fills
  std::uint64_t branches_opened = 0;  // asked Action 0 (with candidates, or before drafting)
  std::uint64_t branches_gated = 0;   // Action 0 kept it closed
  std::uint64_t branches_settled = 0;
  std::uint64_t fills_issued = 0;
  std::uint64_t fills_suppressed = 0;  // a library hit made the fill unnecessary
  std::uint64_t fills_completed = 0;
  std::uint64_t fills_failed = 0;
  std::uint64_t fills_cancelled = 0;
  std::uint64_t fills_consumed = 0;
  std::uint64_t emissions = 0;       // selections read from a decode before it ended
  std::uint64_t fills_outrun = 0;    // ... and the other candidates' fills they stopped then
  std::uint64_t fills_emitted = 0;   // ... and the winners' fills they started then
  std::uint64_t draft_samples = 0;   // drafter samples sent (branches Action 0 opened)
  std::uint64_t fills_promoted = 0;  // fills a call came to wait for: raised to priority 0
  std::uint64_t fills_requeued = 0;  // ... engine requests of theirs moved up the queue then
  std::uint64_t shadows_stored = 0;
  std::uint64_t shadows_discarded = 0;
  double engine_ms_saved = 0;   // engine time of results served without execution
  double engine_ms_wasted = 0;  // engine time of fills nobody consumed (with engine_ms_unfinished)
  // ... of which: fill requests that ended without a result (cancelled midway or failed), as
  // wall time from their start (no engine reports it)
  double engine_ms_unfinished = 0;
  double engine_ms_drafting = 0;  // engine time of drafter samples that answered
  // writes
  std::uint64_t writes = 0;
  // library and admission
  csl::Stats csl;
  std::size_t csl_entries = 0;
  std::size_t csl_shadows = 0;
  std::size_t csl_bytes = 0;
  // The shared library tier (RuntimeConfig::shared_library): what this replica did with it,
  // and the tier's own counts. All zero without one.
  // Recognition without tags (dsl/recognize.hpp), counted while a loaded template recognizes
  // calls: untagged calls recognized, by (workflow, stage), every stage with rules listed; and
  // untagged calls not recognized, by why.
  struct Recognition {
    bool enabled = false;
    std::map<std::pair<std::string, std::string>, std::uint64_t> recognized;
    std::uint64_t no_match = 0;   // no stage's rules held
    std::uint64_t ambiguous = 0;  // two stages' rules held
    std::uint64_t no_run = 0;     // one stage's held, but the call did not say its run
  } recognition;
  struct Shared {
    bool enabled = false;
    std::uint64_t imported = 0;       // results another replica computed, brought in here
    std::uint64_t checks_failed = 0;  // results here refused: a record they read was written
    std::uint64_t remote_writes = 0;  // other replicas' writes applied here
    std::uint64_t shared = 0;         // results written through
    store::TierStats tier;
  } shared;
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
  // Each engine that is a pool of replicas (engines/pool.hpp), by its binding's name.
  struct Pool {
    std::string engine;
    engines::PoolStats stats;
  };
  std::vector<Pool> pools;
};

// One figure of RuntimeStats as a metrics endpoint exports it (Prometheus names and types).
struct Metric {
  std::string_view name;
  std::string_view type;  // "counter" or "gauge"
  std::string_view help;
  std::string labels;  // e.g. {served="fill"}; empty for none
  double value = 0;
};
// Every figure of `stats`, in a stable order; a name with several label sets comes in a run.
// The one list of what dynrt counts: Runtime::stats() and the gateway's /metrics both read it.
std::vector<Metric> metrics(const RuntimeStats& stats);

class Runtime {
 public:
  // Lints and compiles the templates (an error-severity finding refuses them, with the
  // findings in the message), then starts the actor graph.
  static Expected<std::unique_ptr<Runtime>> create(RuntimeConfig config);
  // The same, with the templates at config.template_paths already linted as `linted` (a
  // caller that lints for its own report need not lint twice); reload() reads them anew.
  static Expected<std::unique_ptr<Runtime>> create(RuntimeConfig config,
                                                   const dsl::LintReport& linted);
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
  // The same, answered by callback (from an actor's thread) instead of a future, with whether
  // the write reached the shared library tier (WriteResult::shared).
  void write(std::vector<std::string> keys, std::function<void(WriteResult)> done,
             tenancy::WriteScope scope = tenancy::WriteScope::all());

  RuntimeStats stats() const;
  bool shares_library() const;                 // RuntimeConfig::shared_library is set
  std::vector<std::string> workflows() const;  // the loaded templates' names

  // `dynrt explain`: the journals of `tenant`'s runs with workflow id `id` (of `workflow`, or
  // of every loaded workflow), live or ended within explain_keep, each as JSON: every call in
  // order with how it was served and, for a call no fill or library entry served, why not
  // (run/journal.hpp has the reasons and the format). Empty when none is known. The callback
  // runs on an actor's thread; a stepped Runtime answers inside run_pending().
  void explain(std::string id, std::function<void(std::vector<nlohmann::json>)> done,
               std::string workflow = {}, std::string tenant = {});
  std::future<std::vector<nlohmann::json>> explain(std::string id, std::string workflow = {},
                                                   std::string tenant = {});

  // A stepped Runtime (RuntimeConfig::stepped): runs every actor message pending, including
  // those the messages it runs send, until none is left; returns how many ran. A threaded
  // Runtime runs its actors on its own and returns 0 at once.
  std::size_t run_pending();

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
  static Expected<std::unique_ptr<Runtime>> create(RuntimeConfig config,
                                                   const dsl::LintReport* linted);
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynrt
