// FillChain without an actor system: one fill down the routing template's handler -> executor
// chain, with the library's and the engine's answers given by hand.
#include "run/fill_chain.hpp"

#include "dsl/render.hpp"
#include "tests/run/effects.hpp"
#include "tests/run/graphs.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace dynrt::run {
namespace {

using namespace std::chrono_literals;

using branch::FillStatus;
using dynrt::testing::graph;
using namespace dynrt::run::testing;
using nlohmann::json;

class FillChainRouting : public ::testing::Test {
 protected:
  GraphPtr g = std::make_shared<const dsl::TemplateGraph>(graph("routing"));
  const dsl::Stage& handle = *g->stage("handle");
  const dsl::Stage& execute = *g->stage("execute");
  Policy policy;

  FillChain::Config config(dsl::Bindings bindings = {{"query", "mail Bob the agenda"},
                                                     {"handler", "email"}}) {
    FillChain::Config c;
    c.id = 21;
    c.branch = 7;
    c.graph = g;
    c.chain = {handle.id, execute.id};
    c.bindings = std::move(bindings);
    c.policy = policy;
    c.caller = acme();
    c.run = "run-1";
    return c;
  }
  Hash128 name_of(const dsl::Stage& s, const dsl::Bindings& with) {
    auto r = dsl::render_stage(s, with);
    EXPECT_TRUE(r.ok());
    return stage_name(policy, s, r->endpoint, r->body, acme(), "run-1");
  }
  const dsl::Bindings vars{{"query", "mail Bob the agenda"}, {"handler", "email"}};
  const std::string handled = chat("{\"function\": \"send_mail\"}");
  dsl::Bindings after_handle() {
    auto v = vars;
    v["api_call"] = "{\"function\": \"send_mail\"}";
    return v;
  }

  // Runs the handler stage on the engine and stores its shadow; returns the store's effects.
  FillEffects run_handle(FillChain& chain) {
    chain.start();
    chain.served(ServeReply{});
    chain.snapshotted(ReadSnapshot{});
    chain.executed(1, engine_ok(handled, 50ms));
    return chain.stored(csl::InsertResult{csl::InsertStatus::stored, {4, 1}});
  }
};

TEST_F(FillChainRouting, StartAnnouncesTheFirstStageAndProbesTheLibrary) {
  FillChain chain(config());
  const auto fx = chain.start();
  EXPECT_EQ(only<fill::Announce>(fx).name, name_of(handle, vars));
  const auto p = only<fill::Probe>(fx);
  EXPECT_EQ(p.name, name_of(handle, vars));
  EXPECT_TRUE(p.query.probe);
  EXPECT_FALSE(p.query.promote);  // a fill never promotes another's shadow
  EXPECT_LT(position<fill::Announce>(fx), position<fill::Probe>(fx));
}

TEST_F(FillChainRouting, WithoutReuseItGoesStraightToTheEngine) {
  policy.reuse = false;
  FillChain chain(config());
  const auto fx = chain.start();
  EXPECT_FALSE(has<fill::Probe>(fx));
  EXPECT_TRUE(has<fill::Snapshot>(fx));
}

TEST_F(FillChainRouting, AMissRunsAtFillPriorityAndStoresAShadowWithItsProvenance) {
  FillChain chain(config());
  chain.start();
  auto fx = chain.served(ServeReply{});
  EXPECT_TRUE(only<fill::Snapshot>(fx).records.empty());  // the handler reads no records
  fx = chain.snapshotted(ReadSnapshot{ReadRefs{{"x", 2}}, {}});
  const auto e = only<fill::Execute>(fx);
  EXPECT_EQ(e.endpoint, "/v1/chat/completions");
  EXPECT_EQ(e.body, dsl::render_stage(handle, vars)->body);
  fx = chain.executed(e.tag, engine_ok(handled, 50ms));
  EXPECT_EQ(only<fill::Cost>(fx).sample.stage, handle.fingerprint);
  const auto s = only<fill::Store>(fx);
  EXPECT_EQ(s.insert->name, name_of(handle, vars));
  EXPECT_EQ(s.insert->provenance.origin, csl::Origin::fill);
  EXPECT_EQ(s.insert->provenance.fill, 21u);
  EXPECT_EQ(s.insert->provenance.branch, 7u);
  EXPECT_EQ(s.insert->reads, (ReadRefs{{"x", 2}}));
  EXPECT_EQ(s.insert->ttl, ttl_of(*g, handle));
}

// Once the handler's shadow is in the library its demand can be promoted, and the caller's
// executor call can reach the workflow before the store's answer reaches the fill: the executor
// is announced before the store goes out, so that call waits for the fill.
TEST_F(FillChainRouting, TheNextStageIsAnnouncedBeforeTheShadowIsStored) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  auto fx = chain.executed(1, engine_ok(handled, 50ms));
  const auto next = only<fill::Announce>(fx);
  EXPECT_EQ(next.name, name_of(execute, after_handle()));  // rendered from the handler's output
  EXPECT_LT(position<fill::Announce>(fx), position<fill::Store>(fx));
  EXPECT_FALSE(has<fill::Ended>(fx));  // the handler's fill still runs until it is stored

  fx = chain.stored(csl::InsertResult{csl::InsertStatus::stored, {4, 1}});
  EXPECT_EQ(only<fill::Kept>(fx).ref, (csl::EntryRef{4, 1}));
  EXPECT_FALSE(has<fill::Announce>(fx));  // once is enough
  const auto ended = only<fill::Ended>(fx);
  EXPECT_EQ(ended.name, name_of(handle, vars));
  EXPECT_TRUE(ended.stored);
  EXPECT_EQ(chain.step(), 1u);
  // The executor's own step goes on: probe, and it is not announced a second time.
  EXPECT_EQ(only<fill::Probe>(fx).name, next.name);
}

TEST_F(FillChainRouting, TheExecutorReadsItsRecordsScopedToTheCaller) {
  FillChain chain(config());
  run_handle(chain);
  const auto fx = chain.served(ServeReply{});
  EXPECT_EQ(only<fill::Snapshot>(fx).records, read_records(execute, {"api:email"}, acme()));
}

TEST_F(FillChainRouting, TheChainIsDoneAfterItsLastStageWithItsWholeEngineTime) {
  FillChain chain(config());
  run_handle(chain);
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  chain.executed(2, engine_ok("{\"found\": true}", 5ms));
  const auto fx = chain.stored(csl::InsertResult{csl::InsertStatus::stored, {4, 2}});
  const auto f = only<fill::Finish>(fx);
  EXPECT_EQ(f.status, FillStatus::done);
  EXPECT_EQ(f.engine_time, Duration(55ms));
  EXPECT_TRUE(only<fill::Ended>(fx).stored);
  EXPECT_TRUE(chain.finished());
}

TEST_F(FillChainRouting, ALibraryHitSuppressesTheFirstStagesExecution) {
  FillChain chain(config());
  chain.start();
  ServeReply hit;
  hit.found = true;
  hit.ref = {4, 1};
  hit.bytes = std::make_shared<const std::string>(handled);
  const auto fx = chain.served(hit);
  EXPECT_TRUE(has<fill::Suppressed>(fx));
  EXPECT_FALSE(has<fill::Execute>(fx));
  EXPECT_EQ(only<fill::Announce>(fx).name, name_of(execute, after_handle()));
  EXPECT_TRUE(only<fill::Ended>(fx).stored);
}

TEST_F(FillChainRouting, ACancelWhileTheEngineRunsEndsTheFillAtOnce) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  const auto fx = chain.cancel();
  EXPECT_EQ(only<fill::Finish>(fx).status, FillStatus::cancelled);
  const auto ended = only<fill::Ended>(fx);
  EXPECT_FALSE(ended.stored);
  EXPECT_LT(position<fill::Ended>(fx), position<fill::Finish>(fx));
  // The aborted request's completion comes later, and changes nothing.
  EXPECT_TRUE(chain.executed(1, engine_ok(handled, 50ms)).empty());
}

TEST_F(FillChainRouting, ACancelDuringAStoreWaitsForItAndDiscardsTheShadow) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  chain.executed(1, engine_ok(handled, 50ms));
  EXPECT_TRUE(chain.cancel().empty());  // the store is in flight
  const auto fx = chain.stored(csl::InsertResult{csl::InsertStatus::stored, {4, 1}});
  EXPECT_EQ(only<fill::Drop>(fx).ref, (csl::EntryRef{4, 1}));
  EXPECT_EQ(only<fill::Finish>(fx).status, FillStatus::cancelled);
  EXPECT_FALSE(has<fill::Announce>(fx));
}

TEST_F(FillChainRouting, AnAbnormalResultIsAFailedFillNeverAShadow) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  auto r = engine_ok(handled, 50ms);
  r.result.complete = false;
  const auto fx = chain.executed(1, r);
  EXPECT_FALSE(has<fill::Store>(fx));
  EXPECT_EQ(only<fill::Finish>(fx).status, FillStatus::failed);
}

TEST_F(FillChainRouting, AStaleCompletionIsIgnored) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  EXPECT_TRUE(chain.executed(99, engine_ok(handled, 50ms)).empty());
  EXPECT_FALSE(chain.finished());
}

TEST_F(FillChainRouting, AStaleStoreEndsTheFillAsFailed) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  chain.executed(1, engine_ok(handled, 50ms));
  const auto fx = chain.stored(csl::InsertResult{csl::InsertStatus::stale, {}});
  EXPECT_FALSE(has<fill::Kept>(fx));
  // Both the handler and the executor announced early end unstored: their waiters run.
  std::vector<Hash128> ended;
  for (const auto& e : fx)
    if (const auto* x = std::get_if<fill::Ended>(&e)) {
      EXPECT_FALSE(x->stored);
      ended.push_back(x->name);
    }
  EXPECT_EQ(ended, (std::vector<Hash128>{name_of(handle, vars), name_of(execute, after_handle())}));
  EXPECT_EQ(only<fill::Finish>(fx).status, FillStatus::failed);
}

TEST_F(FillChainRouting, AnUnrenderableFirstStageFailsWithoutAnnouncingAnything) {
  FillChain chain(config({{"handler", "email"}}));  // no query
  const auto fx = chain.start();
  EXPECT_FALSE(has<fill::Announce>(fx));
  EXPECT_EQ(only<fill::Finish>(fx).status, FillStatus::failed);
}

TEST_F(FillChainRouting, AnUnrenderableLaterStageEndsTheChainDone) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  // A normal completion without the content the executor's arguments are rendered from.
  const json refusal = {{"choices",
                         {{{"index", 0},
                           {"message", {{"role", "assistant"}, {"refusal", "no"}}},
                           {"finish_reason", "stop"}}}}};
  chain.executed(1, engine_ok(refusal.dump(), 50ms));
  const auto fx = chain.stored(csl::InsertResult{csl::InsertStatus::stored, {4, 1}});
  EXPECT_FALSE(has<fill::Announce>(fx));
  EXPECT_EQ(only<fill::Finish>(fx).status, FillStatus::done);
  EXPECT_TRUE(only<fill::Ended>(fx).stored);
}

TEST_F(FillChainRouting, WhenTheLibraryDoesNotAnswerTheFillFails) {
  FillChain chain(config());
  chain.start();
  EXPECT_EQ(only<fill::Finish>(chain.served(std::nullopt)).status, FillStatus::failed);
}

TEST_F(FillChainRouting, AnUnroutableRequestFailsTheFill) {
  FillChain chain(config());
  chain.start();
  chain.served(ServeReply{});
  chain.snapshotted(ReadSnapshot{});
  EXPECT_EQ(only<fill::Finish>(chain.unroutable()).status, FillStatus::failed);
}

}  // namespace
}  // namespace dynrt::run
