#include "runtime/admission/cost_model.hpp"

#include <algorithm>

namespace dynrt::admission {

void CostModel::observe(const Hash128& stage, Duration engine_time, double tokens,
                        double prompt_tokens) {
  const double ms = std::chrono::duration<double, std::milli>(engine_time).count();
  if (!(ms >= 0) || !(tokens >= 0) || !(prompt_tokens >= 0)) return;  // NaN or negative
  auto& s = stages_[stage];
  if (s.samples == 0) {
    s.engine_ms = ms;
    s.tokens = tokens;
    s.prompt_tokens = prompt_tokens;
  } else {
    s.engine_ms += config_.memory * (ms - s.engine_ms);
    s.tokens += config_.memory * (tokens - s.tokens);
    s.prompt_tokens += config_.memory * (prompt_tokens - s.prompt_tokens);
  }
  ++s.samples;
}

StageCost CostModel::estimate(const Hash128& stage) const {
  const auto it = stages_.find(stage);
  if (it != stages_.end()) return it->second;
  return StageCost{config_.prior_engine_ms, config_.prior_tokens, 0, config_.prior_prompt_tokens};
}

double CostModel::gain_ms(std::span<const Hash128> chain) const {
  double g = 0;
  for (const auto& s : chain)
    g += estimate(s).engine_ms;
  return g;
}

Footprint CostModel::footprint(std::span<const Hash128> chain) const {
  Footprint f;
  double tokens = 0, mean = 0;
  for (const auto& s : chain) {
    const StageCost c = estimate(s);
    f.slot_ms += c.engine_ms;
    f.prompt_tokens += c.prompt_tokens;   // every stage's prompt is prefilled
    tokens = std::max(tokens, c.tokens);  // one stage of the chain is resident at a time
    // Its KV grows from the prompt to the prompt and completion over its decode.
    mean = std::max(mean, (c.tokens + std::min(c.prompt_tokens, c.tokens)) / 2);
  }
  f.kv_share = config_.kv_tokens > 0 ? std::min(1.0, tokens / config_.kv_tokens) : 0;
  f.kv_mean_share = config_.kv_tokens > 0 ? std::min(1.0, mean / config_.kv_tokens) : 0;
  return f;
}

}  // namespace dynrt::admission
