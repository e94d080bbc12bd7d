// The messages of the actor graph (docs/architecture.md). Internal to actors/.
//
// CAF 0.17 sends local messages without serialization, so payloads are plain structs whitelisted
// with CAF_ALLOW_UNSAFE_MESSAGE_TYPE; anything large or JSON travels as shared_ptr<const T>
// (messages are copy-on-write tuples and must be copyable). Atoms are at most 10 characters and
// spelled so they do not collide with CAF's own.
#pragma once

#include <shared_mutex>
#include "actors/emission.hpp"
#include "actors/reply.hpp"
#include "actors/runtime.hpp"
#include "actors/time.hpp"
#include "dsl/render.hpp"
#include "dsl/template_graph.hpp"
#include "engines/engine.hpp"
#include "engines/router.hpp"
#include "run/journal.hpp"
#include "run/misdirected.hpp"
#include "run/results.hpp"
#include "run/stage.hpp"
#include "runtime/admission/controller.hpp"
#include "runtime/branch/branch.hpp"
#include "runtime/csl/coalescer.hpp"
#include "runtime/csl/store.hpp"
#include "runtime/predictor.hpp"
#include "store/shared_tier.hpp"

#include <caf/all.hpp>

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace dynrt::actors {

// The run-level vocabulary (run/) the messages carry.
using run::ClaimReply;
using run::EntryRefs;
using run::ExecResult;
using run::ExecResultPtr;
using run::GraphPtr;
using run::Hashes;
using run::InsertPtr;
using run::Landed;
using run::LandedPtr;
using run::Policy;
using run::Producers;
using run::ReadRefs;
using run::ServeQuery;
using run::ServeReply;
using run::Strings;

// -- atoms ------------------------------------------------------------------------------------
using demand_atom = caf::atom_constant<caf::atom("demand")>;      // root, workflow: a call
using exec_atom = caf::atom_constant<caf::atom("exec")>;          // engine: run a request
using engdone_atom = caf::atom_constant<caf::atom("engdone")>;    // engine -> requester
using abort_atom = caf::atom_constant<caf::atom("abort")>;        // engine: cancel a handle
using serve_atom = caf::atom_constant<caf::atom("serve")>;        // csl: a ServeQuery
using snap_atom = caf::atom_constant<caf::atom("snap")>;          // csl: read versions
using store_atom = caf::atom_constant<caf::atom("store")>;        // csl: insert
using drop_atom = caf::atom_constant<caf::atom("drop")>;          // csl: discard shadows
using claim_atom = caf::atom_constant<caf::atom("claim")>;        // csl: lead or join a miss
using land_atom = caf::atom_constant<caf::atom("land")>;          // csl: a led execution ended
using coaldone_atom = caf::atom_constant<caf::atom("coaldone")>;  // csl -> a joined waiter
using leave_atom = caf::atom_constant<caf::atom("leave")>;        // csl: a waiter's bound passed
using write_atom = caf::atom_constant<caf::atom("write")>;        // csl, root: records written
using tier_atom = caf::atom_constant<caf::atom("tier")>;          // shared tier -> csl: answers
using remote_atom = caf::atom_constant<caf::atom("remote")>;  // shared tier -> csl: others' writes
using gate_atom = caf::atom_constant<caf::atom("gate")>;      // pricing: Action 0
using rank_atom = caf::atom_constant<caf::atom("rank")>;      // pricing: frequency ranking
using admit_atom = caf::atom_constant<caf::atom("admit")>;    // pricing: Action 1
using setup_atom = caf::atom_constant<caf::atom("setup")>;    // pricing: predictor time
using learn_atom = caf::atom_constant<caf::atom("learn")>;    // pricing: a resolution
using usable_atom = caf::atom_constant<caf::atom("usable")>;  // pricing: consumed / missed
using credit_atom = caf::atom_constant<caf::atom("credit")>;  // pricing: a chain stage served
using refund_atom = caf::atom_constant<caf::atom("refund")>;  // pricing: a fill ran nothing
using release_atom = caf::atom_constant<caf::atom("release")>;     // pricing: a fill ended
using settle_atom = caf::atom_constant<caf::atom("settle")>;       // pricing, workflow
using cost_atom = caf::atom_constant<caf::atom("cost")>;           // pricing: an execution's cost
using canon_atom = caf::atom_constant<caf::atom("canon")>;         // pricing: canonical in flight
using resolve_atom = caf::atom_constant<caf::atom("bresolve")>;    // branch: the selection
using demanded_atom = caf::atom_constant<caf::atom("bdemand")>;    // branch: its demand came
using abandon_atom = caf::atom_constant<caf::atom("babandon")>;    // branch: give up
using settleby_atom = caf::atom_constant<caf::atom("bsettleby")>;  // branch: settle deadline
using timebox_atom = caf::atom_constant<caf::atom("btimebox")>;    // branch: drafter's time box
using kickoff_atom = caf::atom_constant<caf::atom("kickoff")>;     // branch, fill: start
using announce_atom = caf::atom_constant<caf::atom("fannounce")>;  // fill -> workflow
using fend_atom = caf::atom_constant<caf::atom("fend")>;           // fill -> workflow
using bnote_atom = caf::atom_constant<caf::atom("bnote")>;         // branch -> workflow: explain
using explain_atom = caf::atom_constant<caf::atom("explain")>;  // root, workflow: a run's journal
using fstored_atom = caf::atom_constant<caf::atom("fstored")>;  // fill -> branch
using fdone_atom = caf::atom_constant<caf::atom("fdone")>;      // fill -> branch
using fcancel_atom = caf::atom_constant<caf::atom("fcancel")>;  // branch -> fill
using promote_atom = caf::atom_constant<caf::atom("promote")>;  // workflow -> fill: awaited
using emitted_atom = caf::atom_constant<caf::atom("emitted")>;  // watch -> workflow -> branch
using waitend_atom = caf::atom_constant<caf::atom("waitend")>;  // workflow: a wait's bound
using idle_atom = caf::atom_constant<caf::atom("idle")>;        // workflow <-> root: idle check
using stop_atom = caf::atom_constant<caf::atom("stopwf")>;      // root -> workflow: retire
using gone_atom = caf::atom_constant<caf::atom("gonewf")>;      // workflow -> root: it ended
using tick_atom = caf::atom_constant<caf::atom("tick")>;        // root: the periodic expiry
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;      // root: more runs are due

// -- shared services --------------------------------------------------------------------------

// Counters every actor bumps (metrics only; no actor reads another's state through them).
struct Counters {
  std::atomic<std::uint64_t> requests{0}, served_engine{0}, served_fill{0}, served_cache{0},
      passthrough{0}, errors{0}, waits{0}, wait_timeouts{0}, hedge_fills{0}, branches_opened{0},
      branches_gated{0}, branches_settled{0}, fills_issued{0}, fills_suppressed{0},
      fills_completed{0}, fills_failed{0}, fills_cancelled{0}, fills_consumed{0}, shadows_stored{0},
      shadows_discarded{0}, writes{0}, workflows_live{0}, coalesced{0}, runs_evicted{0},
      runs_expired{0}, fills_running{0}, runs_refused{0}, emissions{0}, fills_outrun{0},
      fills_emitted{0}, draft_samples{0}, fills_promoted{0}, fills_requeued{0};
  // Tagged calls passed through because their tags named nothing loaded (run/misdirected.hpp).
  std::atomic<std::uint64_t> tags_no_workflow{0}, tags_unknown_workflow{0}, tags_no_run_id{0},
      tags_unknown_stage{0};
  std::atomic<std::uint64_t> next_id{1};  // branch and fill ids, unique in the process
  // Engine time: of results served without execution, of fills nobody consumed, and (part of
  // the latter) of fill requests that ended without a result (failed, or cancelled midway).
  std::atomic<std::int64_t> saved_us{0}, wasted_us{0}, unfinished_us{0};
  std::atomic<std::int64_t> drafting_us{0};  // engine time of drafter samples that answered
};

class StatsBoard;

// Counts a misdirected call and tells RuntimeConfig::on_misdirected of each kind of them once:
// per reason, workflow and stage, for the first kMaxKinds kinds, so that a client sending ever
// new names cannot flood the log (the counters count every call). Thread-safe.
class MisdirectedNotices {
 public:
  static constexpr std::size_t kMaxKinds = RuntimeConfig::kMisdirectedKindsTold;
  MisdirectedNotices(std::shared_ptr<Counters> counters,
                     std::function<void(const nlohmann::json&)> hear)
      : counters_(std::move(counters)), hear_(std::move(hear)) {}
  void notice(const run::Misdirected& m);

 private:
  std::shared_ptr<Counters> counters_;
  std::function<void(const nlohmann::json&)> hear_;
  std::mutex mutex_;
  std::set<std::string> told_;
};

// The journals of ended workflow runs, for `dynrt explain`: bounded by count (the oldest go
// first) and by age. Thread-safe: workflow actors keep, Runtime::explain() reads.
class RunRecords {
 public:
  RunRecords(std::size_t max_runs, Duration keep) : max_(max_runs), keep_(keep) {}
  // The journal is kept as it is and turned into JSON only when read: most are never read.
  struct Run {
    std::shared_ptr<const run::RunJournal> journal;
    std::string workflow;
    std::string id;
  };
  void keep(const std::string& key, Run run, TimePoint now);
  std::optional<nlohmann::json> find(const std::string& key, TimePoint now) const;

 private:
  struct Kept {
    std::string key;
    Run run;
    TimePoint until;
  };
  mutable std::mutex mutex_;
  std::size_t max_;
  Duration keep_;
  std::list<Kept> runs_;  // oldest first
  std::unordered_map<std::string, std::list<Kept>::iterator> index_;
};

// Whether the graph still stands: a deadline that comes due after shutdown posts nothing (the
// actor system it would post into is being destroyed). Thread-safe.
class LifeGate {
 public:
  // Runs `f` if the graph stands, holding it standing meanwhile.
  template <class F>
  void run_if_open(F&& f) const {
    std::shared_lock lock(mutex_);
    if (open_) f();
  }
  void close() {
    std::unique_lock lock(mutex_);
    open_ = false;
  }

 private:
  mutable std::shared_mutex mutex_;
  bool open_ = true;
};

// Handles every workflow, branch and fill actor uses.
struct Services {
  caf::actor csl;
  caf::actor pricing;
  engines::Router router;                 // which engine (or the tools) runs a call
  std::vector<caf::actor> engine_actors;  // by the router's engine index
  caf::actor tools;                       // tool calls (may be invalid: no tools)
  std::shared_ptr<Counters> counters;
  std::shared_ptr<StatsBoard> board;
  std::shared_ptr<TimeService> time;  // the graph's clock and deadlines
  std::shared_ptr<LifeGate> life;
  std::shared_ptr<RunRecords> records;  // ended runs' journals (`dynrt explain`)
  std::function<void(const nlohmann::json&)> on_near_miss;  // RuntimeConfig::on_near_miss
  std::shared_ptr<MisdirectedNotices> misdirected;          // RuntimeConfig::on_misdirected
  Policy policy;

  // The actor that runs `endpoint` with `body` (a model's engine, or the tools).
  caf::actor executor_for(const std::string& endpoint, const nlohmann::json& body) const;

  // Sends `msg...` to `to` at `at`, unless the graph has stopped by then.
  template <class... Ts>
  TimeService::Token post_at(TimePoint at, const caf::actor& to, Ts... msg) const {
    return time->arm(at, [life = life, to = caf::actor_addr(to.address()), msg...] {
      life->run_if_open([&] {
        if (auto a = caf::actor_cast<caf::actor>(to)) caf::anon_send(a, msg...);
      });
    });
  }
};
using ServicesPtr = std::shared_ptr<const Services>;

// Counts an answer by how it was served, a fill by how it finished (actors/stats.cpp, the one
// registry of counters).
void count_served(Counters& counters, Served how);
void count_finished(Counters& counters, branch::FillStatus status);
// Reads the live counters into `stats`.
void read_counters(const Counters& counters, RuntimeStats& stats);
// The labelled figures of the engines that are pools of replicas, appended to `out`.
void pool_metrics(const RuntimeStats& stats, std::vector<Metric>& out);
// The figures of recognition without tags, appended to `out` while any template recognizes.
void recognition_metrics(const RuntimeStats& stats, std::vector<Metric>& out);
// The answer to a call whose endpoint no engine or tool serves.
Reply no_executor_reply(const std::string& endpoint);

// -- engine -----------------------------------------------------------------------------------

struct Exec {
  std::string endpoint;
  nlohmann::json body;
  engines::RequestKind kind = engines::RequestKind::canonical;
  int priority = 0;
  std::string id;
  std::string tenant;   // whose work it is (EngineRequest::tenant)
  caf::actor reply_to;  // receives (engdone_atom, tag, ExecResultPtr)
  std::uint64_t tag = 0;
  std::shared_ptr<ReplySink> stream_to;  // chunks forwarded as they arrive
  std::shared_ptr<ReplySink> answer_to;  // pass-through: the final answer goes here directly
  std::shared_ptr<ReplySink> call;       // the call it runs for (a client's cancel aborts it)
  std::shared_ptr<Cancellation> cancel;  // speculative work: its owner's end aborts it
  std::shared_ptr<Promotion> promotion;  // a fill: raised to canonical priority when awaited
  // A deciding stage's run: reads the selection from the decode as it is emitted (the request
  // then asks its engine for progress when it does not stream).
  std::shared_ptr<EmissionWatch> watch;
};
using ExecPtr = std::shared_ptr<const Exec>;

// What the csl actor did with the shared tier (store/shared_tier.hpp), beside the tier's own
// statistics.
struct TierCounts {
  std::uint64_t imported = 0;       // entries another replica computed, brought in here
  std::uint64_t checks_failed = 0;  // local results refused: a record they read was written
  std::uint64_t remote_writes = 0;  // writes other replicas took, applied here
  std::uint64_t shared = 0;         // results written through to the tier
};

struct CslSnapshot {
  csl::Stats stats;
  std::size_t entries = 0;
  std::size_t shadows = 0;
  std::size_t bytes = 0;
  TierCounts tier;
};

// The shared tier's answer to one of the csl actor's requests, sent back to it from the tier's
// thread: `ok` (validate, write), `entry` (get).
struct TierAnswer {
  std::uint64_t id = 0;
  bool ok = false;
  std::optional<store::SharedEntry> entry;
};
using TierAnswerPtr = std::shared_ptr<const TierAnswer>;

// -- pricing ----------------------------------------------------------------------------------

struct GateReply {
  bool open = false;
  admission::GateReason reason{};
};

struct AdmitRequest {
  std::uint64_t branch = 0;
  std::string tenant;          // whose share of the fill budget the fills are charged to
  double fill_share = 1.0;     // ... and how large it is
  std::vector<Hashes> chains;  // per candidate, by rank: its chain's stage fingerprints
  int max_fills = 0;
  // Resolve on emission: the decider emitted candidates()[*emitted], which has no fill; admit
  // only it, at p = 1 (Controller::admit_emitted).
  std::optional<std::size_t> emitted;
};
using AdmitRequestPtr = std::shared_ptr<const AdmitRequest>;

struct AdmitReply {
  std::vector<std::pair<std::size_t, std::uint64_t>> admitted;  // (rank, reservation)
  std::vector<admission::Refusal> refused;                      // by rank (none: admitted)
};

struct PricingSnapshot {
  admission::AdmissionStats stats;
  double envelope = 0;
  int fills_in_flight = 0;
  double kv_reserved = 0;
  std::size_t open_branches = 0;
};

// The csl's and the pricing actor's numbers, published by each after every message that may
// change them, so that statistics are read from any thread without a round trip to a busy
// actor (a scrape never waits on the graph, and never holds an I/O thread).
class StatsBoard {
 public:
  void publish(const CslSnapshot& c) {
    std::lock_guard lock(mutex_);
    csl_ = c;
  }
  void publish(const PricingSnapshot& p) {
    std::lock_guard lock(mutex_);
    pricing_ = p;
  }
  std::pair<CslSnapshot, PricingSnapshot> read() const {
    std::lock_guard lock(mutex_);
    return {csl_, pricing_};
  }

 private:
  mutable std::mutex mutex_;
  CslSnapshot csl_;
  PricingSnapshot pricing_;
};

using FeedbackPtr = std::shared_ptr<const branch::Feedback>;

// A decision point resolved: the frequency predictor learns the selection; when `report`, the
// controller learns which admitted rank (if any) it was.
struct Resolution {
  std::uint64_t branch = 0;  // 0: no branch was open
  Hash128 coordinate;
  std::string selection;
  std::optional<std::size_t> rank;
  bool report = false;
};

// An answer to a caller outside the actor system, given at most once: if the message or the
// handler holding it is dropped unanswered (the graph stopped), the destructor answers with a
// default value, so the caller never waits for ever. Used for writes and statistics.
template <class T>
class Answer {
 public:
  explicit Answer(std::function<void(T)> f) : f_(std::move(f)) {}
  ~Answer() {
    if (!done_.exchange(true) && f_) f_(T{});
  }
  Answer(const Answer&) = delete;
  Answer& operator=(const Answer&) = delete;
  void operator()(T value) {
    if (!done_.exchange(true) && f_) f_(std::move(value));
  }

 private:
  std::function<void(T)> f_;
  std::atomic<bool> done_{false};
};

using WriteAnswerPtr = std::shared_ptr<Answer<WriteResult>>;
// The journals of the runs `dynrt explain` asked for, each as JSON.
using ExplainAnswerPtr = std::shared_ptr<Answer<std::vector<nlohmann::json>>>;
using PredictorContextPtr = std::shared_ptr<const PredictorContext>;

// -- workflow, branch, fill -------------------------------------------------------------------

// One call in flight.
struct Demand {
  std::uint64_t id = 0;
  Request request;
  std::shared_ptr<ReplySink> sink;
};
using DemandPtr = std::shared_ptr<Demand>;

struct BranchInit {
  std::uint64_t id = 0;
  GraphPtr graph;
  dsl::DecisionId decision = dsl::kNoId;
  dsl::Bindings bindings;  // the run's variables when the decision point was reached
  Producers producers;
  std::shared_ptr<const nlohmann::json> source_output;  // extract: the source stage's output
  std::string run;  // the key of the run that reached the decision point (tenant, workflow, id)
  Caller caller;    // whose call started the run: its tenant owns the branch and its fills
  caf::actor workflow;
  ServicesPtr services;
};
using BranchInitPtr = std::shared_ptr<const BranchInit>;

struct FillInit {
  std::uint64_t id = 0;
  std::uint64_t branch = 0;
  std::size_t rank = 0;
  std::string candidate;
  GraphPtr graph;
  dsl::DecisionId decision = dsl::kNoId;
  std::vector<dsl::StageId> chain;
  dsl::Bindings bindings;  // with the decision's variable set to the candidate
  Producers producers;
  std::string run;  // the key of the run whose branch admitted it
  Caller caller;    // whose call started that run
  caf::actor workflow;
  caf::actor branch_actor;
  ServicesPtr services;
  // Started for a selection its decider already emitted: it runs at canonical priority, as the
  // call it anticipates by a moment would, so that call's wait for it is never behind fills.
  bool emitted = false;
};
using FillInitPtr = std::shared_ptr<const FillInit>;
using BranchNotePtr = std::shared_ptr<const run::BranchNote>;
using FillRenderPtr = std::shared_ptr<const run::FillRender>;

}  // namespace dynrt::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::Hash128)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::csl::EntryRef)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::csl::InsertResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ServicesPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ExecPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ExecResultPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ServeReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ServeQuery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::run::CostSample)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::branch::Outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::branch::FillStatus)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::Resolution)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ClaimReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::LandedPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::InsertPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ReadRefs)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::run::ReadSnapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::TierAnswerPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::WriteResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::EntryRefs)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::Hashes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::CslSnapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::GateReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::AdmitRequestPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::AdmitReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::PricingSnapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::FeedbackPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::WriteAnswerPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::PredictorContextPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::DemandPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::BranchInitPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::FillInitPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::BranchNotePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::FillRenderPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::ExplainAnswerPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(nlohmann::json)  // a run's journal, `dynrt explain`
