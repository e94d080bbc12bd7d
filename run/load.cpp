#include "run/load.hpp"

#include <algorithm>

namespace dynrt::run {

Pressure pressure_of(const std::vector<engines::LoadSnapshot>& loads, int configured_slots,
                     int canonical, int fills) {
  int slots = configured_slots, queued = 0, busy = 0;
  double kv_total = 0, kv_share_sum = 0;
  int kv_reporting = 0, batches = 0, prefill_batches = 0;
  double prefill_ms = 0;
  for (const auto& s : loads) {
    if (!s.valid) continue;
    const int b = std::max(1, s.batches);
    batches += b;
    if (s.prefill_ms_per_token > 0) {
      prefill_ms += s.prefill_ms_per_token * b;
      prefill_batches += b;
    }
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
  p.batches = std::max(1, batches);
  if (prefill_batches > 0) p.prefill_ms_per_token = prefill_ms / prefill_batches;
  const int canonical_now = std::max(canonical, busy - fills);
  p.canonical = std::min(1.0, static_cast<double>(canonical_now) / slots);
  p.queued = std::min(1.0, static_cast<double>(queued) / slots);
  // The mean over the engines that report a pool (replicas of one model share the load).
  if (kv_reporting > 0) p.kv = std::clamp(kv_share_sum / kv_reporting, 0.0, 1.0);
  return p;
}

}  // namespace dynrt::run
