#include "run/load.hpp"

#include "engines/prefill.hpp"

#include <algorithm>

namespace dynrt::run {

Pressure pressure_of(const std::vector<engines::LoadSnapshot>& loads, int configured_slots,
                     int canonical, int fills) {
  int slots = configured_slots, queued = 0, busy = 0;
  double kv_total = 0, kv_share_sum = 0;
  int kv_reporting = 0;
  engines::PrefillStall prefill;
  for (const auto& s : loads) {
    if (!s.valid) continue;
    prefill.add(s);
    // Where the engine saturates: its compute-bound batch when it reports one.
    if (configured_slots == 0)
      slots += s.concurrency > 0 ? std::min(s.concurrency, s.slots_total) : s.slots_total;
    queued += s.queued;
    busy += s.slots_busy;
    kv_total += s.kv_total;
    if (s.kv_total > 0) {
      kv_share_sum += s.kv_occupancy();
      ++kv_reporting;
    }
  }
  if (slots <= 0) slots = kDefaultDecodeSlots;
  Pressure p;
  p.slots = slots;
  if (kv_total > kKvTokensAtLeast) p.kv_tokens = kv_total;
  p.batches = std::max(1, prefill.batches);
  p.prefill_ms_per_token = prefill.ms_per_token();
  const int canonical_now = std::max(canonical, busy - fills);
  p.canonical = std::min(1.0, static_cast<double>(canonical_now) / slots);
  p.queued = std::min(1.0, static_cast<double>(queued) / slots);
  // The mean over the engines that report a pool (replicas of one model share the load).
  if (kv_reporting > 0) p.kv = std::clamp(kv_share_sum / kv_reporting, 0.0, 1.0);
  return p;
}

admission::DecodeReading decode_reading(const engines::LoadSnapshot& s) {
  admission::DecodeReading d;
  if (!s.valid) return d;
  const double batches = std::max(1, s.batches);
  d.token_gaps = s.token_gaps;
  d.token_gap_s = s.token_gap_s;
  d.prompt_tokens = s.prompt_tokens;
  d.decode_steps = s.decode_steps;
  d.lone_token_ms = s.lone_token_ms;
  d.prefill_ms_per_token = s.prefill_ms_per_token;
  d.batch = s.slots_busy / batches;
  d.compute_batch = s.concurrency > 0 ? s.concurrency / batches : 0;
  d.kv = std::clamp(s.kv_occupancy(), 0.0, 1.0);
  return d;
}

}  // namespace dynrt::run
