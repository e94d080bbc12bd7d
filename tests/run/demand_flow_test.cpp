// DemandFlow without an actor system: every rule of a demand's lifecycle, events in and effects
// out, on a manual clock (the routing template's handler and executor stages; a small notes
// template for a stage that writes).
#include "run/demand_flow.hpp"

#include "dsl/lint.hpp"
#include "dsl/render.hpp"
#include "tests/run/effects.hpp"
#include "tests/run/graphs.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dynrt::run {
namespace {

using namespace std::chrono_literals;

using dynrt::testing::graph;
using namespace dynrt::run::testing;
using nlohmann::json;

ExecResult engine_error(engines::ErrorKind kind) {
  ExecResult r;
  r.error.kind = kind;
  r.error.message = "it failed";
  return r;
}

ServeReply hit(std::string bytes, bool promoted, std::uint64_t branch = 0, Duration cost = 120ms) {
  ServeReply r;
  r.found = true;
  r.promoted = promoted;
  r.ref = {3, 1};
  r.bytes = std::make_shared<const std::string>(std::move(bytes));
  r.cost = cost;
  r.provenance = {promoted ? csl::Origin::fill : csl::Origin::canonical, 11, branch};
  return r;
}

// A run of the routing template whose router said "email": the handler's request is known.
class DemandFlowRouting : public ::testing::Test {
 protected:
  GraphPtr g = std::make_shared<const dsl::TemplateGraph>(graph("routing"));
  const dsl::Stage& router = *g->stage("router");
  const dsl::Stage& handle = *g->stage("handle");
  const dsl::Stage& execute = *g->stage("execute");
  ManualClock clock{TimePoint(1s)};
  WorkflowRun run{g, true};
  Policy policy;
  std::unique_ptr<DemandFlow> flow;

  void SetUp() override { make_flow(); }
  void make_flow() {
    flow = std::make_unique<DemandFlow>(run, clock, DemandFlow::Config{policy, {}, "run-1"});
  }

  std::shared_ptr<const json> body_of(const dsl::Stage& s) {
    auto r = dsl::render_stage(s, run.vars());
    EXPECT_TRUE(r.ok()) << s.name;
    return std::make_shared<const json>(r.ok() ? r->body : json::object());
  }
  std::string endpoint_of(const dsl::Stage& s) {
    return s.kind == dsl::StageKind::tool ? std::string(kToolPrefix) + s.tool
                                          : "/v1/chat/completions";
  }
  DemandEffects start(DemandId id, const dsl::Stage& s) {
    return flow->start(id, s, endpoint_of(s), body_of(s));
  }
  Hash128 name_of(const dsl::Stage& s) {
    return stage_name(policy, s, endpoint_of(s), *body_of(s), {}, "run-1");
  }
  // Demand `id` for the handler, which the library does not hold.
  void miss_the_handler(DemandId id) {
    start(id, handle);
    flow->served(id, ServeReply{});
  }
  static ClaimReply claim(csl::ClaimKind kind, std::uint64_t execution, csl::Ticket ticket = 0) {
    ClaimReply c;
    c.kind = kind;
    c.execution = execution;
    c.ticket = ticket;
    return c;
  }
  // Demand 1 for the handler misses and leads execution 9 on the engine.
  void lead_the_handler() {
    route_to_email();
    miss_the_handler(1);
    flow->claimed(1, claim(csl::ClaimKind::lead, 9));
  }
  // The router ran and chose email (its demand answered from the engine, unstored); the
  // handler branch it opened is known as `branch` (0: none was opened).
  void route_to_email(std::uint64_t branch = 0) {
    const json body = {
        {"model", "qwen3-32b"},
        {"messages", json::array({{{"role", "system"}, {"content", "x"}},
                                  {{"role", "user"}, {"content", "mail Bob the agenda"}}})}};
    const auto fx = run.demand(router, body);
    if (branch != 0 && !fx.open.empty()) run.opened(fx.open[0], branch);
    run.completed(router, chat("HANDLER: email"), {});
  }
};

TEST_F(DemandFlowRouting, AReusableDemandProbesTheLibraryWithThePolicysQuery) {
  route_to_email();
  const auto fx = start(1, handle);
  ASSERT_TRUE(has<demand::Branches>(fx));
  EXPECT_LT(position<demand::Branches>(fx), position<demand::Probe>(fx));  // binds first
  const auto p = only<demand::Probe>(fx);
  EXPECT_EQ(p.id, 1u);
  EXPECT_EQ(p.name, name_of(handle));
  EXPECT_TRUE(p.query.probe);
  EXPECT_TRUE(p.query.promote);
  EXPECT_TRUE(p.query.keep);
  EXPECT_FALSE(has<demand::Execute>(fx));
}

TEST_F(DemandFlowRouting, WithoutReuseAPromotedShadowServesOnlyThisDemand) {
  policy.reuse = false;
  make_flow();
  route_to_email();
  const auto p = only<demand::Probe>(start(1, handle));
  EXPECT_FALSE(p.query.probe);
  EXPECT_TRUE(p.query.promote);
  EXPECT_FALSE(p.query.keep);
}

TEST_F(DemandFlowRouting, WithBothSwitchesOffEveryDemandExecutesAtOnce) {
  policy.reuse = false;
  policy.fills = false;
  make_flow();
  route_to_email();
  const auto fx = start(1, handle);
  EXPECT_FALSE(has<demand::Probe>(fx));
  EXPECT_TRUE(only<demand::Execute>(fx).loads_engine);
}

TEST_F(DemandFlowRouting, AConfirmedHitIsAnsweredFromTheCacheAndTheRunLearnsIt) {
  route_to_email();
  start(1, handle);
  const auto fx = flow->served(1, hit(chat("{\"function\": \"send\"}"), false));
  const auto a = only<demand::Answer>(fx);
  EXPECT_EQ(a.reply.served, Served::cache);
  EXPECT_EQ(a.reply.body, chat("{\"function\": \"send\"}"));
  EXPECT_LT(position<demand::Answer>(fx), position<demand::Branches>(fx));  // answer first
  EXPECT_EQ(run.vars().at("api_call"), "{\"function\": \"send\"}");
  EXPECT_EQ(flow->take_tally().saved, Duration(120ms));
  EXPECT_TRUE(flow->idle());
}

TEST_F(DemandFlowRouting, APromotedFillIsServedAsFillAndItsResolvedBranchLearnsItWasConsumed) {
  route_to_email(7);
  start(1, handle);
  const auto fx = flow->served(1, hit(chat("{}"), true, 7));
  EXPECT_EQ(only<demand::Answer>(fx).reply.served, Served::fill);
  const auto d = only<demand::Demanded>(fx);
  EXPECT_EQ(d.branch, 7u);
  EXPECT_TRUE(d.consumed);
  EXPECT_EQ(d.saved_ms, 120.0);
  EXPECT_FALSE(has<demand::Credit>(fx));
}

TEST_F(DemandFlowRouting, ALaterChainStageServedFromAFillCreditsItsBranch) {
  route_to_email(7);
  run.completed(handle, chat("{}"), {});
  start(1, execute);
  const auto fx = flow->served(1, hit("{\"found\": true}", true, 7));
  EXPECT_FALSE(has<demand::Demanded>(fx));  // the executor is not the branch's first stage
  const auto c = only<demand::Credit>(fx);
  EXPECT_EQ(c.branch, 7u);
  EXPECT_EQ(c.saved_ms, 120.0);
  EXPECT_EQ(c.waited_ms, 0.0);  // it was in the library already
}

// The controller credits the execution less the wait, so the credit carries both.
TEST_F(DemandFlowRouting, AChainStageItsDemandWaitedForCarriesTheWaitInItsCredit) {
  route_to_email(7);
  run.completed(handle, chat("{}"), {});
  const auto name = name_of(execute);
  flow->fill_started(name, 42);
  start(1, execute);
  ASSERT_TRUE(has<demand::ArmWait>(flow->served(1, ServeReply{})));
  clock.advance(30ms);
  ASSERT_TRUE(has<demand::Probe>(flow->fill_ended(name, 42, true)));
  const auto c = only<demand::Credit>(flow->served(1, hit("{\"found\": true}", true, 7)));
  EXPECT_EQ(c.branch, 7u);
  EXPECT_EQ(c.saved_ms, 120.0);
  EXPECT_EQ(c.waited_ms, 30.0);
}

TEST_F(DemandFlowRouting, AMissWhoseFillRunsWaitsWithinTheBoundThenPromotesWithoutASecondWait) {
  route_to_email();
  const auto name = name_of(handle);
  flow->fill_started(name, 42);
  start(1, handle);
  auto fx = flow->served(1, ServeReply{});
  const auto w = only<demand::ArmWait>(fx);
  EXPECT_EQ(w.at, clock.now() + wait_of(*g, handle));
  EXPECT_FALSE(has<demand::Execute>(fx));
  EXPECT_EQ(flow->take_tally().waits, 1u);

  clock.advance(30ms);
  fx = flow->fill_ended(name, 42, true);
  const auto p = only<demand::Probe>(fx);
  EXPECT_EQ(p.id, 1u);
  // The shadow was not there after all (discarded meanwhile): no second wait, it executes.
  fx = flow->served(1, ServeReply{});
  EXPECT_FALSE(has<demand::ArmWait>(fx));
  EXPECT_TRUE(has<demand::Claim>(fx));
  // The wait's deadline comes later, and is stale.
  EXPECT_TRUE(flow->wait_over(1, w.wait).empty());
}

// A fill still queued at fill priority would hold the demand behind every canonical arrival:
// the first demand to wait promotes it, once.
TEST_F(DemandFlowRouting, TheFirstDemandToWaitForAFillPromotesIt) {
  route_to_email();
  const auto name = name_of(handle);
  flow->fill_started(name, 42);
  start(1, handle);
  auto fx = flow->served(1, ServeReply{});
  EXPECT_EQ(only<demand::Promote>(fx).fill, 42u);
  EXPECT_TRUE(has<demand::ArmWait>(fx));
  start(2, handle);
  fx = flow->served(2, ServeReply{});
  EXPECT_TRUE(has<demand::ArmWait>(fx));
  EXPECT_FALSE(has<demand::Promote>(fx));  // promoted already
  // A newer fill of the same name is another engine request: its first waiter promotes it.
  flow->fill_ended(name, 42, false);
  flow->fill_started(name, 43);
  start(3, handle);
  EXPECT_EQ(only<demand::Promote>(flow->served(3, ServeReply{})).fill, 43u);
}

// A miss with no fill running has nothing to promote.
TEST_F(DemandFlowRouting, AMissWithNoFillRunningPromotesNothing) {
  route_to_email();
  start(1, handle);
  EXPECT_FALSE(has<demand::Promote>(flow->served(1, ServeReply{})));
}

TEST_F(DemandFlowRouting, TheWaitedTimeIsWhatTheManualClockSays) {
  route_to_email(7);
  const auto name = name_of(handle);
  flow->fill_started(name, 42);
  start(1, handle);
  flow->served(1, ServeReply{});
  clock.advance(250ms);
  flow->fill_ended(name, 42, true);
  const auto fx = flow->served(1, hit(chat("{}"), true, 7));
  EXPECT_EQ(only<demand::Demanded>(fx).waited_ms, 250.0);
}

TEST_F(DemandFlowRouting, AWaitPastItsBoundExecutesAndMayNoLongerJoin) {
  route_to_email();
  const auto name = name_of(handle);
  flow->fill_started(name, 42);
  start(1, handle);
  const auto w = only<demand::ArmWait>(flow->served(1, ServeReply{}));
  clock.set(w.at);
  auto fx = flow->wait_over(1, w.wait);
  const auto c = only<demand::Claim>(fx);
  EXPECT_FALSE(c.may_join);
  EXPECT_EQ(flow->take_tally().wait_timeouts, 1u);
}

// Past the bound a demand runs itself and still waits for its fill (a hedge): the fill is
// usually nearer its end than a fresh run. Its waiting has ended: the branch learns the wait.
class DemandFlowHedge : public DemandFlowRouting {
 protected:
  Hash128 name;
  // Demand 1 for the handler waited for fill 42 past its bound; its claim is out.
  void time_out() {
    route_to_email(7);
    name = name_of(handle);
    flow->fill_started(name, 42);
    start(1, handle);
    const auto w = only<demand::ArmWait>(flow->served(1, ServeReply{}));
    clock.set(w.at);
    EXPECT_TRUE(has<demand::Claim>(flow->wait_over(1, w.wait)));
  }
  // ... and it leads execution 9, running itself.
  DemandEffects hedge() {
    time_out();
    return flow->claimed(1, claim(csl::ClaimKind::lead, 9));
  }
  // The fill ends stored; the demand probes for it and the library promotes it.
  DemandEffects fill_answers() {
    const auto probe = only<demand::Probe>(flow->fill_ended(name, 42, true));
    EXPECT_EQ(probe.id, 1u);
    EXPECT_EQ(probe.name, name);
    return flow->served(1, hit(chat("{\"fill\": 1}"), true, 7));
  }
};

TEST_F(DemandFlowHedge, TheFillEndingFirstAnswersAndCancelsTheDemandsOwnRun) {
  EXPECT_TRUE(has<demand::Execute>(hedge()));
  clock.advance(500ms);
  auto fx = fill_answers();
  EXPECT_EQ(only<demand::Cancel>(fx).id, 1u);
  EXPECT_EQ(only<demand::Answer>(fx).reply.served, Served::fill);
  EXPECT_EQ(only<demand::Answer>(fx).reply.body, chat("{\"fill\": 1}"));
  // The branch learns that its fill served the demand, and how long it was waited for.
  const auto d = only<demand::Demanded>(fx);
  EXPECT_TRUE(d.consumed);
  EXPECT_EQ(d.waited_ms, ms_of(wait_of(*g, handle)));
  // The led execution's joiners get the fill's result.
  const auto land = only<demand::Land>(fx);
  EXPECT_EQ(land.execution, 9u);
  EXPECT_EQ(land.landed->outcome, Landed::Outcome::result);
  EXPECT_EQ(land.landed->reply.body, chat("{\"fill\": 1}"));
  EXPECT_EQ(flow->take_tally().hedge_fills, 1u);
  EXPECT_FALSE(flow->idle()) << "its cancelled run has not come back";

  // The cancelled run comes back: only the engine's count goes down; nothing is answered,
  // stored or landed twice.
  fx = flow->executed(1, engine_error(engines::ErrorKind::cancelled));
  EXPECT_TRUE(has<demand::Unload>(fx));
  EXPECT_EQ(fx.size(), 1u);
  EXPECT_TRUE(flow->idle());
}

TEST_F(DemandFlowHedge, ARunThatEndsAnywayAfterTheFillAnsweredIsDropped) {
  hedge();
  fill_answers();
  const auto fx = flow->executed(1, engine_ok(chat("{\"own\": 1}")));
  EXPECT_EQ(fx.size(), 1u);
  EXPECT_TRUE(has<demand::Unload>(fx));
}

TEST_F(DemandFlowHedge, TheOwnRunEndingFirstAnswersAndTheFillNoLongerConcernsIt) {
  hedge();
  auto fx = flow->executed(1, engine_ok(chat("{\"own\": 1}")));
  EXPECT_TRUE(has<demand::Store>(fx));
  fx = flow->stored(1, csl::InsertResult{csl::InsertStatus::stored, {5, 2}});
  EXPECT_EQ(only<demand::Answer>(fx).reply.served, Served::engine);
  EXPECT_TRUE(flow->fill_ended(name, 42, true).empty());
  EXPECT_TRUE(flow->idle());
  EXPECT_EQ(flow->take_tally().hedge_fills, 0u);
}

TEST_F(DemandFlowHedge, AFillEndingWhileTheOwnResultIsBeingStoredIsNotProbedFor) {
  hedge();
  EXPECT_TRUE(has<demand::Store>(flow->executed(1, engine_ok(chat("{\"own\": 1}")))));
  EXPECT_TRUE(flow->fill_ended(name, 42, true).empty());
}

TEST_F(DemandFlowHedge, AProbeAnsweredAfterTheOwnResultCameChangesNothing) {
  hedge();
  only<demand::Probe>(flow->fill_ended(name, 42, true));
  EXPECT_TRUE(has<demand::Store>(flow->executed(1, engine_ok(chat("{\"own\": 1}")))));
  EXPECT_TRUE(flow->served(1, hit(chat("{\"fill\": 1}"), true, 7)).empty());
  const auto fx = flow->stored(1, csl::InsertResult{csl::InsertStatus::stored, {5, 2}});
  EXPECT_EQ(only<demand::Answer>(fx).reply.body, chat("{\"own\": 1}"));
}

TEST_F(DemandFlowHedge, AFillThatIsNotThereAfterAllLeavesTheOwnRunGoing) {
  hedge();
  only<demand::Probe>(flow->fill_ended(name, 42, true));
  EXPECT_TRUE(flow->served(1, ServeReply{}).empty());  // no second execution, no wait
  EXPECT_TRUE(has<demand::Store>(flow->executed(1, engine_ok(chat("{}")))));
  const auto fx = flow->stored(1, csl::InsertResult{csl::InsertStatus::stored, {5, 2}});
  EXPECT_EQ(only<demand::Answer>(fx).reply.served, Served::engine);
}

TEST_F(DemandFlowHedge, AFailedFillLeavesTheOwnRunGoing) {
  hedge();
  EXPECT_TRUE(flow->fill_ended(name, 42, false).empty());
}

TEST_F(DemandFlowHedge, AFillAnsweringWhileTheClaimIsOutLandsTheLeadForARetry) {
  time_out();
  auto fx = fill_answers();
  EXPECT_FALSE(has<demand::Cancel>(fx));  // nothing runs yet
  EXPECT_TRUE(has<demand::Answer>(fx));
  EXPECT_FALSE(flow->idle()) << "its claim is still out";
  // The library made it the leader meanwhile: whoever joined claims again.
  fx = flow->claimed(1, claim(csl::ClaimKind::lead, 9));
  EXPECT_EQ(only<demand::Land>(fx).landed->outcome, Landed::Outcome::retry);
  EXPECT_FALSE(has<demand::Execute>(fx));
  EXPECT_TRUE(flow->idle());
}

TEST_F(DemandFlowHedge, AStreamedDemandDoesNotHedge) {
  route_to_email(7);
  name = name_of(handle);
  flow->fill_started(name, 42);
  auto body = std::make_shared<json>(*body_of(handle));
  (*body)["stream"] = true;
  flow->start(1, handle, endpoint_of(handle), body);
  const auto w = only<demand::ArmWait>(flow->served(1, ServeReply{}));
  clock.set(w.at);
  only<demand::Claim>(flow->wait_over(1, w.wait));
  // Its own run may already be streaming to the caller: the fill no longer concerns it.
  EXPECT_TRUE(flow->fill_ended(name, 42, true).empty());
}

TEST_F(DemandFlowRouting, AFillThatFailsSendsItsWaitersToTheEngineAtOnce) {
  route_to_email();
  const auto name = name_of(handle);
  flow->fill_started(name, 42);
  start(1, handle);
  flow->served(1, ServeReply{});
  const auto fx = flow->fill_ended(name, 42, false);
  EXPECT_TRUE(has<demand::Claim>(fx));
  EXPECT_FALSE(has<demand::Probe>(fx));
}

TEST_F(DemandFlowRouting, AnotherFillsEndDoesNotReleaseTheWaiter) {
  route_to_email();
  const auto name = name_of(handle);
  flow->fill_started(name, 42);
  start(1, handle);
  flow->served(1, ServeReply{});
  flow->fill_started(name, 43);  // a newer fill of the same name took over
  EXPECT_TRUE(flow->fill_ended(name, 42, true).empty());
}

TEST_F(DemandFlowRouting, AMissLeadsItsExecutionAndStoresBeforeItAnswers) {
  route_to_email();
  start(1, handle);
  auto fx = flow->served(1, ServeReply{});
  const auto c = only<demand::Claim>(fx);
  EXPECT_EQ(c.name, name_of(handle));
  EXPECT_TRUE(c.may_join);
  ClaimReply lead = claim(csl::ClaimKind::lead, 9);
  lead.reads = {{"r", 1}};
  fx = flow->claimed(1, lead);
  EXPECT_TRUE(only<demand::Execute>(fx).loads_engine);

  fx = flow->executed(1, engine_ok(chat("{\"function\": \"send\"}")));
  EXPECT_TRUE(has<demand::Unload>(fx));
  EXPECT_EQ(only<demand::Cost>(fx).sample.engine_time, Duration(40ms));
  const auto s = only<demand::Store>(fx);
  EXPECT_FALSE(has<demand::Answer>(fx));  // not before the store
  EXPECT_EQ(s.execution, 9u);
  ASSERT_NE(s.landed, nullptr);
  EXPECT_EQ(s.landed->outcome, Landed::Outcome::result);
  EXPECT_EQ(s.insert->name, name_of(handle));
  EXPECT_EQ(s.insert->provenance.origin, csl::Origin::canonical);
  EXPECT_EQ(s.insert->reads, (ReadRefs{{"r", 1}}));
  EXPECT_EQ(s.insert->ttl, ttl_of(*g, handle));

  fx = flow->stored(1, csl::InsertResult{csl::InsertStatus::stored, {5, 2}});
  const auto a = only<demand::Answer>(fx);
  EXPECT_EQ(a.reply.served, Served::engine);
  EXPECT_LT(position<demand::Answer>(fx), position<demand::Branches>(fx));
  EXPECT_EQ(run.producers().at("api_call"), (csl::EntryRef{5, 2}));
  EXPECT_TRUE(flow->idle());
}

TEST_F(DemandFlowRouting, AJoinedDemandIsAnsweredFromItsLeaderAsCache) {
  route_to_email();
  miss_the_handler(2);
  auto fx = flow->claimed(2, claim(csl::ClaimKind::join, 9, 4));
  EXPECT_TRUE(has<demand::ArmWait>(fx));
  EXPECT_EQ(flow->take_tally().coalesced, 1u);
  Landed l;
  l.outcome = Landed::Outcome::result;
  l.reply.body = chat("{}");
  l.cost = 80ms;
  l.ref = {5, 2};
  fx = flow->landed(2, l);
  EXPECT_EQ(only<demand::Answer>(fx).reply.served, Served::cache);
  EXPECT_FALSE(has<demand::Leave>(fx));  // the library forgot the waiter itself
  EXPECT_EQ(flow->take_tally().saved, Duration(80ms));
}

TEST_F(DemandFlowRouting, AJoinedDemandClaimsAgainWhenItsLeaderWasCancelled) {
  route_to_email();
  miss_the_handler(2);
  flow->claimed(2, claim(csl::ClaimKind::join, 9));
  Landed l;
  l.outcome = Landed::Outcome::retry;
  EXPECT_TRUE(has<demand::Claim>(flow->landed(2, l)));
}

TEST_F(DemandFlowRouting, AJoinedDemandPastItsBoundLeavesAndRunsItself) {
  route_to_email();
  miss_the_handler(2);
  const auto w = only<demand::ArmWait>(flow->claimed(2, claim(csl::ClaimKind::join, 9, 4)));
  clock.set(w.at);
  const auto fx = flow->wait_over(2, w.wait);
  const auto leave = only<demand::Leave>(fx);
  EXPECT_EQ(leave.execution, 9u);
  EXPECT_EQ(leave.ticket, 4u);
  EXPECT_FALSE(only<demand::Claim>(fx).may_join);
}

TEST_F(DemandFlowRouting, AnEngineErrorIsLandedForTheWaitersAndAnswered) {
  lead_the_handler();
  const auto fx = flow->executed(1, engine_error(engines::ErrorKind::total_timeout));
  EXPECT_EQ(only<demand::Land>(fx).landed->outcome, Landed::Outcome::error);
  EXPECT_EQ(only<demand::Answer>(fx).reply.status, 504);
  EXPECT_FALSE(has<demand::Store>(fx));
  EXPECT_FALSE(has<demand::Branches>(fx));  // the run learns nothing from an error
}

TEST_F(DemandFlowRouting, ACancelledLeaderSendsItsWaitersToClaimAgain) {
  lead_the_handler();
  const auto fx = flow->executed(1, engine_error(engines::ErrorKind::cancelled));
  EXPECT_EQ(only<demand::Land>(fx).landed->outcome, Landed::Outcome::retry);
}

TEST_F(DemandFlowRouting, AnAbnormalCompletionAnswersItsCallerButIsNeverStored) {
  lead_the_handler();
  auto r = engine_ok(chat("partial"));
  r.result.complete = false;  // e.g. an error event inside the stream
  const auto fx = flow->executed(1, r);
  EXPECT_FALSE(has<demand::Store>(fx));
  EXPECT_EQ(only<demand::Land>(fx).landed->outcome, Landed::Outcome::retry);
  EXPECT_EQ(only<demand::Answer>(fx).reply.body, chat("partial"));
}

TEST_F(DemandFlowRouting, WhenTheLibraryDoesNotAnswerAClaimTheDemandRunsUnstored) {
  route_to_email();
  start(1, handle);
  flow->served(1, ServeReply{});
  EXPECT_TRUE(has<demand::Execute>(flow->claimed(1, std::nullopt)));
  const auto fx = flow->executed(1, engine_ok(chat("{}")));
  EXPECT_FALSE(has<demand::Store>(fx));
  EXPECT_EQ(only<demand::Answer>(fx).reply.served, Served::engine);
}

TEST_F(DemandFlowRouting, AToolCallDoesNotLoadTheEngine) {
  route_to_email();
  run.completed(handle, chat("{}"), {});
  start(1, execute);
  flow->served(1, ServeReply{});
  const auto fx = flow->claimed(1, ClaimReply{});
  EXPECT_FALSE(only<demand::Execute>(fx).loads_engine);
  EXPECT_FALSE(has<demand::Unload>(flow->executed(1, engine_ok("{\"found\": true}"))));
}

TEST_F(DemandFlowRouting, AClaimScopesTheRecordsItReadsToTheCaller) {
  flow = std::make_unique<DemandFlow>(run, clock, DemandFlow::Config{policy, acme(), "run-1"});
  route_to_email();
  run.completed(handle, chat("{}"), {});
  start(1, execute);
  const auto c = only<demand::Claim>(flow->served(1, ServeReply{}));
  EXPECT_EQ(c.records, read_records(execute, {"api:email"}, acme()));
  EXPECT_NE(c.records, (Strings{"api:email"}));
}

TEST_F(DemandFlowRouting, ARefusedDemandIsAnsweredAndItsWaitersToo) {
  lead_the_handler();
  const auto fx = flow->refused(1, error_reply(404, "not_found", "no engine"));
  EXPECT_EQ(only<demand::Land>(fx).landed->outcome, Landed::Outcome::error);
  EXPECT_EQ(only<demand::Answer>(fx).reply.status, 404);
  EXPECT_TRUE(flow->idle());
}

TEST_F(DemandFlowRouting, EventsForUnknownDemandsChangeNothing) {
  EXPECT_TRUE(flow->served(5, ServeReply{}).empty());
  EXPECT_TRUE(flow->executed(5, engine_ok("{}")).empty());
  EXPECT_TRUE(flow->stored(5, std::nullopt).empty());
  EXPECT_TRUE(flow->written(5).empty());
  EXPECT_TRUE(flow->wait_over(5, 1).empty());
  EXPECT_TRUE(flow->idle());
}

// -- a stage that writes ---------------------------------------------------------------------

TEST(DemandFlowWrites, AWritingStagesRecordsAreInForceBeforeItsAnswer) {
  const auto report = dsl::lint_text("notes.yaml", R"(version: 1
workflow: notes
inputs:
  entity: {description: the document}
  text: {description: its new text}
stages:
  edit_doc:
    kind: tool
    tool: update
    bind: {entity: /entity, text: /text}
    arguments: {entity: "{{entity}}", text: "{{text}}"}
    writes: ["doc:{{entity}}"]
)");
  ASSERT_EQ(report.graphs().size(), 1u);
  auto g = std::make_shared<const dsl::TemplateGraph>(*report.graphs()[0]);
  ManualClock clock;
  WorkflowRun run(g, true);
  const Policy policy;
  DemandFlow flow(run, clock, DemandFlow::Config{policy, acme(), "run-1"});
  const auto& stage = *g->stage("edit_doc");
  auto fx = flow.start(1, stage, "/v1/dynrt/tools/update",
                       std::make_shared<const json>(json{{"entity", "a"}, {"text", "new"}}));
  EXPECT_FALSE(only<demand::Execute>(fx).loads_engine);  // not reusable: straight to the tool
  auto r = engine_ok("{\"ok\": true}");
  r.writes = {"doc:b"};  // the tool reported another record too
  fx = flow.executed(1, r);
  const auto w = only<demand::Write>(fx);
  EXPECT_EQ(w.records, write_records({"doc:a", "doc:b"}, acme()));
  EXPECT_FALSE(has<demand::Answer>(fx));
  fx = flow.written(1);
  EXPECT_EQ(only<demand::Answer>(fx).reply.body, "{\"ok\": true}");
  EXPECT_TRUE(flow.idle());
}

}  // namespace
}  // namespace dynrt::run
