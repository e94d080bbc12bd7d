#include "runtime/admission/price.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dynrt::admission {

namespace {
double clamp01(double x) {
  return std::clamp(x, 0.0, 1.0);
}
}  // namespace

double congestion(double u, double places) {
  u = std::clamp(u, 0.0, 1.0);
  if (u >= 1) return std::numeric_limits<double>::infinity();
  const int c = static_cast<int>(std::clamp(std::floor(places), 1.0, 4096.0));
  // Erlang B by its recursion over the places (stable where the closed form overflows), then
  // Erlang C from it.
  const double offered = u * c;
  double b = 1;
  for (int k = 1; k <= c && b > 0; ++k)  // once it underflows to 0 it stays 0
    b = offered * b / (k + offered * b);
  const double wait = b / (1.0 - u * (1.0 - b));  // the chance an arrival waits
  return 1.0 + wait / (c * (1.0 - u));
}

Prices PriceCurves::at(const LoadView& v, double kv_places) const {
  const double rho = clamp01(v.rho);
  const double canonical = rho * p_.decode_slots;  // canonical requests in flight
  const double fills = clamp01(v.fill) * fill_slots_;
  // The work a fill delays that a caller waits for: the canonical requests, and the fills in
  // flight as likely to be consumed as their p says (a consumed fill is a caller's request
  // started early; stretching it delays that caller as much). Fills are slot use either way.
  const double waited = canonical + std::clamp(v.demanded, 0.0, fills);
  const double per_batch = waited / p_.batches;  // ... in the batch a fill joins
  const double slot_use = std::min((canonical + fills) / p_.decode_slots, p_.max_utilization);
  // The stretch grows with all the KV in use (Fig. 5b's fit, k^1.52), so one more token costs
  // most where the pool is already full: the slope at the occupancy the engines report, or at
  // the fills' own share where that is more (a snapshot older than the latest admissions).
  const double in_use = std::max(clamp01(v.kv) * p_.kv_budget, clamp01(v.engine_kv));
  const double share = std::max(in_use, p_.kv_floor);
  const double kv_use = std::min(in_use, p_.max_utilization);
  const InterferenceModel& m = p_.interference;
  Prices out;
  // Per fill: its own stretch of the waited-for work in its batch, plus the one-off sharing
  // overhead of a request alone in its batch (at most one per batch), spread over the fill
  // budget.
  const double k = p_.interference_scale;
  out.slot = k *
             (per_batch * m.per_request +
              std::min(waited, p_.batches) * m.sharing_overhead / fill_slots_) /
             (1.0 - slot_use);
  out.kv = k * waited * m.kv_marginal(share) * congestion(kv_use, kv_places);
  if (past_measured_stretch()) out.kv = 0;
  // The stall: every waited-for request decoding in the batch the prompt joins waits for its
  // prefill, and past the compute-bound batch that forward-pass time is taken from every step
  // after it too, so it steepens with the same slot use as the slot price (without the factor
  // the no-harm trace ran up to 11% behind the floor with paper-sized prompts:
  // docs/benchmarks.md, "Prefill priced as compute").
  out.prefill = per_batch * p_.prefill_ms_per_token / (1.0 - slot_use);
  return out;
}

double PriceCurves::cost(const LoadView& v, const Footprint& f) const {
  const double kv = f.kv_mean_share >= 0 ? std::min(f.kv_mean_share, f.kv_share) : f.kv_share;
  // Requests like this one a worker's pool holds at once, on their mean residency.
  const double worker_share = kv * p_.batches;
  const Prices b = at(v, worker_share > 0 ? 1.0 / worker_share : 1.0);
  const double held_ms = f.slot_ms * std::clamp(f.unused_share, 0.0, 1.0);
  return b.slot * held_ms + b.kv * kv * held_ms + b.prefill * f.prompt_tokens;
}

bool PriceCurves::past_measured_stretch() const {
  if (p_.max_stretch <= 0) return false;
  const double per_batch = engine_rho_ * p_.decode_slots / p_.batches;
  return p_.interference.stretch(per_batch, engine_kv_) >= p_.max_stretch;
}

LoadView PriceCurves::project(const LoadView& v, const Footprint& f) const {
  LoadView out = v;
  out.fill = v.fill + 1.0 / fill_slots_;
  out.kv = v.kv + f.kv_share / p_.kv_budget;
  if (v.engine_kv > 0) out.engine_kv = std::min(1.0, v.engine_kv + f.kv_share);
  return out;
}

}  // namespace dynrt::admission
