// The table of coalesced executions (runtime/csl/coalescer.hpp): who leads, who joins, and
// that a write or a lost producer closes an execution to later demands.
#include "runtime/csl/coalescer.hpp"

#include <gtest/gtest.h>

namespace dynrt::csl {
namespace {

Hash128 N(std::string_view s) {
  return xxh3_128(s);
}

class CoalescerTest : public ::testing::Test {
 protected:
  Claim claim(std::string_view name, std::vector<std::string> keys, Ticket t, bool may_join = true,
              std::vector<EntryRef> producers = {}) {
    return table_.claim(store_, N(name), keys, producers, t, may_join);
  }
  ManualClock clock_;
  Store store_{clock_};
  Coalescer table_;
};

TEST_F(CoalescerTest, TheFirstMissLeadsAndIdenticalOnesJoinIt) {
  const auto lead = claim("a", {"doc:1"}, 1);
  EXPECT_EQ(lead.kind, ClaimKind::lead);
  EXPECT_EQ(lead.reads, store_.snapshot(std::vector<std::string>{"doc:1"}));
  const auto j1 = claim("a", {"doc:1"}, 2);
  const auto j2 = claim("a", {"doc:1"}, 3);
  EXPECT_EQ(j1.kind, ClaimKind::join);
  EXPECT_EQ(j2.kind, ClaimKind::join);
  EXPECT_EQ(j1.execution, lead.execution);
  EXPECT_EQ(claim("b", {"doc:1"}, 4).kind, ClaimKind::lead) << "another name";
  EXPECT_EQ(table_.waiting(), 2u);
  EXPECT_EQ(table_.finish(lead.execution), (std::vector<Ticket>{2, 3}));
  EXPECT_TRUE(table_.finish(lead.execution).empty()) << "finished once";
  EXPECT_EQ(claim("a", {"doc:1"}, 5).kind, ClaimKind::lead) << "nothing in flight any more";
}

TEST_F(CoalescerTest, AWriteClosesTheExecutionToLaterDemands) {
  const auto old = claim("a", {"doc:1", "doc:2"}, 1);
  EXPECT_EQ(claim("a", {"doc:2", "doc:1"}, 2).kind, ClaimKind::join) << "key order is no matter";
  store_.write(std::vector<std::string>{"doc:2"});
  const auto fresh = claim("a", {"doc:1", "doc:2"}, 3);
  EXPECT_EQ(fresh.kind, ClaimKind::lead);
  EXPECT_NE(fresh.execution, old.execution);
  EXPECT_EQ(claim("a", {"doc:1", "doc:2"}, 4).execution, fresh.execution) << "it took the name";
  EXPECT_EQ(table_.finish(old.execution), std::vector<Ticket>{2}) << "the old one still answers";
  EXPECT_EQ(table_.finish(fresh.execution), std::vector<Ticket>{4});
  EXPECT_EQ(table_.in_flight(), 0u);
}

TEST_F(CoalescerTest, ALostProducerOrOtherKeysCloseIt) {
  Insert in;
  in.name = N("p");
  in.bytes = "x";
  in.reads = store_.snapshot(std::vector<std::string>{"doc:9"});
  const auto producer = store_.put_confirmed(in).ref;
  claim("a", {}, 1, true, {producer});
  EXPECT_EQ(claim("a", {"doc:3"}, 2).kind, ClaimKind::lead) << "other keys: not the same reads";
  claim("b", {}, 3, true, {producer});
  EXPECT_EQ(claim("b", {}, 4).kind, ClaimKind::join);
  store_.write(std::vector<std::string>{"doc:9"});  // removes the producer
  EXPECT_EQ(claim("b", {}, 5).kind, ClaimKind::lead);
}

TEST_F(CoalescerTest, ADemandThatMayNotJoinRunsAloneAndLeavingStopsTheWait) {
  const auto lead = claim("a", {}, 1);
  const auto alone = claim("a", {}, 2, false);
  EXPECT_EQ(alone.kind, ClaimKind::alone);
  EXPECT_EQ(alone.execution, 0u);
  EXPECT_EQ(claim("a", {}, 3).execution, lead.execution) << "the leader keeps the name";
  EXPECT_TRUE(table_.leave(lead.execution, 3));
  EXPECT_FALSE(table_.leave(lead.execution, 3));
  EXPECT_TRUE(table_.finish(lead.execution).empty());
  EXPECT_EQ(claim("c", {}, 4, false).kind, ClaimKind::lead) << "nothing in flight: it leads";
}

}  // namespace
}  // namespace dynrt::csl
