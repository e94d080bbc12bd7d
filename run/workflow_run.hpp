// The state of one workflow run, as the workflow actor owns it: the run's variables, which
// library entry produced each, the latest output of each stage, and its open branches. Pure
// (no CAF, no threads, no clock): the actor feeds it demands and completions and carries out
// the RunEffects it returns (abandon, open and resolve branches), so the lifecycle rules are
// tested without an actor system (tests/run/workflow_run_test.cpp).
//
// The rules:
//   - a demand binds the variables its stage's `bind` reads from the request;
//   - a user-window decision resolves when a demand binds its variable (the user's pick);
//   - a demand for a decode-window deciding stage opens that decision's branch before the stage
//     runs (the previous repetition's branch, if still open, is abandoned);
//   - a completion binds the stage's `outputs` (their producer is the stage's library entry),
//     resolves a decode-window decision from the stage's output (selected, ambiguous or
//     unreadable), and opens a user-window branch once every stage before the user's pick has
//     completed;
//   - with fills off, no branch opens, but a readable selection is still reported (the
//     frequency predictor learns from every resolution).
#pragma once

#include "dsl/render.hpp"
#include "run/stage.hpp"
#include "runtime/branch/branch.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::run {

struct BranchOpen {
  dsl::DecisionId decision = dsl::kNoId;
  dsl::Bindings bindings;  // the variables when the decision point is reached
  Producers producers;
  std::shared_ptr<const nlohmann::json> source_output;  // extract: the source stage's output
  std::vector<dsl::StageId> chain;                      // what its fills run
};

struct BranchResolve {
  dsl::DecisionId decision = dsl::kNoId;
  branch::Outcome outcome = branch::Outcome::unreadable;
  std::string value;
  std::optional<std::uint64_t> branch;  // the open branch to tell, if there is one
};

struct RunEffects {
  std::vector<std::uint64_t> abandon;  // branches superseded by a new repetition
  std::vector<BranchResolve> resolve;  // selections, in order
  std::vector<BranchOpen> open;        // branches to open, after the above
};

class WorkflowRun {
 public:
  WorkflowRun(GraphPtr graph, bool fills);

  RunEffects demand(const dsl::Stage& stage, const nlohmann::json& body);
  RunEffects completed(const dsl::Stage& stage, std::string_view response, csl::EntryRef entry);

  // The actor opened the branch `opens` asked for, under `id`.
  void opened(const BranchOpen& open, std::uint64_t id);
  void settled(std::uint64_t id);
  // A demand for `stage` was answered: the resolved branches whose fill chain it judges learn
  // whether their fill served it (once each). A chain is judged at its first stage, unless the
  // library or an identical execution already in flight answered that stage without the fill
  // (`cached`): C1 came first (Eq. 4 credits a fill only with what C1 left), so the verdict
  // moves to the next stage of the chain. ReAct's chain starts with a retrieve that later runs
  // find in the library; its fill's worth is in the read after it. When C1 answered the whole
  // chain, the verdict is not judged: the fill neither served nor missed.
  struct Verdict {
    std::uint64_t branch = 0;
    bool consumed = false;
    bool judged = true;
    friend bool operator==(const Verdict&, const Verdict&) = default;
  };
  std::vector<Verdict> demanded(const dsl::Stage& stage, bool from_fill, std::uint64_t fill_branch,
                                bool cached = false);
  // The open branch that a selection `decision`'s decider emits goes to: while it is unresolved,
  // for a decode window with exclusive promotion (independent candidates all stay eligible).
  std::optional<std::uint64_t> emission_target(dsl::DecisionId decision) const;
  // Branches still open (for the actor to abandon when the run ends).
  std::vector<std::uint64_t> open_branches() const;

  // The record keys a canonical execution of `stage` reads, rendered; nullopt if one does not
  // render (the result is then not stored: its read-set is unknown).
  std::optional<std::vector<std::string>> read_keys(const dsl::Stage& stage) const;
  // The same for the demand `body`: nullopt also when the stage reads records and `body` is
  // not what the template renders from the run's variables, because the keys rendered from
  // those variables would then not be the records this request reads.
  std::optional<std::vector<std::string>> read_keys(const dsl::Stage& stage,
                                                    std::string_view endpoint,
                                                    const nlohmann::json& body) const;
  // The record keys a canonical execution of `stage` writes (its `writes`), rendered.
  std::optional<std::vector<std::string>> write_keys(const dsl::Stage& stage) const;
  // The entries whose outputs rendered `stage`'s input.
  EntryRefs producers_of(const dsl::Stage& stage) const {
    return run::producers_of(stage, producers_);
  }
  const dsl::TemplateGraph& graph() const { return *graph_; }

  const dsl::Bindings& vars() const { return vars_; }
  const Producers& producers() const { return producers_; }

 private:
  struct Open {
    std::uint64_t id = 0;
    bool resolved = false;
    bool demanded = false;
    std::vector<dsl::StageId> chain;  // what its fills run
    std::size_t judged_at = 0;        // the chain stage whose demand judges them
  };
  void resolve(const dsl::Decision& d, branch::Outcome outcome, std::string value, RunEffects& fx);
  void open(const dsl::Decision& d, RunEffects& fx);

  GraphPtr graph_;
  bool fills_;
  dsl::Bindings vars_;
  Producers producers_;
  std::map<dsl::StageId, std::shared_ptr<const nlohmann::json>> latest_;
  std::map<dsl::DecisionId, Open> branches_;
};

}  // namespace dynrt::run
