// A tagged call whose tags dynrt cannot act on passes through to its engine unchanged, answered
// exactly as the engine answers it. That keeps a harness working when its tags are wrong, but
// it also hides the mistake: the run gets no fills and no reuse, and nothing fails. These say
// what was wrong, in words an operator can act on (the runtime counts them and tells its
// `on_misdirected` hook; `dynrt serve` logs each kind once).
#pragma once

#include "dsl/template_graph.hpp"
#include "run/call.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dynrt::run {

struct Misdirected {
  // no_workflow      X-DynRT-Workflow-Id or X-DynRT-Stage without X-DynRT-Workflow
  // unknown_workflow X-DynRT-Workflow names no loaded template
  // no_workflow_id   a loaded template's workflow without X-DynRT-Workflow-Id
  // unknown_stage    the workflow has no stage of that name (or the call named none)
  std::string reason;
  std::string workflow, stage;  // as the call tagged them
  std::string detail;           // one sentence: what was sent, what would be accepted
};

// Why a call that no template claims (its workflow is not loaded, or it has no run id) passed
// through, given the loaded workflows' names; nullopt for an untagged call.
std::optional<Misdirected> misdirected_call(const Tags& tags,
                                            const std::vector<std::string>& workflows,
                                            bool workflow_loaded);

// Why a call of `graph`'s run passed through for its stage tag; nullopt when the stage exists.
std::optional<Misdirected> misdirected_stage(const Tags& tags, const dsl::TemplateGraph& graph);

}  // namespace dynrt::run
