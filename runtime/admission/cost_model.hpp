// What a fill of a stage is expected to cost and save, learned from executions (paper section
// 3.4: G and the footprint (slot time, KV share) that Action 1 prices).
//
// Per stage fingerprint, an exponentially weighted mean of the engine time, the tokens
// (prompt + completion) and the prompt tokens of its executions, canonical and speculative
// alike. A stage never seen uses the configured prior. The gain of a fill is the engine time of
// the chain it runs (a consumed fill saves that execution); its footprint holds a slot for that
// long, reserves its tokens' share of the engine's KV pool (the peak; it is priced on its mean,
// the prompt plus half the completion) and has every stage's prompt prefilled.
//
// Pure; single-threaded (the pricing actor owns one).
#pragma once

#include "runtime/admission/price.hpp"
#include "runtime/clock.hpp"
#include "runtime/hash.hpp"

#include <cstdint>
#include <span>
#include <unordered_map>

namespace dynrt::admission {

struct StageCost {
  double engine_ms = 0;
  double tokens = 0;
  std::uint64_t samples = 0;
  double prompt_tokens = 0;
};

struct CostModelConfig {
  double prior_engine_ms = 2000;  // a stage never executed: a typical model call
  double prior_tokens = 800;
  double prior_prompt_tokens = 400;
  double memory = 0.2;         // weight of the newest execution
  double kv_tokens = 600'000;  // the engine's KV pool (for the KV share)
};

class CostModel {
 public:
  explicit CostModel(CostModelConfig config = {}) : config_(config) {}

  void observe(const Hash128& stage, Duration engine_time, double tokens, double prompt_tokens = 0);
  StageCost estimate(const Hash128& stage) const;
  // G and the footprint of a fill running `chain` (its stages' fingerprints, in order).
  double gain_ms(std::span<const Hash128> chain) const;
  Footprint footprint(std::span<const Hash128> chain) const;
  void set_kv_tokens(double kv_tokens) {
    if (kv_tokens > 0) config_.kv_tokens = kv_tokens;
  }

 private:
  CostModelConfig config_;
  std::unordered_map<Hash128, StageCost> stages_;
};

}  // namespace dynrt::admission
