// What a tagged call that passed through is told: the reason, and a sentence that names what
// was sent and what would have been accepted (the closest loaded name, where one is close).
#include "run/misdirected.hpp"

#include "tests/run/graphs.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dynrt::run {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kLoaded = {"hci", "react", "routing", "subagent"};

TEST(Misdirected, AnUntaggedOrClaimedCallIsNot) {
  EXPECT_FALSE(misdirected_call(Tags{}, kLoaded, false));
  EXPECT_FALSE(misdirected_call(Tags{"routing", "run-1", "router"}, kLoaded, true));
}

TEST(Misdirected, AnUnknownWorkflowNamesTheLoadedOnesAndTheClosest) {
  const auto m = misdirected_call(Tags{"routng", "run-1", "router"}, kLoaded, false);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->reason, "unknown_workflow");
  EXPECT_EQ(m->workflow, "routng");
  EXPECT_EQ(m->stage, "router");
  EXPECT_THAT(m->detail, HasSubstr("X-DynRT-Workflow 'routng'"));
  EXPECT_THAT(m->detail, HasSubstr("(loaded: 'hci', 'react', 'routing' and 'subagent')"));
  EXPECT_THAT(m->detail, HasSubstr("did you mean 'routing'?"));
  const auto far = misdirected_call(Tags{"payroll", "run-1", "router"}, kLoaded, false);
  ASSERT_TRUE(far);
  EXPECT_THAT(far->detail, Not(HasSubstr("did you mean")));
  const auto none = misdirected_call(Tags{"routing", "run-1", "router"}, {}, false);
  ASSERT_TRUE(none);
  EXPECT_THAT(none->detail, HasSubstr("(none is loaded)"));
}

TEST(Misdirected, ALongListIsCut) {
  std::vector<std::string> many;
  for (int i = 0; i < 14; ++i)
    many.push_back("flow-" + std::to_string(i));
  const auto m = misdirected_call(Tags{"other", "run-1", "s"}, many, false);
  ASSERT_TRUE(m);
  EXPECT_THAT(m->detail, HasSubstr("'flow-8', 'flow-9' and 4 more)"));
  EXPECT_THAT(m->detail, Not(HasSubstr("flow-10")));
}

TEST(Misdirected, ALoadedWorkflowWithoutARunId) {
  const auto m = misdirected_call(Tags{"routing", "", "router"}, kLoaded, true);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->reason, "no_workflow_id");
  EXPECT_THAT(m->detail, HasSubstr("no X-DynRT-Workflow-Id"));
}

TEST(Misdirected, ARunIdOrStageWithoutAWorkflow) {
  const auto id = misdirected_call(Tags{"", "run-1", ""}, kLoaded, false);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->reason, "no_workflow");
  EXPECT_THAT(id->detail, HasSubstr("tagged X-DynRT-Workflow-Id without X-DynRT-Workflow"));
  const auto stage = misdirected_call(Tags{"", "", "router"}, kLoaded, false);
  ASSERT_TRUE(stage);
  EXPECT_EQ(stage->reason, "no_workflow");
  EXPECT_THAT(stage->detail, HasSubstr("tagged X-DynRT-Stage without X-DynRT-Workflow"));
}

TEST(Misdirected, AStageTheWorkflowDoesNotHave) {
  const auto& g = testing::graph("routing");
  EXPECT_FALSE(misdirected_stage(Tags{"routing", "run-1", "handle"}, g));
  const auto m = misdirected_stage(Tags{"routing", "run-1", "routr"}, g);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->reason, "unknown_stage");
  EXPECT_EQ(m->stage, "routr");
  EXPECT_THAT(m->detail, HasSubstr("X-DynRT-Stage 'routr' of workflow 'routing'"));
  EXPECT_THAT(m->detail, HasSubstr("(its stages: 'router', 'handle' and 'execute')"));
  EXPECT_THAT(m->detail, HasSubstr("did you mean 'router'?"));
  const auto none = misdirected_stage(Tags{"routing", "run-1", ""}, g);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->reason, "unknown_stage");
  EXPECT_THAT(none->detail, HasSubstr("without X-DynRT-Stage"));
}

}  // namespace
}  // namespace dynrt::run
