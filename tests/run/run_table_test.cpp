// The live-run table: eviction order, idle checks, the race between a check and a demand, and
// a model check of every operation against a brute-force list. Manual time; deterministic.
#include "run/run_table.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>

namespace dynrt::run {
namespace {

using std::chrono::seconds;
using Table = RunTable<int>;

TimePoint at(int s) {
  return TimePoint{} + seconds(s);
}

std::vector<std::string> keys(const std::vector<Table::Run>& runs) {
  std::vector<std::string> out;
  for (const auto& r : runs)
    out.push_back(r.key);
  return out;
}

TEST(RunTable, EvictsTheLeastRecentlyDemandedBeyondItsLimit) {
  Table t(3);
  EXPECT_TRUE(t.add("a", 1, at(0)).empty());
  EXPECT_TRUE(t.add("b", 2, at(1)).empty());
  EXPECT_TRUE(t.add("c", 3, at(2)).empty());
  ASSERT_NE(t.touch("a", at(3)), nullptr);  // a is now the most recent
  const auto evicted = t.add("d", 4, at(4));
  ASSERT_EQ(keys(evicted), std::vector<std::string>{"b"});
  EXPECT_EQ(evicted[0].handle, 2);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.find("b"), nullptr);
  EXPECT_EQ(t.find("a")->sent, 2u);
  EXPECT_EQ(t.touch("zz", at(5)), nullptr);
}

TEST(RunTable, HandsOutQuietRunsOnceAndAsksABusyOneAgainOnlyAfterAnotherIdle) {
  Table t(10);
  t.add("a", 1, at(0));
  t.add("b", 2, at(5));
  t.add("c", 3, at(9));
  EXPECT_FALSE(t.any_due(at(9), seconds(10)));
  EXPECT_TRUE(t.due(at(9), seconds(10), 100).empty());
  EXPECT_EQ(keys(t.due(at(15), seconds(10), 100)), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(t.any_due(at(15), seconds(10)));
  // Neither answered (busy): they are asked again once another idle period has passed.
  EXPECT_EQ(keys(t.due(at(20), seconds(10), 100)), (std::vector<std::string>{"c"}));
  EXPECT_EQ(keys(t.due(at(25), seconds(10), 100)), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.size(), 3u);
}

TEST(RunTable, SweepsInBatches) {
  Table t(100);
  for (int i = 0; i < 10; ++i)
    t.add("r" + std::to_string(i), i, at(0));
  EXPECT_EQ(t.due(at(60), seconds(60), 4).size(), 4u);
  EXPECT_TRUE(t.any_due(at(60), seconds(60)));
  EXPECT_EQ(t.due(at(60), seconds(60), 4).size(), 4u);
  EXPECT_EQ(t.due(at(60), seconds(60), 4).size(), 2u);
  EXPECT_FALSE(t.any_due(at(60), seconds(60)));
}

TEST(RunTable, AnIdleAnswerRacedByADemandKeepsTheRun) {
  Table t(10);
  t.add("a", 1, at(0));
  ASSERT_EQ(t.due(at(60), seconds(60), 10).size(), 1u);
  const auto received = t.find("a")->sent;  // what the run had received when it answered
  t.touch("a", at(61));                     // a demand on its way to the run
  EXPECT_FALSE(t.erase_if_quiet("a", received));
  EXPECT_NE(t.find("a"), nullptr);
  const auto r = t.erase_if_quiet("a", received + 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->handle, 1);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.erase_if_quiet("a", 0));
}

TEST(RunTable, ARunThatEndedOnItsOwnFreesItsKeyOnlyIfItStillHoldsIt) {
  Table t(10);
  t.add("a", 1, at(0));
  EXPECT_FALSE(t.erase_if("a", [](int h) { return h == 7; }));  // a newer run holds the key
  EXPECT_TRUE(t.erase_if("a", [](int h) { return h == 1; }));
  EXPECT_EQ(t.find("a"), nullptr);
}

// Against a brute-force model: a vector in order of last activity.
struct Model {
  struct Run {
    std::string key;
    int handle;
    TimePoint last;
    std::uint64_t sent;
  };
  std::size_t max;
  std::vector<Run> runs;
  std::vector<std::string> touch(const std::string& key, int handle, TimePoint now) {
    auto it = std::find_if(runs.begin(), runs.end(), [&](const Run& r) { return r.key == key; });
    if (it != runs.end()) {
      Run r = *it;
      runs.erase(it);
      r.last = now;
      ++r.sent;
      runs.push_back(r);
      return {};
    }
    std::vector<std::string> evicted;
    while (runs.size() >= max) {
      evicted.push_back(runs.front().key);
      runs.erase(runs.begin());
    }
    runs.push_back({key, handle, now, 1});
    return evicted;
  }
  std::vector<std::string> due(TimePoint now, Duration idle, std::size_t n) {
    std::vector<std::string> out;
    while (out.size() < n && !runs.empty() && runs.front().last <= now - idle &&
           runs.front().last != now) {
      Run r = runs.front();
      runs.erase(runs.begin());
      r.last = now;
      out.push_back(r.key);
      runs.push_back(r);
    }
    return out;
  }
};

RC_GTEST_PROP(RunTable, BehavesLikeTheBruteForceModel, ()) {
  const auto max = *rc::gen::inRange<std::size_t>(1, 8);
  Table t(max);
  Model m{max, {}};
  int now = 0;
  const auto ops = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 100));
  for (const int op : ops) {
    now += op % 7;
    const std::string key = "k" + std::to_string(op % 11);
    if (op < 60) {  // a demand
      std::vector<std::string> evicted;
      if (!t.touch(key, at(now))) evicted = keys(t.add(key, op, at(now)));
      RC_ASSERT(evicted == m.touch(key, op, at(now)));
    } else if (op < 85) {  // a sweep
      const auto n = static_cast<std::size_t>(op % 3 + 1);
      RC_ASSERT(keys(t.due(at(now), seconds(5), n)) == m.due(at(now), seconds(5), n));
    } else {  // an idle answer with the count the run has (or had) received
      const auto it =
          std::find_if(m.runs.begin(), m.runs.end(), [&](const auto& r) { return r.key == key; });
      const std::uint64_t received = it == m.runs.end() ? 0 : it->sent - op % 2;
      const bool quiet = it != m.runs.end() && it->sent == received;
      RC_ASSERT(t.erase_if_quiet(key, received).has_value() == quiet);
      if (quiet) m.runs.erase(it);
    }
    RC_ASSERT(t.size() == m.runs.size());
    RC_ASSERT(t.size() <= max);
  }
}

}  // namespace
}  // namespace dynrt::run
