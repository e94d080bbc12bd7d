// The branch state machine: proposing, admitting fills, recording their shadows, resolving a
// selection (exclusive and independent), settling, and the Feedback it reports.
#include "runtime/branch/branch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ostream>

namespace dynrt::branch {

// Parameters name their outcome ("ambiguous"), not its bytes. Internal linkage: found by
// argument-dependent lookup from this file's instantiations only.
static void PrintTo(Outcome o, std::ostream* os) {
  *os << to_string(o);
}

namespace {

using std::chrono::milliseconds;

csl::EntryRef shadow(std::uint32_t index) {
  return csl::EntryRef{index, 1};
}

bool contains(const std::vector<FillId>& v, FillId id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

bool contains(const std::vector<csl::EntryRef>& v, const csl::EntryRef& r) {
  return std::find(v.begin(), v.end(), r) != v.end();
}

// A branch over three candidates with one fill per candidate: fill 10+rank for rank, holding
// reservation 100+rank, each having stored one shadow (index 20+rank).
BranchState three_fills(bool exclusive) {
  BranchState b(7, xxh3_128("decide"), exclusive);
  b.propose({"billing", "tech", "sales"}, milliseconds(3));
  for (std::size_t rank = 0; rank < 3; ++rank) {
    b.admit(10 + rank, rank, 100 + rank);
    EXPECT_TRUE(b.stored(10 + rank, shadow(static_cast<std::uint32_t>(20 + rank))));
  }
  return b;
}

// -- propose and admit ----------------------------------------------------------------------

TEST(Branch, StartsProposingAndProposeMovesToFilling) {
  BranchState b(3, xxh3_128("c"), true);
  EXPECT_EQ(b.id(), 3u);
  EXPECT_EQ(b.coordinate(), xxh3_128("c"));
  EXPECT_TRUE(b.exclusive());
  EXPECT_EQ(b.phase(), Phase::proposing);
  EXPECT_EQ(b.outcome(), Outcome::pending);
  b.propose({"a", "b"}, milliseconds(5));
  EXPECT_EQ(b.phase(), Phase::filling);
  EXPECT_EQ(b.candidates(), (std::vector<std::string>{"a", "b"}));
}

TEST(Branch, ProposeWithNoCandidatesStillMovesToFilling) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({}, milliseconds(0));
  EXPECT_EQ(b.phase(), Phase::filling);
  EXPECT_TRUE(b.candidates().empty());
}

TEST(Branch, ASecondProposeIsIgnored) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(1));
  b.propose({"x", "y"}, milliseconds(9));
  EXPECT_EQ(b.candidates(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(b.settle().proposed, 1u);
}

TEST(Branch, AdmitBeforeProposeIsIgnored) {
  BranchState b(1, xxh3_128("c"), true);
  b.admit(1, 0, 5);
  EXPECT_TRUE(b.fills().empty());
  b.propose({"a"}, milliseconds(0));
  EXPECT_TRUE(b.fills().empty());
}

TEST(Branch, AdmitRecordsAFillForTheCandidateAtItsRank) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a", "b"}, milliseconds(0));
  b.admit(42, 1, 900);
  ASSERT_EQ(b.fills().size(), 1u);
  const Fill& f = b.fills()[0];
  EXPECT_EQ(f.id, 42u);
  EXPECT_EQ(f.rank, 1u);
  EXPECT_EQ(f.candidate, "b");
  EXPECT_EQ(f.reservation, 900u);
  EXPECT_EQ(f.status, FillStatus::running);
  EXPECT_TRUE(f.shadows.empty());
  EXPECT_FALSE(f.loser);
  EXPECT_EQ(b.running(), 1u);
}

TEST(Branch, AdmitRefusesARankOutsideTheCandidates) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a", "b"}, milliseconds(0));
  b.admit(1, 2, 5);
  b.admit(2, 99, 5);
  EXPECT_TRUE(b.fills().empty());
  EXPECT_EQ(b.settle().admitted, 0u);
}

TEST(Branch, AdmitRefusesADuplicateFillId) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a", "b"}, milliseconds(0));
  b.admit(1, 0, 5);
  b.admit(1, 1, 6);
  ASSERT_EQ(b.fills().size(), 1u);
  EXPECT_EQ(b.fills()[0].rank, 0u);
  EXPECT_EQ(b.fills()[0].reservation, 5u);
}

TEST(Branch, AdmitAfterResolveIsIgnored) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a", "b"}, milliseconds(0));
  b.resolve(Outcome::selected, "a");
  b.admit(1, 0, 5);
  EXPECT_TRUE(b.fills().empty());
}

// -- stored and finished --------------------------------------------------------------------

TEST(Branch, StoredRecordsShadowsInChainOrder) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(0));
  b.admit(1, 0, 5);
  EXPECT_TRUE(b.stored(1, shadow(3)));
  EXPECT_TRUE(b.stored(1, shadow(4)));
  ASSERT_EQ(b.fills().size(), 1u);
  EXPECT_EQ(b.fills()[0].shadows, (std::vector<csl::EntryRef>{shadow(3), shadow(4)}));
}

TEST(Branch, StoredForAnUnknownFillIsRefused) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(0));
  EXPECT_FALSE(b.stored(99, shadow(1)));
}

TEST(Branch, StoredAfterSettleIsRefused) {
  BranchState b(1, xxh3_128("c"), false);
  b.propose({"a"}, milliseconds(0));
  b.admit(1, 0, 5);
  b.resolve(Outcome::selected, "a");
  b.settle();
  EXPECT_FALSE(b.stored(1, shadow(1)));
  EXPECT_TRUE(b.fills()[0].shadows.empty());
}

TEST(Branch, FinishedReturnsTheReservationOnlyOnce) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(0));
  b.admit(1, 0, 77);
  EXPECT_EQ(b.finished(1, FillStatus::done, milliseconds(40)), 77u);
  EXPECT_EQ(b.fills()[0].status, FillStatus::done);
  EXPECT_EQ(b.fills()[0].engine_time, milliseconds(40));
  EXPECT_EQ(b.running(), 0u);
  // A second report (say, a late cancel acknowledgement) neither releases nor counts again.
  EXPECT_EQ(b.finished(1, FillStatus::cancelled, milliseconds(10)), 0u);
  EXPECT_EQ(b.fills()[0].status, FillStatus::done);
  const Feedback fb = b.settle();
  EXPECT_EQ(fb.completed, 1u);
  EXPECT_EQ(fb.cancelled, 0u);
  EXPECT_DOUBLE_EQ(fb.fill_ms, 40);
}

TEST(Branch, FinishedIgnoresAnUnknownFillAndARunningStatus) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(0));
  b.admit(1, 0, 77);
  EXPECT_EQ(b.finished(2, FillStatus::done, milliseconds(1)), 0u);
  EXPECT_EQ(b.finished(1, FillStatus::running, milliseconds(1)), 0u);
  EXPECT_EQ(b.running(), 1u);
  // The fill is still running, so its real end still releases the reservation.
  EXPECT_EQ(b.finished(1, FillStatus::failed, milliseconds(1)), 77u);
}

// -- resolve: exclusive ---------------------------------------------------------------------

TEST(Branch, ExclusiveSelectionCancelsAndDiscardsTheLosersAndKeepsTheWinner) {
  BranchState b = three_fills(true);
  const Resolution r = b.resolve(Outcome::selected, "tech");
  EXPECT_EQ(r.outcome, Outcome::selected);
  EXPECT_EQ(r.selected_rank, 1u);
  EXPECT_EQ(r.cancel.size(), 2u);
  EXPECT_TRUE(contains(r.cancel, 10));
  EXPECT_TRUE(contains(r.cancel, 12));
  EXPECT_FALSE(contains(r.cancel, 11));
  EXPECT_EQ(r.discard.size(), 2u);
  EXPECT_TRUE(contains(r.discard, shadow(20)));
  EXPECT_TRUE(contains(r.discard, shadow(22)));
  EXPECT_FALSE(contains(r.discard, shadow(21)));

  EXPECT_EQ(b.phase(), Phase::resolved);
  EXPECT_EQ(b.outcome(), Outcome::selected);
  EXPECT_EQ(b.selection(), "tech");
  ASSERT_NE(b.winner(), nullptr);
  EXPECT_EQ(b.winner()->id, 11u);
  EXPECT_FALSE(b.winner()->loser);
  EXPECT_EQ(b.winner()->shadows, (std::vector<csl::EntryRef>{shadow(21)}));
  for (const Fill& f : b.fills()) {
    if (f.id == 11) continue;
    EXPECT_TRUE(f.loser) << f.id;
    EXPECT_TRUE(f.shadows.empty()) << f.id;
  }
}

// -- resolve on emission ---------------------------------------------------------------------

TEST(Branch, AnEmittedSelectionCancelsTheOtherCandidatesRunningFills) {
  BranchState b = three_fills(true);
  b.finished(12, FillStatus::done, milliseconds(5));  // "sales" already ended
  const auto cancel = b.emitted("tech");
  EXPECT_EQ(cancel, (std::vector<FillId>{10}));
  EXPECT_TRUE(b.outrun(0));
  EXPECT_FALSE(b.outrun(1));
  EXPECT_TRUE(b.outrun(2));
  EXPECT_EQ(b.phase(), Phase::filling) << "only the whole output resolves the branch";
  EXPECT_TRUE(b.emitted("sales").empty()) << "the first emission stands";
  // The whole output decides what is promoted, and it may disagree with the emission.
  const Resolution r = b.resolve(Outcome::selected, "sales");
  EXPECT_EQ(r.selected_rank, 2u);
  EXPECT_FALSE(b.outrun(0)) << "resolved: nothing is outrun any more";
}

TEST(Branch, AnEmittedSelectionNoCandidateNamedOutrunsEveryFill) {
  BranchState b = three_fills(true);
  EXPECT_EQ(b.emitted("refunds").size(), 3u);
}

TEST(Branch, AnEmittedSelectionChangesNothingForIndependentOrResolvedBranches) {
  BranchState independent = three_fills(false);
  EXPECT_TRUE(independent.emitted("tech").empty());
  EXPECT_FALSE(independent.outrun(0));
  BranchState resolved = three_fills(true);
  resolved.resolve(Outcome::selected, "tech");
  EXPECT_TRUE(resolved.emitted("tech").empty());
  EXPECT_FALSE(resolved.outrun(0));
}

TEST(Branch, AnEmittedWinnerIsUncoveredUntilAFillOfItRunsOrEnded) {
  BranchState b(7, xxh3_128("decide"), true);
  b.propose({"billing", "tech", "sales"}, milliseconds(1));
  b.admit(10, 0, 100);
  EXPECT_EQ(b.uncovered("billing"), std::nullopt) << "running";
  EXPECT_EQ(b.uncovered("tech"), 1u);
  EXPECT_EQ(b.uncovered("refunds"), std::nullopt) << "no candidate names it";
  b.admit(11, 1, 101);
  b.finished(11, FillStatus::failed, milliseconds(0));
  EXPECT_EQ(b.uncovered("tech"), 1u) << "its fill failed: it may be filled again";
  b.admit(12, 1, 102);
  b.finished(12, FillStatus::done, milliseconds(3));
  EXPECT_EQ(b.uncovered("tech"), std::nullopt) << "done";
}

// An emitted selection no candidate named is adopted as a candidate of its own, after the
// predicted ones: its fill may start, and it wins when the whole output selects it. The
// predictor proposed three candidates, and is judged on those.
TEST(Branch, AnEmittedSelectionNoCandidateNamedIsAdoptedAfterThePredictedOnes) {
  BranchState b(7, xxh3_128("decide"), true);
  EXPECT_EQ(b.adopt("refunds"), std::nullopt) << "proposing: nothing to adopt into";
  b.propose({"billing", "tech", "sales"}, milliseconds(1));
  EXPECT_EQ(b.adopt("refunds"), std::nullopt) << "not emitted";
  b.emitted("refunds");
  EXPECT_EQ(b.adopt("tech"), std::nullopt) << "not the emitted selection";
  ASSERT_EQ(b.adopt("refunds"), 3u);
  EXPECT_EQ(b.adopt("refunds"), std::nullopt) << "a candidate now: uncovered() names it";
  EXPECT_EQ(b.uncovered("refunds"), 3u);
  EXPECT_FALSE(b.outrun(3));
  EXPECT_TRUE(b.outrun(0));
  b.admit(10, 3, 100);
  b.stored(10, shadow(30));
  const Resolution r = b.resolve(Outcome::selected, "refunds");
  EXPECT_EQ(r.outcome, Outcome::selected);
  ASSERT_NE(b.winner(), nullptr);
  EXPECT_EQ(b.winner()->id, 10u);
  b.finished(10, FillStatus::done, milliseconds(4));
  b.demanded(true, 40, 0);
  EXPECT_EQ(b.settle().proposed, 3u);
}

TEST(Branch, AnIndependentOrResolvedBranchAdoptsNothing) {
  BranchState independent(7, xxh3_128("decide"), false);
  independent.propose({"billing"}, milliseconds(1));
  independent.emitted("refunds");
  EXPECT_EQ(independent.adopt("refunds"), std::nullopt);
  BranchState resolved(8, xxh3_128("decide"), true);
  resolved.propose({"billing"}, milliseconds(1));
  resolved.emitted("refunds");
  resolved.resolve(Outcome::selected, "refunds");
  EXPECT_EQ(resolved.adopt("refunds"), std::nullopt);
}

TEST(Branch, AnEmissionBeforeTheCandidatesMarksTheLosersToBe) {
  BranchState b(7, xxh3_128("decide"), true);
  EXPECT_TRUE(b.emitted("tech").empty());
  b.propose({"billing", "tech"}, milliseconds(1));
  EXPECT_TRUE(b.outrun(0));
  EXPECT_FALSE(b.outrun(1));
}

TEST(Branch, ExclusiveSelectionCancelsOnlyLosersStillRunning) {
  BranchState b = three_fills(true);
  b.finished(10, FillStatus::done, milliseconds(5));  // a loser that already completed
  const Resolution r = b.resolve(Outcome::selected, "tech");
  EXPECT_EQ(r.cancel, (std::vector<FillId>{12}));
  // Its shadow is still discarded: only the winner's may be promoted.
  EXPECT_TRUE(contains(r.discard, shadow(20)));
  EXPECT_TRUE(contains(r.discard, shadow(22)));
}

TEST(Branch, ExclusiveSelectionDiscardsEveryShadowOfALoserChain) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a", "b"}, milliseconds(0));
  b.admit(1, 0, 5);
  b.admit(2, 1, 6);
  b.stored(1, shadow(1));
  b.stored(1, shadow(2));
  b.stored(2, shadow(3));
  const Resolution r = b.resolve(Outcome::selected, "b");
  EXPECT_EQ(r.discard, (std::vector<csl::EntryRef>{shadow(1), shadow(2)}));
}

TEST(Branch, ALoserShadowArrivingAfterResolveIsRefused) {
  BranchState b = three_fills(true);
  b.resolve(Outcome::selected, "tech");
  EXPECT_FALSE(b.stored(10, shadow(30)));  // raced the cancel: the caller discards it
  EXPECT_TRUE(b.stored(11, shadow(31)));   // the winner's chain goes on
  EXPECT_EQ(b.winner()->shadows, (std::vector<csl::EntryRef>{shadow(21), shadow(31)}));
}

TEST(Branch, ExclusiveSelectionWithoutAFillForTheWinnerDiscardsEveryFill) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a", "b", "c"}, milliseconds(0));
  b.admit(1, 0, 5);
  b.stored(1, shadow(1));
  const Resolution r = b.resolve(Outcome::selected, "c");
  EXPECT_EQ(r.outcome, Outcome::selected);
  EXPECT_EQ(r.selected_rank, 2u);
  EXPECT_EQ(r.cancel, (std::vector<FillId>{1}));
  EXPECT_EQ(r.discard, (std::vector<csl::EntryRef>{shadow(1)}));
  EXPECT_EQ(b.winner(), nullptr);
}

TEST(Branch, ExclusiveUnpredictedSelectionCancelsAndDiscardsEverything) {
  BranchState b = three_fills(true);
  const Resolution r = b.resolve(Outcome::selected, "refund");
  EXPECT_EQ(r.outcome, Outcome::unpredicted);
  EXPECT_FALSE(r.selected_rank);
  EXPECT_EQ(r.cancel.size(), 3u);
  EXPECT_EQ(r.discard.size(), 3u);
  for (std::uint32_t i = 20; i < 23; ++i)
    EXPECT_TRUE(contains(r.discard, shadow(i)));
  EXPECT_EQ(b.outcome(), Outcome::unpredicted);
  EXPECT_EQ(b.selection(), "refund");
  EXPECT_EQ(b.winner(), nullptr);
  for (const Fill& f : b.fills())
    EXPECT_FALSE(b.stored(f.id, shadow(40))) << f.id;
}

TEST(Branch, UnpredictedNamingACandidateCountsAsSelected) {
  BranchState b = three_fills(true);
  const Resolution r = b.resolve(Outcome::unpredicted, "sales");
  EXPECT_EQ(r.outcome, Outcome::selected);
  EXPECT_EQ(r.selected_rank, 2u);
  EXPECT_EQ(b.outcome(), Outcome::selected);
  ASSERT_NE(b.winner(), nullptr);
  EXPECT_EQ(b.winner()->id, 12u);
}

// -- resolve: independent (promotion independent) -------------------------------------------

TEST(Branch, IndependentSelectionKeepsEveryFillAndShadow) {
  BranchState b = three_fills(false);
  const Resolution r = b.resolve(Outcome::selected, "billing");
  EXPECT_EQ(r.outcome, Outcome::selected);
  EXPECT_EQ(r.selected_rank, 0u);
  EXPECT_TRUE(r.cancel.empty());
  EXPECT_TRUE(r.discard.empty());
  ASSERT_NE(b.winner(), nullptr);
  EXPECT_EQ(b.winner()->id, 10u);
  for (const Fill& f : b.fills()) {
    EXPECT_FALSE(f.loser) << f.id;
    EXPECT_EQ(f.shadows.size(), 1u) << f.id;
  }
  EXPECT_TRUE(b.stored(12, shadow(32)));  // every shadow stays eligible
}

TEST(Branch, IndependentUnpredictedSelectionKeepsTheOffers) {
  BranchState b = three_fills(false);
  b.finished(10, FillStatus::done, milliseconds(5));
  const Resolution r = b.resolve(Outcome::selected, "refund");
  EXPECT_EQ(r.outcome, Outcome::unpredicted);
  EXPECT_FALSE(r.selected_rank);
  EXPECT_TRUE(r.cancel.empty());
  EXPECT_TRUE(r.discard.empty());
  EXPECT_EQ(b.winner(), nullptr);
  for (const Fill& f : b.fills())
    EXPECT_FALSE(f.loser) << f.id;
  EXPECT_TRUE(b.stored(11, shadow(31)));
}

// -- resolve: nothing may be promoted -------------------------------------------------------

class UnusableSelection : public ::testing::TestWithParam<std::tuple<Outcome, bool>> {};

TEST_P(UnusableSelection, CancelsAndDiscardsEverythingForEitherKind) {
  const auto [outcome, exclusive] = GetParam();
  BranchState b = three_fills(exclusive);
  b.finished(12, FillStatus::done, milliseconds(5));
  const Resolution r = b.resolve(outcome, "tech");
  EXPECT_EQ(r.outcome, outcome);
  EXPECT_FALSE(r.selected_rank);
  EXPECT_EQ(r.cancel, (std::vector<FillId>{10, 11}));  // the completed fill needs no cancel
  EXPECT_EQ(r.discard.size(), 3u);
  for (std::uint32_t i = 20; i < 23; ++i)
    EXPECT_TRUE(contains(r.discard, shadow(i)));
  EXPECT_EQ(b.outcome(), outcome);
  EXPECT_EQ(b.winner(), nullptr);
  for (const Fill& f : b.fills()) {
    EXPECT_TRUE(f.loser) << f.id;
    EXPECT_TRUE(f.shadows.empty()) << f.id;
    EXPECT_FALSE(b.stored(f.id, shadow(40))) << f.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Branch, UnusableSelection,
                         ::testing::Combine(::testing::Values(Outcome::ambiguous,
                                                              Outcome::unreadable),
                                            ::testing::Bool()),
                         [](const auto& p) {
                           return std::string(to_string(std::get<0>(p.param))) +
                                  (std::get<1>(p.param) ? "Exclusive" : "Independent");
                         });

// -- resolve: only once ---------------------------------------------------------------------

TEST(Branch, ASecondResolveIsIgnored) {
  BranchState b = three_fills(true);
  b.resolve(Outcome::selected, "tech");
  const Resolution again = b.resolve(Outcome::selected, "sales");
  EXPECT_EQ(again.outcome, Outcome::selected);  // reports the standing outcome
  EXPECT_FALSE(again.selected_rank);
  EXPECT_TRUE(again.cancel.empty());
  EXPECT_TRUE(again.discard.empty());
  EXPECT_EQ(b.selection(), "tech");
  EXPECT_EQ(b.winner()->id, 11u);
  EXPECT_FALSE(b.winner()->loser);

  const Resolution ambiguous = b.resolve(Outcome::ambiguous, "");
  EXPECT_EQ(ambiguous.outcome, Outcome::selected);
  EXPECT_TRUE(ambiguous.cancel.empty());
  EXPECT_TRUE(ambiguous.discard.empty());
  EXPECT_EQ(b.outcome(), Outcome::selected);
}

TEST(Branch, ResolvingToPendingOrAbandonedIsIgnored) {
  BranchState b = three_fills(true);
  for (Outcome o : {Outcome::pending, Outcome::abandoned}) {
    const Resolution r = b.resolve(o, "tech");
    EXPECT_EQ(r.outcome, Outcome::pending) << to_string(o);
    EXPECT_TRUE(r.cancel.empty());
    EXPECT_TRUE(r.discard.empty());
  }
  EXPECT_EQ(b.phase(), Phase::filling);
  // The real resolution still applies.
  EXPECT_EQ(b.resolve(Outcome::selected, "tech").selected_rank, 1u);
}

TEST(Branch, ResolveAfterSettleIsIgnored) {
  BranchState b = three_fills(true);
  b.settle();
  const Resolution r = b.resolve(Outcome::selected, "tech");
  EXPECT_EQ(r.outcome, Outcome::abandoned);
  EXPECT_TRUE(r.cancel.empty());
  EXPECT_TRUE(r.discard.empty());
  EXPECT_EQ(b.phase(), Phase::settled);
}

// -- settleable and settle ------------------------------------------------------------------

TEST(Branch, AnUnresolvedBranchIsNotSettleable) {
  BranchState b(1, xxh3_128("c"), true);
  EXPECT_FALSE(b.settleable());
  b.propose({"a"}, milliseconds(0));
  EXPECT_FALSE(b.settleable());
}

TEST(Branch, AResolvedBranchWithoutFillsIsSettleable) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(0));
  b.resolve(Outcome::selected, "a");
  EXPECT_TRUE(b.settleable());
}

TEST(Branch, ARunningFillKeepsTheBranchFromSettling) {
  BranchState b = three_fills(true);
  b.resolve(Outcome::selected, "tech");
  b.finished(11, FillStatus::failed, milliseconds(5));  // the winner failed: nothing to wait for
  EXPECT_FALSE(b.settleable());                         // the losers' cancels are in flight
  b.finished(10, FillStatus::cancelled, milliseconds(1));
  EXPECT_FALSE(b.settleable());
  b.finished(12, FillStatus::cancelled, milliseconds(1));
  EXPECT_TRUE(b.settleable());
}

TEST(Branch, ACompletedWinnerWaitsForItsDemand) {
  BranchState b = three_fills(true);
  b.resolve(Outcome::selected, "tech");
  b.finished(10, FillStatus::cancelled, milliseconds(1));
  b.finished(12, FillStatus::cancelled, milliseconds(1));
  EXPECT_FALSE(b.settleable());  // the winner still runs
  b.finished(11, FillStatus::done, milliseconds(30));
  EXPECT_FALSE(b.settleable());  // completed: waits for the demand it may serve
  b.demanded(true, 30, 0);
  EXPECT_TRUE(b.settleable());
}

TEST(Branch, ACompletedWinnerOfAnIndependentBranchAlsoWaitsForItsDemand) {
  BranchState b = three_fills(false);
  for (FillId id : {10, 11, 12})
    b.finished(id, FillStatus::done, milliseconds(1));
  b.resolve(Outcome::selected, "sales");
  EXPECT_FALSE(b.settleable());
  b.demanded(false, 0, 0);
  EXPECT_TRUE(b.settleable());
}

TEST(Branch, AnUnpredictedBranchSettlesOnceNoFillRuns) {
  BranchState b = three_fills(false);
  b.resolve(Outcome::selected, "refund");
  EXPECT_FALSE(b.settleable());
  for (FillId id : {10, 11, 12})
    b.finished(id, FillStatus::done, milliseconds(1));
  EXPECT_TRUE(b.settleable());  // no winner, so no demand to wait for
}

TEST(Branch, SettleMovesToSettledAndIsIdempotent) {
  BranchState b = three_fills(true);
  b.resolve(Outcome::selected, "tech");
  const Feedback first = b.settle();
  EXPECT_EQ(b.phase(), Phase::settled);
  EXPECT_FALSE(b.settleable());
  const Feedback second = b.settle();
  EXPECT_EQ(second.outcome, first.outcome);
  EXPECT_EQ(second.selection, first.selection);
  EXPECT_EQ(second.admitted, first.admitted);
}

TEST(Branch, SettlingAnUnresolvedBranchAbandonsIt) {
  BranchState b = three_fills(true);
  const Feedback fb = b.settle();
  EXPECT_EQ(fb.outcome, Outcome::abandoned);
  EXPECT_FALSE(fb.selected_rank);
  EXPECT_TRUE(fb.selection.empty());
  EXPECT_EQ(b.outcome(), Outcome::abandoned);
  EXPECT_EQ(b.phase(), Phase::settled);
  EXPECT_FALSE(b.stored(10, shadow(30)));
}

TEST(Branch, SettlingANeverProposedBranchAbandonsIt) {
  BranchState b(1, xxh3_128("c"), false);
  const Feedback fb = b.settle();
  EXPECT_EQ(fb.outcome, Outcome::abandoned);
  EXPECT_EQ(fb.proposed, 0u);
}

// -- Feedback -------------------------------------------------------------------------------

TEST(Branch, FeedbackCountsFillsAndTheirEngineTime) {
  BranchState b(9, xxh3_128("route"), true);
  b.propose({"a", "b", "c", "d"}, milliseconds(12));
  b.admit(1, 0, 11);
  b.admit(2, 1, 12);
  b.admit(3, 2, 13);
  b.admit(4, 2, 14);
  b.finished(1, FillStatus::done, milliseconds(100));
  b.resolve(Outcome::selected, "a");
  b.finished(2, FillStatus::cancelled, milliseconds(20));
  b.finished(3, FillStatus::failed, std::chrono::microseconds(2500));
  b.finished(4, FillStatus::cancelled, milliseconds(0));
  b.demanded(true, 100, 3.5);
  ASSERT_TRUE(b.settleable());
  const Feedback fb = b.settle();
  EXPECT_EQ(fb.branch, 9u);
  EXPECT_EQ(fb.coordinate, xxh3_128("route"));
  EXPECT_EQ(fb.outcome, Outcome::selected);
  EXPECT_EQ(fb.selection, "a");
  EXPECT_EQ(fb.selected_rank, 0u);
  EXPECT_EQ(fb.proposed, 4u);
  EXPECT_EQ(fb.admitted, 4u);
  EXPECT_EQ(fb.completed, 1u);
  EXPECT_EQ(fb.cancelled, 2u);
  EXPECT_EQ(fb.failed, 1u);
  EXPECT_DOUBLE_EQ(fb.fill_ms, 122.5);
  EXPECT_TRUE(fb.demanded);
  EXPECT_TRUE(fb.consumed);
  EXPECT_DOUBLE_EQ(fb.saved_ms, 100);
  EXPECT_DOUBLE_EQ(fb.wait_ms, 3.5);
  EXPECT_EQ(fb.setup, milliseconds(12));
}

TEST(Branch, FeedbackOfADemandNotServedFromTheFill) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a", "b"}, milliseconds(0));
  b.resolve(Outcome::selected, "b");
  b.demanded(false, 0, 0);
  const Feedback fb = b.settle();
  EXPECT_TRUE(fb.demanded);
  EXPECT_FALSE(fb.consumed);
  EXPECT_DOUBLE_EQ(fb.saved_ms, 0);
  EXPECT_EQ(fb.admitted, 0u);
  EXPECT_DOUBLE_EQ(fb.fill_ms, 0);
}

TEST(Branch, OnlyTheFirstDemandIsRecorded) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(0));
  b.resolve(Outcome::selected, "a");
  b.demanded(true, 50, 2);
  b.demanded(false, 0, 9);
  const Feedback fb = b.settle();
  EXPECT_TRUE(fb.consumed);
  EXPECT_DOUBLE_EQ(fb.saved_ms, 50);
  EXPECT_DOUBLE_EQ(fb.wait_ms, 2);
}

TEST(Branch, FeedbackBeforeAnyDemandIsEmpty) {
  BranchState b(1, xxh3_128("c"), true);
  b.propose({"a"}, milliseconds(0));
  b.resolve(Outcome::unreadable, "");
  const Feedback fb = b.settle();
  EXPECT_EQ(fb.outcome, Outcome::unreadable);
  EXPECT_FALSE(fb.demanded);
  EXPECT_FALSE(fb.consumed);
  EXPECT_DOUBLE_EQ(fb.saved_ms, 0);
  EXPECT_DOUBLE_EQ(fb.wait_ms, 0);
}

TEST(Branch, EnumsPrintTheirNames) {
  EXPECT_EQ(to_string(Phase::filling), "filling");
  EXPECT_EQ(to_string(Phase::settled), "settled");
  EXPECT_EQ(to_string(FillStatus::cancelled), "cancelled");
  EXPECT_EQ(to_string(Outcome::unpredicted), "unpredicted");
  EXPECT_EQ(to_string(Outcome::abandoned), "abandoned");
}

}  // namespace
}  // namespace dynrt::branch
