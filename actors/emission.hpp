// Resolve on emission: reads a deciding stage's selection from its decode as it is emitted
// (dsl::emitted_selection), so that the branch can stop the other candidates' fills then rather
// than at the end of the decode (paper Figure 1b). It runs on the engine's thread, fed the
// chunks of a streamed call or the progress an engine reports for one that is not streamed
// (engines::EngineRequest::progress). It tells the workflow actor when a selection first shows
// (the other candidates' fills stop), and again when the decode goes on past it (the selected
// candidate's fill may start). The whole output still resolves the branch.
#pragma once

#include "dsl/template_graph.hpp"
#include "engines/openai/assembly.hpp"

#include <caf/actor.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace dynrt::actors {

class EmissionWatch {
 public:
  // Sends (emitted_atom, decision, selection, false) when the selection shows, then
  // (emitted_atom, decision, selection, true) at the next chunk that decodes more output.
  EmissionWatch(std::shared_ptr<const dsl::TemplateGraph> graph, dsl::DecisionId decision,
                bool chat, caf::actor workflow);

  // One chunk's JSON payload; one request's chunks in order, from one thread at a time.
  void feed(std::string_view chunk);

 private:
  std::shared_ptr<const dsl::TemplateGraph> graph_;
  dsl::DecisionId decision_;
  engines::StreamAssembler decoded_;
  caf::actor workflow_;
  std::string selection_;
  bool fired_ = false;  // the selection showed
  bool done_ = false;   // ... and the decode went on past it
};

}  // namespace dynrt::actors
