#include "runtime/clock.hpp"

#include <gtest/gtest.h>

namespace dynrt {
namespace {

using std::chrono::milliseconds;

TEST(ManualClock, MovesOnlyWhenTold) {
  ManualClock clock;
  const TimePoint start = clock.now();
  EXPECT_EQ(clock.now(), start);
  clock.advance(milliseconds(250));
  EXPECT_EQ(clock.now() - start, milliseconds(250));
  clock.set(start + milliseconds(1000));
  EXPECT_EQ(clock.now() - start, milliseconds(1000));
}

TEST(ManualClock, NeverRunsBackwards) {
  ManualClock clock(TimePoint{} + milliseconds(500));
  clock.set(TimePoint{} + milliseconds(100));
  EXPECT_EQ(clock.now(), TimePoint{} + milliseconds(500));
  clock.advance(milliseconds(-10));
  EXPECT_EQ(clock.now(), TimePoint{} + milliseconds(500));
}

TEST(SteadyClock, IsMonotonic) {
  SteadyClock clock;
  const TimePoint a = clock.now();
  const TimePoint b = clock.now();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace dynrt
