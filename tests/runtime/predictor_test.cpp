// Predictors: each kind's ranking (order, ties, the cap, distinct non-empty candidates) and the
// frequency predictor's online learning.
#include "runtime/predictor.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dynrt {
namespace {

using Ranking = std::vector<std::string>;

PredictorContext vocabulary(Ranking values, std::size_t max = 3) {
  PredictorContext ctx;
  ctx.vocabulary = std::move(values);
  ctx.max = max;
  return ctx;
}

PredictorContext observed(Ranking values, std::size_t max = 3) {
  PredictorContext ctx;
  ctx.observed = std::move(values);
  ctx.max = max;
  return ctx;
}

const Hash128 kCoordinate = xxh3_128("route");
const Hash128 kOther = xxh3_128("tool");

// -- static ---------------------------------------------------------------------------------

TEST(StaticPredictor, RanksTheVocabularyInTemplateOrder) {
  StaticPredictor p;
  EXPECT_EQ(p.name(), "static");
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"b", "a", "c"})), (Ranking{"b", "a", "c"}));
}

TEST(StaticPredictor, ReturnsAtMostMax) {
  StaticPredictor p;
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "b", "c", "d"}, 2)), (Ranking{"a", "b"}));
  EXPECT_TRUE(p.rank(kCoordinate, vocabulary({"a", "b"}, 0)).empty());
}

TEST(StaticPredictor, DropsDuplicatesAndEmptyValues) {
  StaticPredictor p;
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"", "a", "a", "", "b", "a", "c"})),
            (Ranking{"a", "b", "c"}));
}

TEST(StaticPredictor, DroppedValuesDoNotUseUpTheCap) {
  StaticPredictor p;
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "a", "", "b"}, 2)), (Ranking{"a", "b"}));
}

TEST(StaticPredictor, IgnoresObservedValuesAndLearnsNothing) {
  StaticPredictor p;
  PredictorContext ctx = vocabulary({"a"});
  ctx.observed = {"x", "y"};
  p.observe(kCoordinate, "y");
  EXPECT_EQ(p.rank(kCoordinate, ctx), (Ranking{"a"}));
  EXPECT_TRUE(p.rank(kCoordinate, PredictorContext{}).empty());
}

// -- frequency ------------------------------------------------------------------------------

TEST(FrequencyPredictor, WithoutObservationsKeepsTheVocabularyOrder) {
  FrequencyPredictor p;
  EXPECT_EQ(p.name(), "frequency");
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"c", "a", "b"})), (Ranking{"c", "a", "b"}));
}

TEST(FrequencyPredictor, RanksTheMostPickedFirst) {
  FrequencyPredictor p;
  p.observe(kCoordinate, "b");
  p.observe(kCoordinate, "c");
  p.observe(kCoordinate, "c");
  EXPECT_EQ(p.count(kCoordinate, "c"), 2u);
  EXPECT_EQ(p.count(kCoordinate, "b"), 1u);
  EXPECT_EQ(p.count(kCoordinate, "a"), 0u);
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "b", "c"})), (Ranking{"c", "b", "a"}));
}

TEST(FrequencyPredictor, TiesKeepTheVocabularyOrder) {
  FrequencyPredictor p;
  // Observed in the reverse order of the vocabulary, once each: the template decides.
  p.observe(kCoordinate, "c");
  p.observe(kCoordinate, "b");
  p.observe(kCoordinate, "a");
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "b", "c"})), (Ranking{"a", "b", "c"}));
}

TEST(FrequencyPredictor, LearnedValuesBeyondTheVocabularyAppear) {
  FrequencyPredictor p;
  p.observe(kCoordinate, "refund");
  p.observe(kCoordinate, "refund");
  p.observe(kCoordinate, "upgrade");
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"billing", "tech"}, 4)),
            (Ranking{"refund", "upgrade", "billing", "tech"}));
  // With no vocabulary at all (an open one), the learned values alone.
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({})), (Ranking{"refund", "upgrade"}));
}

TEST(FrequencyPredictor, LearnedValuesTieAfterTheVocabularyInFirstAppearanceOrder) {
  FrequencyPredictor p;
  p.observe(kCoordinate, "y");
  p.observe(kCoordinate, "x");
  p.observe(kCoordinate, "b");
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "b"}, 4)), (Ranking{"b", "y", "x", "a"}));
}

TEST(FrequencyPredictor, ReturnsAtMostMaxDistinctNonEmptyValues) {
  FrequencyPredictor p;
  p.observe(kCoordinate, "d");
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "", "a", "b", "c"}, 2)), (Ranking{"d", "a"}));
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "", "a", "d"}, 5)), (Ranking{"d", "a"}));
}

TEST(FrequencyPredictor, AnEmptySelectionIsNotLearned) {
  FrequencyPredictor p;
  p.observe(kCoordinate, "");
  EXPECT_EQ(p.count(kCoordinate, ""), 0u);
  EXPECT_TRUE(p.rank(kCoordinate, vocabulary({})).empty());
}

TEST(FrequencyPredictor, CountsPerCoordinateAreIndependent) {
  FrequencyPredictor p;
  p.observe(kCoordinate, "b");
  p.observe(kOther, "c");
  p.observe(kOther, "c");
  EXPECT_EQ(p.count(kCoordinate, "b"), 1u);
  EXPECT_EQ(p.count(kCoordinate, "c"), 0u);
  EXPECT_EQ(p.count(kOther, "c"), 2u);
  EXPECT_EQ(p.count(kOther, "b"), 0u);
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "b", "c"})), (Ranking{"b", "a", "c"}));
  EXPECT_EQ(p.rank(kOther, vocabulary({"a", "b", "c"})), (Ranking{"c", "a", "b"}));
  EXPECT_EQ(p.rank(xxh3_128("unseen"), vocabulary({"a", "b", "c"})), (Ranking{"a", "b", "c"}));
}

TEST(FrequencyPredictor, TheBoundedTableForgetsTheLeastPickedValue) {
  FrequencyPredictor p(2);
  p.observe(kCoordinate, "a");
  p.observe(kCoordinate, "a");
  p.observe(kCoordinate, "b");
  p.observe(kCoordinate, "c");  // full: "b" (1) is forgotten, not "a" (2)
  EXPECT_EQ(p.count(kCoordinate, "a"), 2u);
  EXPECT_EQ(p.count(kCoordinate, "b"), 0u);
  EXPECT_EQ(p.count(kCoordinate, "c"), 1u);
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({})), (Ranking{"a", "c"}));
}

TEST(FrequencyPredictor, TheBoundedTableForgetsTheOldestAmongEquals) {
  FrequencyPredictor p(2);
  p.observe(kCoordinate, "a");
  p.observe(kCoordinate, "b");
  p.observe(kCoordinate, "c");
  EXPECT_EQ(p.count(kCoordinate, "a"), 0u);
  EXPECT_EQ(p.count(kCoordinate, "b"), 1u);
  EXPECT_EQ(p.count(kCoordinate, "c"), 1u);
}

TEST(FrequencyPredictor, ARepeatedValueDoesNotEvictFromAFullTable) {
  FrequencyPredictor p(2);
  p.observe(kCoordinate, "a");
  p.observe(kCoordinate, "b");
  p.observe(kCoordinate, "b");
  p.observe(kCoordinate, "a");
  EXPECT_EQ(p.count(kCoordinate, "a"), 2u);
  EXPECT_EQ(p.count(kCoordinate, "b"), 2u);
}

TEST(FrequencyPredictor, TheBoundIsPerCoordinate) {
  FrequencyPredictor p(1);
  p.observe(kCoordinate, "a");
  p.observe(kOther, "b");
  EXPECT_EQ(p.count(kCoordinate, "a"), 1u);
  EXPECT_EQ(p.count(kOther, "b"), 1u);
}

TEST(FrequencyPredictor, AZeroBoundRemembersNothing) {
  FrequencyPredictor p(0);
  p.observe(kCoordinate, "a");
  p.observe(kCoordinate, "a");
  EXPECT_EQ(p.count(kCoordinate, "a"), 0u);
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"b"})), (Ranking{"b"}));
}

TEST(FrequencyPredictor, AForgottenValueInTheVocabularyStillRanks) {
  FrequencyPredictor p(1);
  p.observe(kCoordinate, "a");
  p.observe(kCoordinate, "x");  // "a" is forgotten
  EXPECT_EQ(p.rank(kCoordinate, vocabulary({"a", "b"})), (Ranking{"x", "a", "b"}));
}

// -- from-output ----------------------------------------------------------------------------

TEST(FromOutputPredictor, RanksInOrderOfAppearance) {
  FromOutputPredictor p;
  EXPECT_EQ(p.name(), "from-output");
  EXPECT_EQ(p.rank(kCoordinate, observed({"doc:9", "doc:2", "doc:5"})),
            (Ranking{"doc:9", "doc:2", "doc:5"}));
}

TEST(FromOutputPredictor, DropsDuplicatesAndEmptyValuesAndCapsAtMax) {
  FromOutputPredictor p;
  EXPECT_EQ(p.rank(kCoordinate, observed({"a", "", "a", "b", "a", "c", "d"})),
            (Ranking{"a", "b", "c"}));
  EXPECT_EQ(p.rank(kCoordinate, observed({"a", "b", "c"}, 1)), (Ranking{"a"}));
}

TEST(FromOutputPredictor, IgnoresTheVocabulary) {
  FromOutputPredictor p;
  PredictorContext ctx = observed({});
  ctx.vocabulary = {"a", "b"};
  EXPECT_TRUE(p.rank(kCoordinate, ctx).empty());
}

// -- drafter --------------------------------------------------------------------------------

TEST(DrafterPredictor, RanksTheMostVotedFirst) {
  DrafterPredictor p;
  EXPECT_EQ(p.name(), "drafter");
  EXPECT_EQ(p.rank(kCoordinate, observed({"a", "b", "b", "c", "b", "c"})),
            (Ranking{"b", "c", "a"}));
}

TEST(DrafterPredictor, TiesKeepFirstAppearance) {
  DrafterPredictor p;
  EXPECT_EQ(p.rank(kCoordinate, observed({"c", "a", "b", "a", "b", "c"})),
            (Ranking{"c", "a", "b"}));
  EXPECT_EQ(p.rank(kCoordinate, observed({"x", "y", "z"})), (Ranking{"x", "y", "z"}));
}

TEST(DrafterPredictor, ReturnsAtMostMax) {
  DrafterPredictor p;
  EXPECT_EQ(p.rank(kCoordinate, observed({"a", "b", "b", "c", "c", "c"}, 2)), (Ranking{"c", "b"}));
}

TEST(DrafterPredictor, EmptySamplesAreNotVotes) {
  DrafterPredictor p;
  EXPECT_EQ(p.rank(kCoordinate, observed({"", "", "", "a"})), (Ranking{"a"}));
  EXPECT_TRUE(p.rank(kCoordinate, observed({})).empty());
}

}  // namespace
}  // namespace dynrt
