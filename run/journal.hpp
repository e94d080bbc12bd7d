// What `dynrt explain` says of one workflow run: every call in order with how it was served,
// and for each call that neither a fill nor the library answered, why not — down to the JSON
// paths where the request differed from what a fill (or the template) rendered for it.
//
// The workflow actor owns one per run and feeds it: the calls as they arrive and are answered,
// each fill's rendered requests, and each branch's latest state (its gate, the admission of each
// candidate, its fills, its resolution). A call's explanation is made when it is answered, from
// what the run had seen by then, so the bodies it compares are not kept past their use. Pure
// (no CAF, no threads, no clock: times come in as arguments) and bounded: at most
// Limits::calls calls, Limits::branches branches and Limits::renders rendered requests per
// stage are kept; older ones are dropped and counted.
//
// The reasons (MissReason), in the order they are tried:
//   not_reusable    the stage's results are never reused (not speculable, or it writes)
//   fill_running    the fill computing this exact request was still running after wait_ms
//   fill_failed     ... had failed (an engine error, an unrenderable stage): a miss, no harm
//   fill_cancelled  ... was cancelled (its candidate lost, or the branch was unusable)
//   fill_discarded  ... had stored its result, which was gone by the call (discarded with its
//                   branch, expired, or invalidated by a write)
//   body_differed   fills rendered this stage, but not this request: `diff` has the paths
//   not_downstream  no decision's fill chain reaches the stage
//   no_branch       no branch of the decision upstream was open when the call came
//   no_candidates   the branch's predictor proposed nothing
//   not_admitted    the generation gate kept the branch closed, or the fill gate left the
//                   selected candidate out (`by` says which gate, and why)
//   unpredicted     the selection was none of the candidates
//   unresolved      the selection was unreadable or ambiguous, or not known yet
//   unknown_stage   the workflow has no stage of that name: the call passed through
// A call served by the engine whose body also differs from what the template renders from the
// run's variables carries that diff too (`template_diff`): even an admitted fill would miss it.
#pragma once

#include "dsl/render.hpp"
#include "run/call.hpp"
#include "run/stage.hpp"
#include "runtime/admission/controller.hpp"
#include "runtime/branch/branch.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dynrt::run {

// One path where two request bodies differ; an absent side is nullopt.
struct DiffEntry {
  std::string path;  // JSON pointer
  std::optional<nlohmann::json> expected;
  std::optional<nlohmann::json> sent;
};
// Where `sent` differs from `expected`, leaf by leaf (arrays index by index), leaving out the
// top-level fields that never change a reuse name (stream, user, ...). At most `limit` entries.
std::vector<DiffEntry> request_diff(const nlohmann::json& expected, const nlohmann::json& sent,
                                    std::size_t limit = 32);

enum class MissReason {
  not_reusable,
  fill_running,
  fill_failed,
  fill_cancelled,
  fill_discarded,
  body_differed,
  not_downstream,
  no_branch,
  no_candidates,
  not_admitted,
  unpredicted,
  unresolved,
  unknown_stage,
};
std::string_view to_string(MissReason r);

struct Why {
  MissReason reason = MissReason::not_downstream;
  std::string detail;                    // one sentence for a person
  std::string by;                        // not_admitted: "generation gate" or "fill gate"
  std::string refusal;                   // ... and its reason
  std::string compared_with;             // body_differed: what `diff` compares the call with
  std::vector<DiffEntry> diff;           // body_differed
  std::vector<DiffEntry> template_diff;  // the call against the template's rendering
};

// How a demand went, as the demand flow saw it (DemandFlow's Answer).
struct DemandTrace {
  Hash128 name;                 // the name it was served under (or would have been)
  bool reusable = false;        // the stage may be filled or served from the library
  bool waited_fill = false;     // it waited for a fill computing it
  bool wait_timed_out = false;  // ... past the bound
  double waited_ms = 0;
};

// A fill rendered a stage of its chain.
struct FillRender {
  std::uint64_t fill = 0;
  std::uint64_t branch = 0;
  std::string candidate;
  dsl::StageId stage = dsl::kNoId;
  Hash128 name;
  std::shared_ptr<const nlohmann::json> body;
};

// A branch's state as the branch actor last reported it.
struct BranchNote {
  enum class Gate { pending, open, closed };
  struct Candidate {
    std::string value;
    std::uint64_t fill = 0;  // 0: none admitted (see refused)
    std::optional<admission::Refusal> refused;
    branch::FillStatus status = branch::FillStatus::running;
  };
  std::uint64_t branch = 0;
  dsl::DecisionId decision = dsl::kNoId;
  Gate gate = Gate::pending;
  std::string gate_reason;
  bool proposed = false;
  std::vector<Candidate> candidates;
  branch::Outcome outcome = branch::Outcome::pending;
  std::string selection;
};

class RunJournal {
 public:
  struct Limits {
    std::size_t calls = 256;
    std::size_t branches = 64;
    std::size_t renders = 8;  // per stage
  };
  RunJournal(GraphPtr graph, const Policy& policy, Limits limits);
  RunJournal(GraphPtr graph, const Policy& policy) : RunJournal(std::move(graph), policy, {}) {}

  // A call arrived at `at_ms` (the run's time); `stage` may be unknown to the template.
  void arrived(std::uint64_t call, const std::string& stage, const std::string& endpoint,
               double at_ms);
  // The call was answered. `vars` are the run's variables then (for the template's rendering).
  void answered(std::uint64_t call, const dsl::Stage& stage, const nlohmann::json& body,
                Served served, int status, const DemandTrace& trace, const dsl::Bindings& vars,
                double at_ms);
  // A call passed through to its engine: a user stage's, or (`unknown`) one for a stage the
  // template does not have.
  void passed(std::uint64_t call, bool unknown);
  void rendered(FillRender render);
  void fill_finished(std::uint64_t fill, branch::FillStatus status);
  // The branch's latest state (it replaces the earlier one; its fills' statuses are noted).
  void branch(BranchNote note);

  // The last call answered, and its explanation (for a near-miss log line).
  struct Call {
    std::uint64_t seq = 0;
    std::string stage;
    std::string endpoint;
    std::optional<Served> served;  // nullopt: not answered yet
    int status = 0;
    double at_ms = 0;
    double latency_ms = 0;
    double waited_ms = 0;
    bool waited = false;  // it waited for a fill computing it
    std::optional<Why> why;
  };
  const Call* call(std::uint64_t call) const;

  nlohmann::json to_json() const;

 private:
  Why explain(const dsl::Stage& stage, const nlohmann::json& body, const DemandTrace& trace,
              const dsl::Bindings& vars) const;
  const BranchNote* latest_branch(dsl::DecisionId decision) const;
  // The decisions whose fill chains reach `stage` (null: none), the latest branch of any of
  // them, and the words for a selection that was none of a branch's candidates.
  const std::vector<dsl::DecisionId>* reaching(const dsl::Stage& stage) const;
  const BranchNote* latest_of(const std::vector<dsl::DecisionId>& decisions) const;
  std::string unpredicted(const BranchNote& note) const;

  GraphPtr graph_;
  Limits limits_;
  // stage -> the decisions whose fill chains reach it; worked out the first time a call needs a
  // reason (a run served from fills and the library never does)
  mutable std::optional<std::map<dsl::StageId, std::vector<dsl::DecisionId>>> reached_by_;
  int fill_depth_ = 0;
  std::vector<Call> calls_;  // vectors: a run's journal is small, and most runs are short
  std::map<std::uint64_t, std::size_t> call_seq_;  // call id -> its seq (for answered())
  std::uint64_t next_seq_ = 1;
  std::uint64_t calls_dropped_ = 0;
  std::map<dsl::StageId, std::vector<FillRender>> renders_;
  std::map<std::uint64_t, branch::FillStatus> fill_status_;
  std::vector<BranchNote> branches_;  // in the order they were first reported
  std::uint64_t branches_dropped_ = 0;
};

}  // namespace dynrt::run
