// The canonical load the pricing actor observes, from the engines' snapshots (run/load.hpp).
#include "run/load.hpp"

#include <gtest/gtest.h>

namespace dynrt::run {
namespace {

engines::LoadSnapshot snapshot(int busy, int total, int queued, double kv_total) {
  engines::LoadSnapshot s;
  s.slots_busy = busy;
  s.slots_total = total;
  s.queued = queued;
  s.kv_total = kv_total;
  s.valid = true;
  return s;
}

TEST(Load, SlotsComeFromTheEnginesWhenNotConfigured) {
  const auto p = pressure_of({snapshot(4, 16, 2, 1), snapshot(4, 16, 0, 1)}, 0, 0, 0);
  EXPECT_DOUBLE_EQ(p.canonical, 8.0 / 32);
  EXPECT_DOUBLE_EQ(p.queued, 2.0 / 32);
  EXPECT_EQ(p.slots, 32);  // what the price curves count canonical requests against
}

// An engine that is compute-bound past a batch of 100 saturates there, not at its 1,024 slots:
// the pressure, and so the price of a fill, is counted against the smaller.
TEST(Load, AnEnginesComputeBoundBatchIsItsCapacity) {
  auto s = snapshot(50, 1024, 0, 1);
  s.concurrency = 100;
  const auto p = pressure_of({s, snapshot(0, 16, 0, 1)}, 0, 0, 0);
  EXPECT_EQ(p.slots, 116);
  EXPECT_DOUBLE_EQ(p.canonical, 50.0 / 116);
  s.concurrency = 4096;  // never more than its slots
  EXPECT_EQ(pressure_of({s}, 0, 0, 0).slots, 1024);
  EXPECT_EQ(pressure_of({s}, 8, 0, 0).slots, 8);  // a configured count still wins
}

// A prompt token's stall is per batch: the mean over the batches that report one, and the
// batches add up across engines (a pool of replicas, an engine's workers).
TEST(Load, PrefillStallIsTheMeanOverTheBatchesThatReportIt) {
  auto four = snapshot(0, 64, 0, 1);
  four.batches = 4;
  four.prefill_ms_per_token = 0.2;
  auto one = snapshot(0, 64, 0, 1);
  one.prefill_ms_per_token = 0.1;
  auto silent = snapshot(0, 64, 0, 1);  // says nothing: one batch, no stall known
  const auto p = pressure_of({four, one, silent}, 0, 0, 0);
  EXPECT_EQ(p.batches, 6);
  EXPECT_NEAR(p.prefill_ms_per_token, (4 * 0.2 + 0.1) / 5, 1e-12);
  EXPECT_EQ(pressure_of({silent}, 0, 0, 0).prefill_ms_per_token, 0);
  EXPECT_EQ(pressure_of({}, 0, 0, 0).batches, 1);
  four.valid = false;  // not read yet: ignored
  EXPECT_EQ(pressure_of({four, one}, 0, 0, 0).batches, 1);
  EXPECT_DOUBLE_EQ(pressure_of({four, one}, 0, 0, 0).prefill_ms_per_token, 0.1);
}

TEST(Load, ConfiguredSlotsWin) {
  EXPECT_DOUBLE_EQ(pressure_of({snapshot(4, 16, 0, 1)}, 8, 0, 0).canonical, 0.5);
  EXPECT_EQ(pressure_of({snapshot(4, 16, 0, 1)}, 8, 0, 0).slots, 8);
}

TEST(Load, UnknownSlotsFallBackToTheDefault) {
  EXPECT_DOUBLE_EQ(pressure_of({}, 0, 16, 0).canonical, 16.0 / kDefaultDecodeSlots);
  engines::LoadSnapshot invalid = snapshot(60, 64, 0, 1);
  invalid.valid = false;  // not read yet: ignored
  EXPECT_DOUBLE_EQ(pressure_of({invalid}, 0, 0, 0).canonical, 0);
}

TEST(Load, BusySlotsBeyondDynrtsFillsCountAsCanonical) {
  // 10 busy, 6 of them dynrt's fills: 4 canonical from elsewhere, more than dynrt's own 2.
  EXPECT_DOUBLE_EQ(pressure_of({snapshot(10, 20, 0, 1)}, 0, 2, 6).canonical, 4.0 / 20);
  // dynrt's own count wins when the engines report less (a snapshot lags).
  EXPECT_DOUBLE_EQ(pressure_of({snapshot(1, 20, 0, 1)}, 0, 5, 0).canonical, 5.0 / 20);
}

TEST(Load, PressureIsCappedAtOne) {
  const auto p = pressure_of({snapshot(50, 20, 80, 1)}, 0, 0, 0);
  EXPECT_DOUBLE_EQ(p.canonical, 1);
  EXPECT_DOUBLE_EQ(p.queued, 1);
}

TEST(Load, OnlyAPoolInTokensReplacesTheConfiguredKvSize) {
  EXPECT_FALSE(pressure_of({snapshot(0, 8, 0, 1)}, 0, 0, 0).kv_tokens);  // a fraction
  EXPECT_EQ(pressure_of({snapshot(0, 8, 0, 90'000), snapshot(0, 8, 0, 10'000)}, 0, 0, 0).kv_tokens,
            100'000);
}

// The KV occupancy the price reads: the mean over the engines that report a pool, whether in
// tokens (the simulated engine) or as a fraction (engines that export one).
TEST(Load, KvOccupancyIsTheMeanOverTheEnginesThatReportAPool) {
  auto tokens = snapshot(0, 8, 0, 100'000);
  tokens.kv_used = 60'000;
  auto fraction = snapshot(0, 8, 0, 1);
  fraction.kv_used = 0.2;
  const auto silent = snapshot(0, 8, 0, 0);
  EXPECT_DOUBLE_EQ(pressure_of({tokens, fraction, silent}, 0, 0, 0).kv, 0.4);
  EXPECT_EQ(pressure_of({silent}, 0, 0, 0).kv, 0);
}

// The interference fit's reading of one engine: its token counters, its batch and
// compute-bound batch per decode batch, its KV in use; nothing from an invalid snapshot.
TEST(Load, TheDecodeReadingOfAnEngine) {
  auto a = snapshot(12, 64, 0, 1000);
  a.kv_used = 250;
  a.batches = 4;
  a.concurrency = 48;
  a.token_gaps = 100;
  a.token_gap_s = 3;
  a.prompt_tokens = 500;
  a.decode_steps = 20;
  a.lone_token_ms = 20;
  a.prefill_ms_per_token = 0.2;
  const auto d = decode_reading(a);
  EXPECT_EQ(d.token_gaps, 100);
  EXPECT_EQ(d.token_gap_s, 3);
  EXPECT_EQ(d.prompt_tokens, 500);
  EXPECT_EQ(d.decode_steps, 20);
  EXPECT_EQ(d.lone_token_ms, 20);
  EXPECT_EQ(d.prefill_ms_per_token, 0.2);
  EXPECT_EQ(d.batch, 3);           // 12 busy over four batches
  EXPECT_EQ(d.compute_batch, 12);  // 48 over four
  EXPECT_EQ(d.kv, 0.25);
  a.concurrency = 0;  // not stated: no knee is assumed
  EXPECT_EQ(decode_reading(a).compute_batch, 0);
  a.valid = false;
  EXPECT_EQ(decode_reading(a).token_gaps, 0);
  EXPECT_EQ(decode_reading(a).lone_token_ms, 0);
}

}  // namespace
}  // namespace dynrt::run
