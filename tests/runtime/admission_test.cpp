// Load-priced admission: each equation on hand-computed cases, the envelope's asymmetry,
// Proposition A.8's monotonicity, and the exact oracle against brute force.
#include "runtime/admission/beta.hpp"
#include "runtime/admission/fill_gate.hpp"
#include "runtime/admission/load.hpp"
#include "runtime/admission/oracle.hpp"
#include "runtime/admission/price.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dynrt::admission {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TimePoint at(double s) {
  return TimePoint{} + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

LoadView rho(double r) {
  return LoadView{0, 0, r};
}

// The curves with the Figure 5b fit extrapolated past its largest measured stretch whatever the
// engines read (max_stretch 0): what the capped curves are compared with. Curves that have
// had no reading (set_engine_load) price as these do.
PriceCurves extrapolated() {
  PriceParams p;
  p.max_stretch = 0;
  return PriceCurves(p);
}

// -- Eq. 3: the causal envelope -------------------------------------------------------------

TEST(Envelope, RisingLoadCountsAtOnce) {
  LoadEnvelope env(seconds(10));
  env.observe(at(0), rho(0.1));
  env.observe(at(100), rho(0.1));
  env.observe(at(100.5), rho(0.9));
  EXPECT_DOUBLE_EQ(env.envelope(at(100.5)), 0.9);  // max(rho_t, mean): the reading itself
  EXPECT_NEAR(env.mean(at(100.5)), 0.1, 1e-12);    // the new level has lasted no time yet
  EXPECT_NEAR(env.mean(at(101)), 0.1 * 0.95 + 0.9 * 0.05, 1e-12);
}

TEST(Envelope, FallingLoadRelaxesOverOneWindow) {
  LoadEnvelope env(seconds(10));
  env.observe(at(0), rho(0.8));
  env.observe(at(20), rho(0.0));  // the load drops at t = 20
  EXPECT_NEAR(env.envelope(at(20)), 0.8, 1e-12);
  EXPECT_NEAR(env.envelope(at(22.5)), 0.8 * 0.75, 1e-12);  // a quarter of the window is idle
  EXPECT_NEAR(env.envelope(at(25)), 0.4, 1e-12);
  EXPECT_NEAR(env.envelope(at(29)), 0.08, 1e-12);
  EXPECT_NEAR(env.envelope(at(30)), 0.0, 1e-12);
  EXPECT_NEAR(env.envelope(at(60)), 0.0, 1e-12);
}

TEST(Envelope, AShortHistoryAveragesWhatThereIs) {
  LoadEnvelope env(seconds(10));
  EXPECT_EQ(env.envelope(at(0)), 0);
  env.observe(at(100), rho(0.6));
  EXPECT_NEAR(env.mean(at(100)), 0.6, 1e-12);
  env.observe(at(102), rho(0.2));
  EXPECT_NEAR(env.mean(at(104)), (0.6 * 2 + 0.2 * 2) / 4, 1e-12);
}

TEST(Envelope, ViewCarriesTheLatestOccupanciesWithTheEnvelopedRho) {
  LoadEnvelope env(seconds(10));
  env.observe(at(0), LoadView{0.5, 0.25, 1.0});
  env.observe(at(1), LoadView{0.75, 0.5, 0.0});
  const LoadView v = env.view(at(1));
  EXPECT_EQ(v.fill, 0.75);
  EXPECT_EQ(v.kv, 0.5);
  EXPECT_NEAR(v.rho, 1.0, 1e-12);  // all of the short history was at 1.0
}

// A long, irregular history against a brute-force integral.
RC_GTEST_PROP(Envelope, MatchesABruteForceIntegral, ()) {
  const double horizon = *rc::gen::inRange(1, 30);
  LoadEnvelope env(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(horizon)));
  std::vector<std::pair<double, double>> samples;
  double t = 0;
  const int n = *rc::gen::inRange(1, 60);
  for (int i = 0; i < n; ++i) {
    t += *rc::gen::inRange(0, 5000) / 1000.0;
    const double r = *rc::gen::inRange(0, 1001) / 1000.0;
    env.observe(at(t), rho(r));
    if (!samples.empty() && samples.back().first == t) samples.pop_back();
    samples.emplace_back(t, r);
  }
  const double q = t + *rc::gen::inRange(0, 5000) / 1000.0;
  const double start = std::max(q - horizon, samples.front().first);
  double area = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const double a = std::max(samples[i].first, start);
    const double b = i + 1 < samples.size() ? std::min(samples[i + 1].first, q) : q;
    if (b > a) area += samples[i].second * (b - a);
  }
  const double expected = q > start ? area / (q - start) : samples.back().second;
  RC_ASSERT(std::abs(env.mean(at(q)) - expected) < 1e-6);
  RC_ASSERT(env.envelope(at(q)) >= samples.back().second - 1e-12);
}

// -- price curves -------------------------------------------------------------------------------

TEST(Prices, ComeFromTheFigure5bInterferenceModel) {
  const InterferenceModel m;
  const double w = 0.00244;  // the count sweep's per-fill KV share, from the joint fit
  EXPECT_NEAR(m.stretch(1, w), 0.04, 0.01);        // 1 fill: +4%..6%
  EXPECT_NEAR(m.stretch(3, 3 * w), 0.06, 0.01);    // 3 fills: +4%..6%
  EXPECT_NEAR(m.stretch(48, 48 * w), 0.53, 0.01);  // 48 fills: +53%
  EXPECT_NEAR(m.stretch(24, 0.03), 0.11, 0.01);    // KV share 3%: +11%
  EXPECT_NEAR(m.stretch(24, 0.24), 1.45, 0.01);    // KV share 24%: +145%
  EXPECT_EQ(m.stretch(0, 0), 0);
}

TEST(Prices, HandComputedCase) {
  const PriceCurves curves;
  // rho = 0.5 of 64 slots in one batch: 32 canonical requests; no fills; no KV reserved.
  const Prices b = curves.at(LoadView{0, 0, 0.5});
  // Each fill stretches the 32 by a; the one-off overhead falls on at most one request per
  // batch, spread over the 16 fills of the budget.
  const double slot = (32 * 0.00025 + 1 * 0.045 / 16) / (1 - 0.5);
  const double kv = 32 * 12.3 * 1.52 * std::pow(0.03, 0.52) / 1.0;  // derivative at the 3% floor
  EXPECT_NEAR(b.slot, slot, 1e-9);
  EXPECT_NEAR(b.kv, kv, 1e-9);
  EXPECT_NEAR(b.slot, 0.021625, 1e-6);
  EXPECT_NEAR(b.kv, 96.605, 1e-3);
  const Footprint f{2000, 0.005};  // 2 s of decode, 0.5% of the KV pool
  EXPECT_NEAR(curves.cost(LoadView{0, 0, 0.5}, f), slot * 2000 + kv * 0.005 * 2000, 1e-6);
  // Priced on its mean residency where the footprint has one (never above its peak).
  Footprint growing = f;
  growing.kv_mean_share = 0.003;
  EXPECT_NEAR(curves.cost(LoadView{0, 0, 0.5}, growing), slot * 2000 + kv * 0.003 * 2000, 1e-6);
  growing.kv_mean_share = 0.5;
  EXPECT_NEAR(curves.cost(LoadView{0, 0, 0.5}, growing), curves.cost(LoadView{0, 0, 0.5}, f), 1e-9);
  // No canonical work, no canonical delay.
  EXPECT_EQ(curves.cost(LoadView{0.5, 0.5, 0}, f), 0);
}

// A fill joins one batch: its stretch falls on that batch's canonical requests, not on every
// worker's. Four batches of the same 32 requests: 8 in the fill's, and the one-off overhead on
// at most four lone requests.
TEST(Prices, AFillStretchesTheCanonicalRequestsOfItsBatch) {
  PriceCurves curves;
  curves.set_prefill(0.157, 4);
  EXPECT_NEAR(curves.at(LoadView{0, 0, 0.5}).slot, (8 * 0.00025 + 4 * 0.045 / 16) / (1 - 0.5),
              1e-12);
  // Fewer canonical requests than batches: each may be alone in its batch.
  EXPECT_NEAR(curves.at(LoadView{0, 0, 2.0 / 64}).slot,
              (0.5 * 0.00025 + 2 * 0.045 / 16) / (1 - 2.0 / 64), 1e-12);
  // The KV price is per share of the whole pool, which is the fill's share of its worker's
  // over the batches: it still counts all 32.
  PriceCurves one;
  EXPECT_NEAR(curves.at(LoadView{0, 0, 0.5}).kv, one.at(LoadView{0, 0, 0.5}).kv, 1e-12);
}

// The slot count comes from the engines' load: the same pressure on an engine with four times
// the slots is four times the canonical requests a fill slows.
TEST(Prices, CountCanonicalRequestsAgainstTheEnginesSlots) {
  PriceCurves curves;
  const double at64 = curves.at(LoadView{0, 0, 0.25}).kv;
  curves.set_decode_slots(256);
  EXPECT_NEAR(curves.at(LoadView{0, 0, 0.25}).kv, 4 * at64, 1e-9);
  curves.set_decode_slots(0);  // never below one slot
  EXPECT_EQ(curves.params().decode_slots, 1);
}

// The fill budget is a quarter of the engine's slots, and never below the configured 16: a
// fixed 16 would hold fills to 0.4% of four 1,024-slot workers.
TEST(Prices, TheFillBudgetGrowsWithTheEnginesSlots) {
  PriceCurves curves;
  EXPECT_EQ(curves.fill_slots(), 16);
  curves.set_decode_slots(64);
  EXPECT_EQ(curves.fill_slots(), 16);
  curves.set_decode_slots(8);
  EXPECT_EQ(curves.fill_slots(), 16);
  curves.set_decode_slots(4096);
  EXPECT_EQ(curves.fill_slots(), 1024);
  // o_fill counts against the budget in effect: one more fill is 1/1024 of it.
  EXPECT_NEAR(curves.project(LoadView{}, Footprint{1000, 0.001}).fill, 1.0 / 1024, 1e-12);
}

TEST(Prices, SteepenNearCapacity) {
  const PriceCurves curves;
  const double low = curves.at(LoadView{0, 0, 0.2}).slot / 0.2;
  const double high = curves.at(LoadView{0, 0, 0.9}).slot / 0.9;
  EXPECT_GT(high, 5 * low);  // per canonical request, the price grows with congestion
  // The KV price steepens with the KV in use: here the fills' own, 99% and 50% of their
  // quarter of the pool.
  const double full = 0.99 * 0.25, half = 0.5 * 0.25;
  EXPECT_NEAR(curves.at(LoadView{0, 0.99, 0.5}).kv / curves.at(LoadView{0, 0.5, 0.5}).kv,
              (1 - half) / (1 - full) * std::pow(full / half, 0.52), 1e-9);
}

// A KV pool is as many places as requests it holds: a request waits for KV only when every
// place is taken. Its congestion factor is M/M/c's time in the system over the service time,
// the single server's 1 / (1 - u) where the pool holds one request, near 1 where it holds
// hundreds and is not nearly full.
TEST(Prices, KvCongestionIsAPoolOfPlaces) {
  for (const double u : {0.0, 0.3, 0.6, 0.95})
    EXPECT_NEAR(congestion(u, 1), 1 / (1 - u), 1e-12);
  // Two places: ErlangC = 2u^2 / (1 + u), so 1 + C / (2 (1 - u)) = 1 / (1 - u^2).
  EXPECT_NEAR(congestion(0.5, 2), 1 / (1 - 0.25), 1e-12);
  EXPECT_NEAR(congestion(0.9, 2.7), 1 / (1 - 0.81), 1e-12);  // places round down
  EXPECT_LT(congestion(0.6, 200), 1 + 1e-9);
  EXPECT_GT(congestion(0.95, 200), 1);
  EXPECT_LT(congestion(0.95, 200), 1.1);
  EXPECT_EQ(congestion(0, 4096), 1);
  EXPECT_EQ(congestion(0.5, 1e9), congestion(0.5, 4096));  // at most 4,096 places
  EXPECT_EQ(congestion(0.5, 0), congestion(0.5, 1));       // at least one
  EXPECT_TRUE(std::isinf(congestion(1, 8)));

  // A fill of 0.5% of one worker's pool: 200 like it fit. On a pool the engines report 60%
  // full its KV is priced at the curve's slope there, barely steepened; at(v) alone is the
  // single server's price.
  const PriceCurves curves;
  LoadView busy{0, 0, 0.5};
  busy.engine_kv = 0.6;
  const Footprint f{2000, 0.005};
  const double slope = 32 * 12.3 * 1.52 * std::pow(0.6, 0.52);
  EXPECT_NEAR(curves.at(busy).kv, slope / (1 - 0.6), 1e-9);
  EXPECT_NEAR(curves.at(busy, 200).kv, slope, 1e-6);
  EXPECT_NEAR(curves.cost(busy, f), curves.at(busy).slot * 2000 + slope * 0.005 * 2000, 1e-3);
  // Over four batches each worker holds a quarter of the pool: the same fill is 2% of its
  // worker's, 50 places.
  PriceCurves four;
  four.set_prefill(0, 4);
  EXPECT_NEAR(four.cost(busy, f), four.at(busy).slot * 2000 + four.at(busy, 50).kv * 0.005 * 2000,
              1e-9);
  // A fill as large as the whole pool of its worker has one place.
  const Footprint whole{2000, 1.0};
  EXPECT_NEAR(curves.cost(busy, whole), curves.at(busy).slot * 2000 + curves.at(busy).kv * 2000,
              1e-6);
}

RC_GTEST_PROP(Prices, KvCongestionIsMonotoneInUse, ()) {
  const double places = *rc::gen::inRange(1, 5000);
  const double u = *rc::gen::inRange(0, 990) / 1000.0;
  const double more = std::min(0.99, u + *rc::gen::inRange(0, 100) / 1000.0);
  const double a = congestion(u, places), b = congestion(more, places);
  RC_ASSERT(a >= 1);
  RC_ASSERT(std::isfinite(b));
  RC_ASSERT(b >= a - 1e-12);
  RC_ASSERT(a <= congestion(u, 1) + 1e-9);  // more places never wait longer
}

// Fills count as slot use like any request, and the slot price steepens as they fill the
// slots. How full the fill budget is does not raise it further: that is a shortage of fill
// slots, not a delay to canonical work (the controller's reserve price rations the budget).
// On an idle engine the price stays zero.
TEST(Prices, FillsCountAsSlotUseNotAsScarcity) {
  const PriceCurves curves;  // 64 slots, 16 fills
  const double empty = curves.at(LoadView{0, 0, 0.1}).slot;
  const double full = curves.at(LoadView{1.0, 0, 0.1}).slot;
  // rho 0.1: 6.4 canonical requests; a full budget adds 16 fills to the slots in use.
  const double per = 6.4 * 0.00025 + 0.045 / 16;
  EXPECT_NEAR(empty, per / (1 - 0.1), 1e-12);
  EXPECT_NEAR(full, per / (1 - (6.4 + 16) / 64), 1e-12);
  EXPECT_EQ(curves.at(LoadView{1.0, 0, 0}).slot, 0);
}

// A fill likely to be consumed is a caller's request started early: another fill that stretches
// it delays that caller as much as it would a canonical request. It counts among the work the
// slot, KV and prompt prices are charged for, weighted by its chance of being consumed, and as
// slot use once (it is one of the fills). An idle engine with fills nobody will read is free.
TEST(Prices, FillsLikelyToBeConsumedCountAsWorkACallerWaitsFor) {
  PriceCurves curves;  // 64 slots, 16 fills
  curves.set_prefill(0.157, 4);
  LoadView v{0.5, 0, 0.1};  // 6.4 canonical requests, 8 fills in flight
  v.engine_kv = 0.2;
  LoadView likely = v;
  likely.demanded = 6;  // 6 of the 8 fills are expected to be consumed
  const Prices b = curves.at(likely);
  const double waited = 6.4 + 6;
  const double u = (6.4 + 8) / 64;  // the 8 fills are slot use, counted once
  EXPECT_NEAR(b.slot, (waited / 4 * 0.00025 + 4 * 0.045 / 16) / (1 - u), 1e-12);
  EXPECT_NEAR(b.kv, waited * 12.3 * 1.52 * std::pow(0.2, 0.52) / (1 - 0.2), 1e-9);
  EXPECT_NEAR(b.prefill, waited / 4 * 0.157 / (1 - u), 1e-12);
  EXPECT_GT(b.kv, curves.at(v).kv);
  // More expected consumption than fills in flight is clamped to the fills.
  LoadView over = v;
  over.demanded = 50;
  LoadView all = v;
  all.demanded = 8;
  EXPECT_EQ(curves.at(over).slot, curves.at(all).slot);
  // No canonical work and no fill anyone will read: nothing to delay.
  LoadView unread{0.5, 0, 0};
  EXPECT_EQ(curves.cost(unread, Footprint{2000, 0.005, 300}), 0);
  unread.demanded = 2;
  EXPECT_GT(curves.cost(unread, Footprint{2000, 0.005, 300}), 0);
}

// The interference grows with all the KV in use, canonical requests' too: on a pool the
// engines report 60% full, a unit of KV is priced at the curve's slope at 60%, not at the
// fills' own 3% floor, and steepened by the 60% in use; unreported, the fills' share stands.
TEST(Prices, KvIsPricedAtTheEnginesOccupancy) {
  const PriceCurves curves;
  LoadView busy{0, 0, 0.5};
  busy.engine_kv = 0.6;
  const double at = 32 * 12.3 * 1.52 * std::pow(0.6, 0.52) / (1 - 0.6);
  EXPECT_NEAR(curves.at(busy).kv, at, 1e-9);
  EXPECT_NEAR(curves.at(busy).kv / curves.at(LoadView{0, 0, 0.5}).kv,
              std::pow(0.6 / 0.03, 0.52) / (1 - 0.6), 1e-9);
  // A fill's projected KV adds to the engines' occupancy when they report one.
  EXPECT_NEAR(curves.project(busy, Footprint{1000, 0.05}).engine_kv, 0.65, 1e-12);
  EXPECT_EQ(curves.project(LoadView{0, 0, 0.5}, Footprint{1000, 0.05}).engine_kv, 0);
}

// Under chunked prefill a fill's prompt stalls every request decoding in the batch it joins, by
// its whole prefill time: the price is per prompt token, counted against the canonical requests
// of one batch, steepened by the slots in use as the slot price is (near the compute-bound batch
// the forward passes it takes delay every step after it), and zero where the engines do not say
// what a prompt token costs.
TEST(Prices, APromptStallsTheCanonicalRequestsOfItsBatch) {
  PriceCurves curves;              // 64 slots
  const LoadView half{0, 0, 0.5};  // 32 canonical requests
  const Footprint decode{2000, 0.005};
  Footprint prompted = decode;
  prompted.prompt_tokens = 300;
  EXPECT_EQ(curves.at(half).prefill, 0);
  EXPECT_EQ(curves.cost(half, prompted), curves.cost(half, decode));  // unknown: unpriced
  curves.set_prefill(0.157, 1);
  // Half the slots in use: the stall of 32 requests, doubled.
  EXPECT_NEAR(curves.at(half).prefill, 32 * 0.157 / (1 - 0.5), 1e-12);
  EXPECT_NEAR(curves.cost(half, prompted) - curves.cost(half, decode), 300 * 32 * 0.157 / 0.5,
              1e-9);
  // Four batches: a prompt joins one of them, with a quarter of the canonical requests.
  curves.set_prefill(0.157, 4);
  EXPECT_NEAR(curves.at(half).prefill, 8 * 0.157 / 0.5, 1e-12);
  // A full fill budget (16 fills nobody will read) stalls nobody itself, but takes slots: with
  // 48 of 64 in use the same stall costs twice as much as with 32.
  EXPECT_NEAR(curves.at(LoadView{1.0, 0.9, 0.5}).prefill, 2 * curves.at(half).prefill, 1e-12);
  // The factor is capped where the slot price's is (use 0.95: twenty times the stall).
  EXPECT_NEAR(curves.at(LoadView{1.0, 0, 1.0}).prefill, 16 * 0.157 / (1 - 0.95), 1e-9);
  EXPECT_EQ(curves.at(LoadView{0.5, 0.5, 0}).prefill, 0);  // nobody to stall
  // Nonsense from an engine: no stall, at least one batch.
  curves.set_prefill(-1, 0);
  EXPECT_EQ(curves.params().prefill_ms_per_token, 0);
  EXPECT_EQ(curves.params().batches, 1);
}

// A fill that is cancelled before its end (an exclusive branch's loser) slows the batch and
// holds its KV only while it runs: the slot and KV terms scale with the share of its slot time
// it holds them for. Its prompt was prefilled at its start and is charged whole.
TEST(Prices, AFillCancelledEarlyIsChargedForTheTimeItRan) {
  PriceCurves curves;
  curves.set_prefill(0.157, 4);
  const LoadView half{0, 0, 0.5};
  Footprint whole{2000, 0.005};
  whole.prompt_tokens = 300;
  Footprint decode_only = whole;
  decode_only.prompt_tokens = 0;
  Footprint prompt_only = whole;
  prompt_only.slot_ms = 0;
  const double decode = curves.cost(half, decode_only);
  const double prompt = curves.cost(half, prompt_only);
  ASSERT_GT(decode, 0);
  ASSERT_GT(prompt, 0);
  EXPECT_NEAR(curves.cost(half, whole), decode + prompt, 1e-9);
  Footprint quarter = whole;
  quarter.unused_share = 0.25;
  EXPECT_NEAR(curves.cost(half, quarter), 0.25 * decode + prompt, 1e-9);
  quarter.unused_share = 0;  // cancelled at once: its prompt alone
  EXPECT_NEAR(curves.cost(half, quarter), prompt, 1e-9);
  quarter.unused_share = 7;  // nonsense: never more than the whole run
  EXPECT_NEAR(curves.cost(half, quarter), decode + prompt, 1e-9);
}

TEST(Prices, ProjectionAddsOneFillAndItsKv) {
  const PriceCurves curves;
  const LoadView v = curves.project(LoadView{0.25, 0.1, 0.4}, Footprint{1000, 0.05});
  EXPECT_NEAR(v.fill, 0.25 + 1.0 / 16, 1e-12);
  EXPECT_NEAR(v.kv, 0.1 + 0.05 / 0.25, 1e-12);
  EXPECT_EQ(v.rho, 0.4);
}

// Past the largest stretch Figure 5b measured the fit is not extrapolated: where the load the
// engines report already stretches a batch that far, a fill's KV adds no stretch and is free
// (the simulated engine's truth is capped the same way). Below it the price is the curve's.
TEST(Prices, KvIsFreeWhereTheEnginesLoadIsPastTheLargestMeasuredStretch) {
  PriceCurves capped;
  const PriceCurves beyond = extrapolated();
  LoadView v{0, 0, 0.5};                         // 32 canonical requests
  v.engine_kv = 0.3;                             // 12.3 x 0.3^1.52 = 1.97: past +145.6%
  EXPECT_FALSE(capped.past_measured_stretch());  // no reading yet
  EXPECT_EQ(capped.at(v).kv, beyond.at(v).kv);
  capped.set_engine_load(0.5, 0.1);  // 0.045 + 32 x 0.00025 + 12.3 x 0.1^1.52 = 0.43
  EXPECT_FALSE(capped.past_measured_stretch());
  EXPECT_GT(capped.at(v).kv, 0);
  EXPECT_EQ(capped.at(v).kv, beyond.at(v).kv);
  capped.set_engine_load(0.5, 0.3);
  EXPECT_TRUE(capped.past_measured_stretch());
  EXPECT_EQ(capped.at(v).kv, 0);
  EXPECT_GT(beyond.at(v).kv, 0);
  EXPECT_EQ(capped.at(v).slot, beyond.at(v).slot);  // the slot price is the curve's
  const Footprint f{2000, 0.005, 300};
  EXPECT_EQ(capped.cost(v, f), capped.at(v).slot * 2000);
  EXPECT_LT(capped.cost(v, f), beyond.cost(v, f));
  // Canonical requests alone can take a batch there too: 32 per batch stretch it by 5.3%,
  // 5,800 by 149.5%.
  PriceParams big;
  big.decode_slots = 6000;
  PriceCurves many(big);
  many.set_engine_load(5800.0 / 6000, 0);
  EXPECT_TRUE(many.past_measured_stretch());
  PriceCurves off = extrapolated();
  off.set_engine_load(0.5, 0.3);
  EXPECT_FALSE(off.past_measured_stretch());
}

// Proposition A.8: the prices are monotone in every component of the view an admission
// projects, with the fit extrapolated and, where it is not, whatever the engines' reading (the
// reading, not the projection, decides whether the KV past the figure is free).
RC_GTEST_PROP(Prices, AreMonotoneComponentwise, ()) {
  const bool capped = *rc::gen::arbitrary<bool>();
  PriceCurves curves = capped ? PriceCurves() : extrapolated();
  curves.set_prefill(*rc::gen::inRange(0, 1000) / 1000.0, *rc::gen::inRange(1, 9));
  const auto unit = [] { return *rc::gen::inRange(0, 1001) / 1000.0; };
  if (capped) curves.set_engine_load(unit(), unit());
  LoadView a{unit(), unit(), unit(), unit()};
  a.demanded = unit() * 16;  // up to the whole default fill budget
  LoadView b = a;
  b.demanded = a.demanded + unit() * 4;
  b.fill = std::min(1.0, a.fill + unit() / 4);
  b.kv = std::min(1.0, a.kv + unit() / 4);
  b.rho = std::min(1.0, a.rho + unit() / 4);
  b.engine_kv = std::min(1.0, a.engine_kv + unit() / 4);
  const Prices pa = curves.at(a);
  const Prices pb = curves.at(b);
  RC_ASSERT(pb.slot >= pa.slot - 1e-12);
  RC_ASSERT(pb.kv >= pa.kv - 1e-12);
  RC_ASSERT(pb.prefill >= pa.prefill - 1e-12);
  if (capped) {
    const double expected = curves.past_measured_stretch() ? 0.0 : extrapolated().at(b).kv;
    RC_ASSERT(pb.kv == expected);
  }
}

// -- Eq. 6 and 7 --------------------------------------------------------------------------------

TEST(FillGate, UtilityIsEquation6) {
  const PriceCurves curves;
  const LoadView v{0, 0, 0.5};
  const PricedCandidate c{0.7, 1500, Footprint{2000, 0.005}};
  const double cost = curves.cost(v, c.footprint);
  EXPECT_NEAR(utility(c, v, curves), 0.7 * 1500 - 0.3 * cost, 1e-9);
}

TEST(FillGate, ThresholdIsEquation7AndRejects0Over0) {
  EXPECT_NEAR(*threshold(1500, 500), 0.25, 1e-12);
  EXPECT_EQ(*threshold(0, 500), 1.0);   // no gain: never worth it
  EXPECT_EQ(*threshold(1500, 0), 0.0);  // no cost: any chance will do
  EXPECT_FALSE(threshold(0, 0));        // 0/0
  const PriceCurves curves;
  const PricedCandidate nothing{0.9, 0, Footprint{1000, 0.01}};
  EXPECT_EQ(utility(nothing, LoadView{0, 0, 0}, curves), 0);  // and U = 0 is refused:
  EXPECT_TRUE(
      sequential_repricing(std::vector{nothing}, LoadView{0, 0, 0}, curves, Budget{4, 1}).empty());
}

RC_GTEST_PROP(FillGate, PositiveUtilityExactlyAboveTheThreshold, ()) {
  const double p = *rc::gen::inRange(0, 1001) / 1000.0;
  const double g = *rc::gen::inRange(0, 10000);
  const double c = *rc::gen::inRange(0, 10000);
  const auto t = threshold(g, c);
  const double u = p * g - (1 - p) * c;
  if (!t) {
    RC_ASSERT(u == 0);
  } else if (std::abs(p - *t) > 1e-9) {
    RC_ASSERT((u > 0) == (p > *t));
  }
}

// -- sequential repricing (Algorithm 1) -----------------------------------------------------------

TEST(SequentialRepricing, AdmitsByUtilityAndStopsAtTheFirstNonPositiveMaximum) {
  const PriceCurves curves;
  const LoadView v{0, 0, 0.3};
  const std::vector<PricedCandidate> c = {
      {0.30, 2000, Footprint{2000, 0.01}},
      {0.80, 2000, Footprint{2000, 0.01}},  // the best: admitted first
      {0.02, 2000, Footprint{2000, 0.01}},  // never positive
  };
  const auto steps = sequential_repricing(c, v, curves, Budget{8, 1});
  ASSERT_GE(steps.size(), 1u);
  EXPECT_EQ(steps[0].index, 1u);
  EXPECT_NEAR(steps[0].utility, utility(c[1], v, curves), 1e-9);
  for (const Step& s : steps)
    EXPECT_NE(s.index, 2u);
}

TEST(SequentialRepricing, HardFeasibilityBinds) {
  const PriceCurves curves;
  const std::vector<PricedCandidate> c = {
      {0.9, 3000, Footprint{500, 0.02}},
      {0.8, 3000, Footprint{500, 0.02}},
      {0.7, 3000, Footprint{500, 0.001}},
  };
  EXPECT_EQ(sequential_repricing(c, LoadView{}, curves, Budget{1, 1}).size(), 1u);
  const auto kv_bound = sequential_repricing(c, LoadView{}, curves, Budget{8, 0.025});
  ASSERT_EQ(kv_bound.size(), 2u);  // the second 2% candidate does not fit after the first
  EXPECT_EQ(kv_bound[0].index, 0u);
  EXPECT_EQ(kv_bound[1].index, 2u);
}

// KV shares that fill the budget exactly fit, whatever the rounding of the subtractions
// before them: 0.3 - 0.1 - 0.1 is just under 0.1 in doubles.
TEST(SequentialRepricing, FootprintsThatFillTheKvBudgetExactlyAllFit) {
  const PriceCurves curves;
  const std::vector<PricedCandidate> c = {
      {0.9, 3000, Footprint{500, 0.1}},
      {0.9, 3000, Footprint{500, 0.1}},
      {0.9, 3000, Footprint{500, 0.1}},
  };
  ASSERT_LT(0.3 - 0.1 - 0.1, 0.1);
  EXPECT_EQ(sequential_repricing(c, LoadView{}, curves, Budget{8, 0.3}).size(), 3u);
  EXPECT_EQ(exact_oracle(c, LoadView{}, curves, Budget{8, 0.3}).order.size(), 3u);
  EXPECT_EQ(admit_fills(c, LoadView{}, curves, Budget{8, 0.3}).size(), 3u);
}

TEST(SequentialRepricing, AFailedReservationRefusesOnlyThatCandidate) {
  const PriceCurves curves;
  const std::vector<PricedCandidate> c = {{0.9, 3000, Footprint{500, 0.01}},
                                          {0.8, 3000, Footprint{500, 0.01}}};
  Hooks hooks;
  hooks.reserve = [](std::size_t i) { return i != 0; };
  const auto steps = sequential_repricing(c, LoadView{}, curves, Budget{8, 1}, hooks);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].index, 1u);
}

TEST(SequentialRepricing, AnAuditAdmitsOneRefusedCandidateThenStops) {
  const PriceCurves curves;
  const LoadView v{0.5, 0.5, 0.9};
  const std::vector<PricedCandidate> c = {{0.05, 1000, Footprint{3000, 0.01}},
                                          {0.04, 1000, Footprint{3000, 0.01}}};
  ASSERT_TRUE(sequential_repricing(c, v, curves, Budget{8, 1}).empty());
  int asked = 0;
  Hooks hooks;
  hooks.audit = [&](std::size_t) { return ++asked == 1; };
  const auto steps = sequential_repricing(c, v, curves, Budget{8, 1}, hooks);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].audit);
  EXPECT_LE(steps[0].utility, 0);
  EXPECT_EQ(asked, 1);
}

struct Snapshot {
  std::vector<PricedCandidate> candidates;
  LoadView view;
  Budget budget;
};

Snapshot random_snapshot(int max_k) {
  Snapshot s;
  const int k = *rc::gen::inRange(1, max_k + 1);
  const auto unit = [] { return *rc::gen::inRange(0, 1001) / 1000.0; };
  s.view = LoadView{unit() * 0.8, unit() * 0.8, unit() * 0.95};
  for (int i = 0; i < k; ++i) {
    PricedCandidate c;
    c.p = unit();
    c.footprint.slot_ms = *rc::gen::inRange(100, 6000);
    c.footprint.kv_share = *rc::gen::inRange(1, 40) / 1000.0;
    c.gain_ms = *rc::gen::inRange(0, 6000);
    s.candidates.push_back(c);
  }
  s.budget = Budget{*rc::gen::inRange(1, k + 2), unit() * 0.2};
  return s;
}

// Proposition A.8: after an admission, no remaining candidate's utility rises.
RC_GTEST_PROP(SequentialRepricing, NoRemainingUtilityRisesAfterAnAdmission, ()) {
  const PriceCurves curves;
  const Snapshot s = random_snapshot(8);
  LoadView v = s.view;
  std::vector<double> before;
  for (const auto& c : s.candidates)
    before.push_back(utility(c, v, curves));
  for (const Step& step : sequential_repricing(s.candidates, s.view, curves, s.budget)) {
    RC_ASSERT(step.utility > 0);  // every admission is value-positive at reservation
    v = curves.project(v, s.candidates[step.index].footprint);
    for (std::size_t i = 0; i < s.candidates.size(); ++i) {
      const double now = utility(s.candidates[i], v, curves);
      RC_ASSERT(now <= before[i] + 1e-9);
      before[i] = now;
    }
  }
}

// -- the exact oracle ---------------------------------------------------------------------------

TEST(Oracle, OrderMattersAndTheOracleFindsTheBestOrder) {
  const PriceCurves curves;
  const LoadView v{0, 0, 0.5};
  const std::vector<PricedCandidate> c = {
      {0.95, 800, Footprint{800, 0.02}},  // nearly certain: its cost weighs little
      {0.40, 300, Footprint{300, 0.015}},
  };
  const std::vector<std::size_t> ab{0, 1};
  const std::vector<std::size_t> ba{1, 0};
  const OracleResult o = exact_oracle(c, v, curves, Budget{8, 1});
  EXPECT_NEAR(o.best,
              std::max({0.0, sequence_utility(c, ab, v, curves), sequence_utility(c, ba, v, curves),
                        utility(c[0], v, curves), utility(c[1], v, curves)}),
              1e-9);
  EXPECT_NEAR(sequence_utility(c, o.order, v, curves), o.best, 1e-9);
}

// The dynamic program against every ordered subset, brute force.
RC_GTEST_PROP(Oracle, EqualsBruteForceOverOrderedSubsets, ()) {
  const PriceCurves curves;
  const Snapshot s = random_snapshot(6);
  const std::size_t k = s.candidates.size();
  double best = 0;
  for (std::uint32_t set = 1; set < (1u << k); ++set) {
    std::vector<std::size_t> order;
    double kv = 0;
    for (std::size_t i = 0; i < k; ++i) {
      if (set & (1u << i)) {
        order.push_back(i);
        kv += s.candidates[i].footprint.kv_share;
      }
    }
    if (static_cast<int>(order.size()) > s.budget.fills || kv > s.budget.kv_share + kKvSlack)
      continue;
    do {
      best = std::max(best, sequence_utility(s.candidates, order, s.view, curves));
    } while (std::next_permutation(order.begin(), order.end()));
  }
  const OracleResult o = exact_oracle(s.candidates, s.view, curves, s.budget);
  RC_ASSERT(std::abs(o.best - best) < 1e-6 * std::max(1.0, best));
  RC_ASSERT(std::abs(sequence_utility(s.candidates, o.order, s.view, curves) - o.best) <
            1e-6 * std::max(1.0, best));
}

// The refinements only ever add utility, and stay within the budgets.
RC_GTEST_PROP(AdmitFills, NeverWorseThanAlgorithm1AndWithinBudget, ()) {
  const PriceCurves curves;
  const Snapshot s = random_snapshot(8);
  const auto alg1 = sequential_repricing(s.candidates, s.view, curves, s.budget);
  const auto gate = admit_fills(s.candidates, s.view, curves, s.budget);
  const auto j = [&](const std::vector<Step>& steps) {
    std::vector<std::size_t> order;
    for (const Step& st : steps)
      order.push_back(st.index);
    return sequence_utility(s.candidates, order, s.view, curves);
  };
  RC_ASSERT(j(gate) >= j(alg1) - 1e-9);
  RC_ASSERT(static_cast<int>(gate.size()) <= s.budget.fills);
  double kv = 0;
  for (const Step& st : gate)
    kv += s.candidates[st.index].footprint.kv_share;
  RC_ASSERT(kv <= s.budget.kv_share + kKvSlack);
  const OracleResult o = exact_oracle(s.candidates, s.view, curves, s.budget);
  RC_ASSERT(j(gate) <= o.best + 1e-6 * std::max(1.0, o.best));
}

// -- Beta posteriors ------------------------------------------------------------------------------

TEST(Beta, QuantilesOfKnownDistributions) {
  const BetaPosterior uniform{1, 1};
  const BetaPosterior rising{2, 1};  // F(x) = x^2
  const BetaPosterior falling{1, 2};
  EXPECT_NEAR(uniform.quantile(0.9), 0.9, 1e-9);
  EXPECT_NEAR(rising.quantile(0.81), 0.9, 1e-9);
  EXPECT_NEAR(falling.quantile(0.19), 1 - std::sqrt(0.81), 1e-9);
  EXPECT_NEAR((BetaPosterior{3, 7}.mean()), 0.3, 1e-12);
}

TEST(Beta, RankSelectionIsOptimisticThenConcentrates) {
  RankSelection sel;
  EXPECT_EQ(sel.upper(0), 0.5);  // nothing resolved: the prior mean
  for (int i = 0; i < 200; ++i) {
    sel.observe(0, i % 10 != 0);  // rank 0 is selected 90% of the time
    sel.observe(1, i % 10 == 0);
    sel.next_branch();
  }
  EXPECT_NEAR(sel.level(), 0.99, 1e-12);
  EXPECT_GT(sel.upper(0), 0.9);   // above the empirical rate: optimistic
  EXPECT_LT(sel.upper(0), 0.96);  // but concentrated
  EXPECT_LT(sel.upper(1), 0.2);
  EXPECT_NEAR(sel.upper(7), 0.99, 1e-9);  // never observed: the uniform prior's 0.99 quantile
  EXPECT_EQ(&sel.posterior(40), &sel.posterior(RankSelection::kRanks - 1));
}

}  // namespace
}  // namespace dynrt::admission
