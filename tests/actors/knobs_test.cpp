// The policy knobs `dynrt bench` uses for its sweeps and baselines: fanout (fills per branch),
// fill depth (stages down the chain) and private fills (a fill serves only its own run). Each
// must change only what is speculated, never an answer.
#include "actors/messages.hpp"
#include "runtime/reuse_name.hpp"
#include "tests/actors/rig.hpp"

#include <gtest/gtest.h>

namespace dynrt::testing {
namespace {

// Drives one run with the knobs and with the floor; every body must be identical.
struct Outcome {
  std::vector<Served> served;  // per step
  RuntimeStats stats;
};

Outcome drive_and_compare(const std::string& workflow, RigOptions knobs) {
  const auto w = bench::make_workload(graph(workflow), {21, 1, 1.0});
  Rig floor(w, {false, false, 0});
  Rig arm(w, knobs);
  const auto a = floor.drive(w.runs[0]);
  const auto b = arm.drive(w.runs[0]);
  EXPECT_TRUE(a.ok()) << a.error;
  EXPECT_TRUE(b.ok()) << b.error;
  Outcome out;
  EXPECT_EQ(a.steps.size(), b.steps.size());
  for (std::size_t i = 0; i < std::min(a.steps.size(), b.steps.size()); ++i) {
    EXPECT_EQ(a.steps[i].reply.body, b.steps[i].reply.body) << "step " << b.steps[i].stage;
    out.served.push_back(b.steps[i].reply.served);
  }
  out.stats = arm.runtime->stats();
  return out;
}

TEST(Knobs, FanoutZeroIssuesNoFills) {
  RigOptions o{false, true, 10};
  o.fanout = 0;
  const auto out = drive_and_compare("routing", o);
  EXPECT_EQ(out.stats.fills_issued, 0u);
  EXPECT_EQ(out.stats.served_fill, 0u);
}

TEST(Knobs, FanoutOneFillsOnlyTheTopCandidate) {
  RigOptions o{false, true, 10};
  o.fanout = 1;
  const auto out = drive_and_compare("routing", o);
  // Two routing decisions, at most one fill each.
  EXPECT_LE(out.stats.fills_issued, 2u);
  EXPECT_GE(out.stats.fills_issued, 1u);
}

// Depth 1: the handler is filled, its executor is not (it runs when demanded).
TEST(Knobs, FillDepthOneStopsAfterTheFirstStage) {
  RigOptions o{false, true, 10};
  o.fill_depth = 1;
  const auto out = drive_and_compare("routing", o);
  ASSERT_EQ(out.served.size(), 6u);  // router, handle, execute; twice
  for (std::size_t turn = 0; turn < 2; ++turn) {
    EXPECT_EQ(out.served[turn * 3 + 1], Served::fill) << "handler of turn " << turn;
    EXPECT_EQ(out.served[turn * 3 + 2], Served::engine) << "executor of turn " << turn;
  }
}

// Private fills still serve the run that made them, chain included, and answer like the
// floor.
TEST(Knobs, PrivateFillsServeTheirOwnRun) {
  RigOptions o{false, true, 10};
  o.private_fills = true;
  const auto out = drive_and_compare("routing", o);
  EXPECT_EQ(out.stats.served_fill, 4u);
}

TEST(Knobs, PrivateNamesDifferPerRunAndSharedNamesDoNot) {
  run::Policy shared;
  run::Policy priv;
  priv.private_fills = true;
  dsl::Stage stage;
  stage.fingerprint = xxh3_128("a stage");
  const nlohmann::json body = {{"model", "m"}, {"prompt", "a stage's rendered input"}};
  const Hash128 plain = reuse_name(stage.fingerprint, "/v1/completions", body);
  auto name = [&](const run::Policy& sw, const char* run) {
    return run::stage_name(sw, stage, "/v1/completions", body, Caller{}, run);
  };
  EXPECT_EQ(name(shared, "run-1"), plain);
  EXPECT_EQ(name(shared, "run-2"), plain);
  EXPECT_NE(name(priv, "run-1"), plain);
  EXPECT_NE(name(priv, "run-1"), name(priv, "run-2"));
  EXPECT_EQ(name(priv, "run-1"), name(priv, "run-1"));
}

TEST(Knobs, NamesAreScopedByTenantUnlessTheStageIsShared) {
  run::Policy sw;
  dsl::Stage stage;
  stage.fingerprint = xxh3_128("a stage");
  const nlohmann::json body = {{"model", "m"}, {"prompt", "the same input"}};
  const Hash128 plain = reuse_name(stage.fingerprint, "/v1/completions", body);
  auto name = [&](const char* tenant) {
    Caller c;
    c.tenant = tenant;
    c.key = std::string(tenant) + "-key";
    return run::stage_name(sw, stage, "/v1/completions", body, c, "run");
  };
  EXPECT_EQ(name(""), plain);  // the default tenant: the names of a deployment without keys
  EXPECT_NE(name("acme"), plain);
  EXPECT_NE(name("acme"), name("beta"));
  EXPECT_EQ(name("acme"), name("acme"));
  stage.share = dsl::Share::global;
  EXPECT_EQ(name("acme"), plain);
  EXPECT_EQ(name("beta"), plain);
}

}  // namespace
}  // namespace dynrt::testing
