// The lifecycle of every demand (one call for a stage of a workflow run), as the workflow actor
// owns it. Pure (no CAF, no threads; time from the injected Clock): the actor feeds it events
// (the library's answers, an execution's result, a fill's start and end, a wait's deadline)
// and carries out the DemandEffects it returns, in order. Tested without an actor system
// (tests/run/demand_flow_test.cpp).
//
// One demand goes:
//
//   start ──► probe the library ──hit──────────────────────────────────────► answer (fill/cache)
//     │            │miss, its fill running ──► wait (bounded; the fill is promoted to canonical
//     │            │                                priority) ──fill ended─► probe again (no wait)
//     │            │                                │fill failed ─► execute
//     │            │                                └deadline ─► execute, still waiting (hedged):
//     │            │                                   the first of the two answers, the other
//     │            │                                   is cancelled
//     │            └miss ─► execute
//     └ (not reusable, or C1 and C2 off) ─► execute
//
//   execute ──(reusable, reuse on, read-set renders)──► claim ──hit──────► answer (cache)
//     │                                                   │join ─► wait for the leader ─► its
//     │                                                   │       answer (cache), or claim again
//     │                                                   └lead/alone ─► run
//     └──────────────────────────────────────────────────────────────────► run
//
//   run ──► executed ──error──────────────────────────────► land the error ─► answer
//               ├ not stored (not reusable, non-200, abnormal) ─► writes in force ─► answer
//               └ stored ─► store (or land with the insert) ─► answer
//
// and after every answer: the run learns the stage's response (variables, branches resolved and
// opened) and the resolved branches learn whether their fill served it.
#pragma once

#include "run/journal.hpp"
#include "run/results.hpp"
#include "run/stage.hpp"
#include "run/workflow_run.hpp"
#include "runtime/clock.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace dynrt::run {

using DemandId = std::uint64_t;

namespace demand {

// Probe the library (ServeQuery) for `name`; answer with DemandFlow::served.
struct Probe {
  DemandId id = 0;
  Hash128 name;
  ServeQuery query;
};
// Claim a miss of a reusable stage: served if stored meanwhile, else lead, join or run alone;
// answer with DemandFlow::claimed.
struct Claim {
  DemandId id = 0;
  Hash128 name;
  Strings records;  // the record keys it reads, scoped to the caller
  EntryRefs producers;
  bool may_join = true;
};
// Run the demand's own request on its engine or tool; answer with DemandFlow::executed (or
// DemandFlow::refused when nothing serves its endpoint). `loads_engine`: it occupies a model
// engine's decode slot (a tool call does not).
struct Execute {
  DemandId id = 0;
  bool loads_engine = true;
};
// A canonical request ended on a model engine: the pricing actor's count goes down.
struct Unload {};
// A demand now waits for this fill: raise its engine requests to canonical priority, so that a
// fill still queued at fill priority does not hold the call behind every canonical arrival.
struct Promote {
  std::uint64_t fill = 0;
};
// Abort the demand's own execution: the fill it still waited for answered it first. Its end
// still comes to DemandFlow::executed (as a cancellation, or a result that is dropped).
struct Cancel {
  DemandId id = 0;
};
// Store the result as a confirmed entry; when `execution` is set, land that led execution with
// `landed` in the same step (its waiters are answered from it). Answer with DemandFlow::stored.
struct Store {
  DemandId id = 0;
  InsertPtr insert;
  std::uint64_t execution = 0;
  LandedPtr landed;
};
// A led execution ended without a result to store: its waiters get `landed`.
struct Land {
  std::uint64_t execution = 0;
  LandedPtr landed;
};
// A joined waiter gives up on the leader (its own bound passed).
struct Leave {
  std::uint64_t execution = 0;
  csl::Ticket ticket = 0;
};
// Put the records a stage wrote in force; answer with DemandFlow::written.
struct Write {
  DemandId id = 0;
  Strings records;
};
// Answer the call. The demand is forgotten; `trace` is how it went (for `dynrt explain`).
struct Answer {
  DemandId id = 0;
  Reply reply;
  DemandTrace trace;
};
// What the run's state says to do with branches after a demand or a completion.
struct Branches {
  RunEffects effects;
};
// A resolved branch learns whether its fill served its first stage's demand.
struct Demanded {
  std::uint64_t branch = 0;
  bool consumed = false;
  double saved_ms = 0;
  double waited_ms = 0;
  bool judged = true;  // false: C1 answered the branch's whole chain; nothing to learn
};
// A later stage of a branch's fill chain was served: the branch's return grows by what that
// saved (Controller::credit).
struct Credit {
  std::uint64_t branch = 0;
  double saved_ms = 0;   // the stage's execution
  double waited_ms = 0;  // what its demand waited for the fill
};
// Tell DemandFlow::wait_over(id, wait) at `at`.
struct ArmWait {
  DemandId id = 0;
  std::uint64_t wait = 0;
  TimePoint at{};
};
// An execution's cost, for the cost model.
struct Cost {
  CostSample sample;
};

}  // namespace demand

using DemandEffect = std::variant<demand::Probe, demand::Claim, demand::Execute, demand::Unload,
                                  demand::Promote, demand::Cancel, demand::Store, demand::Land,
                                  demand::Leave, demand::Write, demand::Answer, demand::Branches,
                                  demand::Demanded, demand::Credit, demand::ArmWait, demand::Cost>;
using DemandEffects = std::vector<DemandEffect>;

// What the flow counted since the last take_tally().
struct DemandTally {
  std::uint64_t waits = 0;          // demands that waited for an in-flight fill
  std::uint64_t wait_timeouts = 0;  // ... and ran themselves after the bound
  std::uint64_t hedge_fills = 0;    // ... and were then answered by the fill all the same
  std::uint64_t coalesced = 0;      // demands that joined an identical execution in flight
  Duration saved{0};                // engine time of results served without execution
};

class DemandFlow {
 public:
  struct Config {
    Policy policy;
    Caller caller;    // whose call started the run
    std::string run;  // the run's key (tenant, workflow, id)
  };
  DemandFlow(WorkflowRun& run, const Clock& clock, Config config);

  // A demand for `stage` arrived with its request (`body` is kept until it is answered).
  // `wire`: the request as its caller sent it when the gateway translated it from another
  // protocol (null otherwise); a stage written in that protocol binds from it.
  DemandEffects start(DemandId id, const dsl::Stage& stage, std::string endpoint,
                      std::shared_ptr<const nlohmann::json> body,
                      const nlohmann::json& wire = nullptr);
  // The library answered a Probe (nullopt: it did not answer).
  DemandEffects served(DemandId id, const std::optional<ServeReply>& reply);
  // The library answered a Claim (nullopt: it did not answer; the demand runs unstored).
  DemandEffects claimed(DemandId id, std::optional<ClaimReply> reply);
  // Nothing serves the demand's endpoint: it is answered with `reply`.
  DemandEffects refused(DemandId id, Reply reply);
  DemandEffects executed(DemandId id, const ExecResult& result);
  // The library answered a Store (nullopt: it did not answer).
  DemandEffects stored(DemandId id, const std::optional<csl::InsertResult>& result);
  DemandEffects written(DemandId id);
  // The execution this demand joined ended.
  DemandEffects landed(DemandId id, const Landed& landed);
  // A fill started computing the stage result named `name`, or ended (`stored`: its shadow is
  // in the library).
  DemandEffects fill_started(const Hash128& name, std::uint64_t fill);
  DemandEffects fill_ended(const Hash128& name, std::uint64_t fill, bool stored);
  // A wait's deadline (stale ones are ignored). Past the bound a demand runs itself; one that
  // waited for a fill, and does not stream, keeps waiting for it too: a fill slowed by load is
  // usually nearer its end than a fresh run, and giving it up would pay the wait and a whole
  // run. Whichever ends first answers; the other is cancelled (Cancel) or dropped.
  DemandEffects wait_over(DemandId id, std::uint64_t wait);

  // Nothing pending, and no cancelled execution still to come back.
  bool idle() const { return pending_.empty() && abandoned_.empty(); }
  DemandTally take_tally() { return std::exchange(tally_, {}); }

 private:
  struct Pending {
    dsl::StageId stage = dsl::kNoId;
    std::string endpoint;
    std::shared_ptr<const nlohmann::json> body;
    Hash128 name;
    bool may_wait = false;  // a probe in flight may wait for the stage's running fill
    bool store = false;     // a canonical result is kept for reuse
    ReadRefs reads;
    csl::TierFence fence;                    // the shared tier's, when its execution started
    std::optional<TimePoint> waiting_since;  // waiting for a fill or a leader
    std::uint64_t wait = 0;                  // the current wait's number, for its deadline
    double waited_ms = 0;
    std::uint64_t execution = 0;  // the coalesced execution this demand leads
    std::uint64_t joined = 0;     // ... or waits for (with `ticket`)
    csl::Ticket ticket = 0;
    bool may_join = true;         // false once a wait for another's execution timed out
    bool streams = false;         // answered as a stream: its own execution cannot be swapped
    bool hedged = false;          // runs itself and still waits for the stage's fill
    bool waited_fill = false;     // it waited for the stage's fill
    bool wait_timed_out = false;  // ... past the bound
    bool racing = false;          // ... whose result is being probed for
    bool executing = false;       // an Execute is out, executed() has not come
    bool claiming = false;        // a Claim is out, claimed() has not come
    std::optional<Reply> answer;  // held until the stage's writes are in force
    std::shared_ptr<const std::string> response;  // what the run learns once it is answered
  };
  // A demand the fill answered while its own execution or claim was still out: what its end
  // must still undo.
  struct Abandoned {
    bool loads_engine = false;  // an Execute out on a model engine (Unload at its end)
    bool claiming = false;      // a Claim out (a lead it gets is landed for a retry)
  };
  struct FillInFlight {
    std::uint64_t fill = 0;
    std::vector<DemandId> waiters;
    bool promoted = false;  // a Promote went out for it
  };

  const dsl::Stage& stage_of(const Pending& p) const;
  void serve(DemandId id, Pending& p, bool may_wait, DemandEffects& fx);
  void execute(DemandId id, Pending& p, DemandEffects& fx);
  void run_itself(DemandId id, Pending& p, DemandEffects& fx);
  // The fill's result answers a hedged demand whose own execution is still out.
  void take_fill(DemandId id, Pending& p, const ServeReply& hit, DemandEffects& fx);
  void wait(DemandId id, Pending& p, std::chrono::milliseconds bound, DemandEffects& fx);
  void stop_waiting(DemandId id, Pending& p, DemandEffects& fx);
  // The demand is no longer among the waiters of its stage's fill.
  void leave_fill(DemandId id, const Pending& p);
  void land(Pending& p, Landed::Outcome outcome, const Reply& reply, DemandEffects& fx);
  void from_library(DemandId id, const ServeReply& hit, DemandEffects& fx);
  void answer(DemandId id, Reply reply, DemandEffects& fx);
  // After the answer: the run learns the response, the branches whether a fill served it.
  void completed(const dsl::Stage& stage, const std::string& response, csl::EntryRef ref,
                 bool from_fill, std::uint64_t fill_branch, double saved_ms, double waited_ms,
                 bool cached, DemandEffects& fx);

  WorkflowRun& run_;
  const Clock& clock_;
  Config config_;
  std::map<DemandId, Pending> pending_;
  std::unordered_map<Hash128, FillInFlight> fills_;  // by the name of the stage result
  std::unordered_map<DemandId, Abandoned> abandoned_;
  std::uint64_t next_wait_ = 1;
  DemandTally tally_;
};

}  // namespace dynrt::run
