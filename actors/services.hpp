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
                              std::shared_ptr<engines::ToolEngine> tools);

struct CslConfig {
  csl::Limits limits;
};
// The csl and the pricing actor publish their statistics on `board` after every message.
caf::actor spawn_csl_actor(caf::event_based_actor* parent, CslConfig config,
                           std::shared_ptr<Counters> counters, std::shared_ptr<StatsBoard> board);

// Deadlines that do not keep their actor alive: (arm_atom, token, Duration delay, int32 which)
// from an actor makes the timer send it (expire_atom, which) once `delay` has passed, unless
// (disarm_atom, token) came first. It holds only the actor's weak address, and an actor that
// ends disarms what it armed, so neither its memory nor anything of it outlives it (a delayed
// message to oneself holds its receiver until it is delivered). Tokens are unique in the
// process (Counters::next_id).
caf::actor spawn_timer_actor(caf::event_based_actor* parent);

struct PricingConfig {
  admission::AdmissionConfig admission;
  admission::CostModelConfig costs;
  std::vector<std::shared_ptr<engines::Engine>> engines;  // load snapshots
  int decode_slots = 0;                                   // 0: from the engines' snapshots
  std::shared_ptr<StatsBoard> board;
};
caf::actor spawn_pricing_actor(caf::event_based_actor* parent, PricingConfig config);

}  // namespace dynrt::actors
