// Adding up what several engines or workers say a prompt costs: their decode batches, and the
// stall a prompt token puts on a decode step, as the mean per batch over those that report one
// (a fill lands on any of them). Used wherever load snapshots are summed: an engine's workers,
// a pool's replicas, the pricing actor's engines.
#pragma once

#include "engines/engine.hpp"

#include <algorithm>

namespace dynrt::engines {

struct PrefillStall {
  int batches = 0;      // every batch added
  int stalling = 0;     // ... of which report a stall
  double stall_ms = 0;  // their stalls, weighted by batches

  void add(const LoadSnapshot& s) {
    const int b = std::max(1, s.batches);
    batches += b;
    if (s.prefill_ms_per_token > 0) {
      stall_ms += s.prefill_ms_per_token * b;
      stalling += b;
    }
  }
  double ms_per_token() const { return stalling > 0 ? stall_ms / stalling : 0; }
};

}  // namespace dynrt::engines
