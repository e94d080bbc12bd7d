// The bench workloads: seeded and deterministic, exact repeats at the requested rate with
// their own workflow ids, and the statistics the paper states (section 2.2, Figure 4).
#include "bench/workloads.hpp"
#include "dsl/render.hpp"
#include "engines/sim/text.hpp"
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

// Paper-sized contexts lengthen the prompts and nothing else: the same seed gives the same runs,
// selections and think times as the compact trace.
TEST(Workloads, PaperContextsChangeThePromptsNotTheSelections) {
  for (const char* name : {"routing", "react", "subagent", "hci"}) {
    bench::WorkloadOptions o{4, 60, 1.0};
    o.repeat_rate = 0.3;
    const auto compact = bench::make_workload(graph(name), o);
    o.contexts = bench::Contexts::paper;
    const auto paper = bench::make_workload(graph(name), o);
    ASSERT_EQ(paper.runs.size(), compact.runs.size()) << name;
    ASSERT_EQ(paper.corpus.size(), compact.corpus.size()) << name;
    std::size_t longer = 0;
    for (std::size_t i = 0; i < paper.runs.size(); ++i) {
      EXPECT_EQ(paper.runs[i].picks, compact.runs[i].picks) << name;
      EXPECT_EQ(paper.runs[i].think_s, compact.runs[i].think_s) << name;
      EXPECT_EQ(paper.runs[i].popular, compact.runs[i].popular) << name;
      longer += paper.runs[i].input.size() > compact.runs[i].input.size() ? 1 : 0;
    }
    for (std::size_t k = 0; k < paper.corpus.size(); ++k) {
      const auto p = paper.corpus[k]["text"].get<std::string>();
      const auto c = compact.corpus[k]["text"].get<std::string>();
      // A record keeps its compact text in front (ReAct's links come first, in their order)
      // and the added prose names nothing.
      EXPECT_EQ(p.rfind(c, 0), 0u) << name << ": " << p;
      EXPECT_EQ(p.find("[[", c.size()), std::string::npos) << name << ": " << p;
    }
    if (std::string(name) == "routing" || std::string(name) == "hci") {
      EXPECT_EQ(longer, paper.runs.size()) << name << ": every request carries its context";
    }
  }
}

std::int64_t prompt_tokens(const nlohmann::json& body) {
  return engines::sim::estimate_prompt_tokens("/v1/chat/completions", body);
}

// Section 2.2, F2: Routing's downstream prefill is about 263 tokens at p50.
TEST(Workloads, PaperContextsGiveRoutingsHandlerAbout263PromptTokens) {
  bench::WorkloadOptions o{6, 400, 1.0};
  o.contexts = bench::Contexts::paper;
  const auto w = bench::make_workload(graph("routing"), o);
  std::vector<std::int64_t> tokens;
  for (const auto& r : w.runs) {
    const auto body =
        dsl::render_stage(*graph("routing").stage("handle"),
                          {{"handler", r.picks.at(0)}, {"query", bench::routing_query(r, 0)}});
    ASSERT_TRUE(body);
    tokens.push_back(prompt_tokens(body->body));
  }
  std::sort(tokens.begin(), tokens.end());
  EXPECT_NEAR(static_cast<double>(tokens[tokens.size() / 2]), 263, 15);
  EXPECT_LT(tokens.front(), 200) << "sizes vary";
  EXPECT_GT(tokens.back(), 340);
}

// A chat ReAct agent sends its scratchpad: at hop h, every earlier thought and the passage its
// search returned. The think prompt grows per hop, and each hop's scripted answer is found.
TEST(Workloads, PaperContextsGrowReactsThinkPromptPerHop) {
  bench::WorkloadOptions o{8, 40, 1.0};
  o.contexts = bench::Contexts::paper;
  const auto w = bench::make_workload(graph("react"), o);
  std::size_t checked = 0;
  for (const auto& r : w.runs) {
    ASSERT_EQ(r.thoughts.size(), r.picks.size());
    ASSERT_EQ(r.observations.size(), r.picks.size());
    std::int64_t before = 0;
    for (std::size_t h = 0; h < r.picks.size(); ++h) {
      const auto body = bench::react_think_request(r, h);
      ASSERT_EQ(body["messages"].size(), 3 + 2 * h);
      if (h > 0) {
        EXPECT_EQ(body["messages"][2 * h]["content"], r.thoughts[h - 1]);
        EXPECT_EQ(body["messages"][2 * h + 1]["content"], "Observation: " + r.observations[h - 1]);
        // The passage the last hop read: the corpus record of its pick.
        EXPECT_EQ(r.observations[h - 1].rfind(r.picks[h - 1] + " is linked to", 0), 0u);
        EXPECT_GT(prompt_tokens(body) - before, 150) << "a thought and a passage per hop";
      }
      before = prompt_tokens(body);
      const auto* scripted = w.script.find(body);
      ASSERT_NE(scripted, nullptr) << "hop " << h;
      EXPECT_EQ(scripted->text, r.thoughts[h]);
      EXPECT_NE(scripted->text.find("Search[" + r.picks[h] + "]"), std::string::npos);
      ++checked;
    }
  }
  EXPECT_GT(checked, 120u);
  // The compact trace sends no history.
  o.contexts = bench::Contexts::compact;
  const auto compact = bench::make_workload(graph("react"), o);
  EXPECT_TRUE(compact.runs[0].thoughts.empty());
  EXPECT_EQ(bench::react_think_request(compact.runs[0], 2)["messages"].size(), 3u);
}

TEST(Workloads, PaperContextsSizePassagesAndDialogs) {
  bench::WorkloadOptions o{2, 200, 1.0};
  o.contexts = bench::Contexts::paper;
  std::vector<double> passages;
  for (const char* name : {"react", "subagent"})
    for (const auto& rec : bench::make_workload(graph(name), o).corpus)
      passages.push_back(static_cast<double>(rec["text"].get<std::string>().size()) / 4);
  std::sort(passages.begin(), passages.end());
  EXPECT_NEAR(passages[passages.size() / 2], 130, 20);
  std::vector<double> dialogs;
  for (const auto& r : bench::make_workload(graph("hci"), o).runs)
    dialogs.push_back(static_cast<double>(r.input.size()) / 4);
  std::sort(dialogs.begin(), dialogs.end());
  EXPECT_NEAR(dialogs[dialogs.size() / 2], 165, 25) << "150 of conversation and the message";
}

TEST(Workloads, ContextsParseByName) {
  EXPECT_EQ(bench::parse_contexts("paper"), bench::Contexts::paper);
  EXPECT_EQ(bench::parse_contexts("compact"), bench::Contexts::compact);
  EXPECT_FALSE(bench::parse_contexts("long"));
  EXPECT_STREQ(bench::to_string(bench::Contexts::paper), "paper");
}

}  // namespace
}  // namespace dynrt::testing
