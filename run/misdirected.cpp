#include "run/misdirected.hpp"

#include "dsl/suggest.hpp"

#include <algorithm>

namespace dynrt::run {
namespace {

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// "'a', 'b' and 'c'"; past kMaxListed names, "'a', ..., 'j' and 5 more".
std::string listed(const std::vector<std::string>& names) {
  constexpr std::size_t kMaxListed = 10;
  const std::size_t shown = std::min(names.size(), kMaxListed);
  const std::size_t more = names.size() - shown;
  std::string out;
  for (std::size_t i = 0; i < shown; ++i) {
    if (i > 0) out += i + 1 == shown && more == 0 ? " and " : ", ";
    out += quoted(names[i]);
  }
  if (more > 0) out += " and " + std::to_string(more) + " more";
  return out;
}

std::string suggestion(const std::string& word, const std::vector<std::string>& names) {
  if (const auto s = dsl::closest(word, names)) return "; did you mean " + quoted(*s) + "?";
  return "";
}

}  // namespace

std::optional<Misdirected> misdirected_call(const Tags& tags,
                                            const std::vector<std::string>& workflows,
                                            bool workflow_loaded) {
  if (tags.empty()) return std::nullopt;
  Misdirected m;
  m.workflow = tags.workflow;
  m.stage = tags.stage;
  if (tags.workflow.empty()) {
    m.reason = "no_workflow";
    m.detail = std::string("a call tagged ") +
               (tags.workflow_id.empty() ? "X-DynRT-Stage" : "X-DynRT-Workflow-Id") +
               " without X-DynRT-Workflow passed through unchanged: tag each call with its "
               "workflow, its run's id and its stage";
  } else if (!workflow_loaded) {
    m.reason = "unknown_workflow";
    m.detail = "a call tagged X-DynRT-Workflow " + quoted(tags.workflow) +
               " passed through unchanged: no loaded template defines that workflow" +
               (workflows.empty() ? std::string(" (none is loaded)")
                                  : " (loaded: " + listed(workflows) + ")") +
               suggestion(tags.workflow, workflows);
  } else if (tags.workflow_id.empty()) {
    m.reason = "no_workflow_id";
    m.detail = "a call of workflow " + quoted(tags.workflow) +
               " passed through unchanged: it has no X-DynRT-Workflow-Id, and only the calls "
               "of one run, tagged with the run's id, get fills and reuse";
  } else {
    return std::nullopt;  // the call is claimed
  }
  return m;
}

std::optional<Misdirected> misdirected_stage(const Tags& tags, const dsl::TemplateGraph& graph) {
  if (graph.stage(tags.stage)) return std::nullopt;
  std::vector<std::string> stages;
  for (const auto& s : graph.stages)
    stages.push_back(s.name);
  Misdirected m;
  m.reason = "unknown_stage";
  m.workflow = tags.workflow;
  m.stage = tags.stage;
  m.detail =
      tags.stage.empty()
          ? "a call of workflow " + quoted(graph.workflow) +
                " without X-DynRT-Stage passed through unchanged (its stages: " + listed(stages) +
                ")"
          : "a call tagged X-DynRT-Stage " + quoted(tags.stage) + " of workflow " +
                quoted(graph.workflow) +
                " passed through unchanged: the workflow has no stage of that name (its "
                "stages: " +
                listed(stages) + ")" + suggestion(tags.stage, stages);
  return m;
}

}  // namespace dynrt::run
