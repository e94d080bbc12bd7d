// Which runs of a sweep cell's trace its latencies cover (trim_cell): the shares the report
// states, with runs added in front and behind at high rates, so that the measured runs arrive
// into a running deployment and the load holds until the last of them has finished.
#include "bench/sweep.hpp"

#include <gtest/gtest.h>

namespace dynrt::bench {
namespace {

TEST(CellTrim, AtALowRateTheSharesAloneAreLeftOut) {
  // 1,000 runs at 1 run/s: the first 200 arrive over 200 s and the last 100 over 100 s, both
  // longer than the 30 s of warm-up and drain, so nothing is added.
  const CellTrim t = trim_cell(1000, 1.0);
  EXPECT_EQ(t.runs, 1000u);
  EXPECT_EQ(t.measure_from, 200u);
  EXPECT_EQ(t.measure_to, 900u);
}

TEST(CellTrim, AtAHighRateRunsAreAddedInFrontAndBehind) {
  // At 95 runs/s, 30 s of arrivals are 2,850 runs: the warm-up gets 2,650 more than its 200
  // and the drain 2,750 more than its 100.
  const CellTrim t = trim_cell(1000, 95.0);
  EXPECT_EQ(t.measure_from, 2850u);
  EXPECT_EQ(t.runs - t.measure_to, 2850u);
  EXPECT_EQ(t.runs, 1000u + 2650u + 2750u);
}

TEST(CellTrim, MeasuresAsManyRunsFromTheSameStartWhateverTheDrain) {
  // Between 3.3 runs/s (the drain's 100 runs take 30 s) and 6.7 (the warm-up's 200 do) only
  // runs behind are added: the measured runs are the same ones as at a low rate.
  const CellTrim low = trim_cell(1000, 1.0);
  const CellTrim mid = trim_cell(1000, 5.0);
  EXPECT_EQ(mid.measure_from, low.measure_from);
  EXPECT_EQ(mid.measure_to, low.measure_to);
  EXPECT_EQ(mid.runs, 1000u + 50u);  // 150 runs arrive in the last 30 s
  for (const double rate : {0.5, 5.0, 35.2, 100.0, 160.0})
    EXPECT_EQ(trim_cell(1000, rate).measure_to - trim_cell(1000, rate).measure_from, 700u) << rate;
}

}  // namespace
}  // namespace dynrt::bench
