#include "runtime/admission/price.hpp"

#include <algorithm>
#include <cmath>

namespace dynrt::admission {

namespace {
double clamp01(double x) {
  return std::clamp(x, 0.0, 1.0);
}
}  // namespace

Prices PriceCurves::at(const LoadView& v) const {
  const double rho = clamp01(v.rho);
  const double canonical = rho * p_.decode_slots;  // canonical requests in flight
  const double fills = clamp01(v.fill) * fill_slots_;
  const double slot_use = std::min(std::max((canonical + fills) / p_.decode_slots, clamp01(v.fill)),
                                   p_.max_utilization);
  const double kv_use = std::min(clamp01(v.kv), p_.max_utilization);
  // The stretch grows with all the KV in use (Fig. 5b's fit, k^1.52), so one more token costs
  // most where the pool is already full: the slope at the engines' occupancy when they report
  // it, else at the fills' own share.
  const double share = std::max({clamp01(v.kv) * p_.kv_budget, clamp01(v.engine_kv), p_.kv_floor});
  const InterferenceModel& m = p_.interference;
  Prices out;
  // Per fill: its own stretch, plus the one-off sharing overhead spread over the fill budget.
  out.slot = canonical * (m.per_request + m.sharing_overhead / fill_slots_) / (1.0 - slot_use);
  out.kv = canonical * m.kv_marginal(share) / (1.0 - kv_use);
  // The direct stall: every canonical request decoding in the batch the prompt joins waits for
  // it. (Steepening it near capacity, as the slot price is, overpriced fills at moderate load:
  // docs/benchmarks.md, "Prompts priced".)
  out.prefill = canonical / p_.batches * p_.prefill_ms_per_token;
  return out;
}

double PriceCurves::cost(const LoadView& v, const Footprint& f) const {
  const Prices b = at(v);
  return b.slot * f.slot_ms + b.kv * f.kv_share * f.slot_ms + b.prefill * f.prompt_tokens;
}

LoadView PriceCurves::project(const LoadView& v, const Footprint& f) const {
  LoadView out = v;
  out.fill = v.fill + 1.0 / fill_slots_;
  out.kv = v.kv + f.kv_share / p_.kv_budget;
  if (v.engine_kv > 0) out.engine_kv = std::min(1.0, v.engine_kv + f.kv_share);
  return out;
}

}  // namespace dynrt::admission
