// The branch actor: one open branch, from its decision point to its settlement (paper Figure 6
// steps 1-4 and the feedback of Algorithm 1). A thin shell over branch::BranchState.
//
//   propose   the decision's candidate source: static, frequency (the pricing actor's tables),
//             from-output (extracted from the source stage's latest output) or drafter (the
//             draft model sampled N times on an engine, within the source's time box)
//   price     Action 0 (open the branch?) then Action 1 (which candidates, with reservations)
//   fill      one fill actor per admitted candidate, linked
//   resolve   from the workflow: the selection; losers are cancelled in the engine and their
//             shadows discarded (exclusive), or kept until they expire (independent)
//   settle    when nothing is left to wait for (or the settle deadline passes): reservations
//             returned, feedback to the pricing actor and the workflow
#pragma once

#include "actors/messages.hpp"

namespace dynrt::actors {

caf::actor spawn_branch_actor(caf::event_based_actor* parent, BranchInitPtr init);

}  // namespace dynrt::actors
