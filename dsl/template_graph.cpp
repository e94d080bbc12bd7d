#include "dsl/template_graph.hpp"

#include "runtime/endpoints.hpp"

namespace dynrt::dsl {

namespace {

template <class T>
const T* find_by_name(const std::vector<T>& items, std::string_view name) {
  for (const T& item : items) {
    if (item.name == name) return &item;
  }
  return nullptr;
}

}  // namespace

std::string_view to_string(StageKind k) {
  switch (k) {
    case StageKind::model:
      return "model";
    case StageKind::tool:
      return "tool";
    case StageKind::user:
      return "user";
  }
  return "model";
}
std::string_view to_string(ModelApi a) {
  switch (a) {
    case ModelApi::chat:
      return "chat";
    case ModelApi::completions:
      return "completions";
    case ModelApi::messages:
      return "messages";
    case ModelApi::responses:
      return "responses";
  }
  return "chat";
}
std::string_view to_string(Window w) {
  return w == Window::decode ? "decode" : "user";
}
std::string_view to_string(Promotion p) {
  return p == Promotion::exclusive ? "exclusive" : "independent";
}
std::string_view to_string(Share s) {
  return s == Share::tenant ? "tenant" : "global";
}
std::string_view to_string(CandidateSourceKind k) {
  switch (k) {
    case CandidateSourceKind::static_list:
      return "static";
    case CandidateSourceKind::learned:
      return "learned";
    case CandidateSourceKind::extract:
      return "extract";
    case CandidateSourceKind::drafter:
      return "drafter";
  }
  return "static";
}

std::string Stage::endpoint() const {
  switch (kind) {
    case StageKind::model:
      return api == ModelApi::completions ? "/v1/completions" : "/v1/chat/completions";
    case StageKind::tool:
      return std::string(kToolPrefix) + tool;
    case StageKind::user:
      break;
  }
  return {};
}

std::string Stage::route() const {
  if (kind == StageKind::model && api == ModelApi::messages) return "/v1/messages";
  if (kind == StageKind::model && api == ModelApi::responses) return "/v1/responses";
  return endpoint();
}

const Stage* TemplateGraph::stage(std::string_view name) const {
  return find_by_name(stages, name);
}
const Decision* TemplateGraph::decision(std::string_view name) const {
  return find_by_name(decisions, name);
}
const Loop* TemplateGraph::loop(std::string_view name) const {
  return find_by_name(loops, name);
}

}  // namespace dynrt::dsl
