#include "actors/emission.hpp"

#include "actors/messages.hpp"
#include "dsl/render.hpp"
#include "runtime/json_text.hpp"

#include <caf/all.hpp>

namespace dynrt::actors {

EmissionWatch::EmissionWatch(std::shared_ptr<const dsl::TemplateGraph> graph,
                             dsl::DecisionId decision, bool chat, caf::actor workflow)
    : graph_(std::move(graph)),
      decision_(decision),
      decoded_(chat),
      workflow_(std::move(workflow)) {}

namespace {

// Whether a chunk carries decoded output: text, or a tool call's arguments.
bool decodes(const nlohmann::json& chunk) {
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return false;
  const auto& c = choices->front();
  if (const auto t = c.find("text"); t != c.end() && t->is_string() && !t->empty()) return true;
  const auto delta = c.find("delta");
  if (delta == c.end() || !delta->is_object()) return false;
  if (const auto t = delta->find("content"); t != delta->end() && t->is_string() && !t->empty())
    return true;
  return delta->contains("tool_calls") || delta->contains("function_call");
}

}  // namespace

void EmissionWatch::feed(std::string_view chunk) {
  if (done_) return;
  const auto doc = parse_json(chunk);
  if (!doc.is_object()) return;
  if (fired_) {
    // The decode goes on past the pick: the selected candidate's work may start now. (A pick
    // in the last chunk gains nothing from starting it: the caller's call is a moment away.)
    if (!decodes(doc)) return;
    done_ = true;
    caf::anon_send(workflow_, emitted_atom::value, static_cast<std::uint64_t>(decision_),
                   std::move(selection_), true);
    workflow_ = nullptr;  // the engine may keep its sink, and this, a while
    return;
  }
  decoded_.add(doc);
  // A selection can only have become readable with a line break, a quote (closing a JSON
  // string) or a tool call's name in this chunk: skip reassembling the text otherwise.
  if (chunk.find("\\n") == std::string_view::npos && chunk.find("\\\"") == std::string_view::npos &&
      chunk.find("\"name\"") == std::string_view::npos)
    return;
  auto selection = dsl::emitted_selection(graph_->decisions[decision_], decoded_.document());
  if (!selection) return;
  fired_ = true;
  selection_ = *selection;
  caf::anon_send(workflow_, emitted_atom::value, static_cast<std::uint64_t>(decision_),
                 std::move(*selection), false);
}

}  // namespace dynrt::actors
