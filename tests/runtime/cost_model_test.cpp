// The cost model: the prior, the EWMA of engine time and tokens per stage, invalid readings
// ignored, and a chain's gain G and footprint (slot time, KV share).
#include "runtime/admission/cost_model.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <vector>

namespace dynrt::admission {
namespace {

using std::chrono::milliseconds;

const Hash128 kRetrieve = xxh3_128("retrieve");
const Hash128 kAnswer = xxh3_128("answer");
const Hash128 kUnseen = xxh3_128("unseen");

CostModelConfig config() {
  CostModelConfig c;
  c.prior_engine_ms = 1500;
  c.prior_tokens = 500;
  c.memory = 0.25;
  c.kv_tokens = 10'000;
  return c;
}

TEST(CostModel, AnUnseenStageUsesThePrior) {
  const CostModel m(config());
  const StageCost c = m.estimate(kUnseen);
  EXPECT_DOUBLE_EQ(c.engine_ms, 1500);
  EXPECT_DOUBLE_EQ(c.tokens, 500);
  EXPECT_EQ(c.samples, 0u);
}

TEST(CostModel, TheDefaultPriorIsATypicalModelCall) {
  const CostModel m;
  const StageCost c = m.estimate(kUnseen);
  EXPECT_DOUBLE_EQ(c.engine_ms, CostModelConfig{}.prior_engine_ms);
  EXPECT_DOUBLE_EQ(c.tokens, CostModelConfig{}.prior_tokens);
}

TEST(CostModel, TheFirstObservationReplacesThePrior) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(400), 120);
  const StageCost c = m.estimate(kAnswer);
  EXPECT_DOUBLE_EQ(c.engine_ms, 400);
  EXPECT_DOUBLE_EQ(c.tokens, 120);
  EXPECT_EQ(c.samples, 1u);
  // Other stages keep the prior.
  EXPECT_DOUBLE_EQ(m.estimate(kRetrieve).engine_ms, 1500);
}

TEST(CostModel, LaterObservationsAreAnEwmaWithTheConfiguredMemory) {
  CostModel m(config());  // memory 0.25
  m.observe(kAnswer, milliseconds(400), 100);
  m.observe(kAnswer, milliseconds(800), 300);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).engine_ms, 400 + 0.25 * (800 - 400));  // 500
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).tokens, 100 + 0.25 * (300 - 100));     // 150
  m.observe(kAnswer, milliseconds(100), 50);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).engine_ms, 500 + 0.25 * (100 - 500));  // 400
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).tokens, 150 + 0.25 * (50 - 150));      // 125
  EXPECT_EQ(m.estimate(kAnswer).samples, 3u);
}

TEST(CostModel, TheMemoryIsTheWeightOfTheNewestExecution) {
  CostModelConfig c = config();
  c.memory = 1;
  CostModel forgetful(c);
  forgetful.observe(kAnswer, milliseconds(400), 100);
  forgetful.observe(kAnswer, milliseconds(900), 700);
  EXPECT_DOUBLE_EQ(forgetful.estimate(kAnswer).engine_ms, 900);
  EXPECT_DOUBLE_EQ(forgetful.estimate(kAnswer).tokens, 700);

  c.memory = 0;
  CostModel stubborn(c);
  stubborn.observe(kAnswer, milliseconds(400), 100);
  stubborn.observe(kAnswer, milliseconds(900), 700);
  EXPECT_DOUBLE_EQ(stubborn.estimate(kAnswer).engine_ms, 400);
  EXPECT_DOUBLE_EQ(stubborn.estimate(kAnswer).tokens, 100);
}

TEST(CostModel, SubMillisecondEngineTimeIsKept) {
  CostModel m(config());
  m.observe(kAnswer, std::chrono::microseconds(1500), 10);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).engine_ms, 1.5);
}

TEST(CostModel, ANegativeEngineTimeIsIgnored) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(-5), 10);
  EXPECT_EQ(m.estimate(kAnswer).samples, 0u);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).engine_ms, 1500);  // still the prior
  m.observe(kAnswer, milliseconds(400), 100);
  m.observe(kAnswer, milliseconds(-5), 100);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).engine_ms, 400);
  EXPECT_EQ(m.estimate(kAnswer).samples, 1u);
}

TEST(CostModel, NegativeOrNanTokensAreIgnored) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(400), -1);
  m.observe(kAnswer, milliseconds(400), std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(m.estimate(kAnswer).samples, 0u);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).tokens, 500);  // still the prior
  m.observe(kAnswer, milliseconds(400), 100);
  m.observe(kAnswer, milliseconds(800), std::numeric_limits<double>::quiet_NaN());
  m.observe(kAnswer, milliseconds(800), -100);
  const StageCost c = m.estimate(kAnswer);
  EXPECT_DOUBLE_EQ(c.engine_ms, 400);  // the whole reading is dropped, not just its tokens
  EXPECT_DOUBLE_EQ(c.tokens, 100);
  EXPECT_EQ(c.samples, 1u);
}

TEST(CostModel, ZeroIsAValidObservation) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(0), 0);
  EXPECT_EQ(m.estimate(kAnswer).samples, 1u);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).engine_ms, 0);
  EXPECT_DOUBLE_EQ(m.estimate(kAnswer).tokens, 0);
}

TEST(CostModel, GainSumsTheChainsEngineTime) {
  CostModel m(config());
  m.observe(kRetrieve, milliseconds(200), 100);
  m.observe(kAnswer, milliseconds(700), 300);
  const std::vector<Hash128> chain{kRetrieve, kAnswer, kUnseen};
  EXPECT_DOUBLE_EQ(m.gain_ms(chain), 200 + 700 + 1500);
  EXPECT_DOUBLE_EQ(m.gain_ms(std::vector<Hash128>{kAnswer}), 700);
  EXPECT_DOUBLE_EQ(m.gain_ms({}), 0);
}

TEST(CostModel, AStageRepeatedInAChainCountsEachTime) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(300), 100);
  EXPECT_DOUBLE_EQ(m.gain_ms(std::vector<Hash128>{kAnswer, kAnswer}), 600);
}

TEST(CostModel, FootprintHoldsASlotForTheWholeChain) {
  CostModel m(config());
  m.observe(kRetrieve, milliseconds(200), 1000);
  m.observe(kAnswer, milliseconds(700), 3000);
  const Footprint f = m.footprint(std::vector<Hash128>{kRetrieve, kAnswer});
  EXPECT_DOUBLE_EQ(f.slot_ms, 900);
  EXPECT_DOUBLE_EQ(f.slot_ms, m.gain_ms(std::vector<Hash128>{kRetrieve, kAnswer}));
}

// Every stage of a fill's chain has its prompt prefilled, so the footprint sums their prompt
// tokens; an unseen stage counts the prior's.
TEST(CostModel, FootprintPrefillsEveryStagesPrompt) {
  CostModelConfig c = config();
  c.prior_prompt_tokens = 250;
  CostModel m(c);
  m.observe(kRetrieve, milliseconds(200), 1000, 600);
  m.observe(kAnswer, milliseconds(700), 3000, 2000);
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kRetrieve, kAnswer}).prompt_tokens, 2600);
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kRetrieve, kUnseen}).prompt_tokens, 850);
  // An EWMA like the rest, with the configured memory (0.25).
  m.observe(kRetrieve, milliseconds(200), 1000, 200);
  EXPECT_DOUBLE_EQ(m.estimate(kRetrieve).prompt_tokens, 600 + 0.25 * (200 - 600));
  // A negative or NaN count is ignored, the whole observation with it.
  m.observe(kRetrieve, milliseconds(900), 1000, -5);
  m.observe(kRetrieve, milliseconds(900), 1000, std::numeric_limits<double>::quiet_NaN());
  EXPECT_DOUBLE_EQ(m.estimate(kRetrieve).prompt_tokens, 500);
  EXPECT_DOUBLE_EQ(m.estimate(kRetrieve).engine_ms, 200);
  EXPECT_EQ(m.estimate(kRetrieve).samples, 2u);
}

TEST(CostModel, KvShareIsTheLargestStagesTokensOverThePool) {
  CostModel m(config());  // kv_tokens 10'000
  m.observe(kRetrieve, milliseconds(200), 1000);
  m.observe(kAnswer, milliseconds(700), 3000);
  // One stage of the chain is resident at a time: the max, not the sum.
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kRetrieve, kAnswer}).kv_share, 0.3);
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kAnswer, kRetrieve}).kv_share, 0.3);
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kRetrieve}).kv_share, 0.1);
  // An unseen stage brings its prior tokens (500).
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kUnseen}).kv_share, 0.05);
}

// A request's KV grows from its prompt to its prompt and completion as it decodes: it is priced
// on its mean residency, the prompt plus half the completion, and reserved at its peak.
TEST(CostModel, KvIsPricedOnTheMeanResidencyOverTheDecode) {
  CostModelConfig c = config();  // kv_tokens 10'000
  c.prior_prompt_tokens = 100;
  CostModel m(c);
  m.observe(kRetrieve, milliseconds(200), 1000, 600);
  m.observe(kAnswer, milliseconds(700), 3000, 2000);
  const Footprint f = m.footprint(std::vector<Hash128>{kRetrieve, kAnswer});
  EXPECT_DOUBLE_EQ(f.kv_share, 0.3);
  EXPECT_DOUBLE_EQ(f.kv_mean_share, (2000 + 1000 / 2.0) / 10'000);  // the larger stage's
  // An unseen stage: the prior's 500 tokens, 100 of them prompt.
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kUnseen}).kv_mean_share, 0.03);
  // A count of prompt tokens above the total (a client's miscount) is held to the total.
  m.observe(kRetrieve, milliseconds(200), 1000, 5000);
  EXPECT_LE(m.footprint(std::vector<Hash128>{kRetrieve}).kv_mean_share,
            m.footprint(std::vector<Hash128>{kRetrieve}).kv_share);
}

TEST(CostModel, KvShareIsCappedAtTheWholePool) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(700), 25'000);
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kAnswer}).kv_share, 1.0);
}

TEST(CostModel, AnEmptyChainHasNoFootprint) {
  const CostModel m(config());
  const Footprint f = m.footprint({});
  EXPECT_DOUBLE_EQ(f.slot_ms, 0);
  EXPECT_DOUBLE_EQ(f.kv_share, 0);
}

TEST(CostModel, SetKvTokensRescalesTheShare) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(700), 3000);
  m.set_kv_tokens(6000);
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kAnswer}).kv_share, 0.5);
}

TEST(CostModel, SetKvTokensIgnoresNonPositiveValues) {
  CostModel m(config());
  m.observe(kAnswer, milliseconds(700), 3000);
  m.set_kv_tokens(0);
  m.set_kv_tokens(-100);
  m.set_kv_tokens(std::numeric_limits<double>::quiet_NaN());
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kAnswer}).kv_share, 0.3);
}

TEST(CostModel, AConfiguredEmptyKvPoolGivesNoShare) {
  CostModelConfig c = config();
  c.kv_tokens = 0;
  const CostModel m(c);
  EXPECT_DOUBLE_EQ(m.footprint(std::vector<Hash128>{kUnseen}).kv_share, 0);
}

}  // namespace
}  // namespace dynrt::admission
