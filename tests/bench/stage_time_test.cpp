// Where a cell's answer time went (`stages` in dynrt bench records and points): a run's calls
// are added up per stage and per how each was served, over the runs added, and the seeds'
// figures average with a pair one seed lacks counted as no calls there.
#include "bench/cell.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace dynrt::bench {
namespace {

using std::chrono::milliseconds;

Step step(const char* stage, Served served, int ms) {
  Step s;
  s.stage = stage;
  s.reply.served = served;
  s.latency = milliseconds(ms);
  return s;
}

TEST(StageTally, AddsCallsPerStageAndHowServedOverTheRuns) {
  detail::StageTally tally;
  RunResult one, two;
  one.steps = {step("plan", Served::engine, 1000), step("act", Served::fill, 2000)};
  two.steps = {step("plan", Served::engine, 3000), step("act", Served::cache, 0),
               step("plan", Served::engine, 2000)};
  tally.add(one);
  tally.add(two);
  const auto t = tally.stage_times();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].stage, "plan");
  EXPECT_EQ(t[0].served, "engine");
  EXPECT_DOUBLE_EQ(t[0].calls, 1.5);  // three calls over two runs
  EXPECT_DOUBLE_EQ(t[0].mean_s, 2.0);
  EXPECT_DOUBLE_EQ(t[0].per_run_s, 3.0);
  EXPECT_EQ(t[1].served, "fill");
  EXPECT_DOUBLE_EQ(t[1].calls, 0.5);
  EXPECT_DOUBLE_EQ(t[1].mean_s, 2.0);
  EXPECT_DOUBLE_EQ(t[1].per_run_s, 1.0);
  EXPECT_EQ(t[2].served, "cache");
  EXPECT_DOUBLE_EQ(t[2].per_run_s, 0.0);
}

// The prompt tokens of a stage's calls as the simulated engine counts them, whoever served
// them; a tool call has none.
TEST(StageTally, AveragesThePromptTokensOfAStagesCalls) {
  auto call = [](const char* stage, std::string text) {
    Step s = step(stage, Served::engine, 100);
    s.endpoint = "/v1/chat/completions";
    s.request = {{"messages", nlohmann::json::array({{{"role", "user"}, {"content", text}}})}};
    return s;
  };
  Step tool = step("search", Served::engine, 10);
  tool.endpoint = "/v1/dynrt/tools/search";
  tool.request = {{"query", std::string(400, 'q')}};
  RunResult run;
  // 40 and 400 characters: 10 and 100 tokens, and 4 for the message and 1 more each.
  run.steps = {call("read", std::string(40, 'a')), call("read", std::string(400, 'b')), tool};
  detail::StageTally tally;
  tally.add(run);
  const auto t = tally.stage_times();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0].prompt_tokens, (15 + 105) / 2.0);
  EXPECT_DOUBLE_EQ(t[1].prompt_tokens, 0.0);
  // Seeds average per call, weighted by their calls.
  const std::vector<StageTime> a = {{"read", "engine", 2, 1, 2, 100}};
  const std::vector<StageTime> b = {{"read", "engine", 1, 1, 1, 400}};
  EXPECT_DOUBLE_EQ(mean_stage_times({a, b})[0].prompt_tokens, 200.0);
}

TEST(StageTally, NoRunsGiveNoFigures) {
  EXPECT_TRUE(detail::StageTally{}.stage_times().empty());
}

TEST(StageTimes, SeedsAverageWithAMissingPairAsNoCalls) {
  const std::vector<StageTime> a = {{"plan", "engine", 1, 2, 2}};
  const std::vector<StageTime> b = {{"plan", "engine", 1, 4, 4}, {"act", "fill", 1, 2, 2}};
  const auto m = mean_stage_times({a, b});
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].stage, "plan");
  EXPECT_DOUBLE_EQ(m[0].calls, 1.0);
  EXPECT_DOUBLE_EQ(m[0].per_run_s, 3.0);
  EXPECT_DOUBLE_EQ(m[0].mean_s, 3.0);
  EXPECT_EQ(m[1].stage, "act");
  EXPECT_DOUBLE_EQ(m[1].calls, 0.5);
  EXPECT_DOUBLE_EQ(m[1].per_run_s, 1.0);
  EXPECT_DOUBLE_EQ(m[1].mean_s, 2.0);  // the calls that were made took 2 s each
  EXPECT_TRUE(mean_stage_times({}).empty());
}

}  // namespace
}  // namespace dynrt::bench
