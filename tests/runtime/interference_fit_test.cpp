// The interference fit: reading the engines' stretch, over the price curves', from their
// inter-token latency (runtime/admission/interference_fit.hpp).
#include "runtime/admission/interference_fit.hpp"
#include "runtime/admission/controller.hpp"

#include <gtest/gtest.h>

#include <random>

namespace dynrt::admission {
namespace {

// An engine whose steps stretch `scale` times the curve, read every interval: its counters
// advanced by intervals of `gaps` gaps at a batch and KV drawn from the seeded generator, with
// prompts stalling the steps as chunked prefill does.
struct Engine {
  double scale = 1;
  double lone_ms = 20;
  double prefill_ms_per_token = 0.05;
  InterferenceModel curve;
  DecodeReading r;
  std::mt19937_64 rng{7};

  DecodeReading next(double batch_lo, double batch_hi, double kv_lo, double kv_hi) {
    std::uniform_real_distribution<double> b(batch_lo, batch_hi), k(kv_lo, kv_hi), prompts(0, 300);
    const double batch = b(rng), kv = k(rng);
    const double steps = 50;
    const double prompt = prompts(rng) * steps / 10;  // tokens over the interval
    const double step_ms = lone_ms * (1 + scale * curve.stretch(batch - 1, kv)) +
                           prefill_ms_per_token * prompt / steps;
    r.token_gaps += steps * batch;
    r.token_gap_s += steps * batch * step_ms / 1000;
    r.prompt_tokens += prompt;
    r.decode_steps += steps;
    r.lone_token_ms = lone_ms;
    r.prefill_ms_per_token = prefill_ms_per_token;
    r.batch = batch;
    r.kv = kv;
    return r;
  }
};

TEST(InterferenceFit, ReadsTheScaleTheEngineStretchesBy) {
  for (const double scale : {0.5, 1.0, 2.0, 3.0}) {
    Engine e;
    e.scale = scale;
    InterferenceFit fit;
    for (int i = 0; i < 200; ++i)
      fit.observe(0, e.next(4, 60, 0.05, 0.4));
    EXPECT_NEAR(fit.scale(), scale, 0.02 * scale) << scale;
    EXPECT_GT(fit.intervals(), 150u);
  }
}

TEST(InterferenceFit, FollowsAnEngineThatChanges) {
  Engine e;
  e.scale = 1;
  InterferenceFit fit;
  for (int i = 0; i < 200; ++i)
    fit.observe(0, e.next(4, 60, 0.05, 0.4));
  EXPECT_NEAR(fit.scale(), 1.0, 0.02);
  e.scale = 2;  // e.g. a longer context mix, or another GPU behind the same URL
  for (int i = 0; i < 400; ++i)
    fit.observe(0, e.next(4, 60, 0.05, 0.4));
  EXPECT_NEAR(fit.scale(), 2.0, 0.05);
}

// Engines of different models are each read against their own lone gap: a small model whose
// tokens come three times faster than a large one's, both stretching twice the curve, reads 2.
// (Their gaps summed against a mean lone gap would read neither.)
TEST(InterferenceFit, ReadsEachEngineAgainstItsOwnLoneGap) {
  Engine large, small;
  large.scale = small.scale = 2;
  large.lone_ms = 30;
  small.lone_ms = 10;
  small.rng.seed(11);
  InterferenceFit fit;
  for (int i = 0; i < 200; ++i) {
    fit.observe(0, large.next(4, 60, 0.05, 0.4));
    fit.observe(1, small.next(4, 60, 0.05, 0.4));
  }
  EXPECT_NEAR(fit.scale(), 2.0, 0.04);
}

// A lightly loaded engine: two or three requests per batch and a nearly empty pool, so the
// only stretch is the one-off cost of sharing a batch (about 0.05 of the curve). That is where
// fills are admitted most freely, and an engine that stretches twice the curve there is read
// as such, not left at the prior.
TEST(InterferenceFit, ReadsTheSharingOverheadOfALightlyLoadedEngine) {
  for (const double scale : {1.0, 2.0}) {
    Engine e;
    e.scale = scale;
    const double most = e.curve.stretch(2.0, 0.01);
    ASSERT_LT(most, 0.1);  // the light load this test is about: under the fit's former threshold
    InterferenceFit fit;
    for (int i = 0; i < 200; ++i)
      fit.observe(0, e.next(2, 3, 0, 0.01));
    EXPECT_GT(fit.intervals(), 150u) << scale;
    EXPECT_NEAR(fit.scale(), scale, 0.02 * scale);
  }
}

// Intervals that say nothing of the curve leave the prior (1) alone.
TEST(InterferenceFit, KeepsThePriorWithoutEvidence) {
  {
    Engine e;  // no lone gap stated: nothing to stretch from
    e.scale = 3;
    e.lone_ms = 0;
    InterferenceFit fit;
    for (int i = 0; i < 100; ++i)
      fit.observe(0, e.next(4, 60, 0.05, 0.4));
    EXPECT_EQ(fit.scale(), 1.0);
    EXPECT_EQ(fit.intervals(), 0u);
  }
  {
    Engine e;  // a nearly idle engine: one request alone, an empty pool
    e.scale = 3;
    InterferenceFit fit;
    for (int i = 0; i < 100; ++i)
      fit.observe(0, e.next(1, 1, 0, 0.001));
    EXPECT_EQ(fit.scale(), 1.0);
  }
  {
    Engine e;  // past the compute-bound batch its steps are compute, whatever the curve says
    e.scale = 3;
    InterferenceFit fit;
    for (int i = 0; i < 100; ++i) {
      DecodeReading r = e.next(40, 60, 0.05, 0.4);
      r.compute_batch = 30;
      fit.observe(0, r);
    }
    EXPECT_EQ(fit.scale(), 1.0);
  }
  {
    // Counters that go back (the engine restarted) or stand still are not an interval.
    InterferenceFit fit;
    DecodeReading r;
    r.lone_token_ms = 20;
    r.batch = 10;
    r.kv = 0.3;
    r.token_gaps = 1000;
    r.token_gap_s = 100;
    fit.observe(0, r);
    r.token_gaps = 10;
    r.token_gap_s = 1;
    fit.observe(0, r);
    fit.observe(0, r);
    EXPECT_EQ(fit.intervals(), 0u);
    EXPECT_EQ(fit.scale(), 1.0);
  }
}

// However wild the readings, the scale stays finite and within its bounds.
TEST(InterferenceFit, StaysWithinItsBounds) {
  InterferenceFit fit;
  DecodeReading r;
  r.lone_token_ms = 1;
  r.batch = 30;
  r.kv = 0.3;
  for (int i = 1; i <= 100; ++i) {
    r.token_gaps += 100;
    r.token_gap_s += 1e6;  // ten thousand seconds a token
    fit.observe(0, r);
  }
  EXPECT_EQ(fit.scale(), InterferenceFitParams{}.max_scale);
  InterferenceFit low;
  DecodeReading q = r;
  q.token_gaps = q.token_gap_s = 0;
  q.lone_token_ms = 1000;  // every gap shorter than a lone one
  for (int i = 1; i <= 100; ++i) {
    q.token_gaps += 100;
    q.token_gap_s += 1;
    low.observe(0, q);
  }
  EXPECT_EQ(low.scale(), InterferenceFitParams{}.min_scale);
}

struct Fixed : Clock {
  TimePoint now() const override { return TimePoint{}; }
};

// Two controllers at the same load, one with the default configuration and one with `other`,
// both reading an engine that stretches `scale` times the curve for 300 intervals.
struct TwoControllers {
  Fixed clock;
  Controller standard;
  Controller other;
  Prices before;  // the standard controller's prices before any reading
  TwoControllers(const AdmissionConfig& other_config, double scale)
      : standard(clock, AdmissionConfig{}), other(clock, other_config) {
    for (Controller* c : {&standard, &other}) {
      c->observe_load(0.5, 0, 0.2);
      c->set_prefill(0.05, 4);
    }
    before = standard.prices().at(standard.view());
    Engine e;
    e.scale = scale;
    for (int i = 0; i < 300; ++i) {
      const DecodeReading r = e.next(4, 60, 0.05, 0.4);
      standard.observe_decode(0, r);
      other.observe_decode(0, r);
    }
  }
};

// The controller's prices follow the fit: twice the stretch, twice the slot and KV prices; the
// prompt's stall, the engines' own figure, is unchanged. Switched off, nothing moves.
TEST(InterferenceFit, TheControllersPricesFollowIt) {
  AdmissionConfig off;
  off.fit_interference = false;
  TwoControllers t(off, 2.0);
  const Controller& fitted = t.standard;
  EXPECT_NEAR(fitted.stats().interference_scale, 2.0, 0.05);
  EXPECT_GT(fitted.stats().interference_intervals, 250u);
  const Prices after = fitted.prices().at(fitted.view());
  EXPECT_NEAR(after.slot / t.before.slot, fitted.stats().interference_scale, 1e-9);
  EXPECT_NEAR(after.kv / t.before.kv, fitted.stats().interference_scale, 1e-9);
  EXPECT_DOUBLE_EQ(after.prefill, t.before.prefill);
  EXPECT_EQ(t.other.stats().interference_scale, 1.0);
  EXPECT_DOUBLE_EQ(t.other.prices().at(t.other.view()).slot, t.before.slot);
}

// An engine that stretches less than the curve reads as such, but its fills get no cheaper:
// the prices take the fit from min_price_scale (1) up, unless configured lower.
TEST(InterferenceFit, PricesDoNotFallBelowTheCurveByDefault) {
  AdmissionConfig free;
  free.min_price_scale = 0;
  TwoControllers t(free, 0.5);
  EXPECT_NEAR(t.standard.stats().interference_scale, 0.5, 0.02);
  EXPECT_DOUBLE_EQ(t.standard.prices().at(t.standard.view()).slot, t.before.slot);
  EXPECT_NEAR(t.other.prices().at(t.other.view()).slot / t.before.slot,
              t.other.stats().interference_scale, 1e-9);
}

}  // namespace
}  // namespace dynrt::admission
