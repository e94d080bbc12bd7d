#include "actors/emission.hpp"

#include "actors/messages.hpp"
#include "dsl/render.hpp"

#include <caf/all.hpp>

namespace dynrt::actors {

EmissionWatch::EmissionWatch(std::shared_ptr<const dsl::TemplateGraph> graph,
                             dsl::DecisionId decision, bool chat, caf::actor workflow)
    : graph_(std::move(graph)),
      decision_(decision),
      decoded_(chat),
      workflow_(std::move(workflow)) {}

void EmissionWatch::feed(std::string_view chunk) {
  if (fired_) return;
  const auto doc = nlohmann::json::parse(chunk, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return;
  decoded_.add(doc);
  // A selection can only have become readable with a line break, a quote (closing a JSON
  // string) or a tool call's name in this chunk: skip reassembling the text otherwise.
  if (chunk.find("\\n") == std::string_view::npos && chunk.find("\\\"") == std::string_view::npos &&
      chunk.find("\"name\"") == std::string_view::npos)
    return;
  auto selection = dsl::emitted_selection(graph_->decisions[decision_], decoded_.document());
  if (!selection) return;
  fired_ = true;
  caf::anon_send(workflow_, emitted_atom::value, static_cast<std::uint64_t>(decision_),
                 std::move(*selection));
  workflow_ = nullptr;  // the engine may keep its sink, and this, a while
}

}  // namespace dynrt::actors
