// The fill actor: one admitted speculative execution (paper section 3.3, Figure 6 step 3).
//
// It renders the decision's first downstream stage from the template with the candidate bound,
// derives the reuse name, probes the library (a confirmed hit suppresses the execution: the
// chain continues from it), runs the request on the engine at fill priority, and stores the
// result as a shadow with its read-set (versions snapshotted before it ran), producers and
// provenance. It then continues down the chain of speculable stages, each stage its own
// shadow, so promotion later happens stage by stage. Each stage's reuse name is announced to
// the workflow (a demand for it may wait) and its end too. A cancel aborts the engine request
// at once; a shadow stored after the cancel is discarded. Failure of any kind ends the fill: a
// miss, never a wrong answer.
#pragma once

#include "actors/messages.hpp"

namespace dynrt::actors {

caf::actor spawn_fill_actor(caf::event_based_actor* parent, FillInitPtr init);

}  // namespace dynrt::actors
