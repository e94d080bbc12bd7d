// Cancellable deadlines: order, cancellation, replacement. Manual time; deterministic.
#include "run/deadlines.hpp"

#include <gtest/gtest.h>

namespace dynrt::run {
namespace {

TimePoint at(int ms) {
  return TimePoint{} + std::chrono::milliseconds(ms);
}

TEST(Deadlines, ComeDueInOrderAndOnlyOnce) {
  Deadlines<int> d;
  d.add(1, at(30), 30);
  d.add(2, at(10), 10);
  d.add(3, at(20), 20);
  d.add(4, at(20), 21);  // the same time: in order of token
  EXPECT_EQ(d.next(), at(10));
  EXPECT_TRUE(d.pop_due(at(9)).empty());
  EXPECT_EQ(d.pop_due(at(20)), (std::vector<int>{10, 20, 21}));
  EXPECT_EQ(d.pop_due(at(20)), std::vector<int>{});
  EXPECT_EQ(d.size(), 1u);
  EXPECT_EQ(d.pop_due(at(100)), std::vector<int>{30});
  EXPECT_EQ(d.next(), std::nullopt);
}

TEST(Deadlines, ACancelledOneNeverComesAndARepeatedTokenReplaces) {
  Deadlines<int> d;
  d.add(1, at(10), 1);
  d.add(2, at(10), 2);
  EXPECT_TRUE(d.cancel(1));
  EXPECT_FALSE(d.cancel(1));
  d.add(2, at(50), 20);  // replaces token 2's deadline
  EXPECT_EQ(d.size(), 1u);
  EXPECT_TRUE(d.pop_due(at(10)).empty());
  EXPECT_EQ(d.pop_due(at(50)), std::vector<int>{20});
  EXPECT_EQ(d.size(), 0u);
}

}  // namespace
}  // namespace dynrt::run
