// WorkflowRun without an actor system: demands and completions in, RunEffects out, on the shipped
// templates (routing: a decode-window decision in a loop; hci: a user-window decision with
// extracted candidates; subagent: template-wide limits).
#include "run/workflow_run.hpp"

#include "dsl/render.hpp"
#include "tests/run/graphs.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dynrt::run {
namespace {

using branch::Outcome;
using dynrt::testing::graph;
using Demanded = std::vector<WorkflowRun::Verdict>;

GraphPtr shared(const std::string& workflow) {
  return std::make_shared<const dsl::TemplateGraph>(graph(workflow));
}

// A chat.completion response whose message content is `content`.
std::string chat(const std::string& content) {
  return nlohmann::json{{"choices", {{{"message", {{"role", "assistant"}, {"content", content}}}}}}}
      .dump();
}

nlohmann::json body(const dsl::TemplateGraph& g, const std::string& stage,
                    const dsl::Bindings& vars) {
  auto r = dsl::render_stage(*g.stage(stage), vars);
  EXPECT_TRUE(r.ok()) << stage;
  return r.ok() ? r->body : nlohmann::json{};
}

const csl::EntryRef kNoEntry{};

// -- routing: a decode-window decision -------------------------------------------------------

class WorkflowRunRouting : public ::testing::Test {
 protected:
  GraphPtr g = shared("routing");
  const dsl::Stage& router = *g->stage("router");
  const dsl::Stage& handle = *g->stage("handle");
  const dsl::Stage& execute = *g->stage("execute");
  const dsl::DecisionId handler = g->decision("handler")->id;

  RunEffects demand_router(WorkflowRun& run, const std::string& query) {
    return run.demand(router, body(*g, "router", {{"query", query}}));
  }
  // Demands the router, opens the branch it asks for under `id`.
  void open_branch(WorkflowRun& run, std::uint64_t id) {
    const auto fx = demand_router(run, "mail Bob the agenda");
    ASSERT_EQ(fx.open.size(), 1u);
    run.opened(fx.open[0], id);
  }
};

TEST_F(WorkflowRunRouting, DemandOfTheRouterBindsTheQueryAndOpensTheHandlerBranch) {
  WorkflowRun run(g, true);
  const auto fx = demand_router(run, "mail Bob the agenda");

  EXPECT_EQ(run.vars().at("query"), "mail Bob the agenda");
  EXPECT_TRUE(fx.abandon.empty());
  EXPECT_TRUE(fx.resolve.empty());
  ASSERT_EQ(fx.open.size(), 1u);
  const auto& o = fx.open[0];
  EXPECT_EQ(o.decision, handler);
  EXPECT_EQ(o.bindings.at("query"), "mail Bob the agenda");
  EXPECT_EQ(o.chain, (std::vector<dsl::StageId>{handle.id, execute.id}));
  EXPECT_EQ(o.source_output, nullptr);  // learned candidates read no stage's output
}

TEST_F(WorkflowRunRouting, RouterCompletionResolvesTheOpenBranchToTheSelectedHandler) {
  WorkflowRun run(g, true);
  open_branch(run, 7);

  const auto fx = run.completed(router, chat("It is about mail.\nHANDLER: email"), kNoEntry);

  EXPECT_TRUE(fx.abandon.empty());
  EXPECT_TRUE(fx.open.empty());
  ASSERT_EQ(fx.resolve.size(), 1u);
  EXPECT_EQ(fx.resolve[0].decision, handler);
  EXPECT_EQ(fx.resolve[0].outcome, Outcome::selected);
  EXPECT_EQ(fx.resolve[0].value, "email");
  EXPECT_EQ(fx.resolve[0].branch, std::optional<std::uint64_t>(7));
  EXPECT_EQ(run.vars().at("handler"), "email");
}

// Resolve on emission: a selection the router emits goes to its open branch, until the whole
// output resolves it.
TEST_F(WorkflowRunRouting, AnEmittedSelectionGoesToTheOpenBranchUntilItResolves) {
  WorkflowRun run(g, true);
  EXPECT_EQ(run.emission_target(handler), std::nullopt) << "no branch open yet";
  open_branch(run, 7);
  EXPECT_EQ(run.emission_target(handler), 7u);
  run.completed(router, chat("HANDLER: email"), kNoEntry);
  EXPECT_EQ(run.emission_target(handler), std::nullopt) << "resolved";
  EXPECT_EQ(run.emission_target(dsl::kNoId), std::nullopt);
}

TEST_F(WorkflowRunRouting, ResolvedBranchLearnsOnceThatItsFillServedTheHandlerDemand) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  EXPECT_EQ(run.demanded(handle, true, 7), (Demanded{{7, true}}));
  EXPECT_TRUE(run.demanded(handle, true, 7).empty());
}

TEST_F(WorkflowRunRouting, DemandServedByAnotherBranchsFillIsNotConsumed) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  EXPECT_EQ(run.demanded(handle, true, 99), (Demanded{{7, false}}));
}

TEST_F(WorkflowRunRouting, DemandNotFromAFillIsNotConsumed) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  EXPECT_EQ(run.demanded(handle, false, 7), (Demanded{{7, false}}));
}

// C1 answered the handler stage (the library, or an identical execution in flight): the fill
// is judged at the executor after it, by whether it served that.
TEST_F(WorkflowRunRouting, AStageTheLibraryAnsweredMovesTheVerdictDownTheChain) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  EXPECT_TRUE(run.demanded(handle, false, 0, /*cached=*/true).empty());
  EXPECT_EQ(run.demanded(execute, true, 7), (Demanded{{7, true}}));
  EXPECT_TRUE(run.demanded(execute, true, 7).empty());
}

TEST_F(WorkflowRunRouting, AChainTheLibraryAnsweredWhollyIsNotJudged) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  EXPECT_TRUE(run.demanded(handle, false, 0, /*cached=*/true).empty());
  EXPECT_EQ(run.demanded(execute, false, 0, /*cached=*/true), (Demanded{{7, false, false}}));
}

// Executed on the engine: the fill did not serve, and that is judged at once.
TEST_F(WorkflowRunRouting, AnExecutedFirstStageJudgesTheFillAtOnce) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  EXPECT_EQ(run.demanded(handle, false, 0, /*cached=*/false), (Demanded{{7, false}}));
  EXPECT_TRUE(run.demanded(execute, true, 7).empty());
}

TEST_F(WorkflowRunRouting, DemandBeforeResolutionTellsNoBranchAndDoesNotUseUpItsTurn) {
  WorkflowRun run(g, true);
  open_branch(run, 7);

  EXPECT_TRUE(run.demanded(handle, true, 7).empty());
  run.completed(router, chat("HANDLER: email"), kNoEntry);
  EXPECT_EQ(run.demanded(handle, true, 7), (Demanded{{7, true}}));
}

TEST_F(WorkflowRunRouting, DemandOfALaterChainStageTellsNoBranch) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  EXPECT_TRUE(run.demanded(execute, true, 7).empty());
  EXPECT_EQ(run.demanded(handle, true, 7), (Demanded{{7, true}}));
}

TEST_F(WorkflowRunRouting, NextRepetitionOfTheRouterAbandonsThePreviousBranchAndOpensANewOne) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  const auto fx = demand_router(run, "and what is the weather");

  EXPECT_EQ(fx.abandon, (std::vector<std::uint64_t>{7}));
  ASSERT_EQ(fx.open.size(), 1u);
  EXPECT_EQ(fx.open[0].decision, handler);
  EXPECT_EQ(fx.open[0].bindings.at("query"), "and what is the weather");
  run.opened(fx.open[0], 8);
  EXPECT_EQ(run.open_branches(), (std::vector<std::uint64_t>{8}));

  const auto done = run.completed(router, chat("HANDLER: weather"), kNoEntry);
  ASSERT_EQ(done.resolve.size(), 1u);
  EXPECT_EQ(done.resolve[0].branch, std::optional<std::uint64_t>(8));
  EXPECT_EQ(run.vars().at("handler"), "weather");
}

TEST_F(WorkflowRunRouting, AmbiguousSelectionIsReportedAndBindsNoHandler) {
  WorkflowRun run(g, true);
  open_branch(run, 7);

  const auto fx =
      run.completed(router, chat("HANDLER: weather\nno, rather\nHANDLER: email"), kNoEntry);

  ASSERT_EQ(fx.resolve.size(), 1u);
  EXPECT_EQ(fx.resolve[0].outcome, Outcome::ambiguous);
  EXPECT_EQ(fx.resolve[0].branch, std::optional<std::uint64_t>(7));
  EXPECT_EQ(run.vars().count("handler"), 0u);
}

TEST_F(WorkflowRunRouting, UnreadableSelectionIsReportedAndBindsNoHandler) {
  WorkflowRun run(g, true);
  open_branch(run, 7);

  const auto fx = run.completed(router, chat("I cannot decide."), kNoEntry);

  ASSERT_EQ(fx.resolve.size(), 1u);
  EXPECT_EQ(fx.resolve[0].outcome, Outcome::unreadable);
  EXPECT_EQ(fx.resolve[0].branch, std::optional<std::uint64_t>(7));
  EXPECT_EQ(run.vars().count("handler"), 0u);
}

TEST_F(WorkflowRunRouting, BranchIsResolvedOnlyOnce) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  // The same router output again (a duplicate completion) has no branch left to tell.
  const auto fx = run.completed(router, chat("HANDLER: email"), kNoEntry);
  ASSERT_EQ(fx.resolve.size(), 1u);
  EXPECT_EQ(fx.resolve[0].branch, std::nullopt);
}

TEST_F(WorkflowRunRouting, WithFillsOffNoBranchOpensButTheSelectionIsStillReported) {
  WorkflowRun run(g, false);

  const auto first = demand_router(run, "mail Bob the agenda");
  EXPECT_TRUE(first.open.empty());
  EXPECT_TRUE(first.abandon.empty());

  const auto fx = run.completed(router, chat("HANDLER: email"), kNoEntry);
  EXPECT_TRUE(fx.open.empty());
  ASSERT_EQ(fx.resolve.size(), 1u);
  EXPECT_EQ(fx.resolve[0].decision, handler);
  EXPECT_EQ(fx.resolve[0].outcome, Outcome::selected);
  EXPECT_EQ(fx.resolve[0].value, "email");
  EXPECT_EQ(fx.resolve[0].branch, std::nullopt);
  EXPECT_EQ(run.vars().at("handler"), "email");

  const auto again = demand_router(run, "and the weather");
  EXPECT_TRUE(again.open.empty());
  EXPECT_TRUE(again.abandon.empty());
  EXPECT_TRUE(run.open_branches().empty());
}

TEST_F(WorkflowRunRouting, HandlerCompletionMakesItsEntryTheProducerOfTheApiCall) {
  WorkflowRun run(g, true);
  demand_router(run, "mail Bob the agenda");
  run.completed(router, chat("HANDLER: email"), kNoEntry);

  const std::string call = R"({"function": "send", "arguments": {"to": "Bob"}})";
  run.completed(handle, chat(call), csl::EntryRef{3, 1});

  EXPECT_EQ(run.vars().at("api_call"), call);
  EXPECT_EQ(run.producers().at("api_call"), (csl::EntryRef{3, 1}));
  EXPECT_EQ(run.producers_of(execute), (std::vector<csl::EntryRef>{{3, 1}}));
}

TEST_F(WorkflowRunRouting, CompletionWithoutAnEntryForgetsTheEarlierProducer) {
  WorkflowRun run(g, true);
  demand_router(run, "mail Bob the agenda");
  run.completed(router, chat("HANDLER: email"), kNoEntry);
  run.completed(handle, chat(R"({"function": "send"})"), csl::EntryRef{3, 1});

  run.completed(handle, chat(R"({"function": "draft"})"), kNoEntry);

  EXPECT_EQ(run.vars().at("api_call"), R"({"function": "draft"})");
  EXPECT_EQ(run.producers().count("api_call"), 0u);
  EXPECT_TRUE(run.producers_of(execute).empty());
}

TEST_F(WorkflowRunRouting, RequestBoundAndSelectedVariablesHaveNoProducer) {
  WorkflowRun run(g, true);
  demand_router(run, "mail Bob the agenda");
  run.completed(router, chat("HANDLER: email"), csl::EntryRef{1, 1});
  run.completed(handle, chat(R"({"function": "send"})"), csl::EntryRef{3, 1});

  EXPECT_EQ(run.producers().count("query"), 0u);
  EXPECT_EQ(run.producers().count("handler"), 0u);
  EXPECT_EQ(run.producers_of(router), std::vector<csl::EntryRef>{});

  // The next turn's router binds query from its request again: still not produced.
  demand_router(run, "and the weather");
  EXPECT_EQ(run.producers().count("query"), 0u);
}

TEST_F(WorkflowRunRouting, ExecuteReadKeysRenderOnceTheHandlerIsBound) {
  WorkflowRun run(g, true);
  demand_router(run, "mail Bob the agenda");
  EXPECT_EQ(run.read_keys(execute), std::nullopt);

  run.completed(router, chat("HANDLER: email"), kNoEntry);
  EXPECT_EQ(run.read_keys(execute), (std::vector<std::string>{"api:email"}));
  EXPECT_EQ(run.read_keys(handle), std::vector<std::string>{});  // reads nothing
}

TEST_F(WorkflowRunRouting, HandlerWaitsTheTemplatesWaitForAFill) {
  WorkflowRun run(g, true);
  EXPECT_EQ(wait_of(*g, handle), std::chrono::milliseconds(30000));
  EXPECT_EQ(ttl_of(*g, execute), std::chrono::seconds(600));
}

TEST_F(WorkflowRunRouting, SettledBranchIsNoLongerOpen) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  EXPECT_EQ(run.open_branches(), (std::vector<std::uint64_t>{7}));

  run.settled(99);  // not one of this run's
  EXPECT_EQ(run.open_branches(), (std::vector<std::uint64_t>{7}));

  run.settled(7);
  EXPECT_TRUE(run.open_branches().empty());
  // Nothing left to resolve or abandon.
  const auto done = run.completed(router, chat("HANDLER: email"), kNoEntry);
  ASSERT_EQ(done.resolve.size(), 1u);
  EXPECT_EQ(done.resolve[0].branch, std::nullopt);
  EXPECT_TRUE(demand_router(run, "again").abandon.empty());
}

TEST_F(WorkflowRunRouting, ResponseThatIsNotJsonChangesNothing) {
  WorkflowRun run(g, true);
  open_branch(run, 7);
  const auto vars = run.vars();

  const auto fx = run.completed(router, "HANDLER: email (not JSON)", csl::EntryRef{1, 1});
  EXPECT_TRUE(fx.abandon.empty());
  EXPECT_TRUE(fx.resolve.empty());
  EXPECT_TRUE(fx.open.empty());
  const auto fx2 = run.completed(handle, "{\"choices\": [", csl::EntryRef{3, 1});
  EXPECT_TRUE(fx2.resolve.empty());

  EXPECT_EQ(run.vars(), vars);
  EXPECT_TRUE(run.producers().empty());
  EXPECT_EQ(run.open_branches(), (std::vector<std::uint64_t>{7}));
  // The branch is still unresolved: a readable router output resolves it.
  const auto done = run.completed(router, chat("HANDLER: email"), kNoEntry);
  ASSERT_EQ(done.resolve.size(), 1u);
  EXPECT_EQ(done.resolve[0].branch, std::optional<std::uint64_t>(7));
}

// -- hci: a user-window decision -------------------------------------------------------------

class WorkflowRunHci : public ::testing::Test {
 protected:
  GraphPtr g = shared("hci");
  const dsl::Stage& offer = *g->stage("offer");
  const dsl::Stage& act = *g->stage("act");
  const dsl::DecisionId action = g->decision("action")->id;
  const std::string offered = chat(R"({"actions": ["a", "b", "c"]})");
};

TEST_F(WorkflowRunHci, OfferCompletionOpensTheActionBranchWithTheOfferAsItsSource) {
  WorkflowRun run(g, true);
  EXPECT_TRUE(run.demand(offer, body(*g, "offer", {{"dialog", "plan my day"}})).open.empty());

  const auto fx = run.completed(offer, offered, kNoEntry);

  EXPECT_TRUE(fx.resolve.empty());
  ASSERT_EQ(fx.open.size(), 1u);
  const auto& o = fx.open[0];
  EXPECT_EQ(o.decision, action);
  EXPECT_EQ(o.bindings.at("dialog"), "plan my day");
  EXPECT_EQ(o.chain, std::vector<dsl::StageId>{act.id});
  ASSERT_NE(o.source_output, nullptr);
  EXPECT_EQ(*o.source_output, nlohmann::json::parse(offered));
}

TEST_F(WorkflowRunHci, ActDemandCarriesTheUsersPickAndResolvesTheBranch) {
  WorkflowRun run(g, true);
  run.demand(offer, body(*g, "offer", {{"dialog", "plan my day"}}));
  const auto opened = run.completed(offer, offered, kNoEntry);
  ASSERT_EQ(opened.open.size(), 1u);
  run.opened(opened.open[0], 11);
  EXPECT_EQ(run.emission_target(action), std::nullopt) << "a user's pick is not decoded";

  const auto fx = run.demand(act, body(*g, "act", {{"dialog", "plan my day"}, {"action", "b"}}));

  EXPECT_TRUE(fx.open.empty());
  EXPECT_TRUE(fx.abandon.empty());
  ASSERT_EQ(fx.resolve.size(), 1u);
  EXPECT_EQ(fx.resolve[0].decision, action);
  EXPECT_EQ(fx.resolve[0].outcome, Outcome::selected);
  EXPECT_EQ(fx.resolve[0].value, "b");
  EXPECT_EQ(fx.resolve[0].branch, std::optional<std::uint64_t>(11));
  EXPECT_EQ(run.vars().at("action"), "b");
  EXPECT_EQ(run.producers().count("action"), 0u);
  EXPECT_EQ(run.demanded(act, true, 11), (Demanded{{11, true}}));
}

TEST_F(WorkflowRunHci, ActWaitsTheTemplatesWaitForAFill) {
  WorkflowRun run(g, true);
  EXPECT_EQ(wait_of(*g, act), std::chrono::milliseconds(30000));
  EXPECT_EQ(ttl_of(*g, act), std::chrono::seconds(300));
}

// -- subagent: template-wide limits, outputs down a chain ------------------------------------

TEST(WorkflowRunSubagent, ResearchLivesAsLongAsTheTemplatesTtl) {
  const auto g = shared("subagent");
  WorkflowRun run(g, true);
  EXPECT_EQ(ttl_of(*g, *g->stage("research")), std::chrono::seconds(3600));
  EXPECT_EQ(ttl_of(*g, *g->stage("summarize")), std::chrono::seconds(3600));
}

TEST(WorkflowRunSubagent, OnlyStageOutputsHaveProducers) {
  const auto g = shared("subagent");
  WorkflowRun run(g, true);
  const auto& plan = *g->stage("plan");
  // plan has no request template: the harness writes its request.
  const nlohmann::json request = {
      {"messages",
       {{{"role", "system"}, {"content", "Plan."}},
        {{"role", "user"}, {"content", "Where was [[Ada Lovelace]] born?"}}}}};
  run.demand(plan, request);
  EXPECT_EQ(run.vars().at("question"), "Where was [[Ada Lovelace]] born?");
  EXPECT_EQ(run.vars().at("entity"), "Ada Lovelace");

  run.completed(plan, chat(R"({"subagent": "biography"})"), csl::EntryRef{1, 1});
  run.completed(*g->stage("research"), R"({"passage": "Born in London."})", csl::EntryRef{5, 2});
  EXPECT_EQ(run.vars().at("subagent"), "biography");
  EXPECT_EQ(run.vars().at("findings"), "Born in London.");

  EXPECT_EQ(run.producers(), (Producers{{"findings", csl::EntryRef{5, 2}}}));
  EXPECT_EQ(run.producers_of(*g->stage("summarize")), (std::vector<csl::EntryRef>{{5, 2}}));
  EXPECT_EQ(run.read_keys(*g->stage("research")),
            (std::vector<std::string>{"kb:biography:Ada Lovelace"}));
}

}  // namespace
}  // namespace dynrt::run
