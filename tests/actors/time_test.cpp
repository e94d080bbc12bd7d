// The graph's clock and timer service (actors/time.hpp).
#include "actors/time.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <vector>

namespace dynrt {
namespace {

using namespace std::chrono_literals;

TEST(ManualTime, FiresWhatCameDueInOrderOnTheThreadThatAdvances) {
  ManualTime t;
  std::vector<int> fired;
  t.arm(TimePoint(30ms), [&] { fired.push_back(3); });
  t.arm(TimePoint(10ms), [&] { fired.push_back(1); });
  t.arm(TimePoint(20ms), [&] { fired.push_back(2); });
  t.advance(15ms);
  EXPECT_EQ(fired, (std::vector<int>{1}));
  t.advance(15ms);
  EXPECT_EQ(fired, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t.now(), TimePoint(30ms));
  EXPECT_EQ(t.pending(), 0u);
}

TEST(ManualTime, ADisarmedDeadlineNeverFires) {
  ManualTime t;
  bool fired = false;
  const auto token = t.arm(TimePoint(10ms), [&] { fired = true; });
  t.disarm(token);
  t.advance(1s);
  EXPECT_FALSE(fired);
}

TEST(ManualTime, ADeadlineArmedWhileFiringFiresInTheSameAdvanceIfDue) {
  ManualTime t;
  int fired = 0;
  t.arm(TimePoint(10ms), [&] {
    ++fired;
    t.arm(TimePoint(20ms), [&] { ++fired; });
    t.arm(TimePoint(90ms), [&] { ++fired; });
  });
  t.advance(50ms);
  EXPECT_EQ(fired, 2);
  EXPECT_EQ(t.pending(), 1u);
}

TEST(ManualTime, NeverRunsBackwards) {
  ManualTime t(TimePoint(5s));
  t.set(TimePoint(1s));
  t.advance(-1s);
  EXPECT_EQ(t.now(), TimePoint(5s));
}

TEST(SystemTime, FiresOnItsOwnThreadAndNotAfterStop) {
  SystemTime t;
  std::promise<void> fired;
  t.arm(t.now() + 1ms, [&] { fired.set_value(); });
  // Bounded only against a hang; no assertion on how long it took.
  ASSERT_EQ(fired.get_future().wait_for(60s), std::future_status::ready);
  bool late = false;
  t.arm(t.now() + 1h, [&] { late = true; });
  t.stop();
  EXPECT_FALSE(late);
  EXPECT_EQ(t.arm(t.now(), [&] { late = true; }), 0u);  // a stopped service arms nothing
}

}  // namespace
}  // namespace dynrt
