// The workflow actor: one run of a template (one workflow id). The root routes its demands to
// it and ends it (see root_actor in actors/runtime.cpp): when the root's idle check finds it
// quiet with nothing in flight, or when it is retired to keep the live runs within their
// limit. Retiring abandons its branches (their fills are cancelled and shadows discarded) and
// answers what is in flight before it ends; it tells the root when it has ended.
//
// It maps each demand to its stage, binds the variables the stage's request carries, and
// answers it: a confirmed library hit (C1), a shadow promoted by this exact demand (C2), a
// bounded wait on the fill computing it, or canonical execution on the engine (whose result,
// for a speculable stage, is stored for reuse). A demand for a deciding stage opens a branch
// before it runs, so fills overlap the decider's decode; the decider's output gives the
// selection, which resolves the branch. A user-window decision opens its branch when the
// stages before the user's pick have completed, and resolves when the request after the pick
// binds the selection. A stage the template does not know, or a user stage, passes through.
#pragma once

#include "actors/messages.hpp"

namespace dynrt::actors {

struct WorkflowInit {
  std::string key;  // tenant, workflow name and id, as the root knows it
  std::string id;
  Caller caller;  // whose call started the run: its tenant owns the run
  GraphPtr graph;
  ServicesPtr services;
  caf::actor root;
};

caf::actor spawn_workflow_actor(caf::event_based_actor* parent, WorkflowInit init);

}  // namespace dynrt::actors
