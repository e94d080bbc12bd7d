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

// Adding up the token counters of an engine's workers or a pool's replicas, all of one model
// (LoadSnapshot::token_gaps, token_gap_s, prompt_tokens, decode_steps): their sums, and the
// lone request's token gap as the mean over those that know it.
struct TokenPace {
  double gaps = 0;
  double gap_s = 0;
  double prompt_tokens = 0;
  double steps = 0;
  double lone_ms = 0;  // summed over `lone`
  int lone = 0;

  void add(const LoadSnapshot& s) {
    gaps += s.token_gaps;
    gap_s += s.token_gap_s;
    prompt_tokens += s.prompt_tokens;
    steps += s.decode_steps;
    if (s.lone_token_ms > 0) {
      lone_ms += s.lone_token_ms;
      ++lone;
    }
  }
  void into(LoadSnapshot& s) const {
    s.token_gaps = gaps;
    s.token_gap_s = gap_s;
    s.prompt_tokens = prompt_tokens;
    s.decode_steps = steps;
    s.lone_token_ms = lone > 0 ? lone_ms / lone : 0;
  }
};

}  // namespace dynrt::engines
