// Coalescing of identical concurrent misses (docs/reuse.md): N identical demands of a
// speculable stage from different runs, while the first runs on an engine the test holds, cause
// one engine execution and are answered with its bytes; a failure reaches every waiter and is
// not cached; a cancelled leader hands over; a write closes the execution to later demands and
// its late result is not stored; non-speculable stages and reuse off never coalesce. And a wait
// for a fill past its bound is hedged: the demand runs itself, and the first to end answers.
#include "tests/actors/hold_engine.hpp"
#include "tests/actors/rig.hpp"

#include "actors/reply.hpp"
#include "dsl/render.hpp"

#include <thread>

namespace dynrt::testing {
namespace {

using nlohmann::json;

std::string coalesce_yaml(int wait_ms) {
  return R"(version: 1
workflow: co
inputs:
  topic: {description: the topic}
stages:
  answer:
    kind: model
    speculable: true
    model: m
    params: {temperature: 0, max_tokens: 48}
    bind:
      topic: {pointer: /messages/0/content, regex: '^Topic: (.*)$'}
    reads: ["doc:{{topic}}"]
    request:
      messages: [{role: user, content: "Topic: {{topic}}"}]
  chat:
    kind: model
    model: m
    params: {temperature: 0.7, max_tokens: 48}
    request:
      messages: [{role: user, content: "Chat about {{topic}}"}]
limits:
  wait_ms: )" +
         std::to_string(wait_ms) + "\n";
}

struct CoRig {
  std::shared_ptr<engines::sim::SimEngine> sim = std::make_shared<engines::sim::SimEngine>(
      engines::sim::SimParams{}, engines::sim::Script{}, engines::sim::SimEngineOptions{0, "sim"});
  std::shared_ptr<HoldEngine> hold = std::make_shared<HoldEngine>(sim);
  std::shared_ptr<ManualTime> time = std::make_shared<ManualTime>();  // waits end when told
  std::unique_ptr<Runtime> rt;
  json answer_body;  // what the template renders for stage `answer`, topic "x"
  json chat_body;

  explicit CoRig(bool reuse = true, int wait_ms = 600'000) {
    const auto yaml = coalesce_yaml(wait_ms);
    RuntimeConfig cfg;
    cfg.engines.push_back({"hold", hold, {}});
    cfg.template_texts = {{"co.yaml", yaml}};
    cfg.reuse = reuse;
    cfg.time = time;
    auto r = Runtime::create(cfg);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    rt = std::move(*r);
    const auto report = dsl::lint_text("co.yaml", yaml);
    const auto& g = *report.graphs().front();
    const dsl::Bindings vars = {{"topic", "x"}};
    answer_body = dsl::render_stage(*g.stage("answer"), vars)->body;
    chat_body = dsl::render_stage(*g.stage("chat"), vars)->body;
  }

  std::future<Reply> call(const std::string& run, const std::string& stage = "answer",
                          bool stream = false) {
    json body = stage == "answer" ? answer_body : chat_body;
    if (stream) body["stream"] = true;
    return rt->complete({"/v1/chat/completions", body, {"co", run, stage}});
  }
  // Waits (for events, not for time) until `n` demands have joined an execution.
  void wait_coalesced(std::uint64_t n) {
    while (rt->stats().coalesced < n)
      std::this_thread::yield();
  }
  // What the engine answers for the request, asked directly.
  std::string direct(const json& body) {
    return bench::ask_engine(*sim, "/v1/chat/completions", body);
  }
};

constexpr int kN = 6;

// The first demand leads and is held; kN - 1 more from other runs (one streamed) start at once.
struct Concurrent {
  std::future<Reply> leader;
  std::vector<std::future<Reply>> waiters;
  std::vector<std::string> streamed;  // the streamed waiter's chunks
  std::promise<Reply> streamed_done;
};

void issue_waiters(CoRig& rig, Concurrent& c, const std::string& prefix) {
  std::vector<std::promise<std::future<Reply>>> got(kN - 2);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int i = 0; i < kN - 2; ++i)
    threads.emplace_back([&, i] {
      while (!go)
        std::this_thread::yield();
      got[i].set_value(rig.call(prefix + std::to_string(i)));
    });
  threads.emplace_back([&] {
    while (!go)
      std::this_thread::yield();
    json body = rig.answer_body;
    body["stream"] = true;
    rig.rt->complete(
        {"/v1/chat/completions", body, {"co", prefix + "s", "answer"}},
        ReplyCallbacks{[&](std::string_view d) { c.streamed.emplace_back(d); },
                       [&](Reply r) { c.streamed_done.set_value(std::move(r)); }, nullptr});
  });
  go = true;
  for (auto& t : threads)
    t.join();
  for (auto& g : got)
    c.waiters.push_back(g.get_future().get());
}

// Once the leader is held: the waiters, until every one has joined it.
void start_waiters(CoRig& rig, Concurrent& c) {
  rig.hold->wait_held(1);
  issue_waiters(rig, c, "w");
  rig.wait_coalesced(kN - 1);
}

TEST(Coalescing, IdenticalConcurrentMissesRunOnceAndShareItsBytes) {
  CoRig rig;
  Concurrent c;
  c.leader = rig.call("lead");
  start_waiters(rig, c);
  EXPECT_EQ(rig.hold->submitted(), 1u);
  rig.hold->release_all();

  const std::string expected = rig.direct(rig.answer_body);
  const auto lead = c.leader.get();
  ASSERT_TRUE(lead.ok()) << lead.error;
  EXPECT_EQ(lead.served, Served::engine);
  EXPECT_EQ(lead.body, expected);
  for (auto& f : c.waiters) {
    const auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.served, Served::cache);
    EXPECT_EQ(r.body, expected) << "a waiter gets the leader's bytes";
  }
  const auto s = c.streamed_done.get_future().get();
  ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_EQ(s.body, expected);
  EXPECT_EQ(c.streamed, actors::replay_chunks("/v1/chat/completions", expected, false))
      << "a streamed waiter gets the result replayed in SSE shape";
  EXPECT_EQ(rig.hold->submitted(), 1u) << "one engine execution for " << kN << " demands";
  const auto st = rig.rt->stats();
  EXPECT_EQ(st.coalesced, static_cast<std::uint64_t>(kN - 1));
  EXPECT_EQ(st.served_engine, 1u);
  EXPECT_EQ(st.served_cache, static_cast<std::uint64_t>(kN - 1));
  // Stored: a later identical demand is a library hit.
  EXPECT_EQ(rig.call("later").get().served, Served::cache);
  EXPECT_EQ(rig.hold->submitted(), 1u);
}

TEST(Coalescing, AFailureReachesEveryWaiterAndIsNotCached) {
  CoRig rig;
  Concurrent c;
  c.leader = rig.call("lead");
  start_waiters(rig, c);
  const std::string error_body = R"({"error":{"message":"boom","type":"server_error","code":500}})";
  rig.hold->fail_all({engines::ErrorKind::http_status, 500, error_body, "engine said 500"});

  const auto lead = c.leader.get();
  EXPECT_FALSE(lead.ok());
  EXPECT_EQ(lead.status, 500);
  std::vector<Reply> all;
  for (auto& f : c.waiters)
    all.push_back(f.get());
  all.push_back(c.streamed_done.get_future().get());
  for (const auto& r : all) {
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status, lead.status);
    EXPECT_EQ(r.body, lead.body) << "every waiter gets the same error";
  }
  EXPECT_TRUE(c.streamed.empty()) << "an error is not replayed as chunks";
  EXPECT_EQ(rig.rt->stats().errors, static_cast<std::uint64_t>(kN));
  EXPECT_EQ(rig.rt->stats().csl_entries, 0u);

  // Nothing was cached: a later identical demand executes again.
  auto again = rig.call("again");
  rig.hold->wait_held(1);
  EXPECT_EQ(rig.hold->submitted(), 2u);
  rig.hold->release_all();
  const auto r = again.get();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.served, Served::engine);
  EXPECT_EQ(r.body, rig.direct(rig.answer_body));
}

TEST(Coalescing, ACancelledLeaderHandsOverAndFailsNobodyElse) {
  CoRig rig;
  Concurrent c;
  std::promise<Reply> leader_done;
  const CallId leader = rig.rt->complete(
      {"/v1/chat/completions", rig.answer_body, {"co", "lead", "answer"}},
      ReplyCallbacks{nullptr, [&](Reply r) { leader_done.set_value(std::move(r)); }, nullptr});
  start_waiters(rig, c);
  rig.rt->cancel(leader);  // its client disconnected
  const auto lead = leader_done.get_future().get();
  EXPECT_FALSE(lead.ok());
  // One waiter took over: a second execution, and the rest joined it.
  rig.hold->wait_held(1);
  rig.wait_coalesced((kN - 1) + (kN - 2));
  EXPECT_EQ(rig.hold->submitted(), 2u);
  rig.hold->release_all();
  const std::string expected = rig.direct(rig.answer_body);
  int engine = 0, cache = 0;
  for (auto& f : c.waiters) {
    const auto r = f.get();
    ASSERT_TRUE(r.ok()) << "a client's disconnect must not fail another: " << r.error;
    EXPECT_EQ(r.body, expected);
    (r.served == Served::engine ? engine : cache)++;
  }
  const auto s = c.streamed_done.get_future().get();
  ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_EQ(s.body, expected);
  (s.served == Served::engine ? engine : cache)++;
  EXPECT_EQ(engine, 1);
  EXPECT_EQ(cache, kN - 2);
  EXPECT_EQ(rig.hold->submitted(), 2u);
}

TEST(Coalescing, AWriteClosesTheExecutionAndItsLateResultIsNotStored) {
  CoRig rig;
  auto leader = rig.call("lead");
  rig.hold->wait_held(1);
  auto before = rig.call("before");  // concurrent with the write: may take the old result
  rig.wait_coalesced(1);
  rig.rt->write({"doc:x"}).get();  // acknowledged
  auto after = rig.call("after");  // must not join the pre-write execution
  rig.hold->wait_held(2);
  EXPECT_EQ(rig.hold->submitted(), 2u) << "a demand after the write executes fresh";
  EXPECT_EQ(rig.rt->stats().coalesced, 1u);
  // The pre-write execution lands first (its waiter is answered once the library has seen
  // it), then the post-write one: the order is the test's, not the scheduler's.
  rig.hold->release_first();
  const auto l = leader.get(), b = before.get();
  EXPECT_EQ(rig.rt->stats().csl.stale_inserts, 1u) << "the pre-write result is refused at insert";
  rig.hold->release_all();
  const auto a = after.get();
  ASSERT_TRUE(l.ok() && b.ok() && a.ok());
  EXPECT_EQ(l.served, Served::engine);
  EXPECT_EQ(b.served, Served::cache);
  EXPECT_EQ(a.served, Served::engine);
  EXPECT_EQ(b.body, l.body);
  const auto st = rig.rt->stats();
  EXPECT_EQ(st.csl.stale_inserts, 1u);
  EXPECT_EQ(st.csl_entries, 1u) << "only the post-write result is stored";
  EXPECT_EQ(rig.call("later").get().served, Served::cache);
  EXPECT_EQ(rig.hold->submitted(), 2u);
}

TEST(Coalescing, WaitersGiveUpAfterTheirBoundAndExecute) {
  CoRig rig(true, 1);  // wait_ms 1: the held leader outlasts it
  auto leader = rig.call("lead");
  rig.hold->wait_held(1);
  auto waiter = rig.call("w");
  rig.wait_coalesced(1);
  EXPECT_EQ(rig.hold->submitted(), 1u) << "no time has passed: it still waits";
  rig.time->advance(std::chrono::milliseconds(1));
  rig.hold->wait_held(2);  // it gave up after its bound and ran alone
  EXPECT_EQ(rig.rt->stats().wait_timeouts, 1u);
  rig.hold->release_all();
  const auto l = leader.get(), w = waiter.get();
  ASSERT_TRUE(l.ok() && w.ok());
  EXPECT_EQ(w.served, Served::engine);
  EXPECT_EQ(w.body, l.body);
}

TEST(Coalescing, NonSpeculableStagesAndReuseOffNeverCoalesce) {
  for (const bool reuse : {true, false}) {
    CoRig rig(reuse);
    const std::string stage = reuse ? "chat" : "answer";
    std::vector<std::future<Reply>> replies;
    for (int i = 0; i < kN; ++i)
      replies.push_back(rig.call("r" + std::to_string(i), stage));
    rig.hold->wait_held(kN);
    EXPECT_EQ(rig.hold->submitted(), static_cast<std::size_t>(kN));
    rig.hold->release_all();
    for (auto& f : replies) {
      const auto r = f.get();
      ASSERT_TRUE(r.ok()) << r.error;
      EXPECT_EQ(r.served, Served::engine);
    }
    EXPECT_EQ(rig.rt->stats().coalesced, 0u);
  }
}

}  // namespace
}  // namespace dynrt::testing

namespace dynrt::testing {
namespace {

// A demand whose wait for its fill passes the bound runs itself and still waits for the fill
// (a hedged wait): the first of the two to end answers, the other is cancelled or dropped.
struct HedgeRig {
  std::shared_ptr<engines::sim::SimEngine> sim;
  std::shared_ptr<HoldEngine> hold;
  std::shared_ptr<ManualTime> time = std::make_shared<ManualTime>();
  std::unique_ptr<Runtime> rt;
  json router = {{"model", "m"},
                 {"temperature", 0},
                 {"max_tokens", 16},
                 {"messages", json::array({{{"role", "user"}, {"content", "route me"}}})}};
  json handle = {{"model", "m"},
                 {"temperature", 0},
                 {"max_tokens", 16},
                 {"messages", json::array({{{"role", "user"}, {"content", "email: route me"}}})}};

  HedgeRig() {
    engines::sim::Script script;
    script.add_contains("route me", "HANDLER: email");
    sim = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, script,
                                                    engines::sim::SimEngineOptions{0, "sim"});
    hold = std::make_shared<HoldEngine>(sim);
    RuntimeConfig cfg;
    cfg.engines.push_back({"hold", hold, {}});
    cfg.template_texts = {{"hedge.yaml", R"(version: 1
workflow: hedge
inputs:
  query: {description: the request}
stages:
  router:
    kind: model
    model: m
    params: {temperature: 0, max_tokens: 16}
    bind: {query: /messages/0/content}
    decides: handler
    request:
      messages: [{role: user, content: "{{query}}"}]
  handle:
    kind: model
    after: router
    speculable: true
    model: m
    params: {temperature: 0, max_tokens: 16}
    request:
      messages: [{role: user, content: "{{handler}}: {{query}}"}]
decisions:
  handler:
    promotion: exclusive
    candidates:
      source: learned
      values: [email]
      max: 1
    selection:
      regex: 'HANDLER:\s*(\w+)'
limits:
  wait_ms: 1000
)"}};
    cfg.time = time;
    auto r = Runtime::create(cfg);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    rt = std::move(*r);
  }
  ~HedgeRig() { expect_budget_returned(*rt, "hedge"); }

  // The router is answered and its branch's fill for `email` is held; the handler's demand
  // waited for it past its bound and now runs itself, held too.
  std::future<Reply> hedge() {
    auto routed = rt->complete({"/v1/chat/completions", router, {"hedge", "r1", "router"}});
    // The router's own request and its branch's fill reach the engine from different actors,
    // in either order: wait for both before releasing the router.
    hold->wait_held(engines::RequestKind::fill, 1);
    hold->wait_held(engines::RequestKind::canonical, 1);
    hold->release_kind(engines::RequestKind::canonical);
    const Reply r = routed.get();
    EXPECT_TRUE(r.ok()) << r.error;
    auto handled = rt->complete({"/v1/chat/completions", handle, {"hedge", "r1", "handle"}});
    await_stats(*rt, [](const RuntimeStats& s) { return s.waits >= 1; });
    EXPECT_EQ(rt->stats().waits, 1u) << "the demand waits for its running fill";
    time->advance(std::chrono::milliseconds(1000));
    hold->wait_held(engines::RequestKind::canonical, 1);  // it runs itself
    EXPECT_EQ(rt->stats().wait_timeouts, 1u);
    EXPECT_EQ(hold->held(), 2u) << "the fill still runs beside it";
    return handled;
  }
  std::string direct(const json& body) {
    return bench::ask_engine(*sim, "/v1/chat/completions", body);
  }
};

TEST(HedgedWait, TheFillEndingFirstAnswersAndTheDemandsOwnRunIsCancelled) {
  HedgeRig rig;
  auto handled = rig.hedge();
  rig.hold->release_kind(engines::RequestKind::fill);
  // Bounded: without the hedge the answer would wait for its own held run.
  if (handled.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "the fill's end did not answer the demand";
    rig.hold->release_all();
  }
  const Reply r = handled.get();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.served, Served::fill);
  EXPECT_EQ(r.body, rig.direct(rig.handle)) << "value equivalence";
  rig.hold->wait_empty();  // its own run was cancelled in the engine, not left to finish
  EXPECT_EQ(rig.hold->submitted(), 3u);
  const auto st = await_stats(*rig.rt, [](const RuntimeStats& s) { return s.hedge_fills >= 1; });
  EXPECT_EQ(st.hedge_fills, 1u);
  EXPECT_EQ(st.served_fill, 1u);
  EXPECT_EQ(st.served_engine, 1u) << "the router only";
}

TEST(HedgedWait, TheOwnRunEndingFirstAnswersAndTheFillStaysAShadow) {
  HedgeRig rig;
  auto handled = rig.hedge();
  rig.hold->release_kind(engines::RequestKind::canonical);
  const Reply r = handled.get();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.served, Served::engine);
  EXPECT_EQ(r.body, rig.direct(rig.handle));
  rig.hold->release_kind(engines::RequestKind::fill);
  rig.hold->wait_empty();
  EXPECT_EQ(rig.rt->stats().hedge_fills, 0u);
  // The same call in a later run is served from the library: the one result was stored.
  const Reply again =
      rig.rt->complete({"/v1/chat/completions", rig.handle, {"hedge", "r2", "handle"}}).get();
  EXPECT_EQ(again.served, Served::cache);
  EXPECT_EQ(again.body, r.body);
}

}  // namespace
}  // namespace dynrt::testing
