// The shared actors of the graph: engine (one per configured engine, and one for tools), csl
// (the Completed-Subgraph Library) and pricing (load, both gates, reservations, learning).
// The spawn functions link the new actor to `parent` (the root). Each is a thin shell over a
// runtime/ state class or an engines/ Engine; see docs/architecture.md for the messages each
// answers.
#pragma once

#include "actors/messages.hpp"
#include "engines/engine.hpp"
#include "engines/tools/tool.hpp"
#include "runtime/admission/controller.hpp"
#include "runtime/admission/cost_model.hpp"
#include "runtime/csl/store.hpp"

#include <caf/all.hpp>

#include <memory>
#include <vector>

namespace dynrt::actors {

// Owns an Engine (or a ToolEngine): submits requests, forwards chunks, and delivers each
// completion to its requester as (engdone_atom, tag, ExecResultPtr). Never blocks: Engine
// submit() and cancel() return at once and completions arrive from the engine's thread.
caf::actor spawn_engine_actor(caf::event_based_actor* parent,
                              std::shared_ptr<engines::Engine> engine,
                              std::shared_ptr<engines::ToolEngine> tools,
                              std::shared_ptr<const TimeService> time);

// The one pass-through route: a call no template claims (untagged, an unknown workflow or
// stage, a user stage) runs on its engine (or tool) as it is, and its answer goes straight to
// `sink`. Callable from any thread; never blocks.
void forward(const Services& services, const Request& request, std::shared_ptr<ReplySink> sink);

struct CslConfig {
  csl::Limits limits;
  std::shared_ptr<const Clock> clock;  // TTLs
  // The shared library tier, when configured: confirmed results are written through to it, a
  // local miss looks there, a result that read records is checked against it before it
  // serves, and writes reach it before they are answered. `life` guards the tier's callbacks
  // (they run on its threads and message the actor).
  std::shared_ptr<store::SharedTier> tier;
  std::shared_ptr<LifeGate> life;
};
// The csl and the pricing actor publish their statistics on `board` after every message.
caf::actor spawn_csl_actor(caf::event_based_actor* parent, CslConfig config,
                           std::shared_ptr<Counters> counters, std::shared_ptr<StatsBoard> board);

struct PricingConfig {
  admission::AdmissionConfig admission;
  admission::CostModelConfig costs;
  std::vector<std::shared_ptr<engines::Engine>> engines;  // load snapshots
  int decode_slots = 0;                                   // 0: from the engines' snapshots
  std::shared_ptr<StatsBoard> board;
  std::shared_ptr<const TimeService> clock;  // the load envelope's window
};
caf::actor spawn_pricing_actor(caf::event_based_actor* parent, PricingConfig config);

}  // namespace dynrt::actors
