// The bench workloads: seeded and deterministic, exact repeats at the requested rate with
// their own workflow ids, and the statistics the paper states (section 2.2, Figure 4).
#include "bench/workloads.hpp"
#include "tests/actors/rig.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace dynrt::testing {
namespace {

TEST(Workloads, AreDeterministicForASeed) {
  for (const char* name : {"routing", "react", "subagent", "hci"}) {
    bench::WorkloadOptions o;
    o.seed = 9;
    o.runs = 20;
    o.repeat_rate = 0.3;
    const auto a = bench::make_workload(graph(name), o);
    const auto b = bench::make_workload(graph(name), o);
    ASSERT_EQ(a.runs.size(), 20u) << name;
    for (std::size_t i = 0; i < a.runs.size(); ++i) {
      EXPECT_EQ(a.runs[i].input, b.runs[i].input) << name;
      EXPECT_EQ(a.runs[i].picks, b.runs[i].picks) << name;
      EXPECT_EQ(a.runs[i].think_s, b.runs[i].think_s) << name;
    }
    o.seed = 10;
    EXPECT_NE(bench::make_workload(graph(name), o).runs[0].input, a.runs[0].input) << name;
  }
}

TEST(Workloads, ExactRepeatsCopyAPopularRequestUnderTheirOwnId) {
  bench::WorkloadOptions o;
  o.seed = 3;
  o.runs = 400;
  o.repeat_rate = 0.5;
  const auto w = bench::make_workload(graph("routing"), o);
  ASSERT_EQ(w.popular.size(), 50u);  // runs / 8
  std::size_t repeats = 0;
  std::set<std::string> ids;
  for (const auto& r : w.runs) {
    ids.insert(r.workflow_id);
    if (r.popular < 0) continue;
    ++repeats;
    const auto& p = w.popular.at(static_cast<std::size_t>(r.popular));
    EXPECT_EQ(r.input, p.input);
    EXPECT_EQ(r.picks, p.picks);
  }
  EXPECT_EQ(ids.size(), w.runs.size()) << "every run has its own workflow id";
  EXPECT_NEAR(static_cast<double>(repeats) / 400, 0.5, 0.08);
  o.repeat_rate = 0;
  for (const auto& r : bench::make_workload(graph("routing"), o).runs)
    EXPECT_EQ(r.popular, -1);
}

TEST(Workloads, HciThinkTimesCenterOnTheMedianAndTheTopOfferIsUsuallyPicked) {
  bench::WorkloadOptions o;
  o.seed = 5;
  o.runs = 300;
  const auto w = bench::make_workload(graph("hci"), o);
  std::vector<double> think;
  std::size_t top = 0;
  for (const auto& r : w.runs) {
    think.push_back(r.think_s);
    top += r.picks.at(0).rfind("book a flight", 0) == 0 ? 1 : 0;
  }
  std::sort(think.begin(), think.end());
  EXPECT_NEAR(think[think.size() / 2], 2.7, 0.3);
  EXPECT_NEAR(static_cast<double>(top) / 300, 29.0 / 30, 0.04);
}

// The next entity is among the previous passage's three 61% of the time when predictable,
// and rarely when not (the no-harm trace).
TEST(Workloads, ReactNextEntityFollowsThePassageAsOftenAsThePredictabilitySays) {
  auto share = [](double predictability) {
    bench::WorkloadOptions o;
    o.seed = 2;
    o.runs = 300;
    o.predictability = predictability;
    const auto w = bench::make_workload(graph("react"), o);
    std::size_t hops = 0, linked = 0;
    for (const auto& r : w.runs)
      for (std::size_t h = 1; h < r.picks.size(); ++h) {
        ++hops;
        for (const auto& rec : w.corpus)
          if (rec["key"] == "corpus:" + r.picks[h - 1] &&
              rec["text"].get<std::string>().find("[[" + r.picks[h] + "]]") != std::string::npos)
            ++linked;
      }
    return static_cast<double>(linked) / static_cast<double>(hops);
  };
  EXPECT_NEAR(share(1.0), 0.61, 0.06);
  EXPECT_LT(share(0.0), 0.02);
}

TEST(Workloads, SubagentPlannerReasonsThenNamesTheSubAgentAsJson) {
  const auto w = bench::make_workload(graph("subagent"), {1, 4, 1.0});
  for (const auto& r : w.runs) {
    const auto* scripted = w.script.find(bench::subagent_plan_request(r));
    const std::string* answer = scripted ? &scripted->text : nullptr;
    ASSERT_NE(answer, nullptr);
    const auto doc = nlohmann::json::parse(*answer);
    EXPECT_EQ(doc["subagent"], r.picks.at(0));
    EXPECT_GT(doc["reasoning"].get<std::string>().size(), 400u) << "a real decode window";
  }
}

// The trace on which resolving on emission pays: each decider writes its selection first.
TEST(Workloads, SelectionFirstPutsEachDecidersPickBeforeItsReasoning) {
  bench::WorkloadOptions o{1, 4, 1.0};
  o.selection_first = true;
  const auto routing = bench::make_workload(graph("routing"), o);
  for (const auto& r : routing.runs) {
    const auto body = dsl::render_stage(*graph("routing").stage("router"),
                                        {{"query", bench::routing_query(r, 0)}});
    const auto* scripted = routing.script.find(body->body);
    const std::string* answer = scripted ? &scripted->text : nullptr;
    ASSERT_NE(answer, nullptr);
    EXPECT_EQ(answer->rfind("HANDLER: " + r.picks.at(0) + "\n", 0), 0u) << *answer;
  }
  const auto subagent = bench::make_workload(graph("subagent"), o);
  for (const auto& r : subagent.runs) {
    const auto* scripted = subagent.script.find(bench::subagent_plan_request(r));
    const std::string* answer = scripted ? &scripted->text : nullptr;
    ASSERT_NE(answer, nullptr);
    EXPECT_EQ(answer->rfind("{\"subagent\":\"" + r.picks.at(0) + "\",", 0), 0u) << *answer;
    EXPECT_EQ(nlohmann::json::parse(*answer)["subagent"], r.picks.at(0));
  }
  const auto react = bench::make_workload(graph("react"), o);
  for (const auto& r : react.runs) {
    const auto* scripted = react.script.find(bench::react_think_request(r, 0));
    const std::string* answer = scripted ? &scripted->text : nullptr;
    ASSERT_NE(answer, nullptr);
    EXPECT_EQ(answer->rfind("Search[" + r.picks.at(0) + "]\n", 0), 0u) << *answer;
  }
}

}  // namespace
}  // namespace dynrt::testing
