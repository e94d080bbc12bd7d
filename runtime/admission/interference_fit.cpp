#include "runtime/admission/interference_fit.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace dynrt::admission {

void InterferenceFit::observe(std::size_t engine, const DecodeReading& r) {
  if (engine >= last_.size()) last_.resize(engine + 1);
  const std::optional<DecodeReading> last = std::exchange(last_[engine], r);
  if (!last || !(r.lone_token_ms > 0)) return;
  const double gaps = r.token_gaps - last->token_gaps;
  const double gap_s = r.token_gap_s - last->token_gap_s;
  const double prompt = r.prompt_tokens - last->prompt_tokens;
  const double counted_steps = r.decode_steps - last->decode_steps;
  // Counters that went back (a restart, a replica gone) or did not move: nothing to learn.
  if (!(gaps >= p_.min_gaps) || !(gap_s > 0) || !(prompt >= 0) || counted_steps < 0) return;
  // Each step advances every request in it by one token: the gaps over the steps are the mean
  // batch; without a step count, the batch at the reading stands for it.
  const double batch = counted_steps > 0 ? gaps / counted_steps : std::max(r.batch, 1.0);
  if (r.compute_batch > 0 && batch >= r.compute_batch) return;
  // The one-off sharing overhead falls on the steps that had company: for a mean batch between
  // one and two, about batch - 1 of them.
  double s = curve_.stretch(batch - 1.0, r.kv);
  if (batch > 1.0 && batch < 2.0) s -= curve_.sharing_overhead * (2.0 - batch);
  if (!std::isfinite(s) || s < p_.min_stretch) return;
  const double gap_ms = gap_s * 1000.0 / gaps;
  const double steps = gaps / batch;  // the steps that carried the prompts
  const double stall_ms = r.prefill_ms_per_token > 0 ? r.prefill_ms_per_token * prompt / steps : 0;
  const double excess = (gap_ms - stall_ms - r.lone_token_ms) / r.lone_token_ms;
  if (!std::isfinite(excess)) return;
  excess_ = p_.memory * excess_ + excess;
  weight_ = p_.memory * weight_ + s;
  ++intervals_;
  if (weight_ >= p_.min_weight) scale_ = std::clamp(excess_ / weight_, p_.min_scale, p_.max_scale);
}

}  // namespace dynrt::admission
