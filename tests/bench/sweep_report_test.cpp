// What the sweep's and the bursty trace's reports say of failed runs: the tables count them,
// and each cell with failures names its first one, in results.md and in results.json.
#include "bench/sweep.hpp"

#include <gtest/gtest.h>

namespace dynrt::bench {
namespace {

SweepPoint point(const std::string& arm, std::size_t failures, const std::string& why) {
  SweepPoint p;
  p.workload = "routing";
  p.load = 0.3;
  p.rate = 4.5;
  p.arm = arm;
  p.seeds = 2;
  p.mean_s = 3.0;
  p.ratio_to_floor = arm == "floor" ? 1.0 : 0.5;
  p.failures = failures;
  p.first_failure = why;
  return p;
}

TEST(SweepReport, NamesEachFailedCellsFirstFailure) {
  SweepOptions o;
  o.workloads = {"routing"};
  o.loads = {0.3};
  SweepResult r;
  r.saturation["routing"] = Saturation{"routing", 15.0, 1000, 60.0};
  r.points = {point("floor", 0, ""), point("full", 2, "engine: HTTP 500 (boom)")};

  const std::string md = format_sweep(o, r);
  EXPECT_NE(md.find("2 failed"), std::string::npos) << md;
  EXPECT_NE(md.find("full at 0.3: 2 run(s) failed; the first: engine: HTTP 500 (boom)"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("floor at 0.3:"), std::string::npos) << "a cell without failures says nothing";

  EXPECT_EQ(r.points[1].to_json().value("first_failure", ""), "engine: HTTP 500 (boom)");
  EXPECT_FALSE(r.points[0].to_json().contains("first_failure"));

  SweepRecord rec;
  rec.workload = "routing";
  rec.arm = "full";
  rec.cell.failures = 1;
  rec.cell.first_failure = "the run never finished";
  EXPECT_EQ(rec.to_json().value("first_failure", ""), "the run never finished");
  rec.cell.failures = 0;
  EXPECT_FALSE(rec.to_json().contains("first_failure"));
}

TEST(BurstyReport, NamesEachFailedArmsFirstFailure) {
  SweepOptions o;
  o.workloads = {"hci"};
  BurstyResult r;
  r.saturation["hci"] = Saturation{"hci", 40.0, 1000, 25.0};
  BurstyPoint floor;
  floor.workload = "hci";
  floor.arm = "floor";
  floor.mean_s = 3.0;
  floor.phase_mean_s = {2.5, 5.0, 3.5, 2.4};
  BurstyPoint full = floor;
  full.arm = "full";
  full.failures = 3;
  full.first_failure = "engine: connection refused";
  r.points = {floor, full};

  const std::string md = format_bursty(o, r);
  EXPECT_NE(md.find("full: 3 run(s) failed; the first: engine: connection refused"),
            std::string::npos)
      << md;
  EXPECT_EQ(full.to_json().value("first_failure", ""), "engine: connection refused");
  EXPECT_FALSE(floor.to_json().contains("first_failure"));
}

}  // namespace
}  // namespace dynrt::bench
