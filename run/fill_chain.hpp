// The lifecycle of one admitted fill (paper section 3.3, Figure 6 step 3), as the fill actor
// owns it. Pure (no CAF, no threads): the actor feeds it the library's and the engine's answers
// and carries out the FillEffects it returns, in order. Tested without an actor system
// (tests/run/fill_chain_test.cpp).
//
// For each stage of the decision's speculable chain, with the candidate bound:
//
//   render ─► announce its name ─► probe the library ──hit─► bind its outputs, next stage
//     │(first stage unrenderable: failed;           └miss─► snapshot the read-set ─► execute at
//     │ a later one: the chain ends, done)                  fill priority ─► store the shadow
//     │                                                     ─► the branch keeps it ─► next stage
//     └ (reuse off) ─► snapshot ─► execute ─► ...
//
// The next stage is announced before the current one's shadow is stored, so that a demand
// answered from the current stage (its caller then sends the next stage's demand) finds the next
// stage's fill running and waits for it instead of racing it to the engine. A cancel ends the chain
// at once unless a library call is in flight (a shadow it stores must be discarded first). Anything
// abnormal ends it too: a miss, never a wrong answer.
#pragma once

#include "dsl/render.hpp"
#include "run/results.hpp"
#include "run/stage.hpp"
#include "runtime/branch/branch.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace dynrt::run {

namespace fill {

// The workflow learns that this fill computes the stage result `name` (a demand may wait).
struct Announce {
  Hash128 name;
  dsl::StageId stage = dsl::kNoId;
  std::shared_ptr<const nlohmann::json> body;  // the request it rendered (for `dynrt explain`)
};
// ... and that it no longer does (`stored`: its shadow is in the library).
struct Ended {
  Hash128 name;
  bool stored = false;
};
// Probe the library for a confirmed result; answer with FillChain::served.
struct Probe {
  Hash128 name;
  ServeQuery query;
};
// Snapshot the versions of the records it reads; answer with FillChain::snapshotted.
struct Snapshot {
  Strings records;
};
// Run the rendered request at fill priority; answer with FillChain::executed(tag, ...), or
// FillChain::unroutable when nothing serves its endpoint.
struct Execute {
  std::uint64_t tag = 0;
  std::string endpoint;
  nlohmann::json body;
};
// Store the result as a shadow; answer with FillChain::stored.
struct Store {
  InsertPtr insert;
};
// A shadow was stored: the branch decides whether it may stay.
struct Kept {
  csl::EntryRef ref;
};
// Discard a shadow stored after the cancel.
struct Drop {
  csl::EntryRef ref;
};
// The first stage was already in the library: the fill ran nothing for it.
struct Suppressed {};
struct Cost {
  CostSample sample;
};
// The fill is over; its engine time is what it cost.
struct Finish {
  branch::FillStatus status = branch::FillStatus::failed;
  Duration engine_time{0};
};

}  // namespace fill

using FillEffect =
    std::variant<fill::Announce, fill::Ended, fill::Probe, fill::Snapshot, fill::Execute,
                 fill::Store, fill::Kept, fill::Drop, fill::Suppressed, fill::Cost, fill::Finish>;
using FillEffects = std::vector<FillEffect>;

class FillChain {
 public:
  struct Config {
    std::uint64_t id = 0;      // the fill
    std::uint64_t branch = 0;  // the branch that admitted it
    GraphPtr graph;
    std::vector<dsl::StageId> chain;
    dsl::Bindings bindings;  // with the decision's variable set to the candidate
    Producers producers;
    Policy policy;
    Caller caller;    // whose call started the run
    std::string run;  // the run's key
  };
  explicit FillChain(Config config);

  FillEffects start();
  // The library answered a Probe, a Snapshot or a Store (nullopt: it did not answer).
  FillEffects served(const std::optional<ServeReply>& reply);
  FillEffects snapshotted(std::optional<ReadSnapshot> snapshot);
  FillEffects stored(const std::optional<csl::InsertResult>& result);
  FillEffects executed(std::uint64_t tag, const ExecResult& result);
  FillEffects unroutable();
  FillEffects cancel();

  bool finished() const { return finished_; }
  std::size_t step() const { return step_; }
  std::uint64_t tag() const { return tag_; }  // the engine request out (Execute::tag)

 private:
  const dsl::Stage& stage() const { return config_.graph->stages[config_.chain[step_]]; }
  void next_stage(FillEffects& fx);
  void run_on_engine(FillEffects& fx);
  void announce_next(const std::string& bytes, FillEffects& fx);
  // The current stage's outputs in its result `bytes`; nullopt when they do not read.
  std::optional<dsl::Bindings> outputs(const std::string& bytes) const;
  Hash128 name_of(const dsl::Stage& s, const dsl::RenderedRequest& request) const;
  void advance(const std::string& bytes, csl::EntryRef ref, bool stored, FillEffects& fx);
  void finish(branch::FillStatus status, FillEffects& fx);

  Config config_;
  dsl::Bindings vars_;
  Producers producers_;
  std::size_t step_ = 0;
  std::optional<dsl::RenderedRequest> request_;  // the current stage's
  std::optional<Hash128> announced_;             // the current stage's name, once announced
  std::optional<Hash128> next_;  // the next stage's, announced while the current one is stored
  ReadRefs reads_;
  csl::TierFence fence_;  // the shared tier's, when the current stage started
  InsertPtr insert_;      // the current stage's shadow, while it is stored
  std::uint64_t tag_ = 0;
  bool executing_ = false;  // an engine request is out
  bool busy_ = false;       // a library call is out; a cancel waits for it
  bool cancelled_ = false;
  bool finished_ = false;
  Duration engine_time_{0};
};

}  // namespace dynrt::run
