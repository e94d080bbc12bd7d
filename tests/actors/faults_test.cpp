// Engine faults through the whole runtime: a dynrt::Runtime whose router model runs on the
// simulated engine and whose handler model runs on an OpenAI engine pointed at a misbehaving
// loopback server (tests/engines/faulty_server.hpp). A fill that fails, is truncated, reset
// mid-stream, times out, is cancelled or carries an engine's error event is never stored in the
// library, and the canonical call gets the engine's error or a clean 502/504, never a partial
// body; a canonical result that did not complete normally answers its caller and is never
// stored either. Waits are for events
// (stats reaching a value), bounded; the deadlines under test are the engine's, configured short.
#include "../engines/faulty_server.hpp"
#include "actors/runtime.hpp"
#include "engines/openai/assembly.hpp"
#include "engines/openai/engine.hpp"
#include "engines/sim/engine.hpp"
#include "tests/actors/hold_engine.hpp"
#include "tests/actors/invariants.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <ostream>
#include <thread>

namespace dynrt::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Mode = FaultyServer::Mode;

constexpr auto kWait = seconds(30);  // a safety net against hangs, not a timing assertion

const char* kTemplate = R"(version: 1
workflow: faults
inputs:
  query: {description: the request}
stages:
  router:
    kind: model
    model: big
    params: {temperature: 0, max_tokens: 400}
    bind: {query: /messages/0/content}
    decides: handler
    request:
      messages: [{role: user, content: "{{query}}"}]
  handle:
    kind: model
    after: router
    speculable: true
    model: faulty
    params: {temperature: 0, max_tokens: 32}
    request:
      messages: [{role: user, content: "{{handler}}: {{query}}"}]
decisions:
  handler:
    promotion: exclusive
    candidates: {source: static, values: [weather, email]}
    selection:
      regex: 'HANDLER:\s*(\w+)'
)";

json router_body() {
  return {{"model", "big"},
          {"temperature", 0},
          {"max_tokens", 400},
          {"messages", json::array({{{"role", "user"}, {"content", "route me"}}})}};
}

json handle_body(const std::string& handler, bool stream = false) {
  json b = {{"model", "faulty"},
            {"temperature", 0},
            {"max_tokens", 32},
            {"messages", json::array({{{"role", "user"}, {"content", handler + ": route me"}}})}};
  if (stream) b["stream"] = true;
  return b;
}

// The router on the simulated engine (it answers "weather" after some reasoning, so fills
// run while it decodes); the handler on the faulty server.
struct FaultRig {
  FaultyServer server;
  std::shared_ptr<engines::OpenAiEngine> faulty;
  std::unique_ptr<Runtime> rt;

  explicit FaultRig(Mode mode, const std::function<void(engines::OpenAiOptions&)>& tune = {},
                    const std::string& templ = kTemplate)
      : server(mode) {
    engines::sim::Script script;
    std::string reasoning;
    for (int i = 0; i < 300; ++i)
      reasoning += "hmm ";
    script.add_contains("route me", reasoning + "HANDLER: weather");
    engines::sim::SimEngineOptions eo;
    eo.time_scale = 10;
    auto sim = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, script, eo);
    engines::OpenAiOptions oo;
    oo.base_url = server.base_url();
    oo.scrape_interval = Duration::zero();
    oo.first_byte_timeout = seconds(10);  // a safety net: only the timeout case stalls
    oo.name = "faulty";
    if (tune) tune(oo);
    faulty = std::make_shared<engines::OpenAiEngine>(oo);
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", sim, {"big"}});
    cfg.engines.push_back({"faulty", faulty, {"faulty"}});
    cfg.template_texts = {{"faults.yaml", templ}};
    auto created = Runtime::create(cfg);
    EXPECT_TRUE(created.ok()) << (created.ok() ? "" : created.error().message);
    rt = std::move(*created);
  }
  ~FaultRig() {
    if (rt) expect_budget_returned(*rt, "at the end of the scenario");
  }

  Reply call(const json& body, const std::string& run, const std::string& stage) {
    auto f = rt->complete({"/v1/chat/completions", body, {"faults", run, stage}});
    if (f.wait_for(kWait) != std::future_status::ready) {
      ADD_FAILURE() << "no reply within " << kWait.count() << " s";
      return {};
    }
    return f.get();
  }

  struct Streamed {
    std::vector<std::string> chunks;
    Reply reply;
  };
  // A call that collects its chunks too.
  Streamed stream(const json& body, const std::string& run, const std::string& stage) {
    Streamed out;
    std::promise<Reply> done;
    auto f = done.get_future();
    rt->complete({"/v1/chat/completions", body, {"faults", run, stage}},
                 {[&](std::string_view d) { out.chunks.emplace_back(d); },
                  [&](Reply r) { done.set_value(std::move(r)); }, nullptr});
    if (f.wait_for(kWait) != std::future_status::ready) {
      ADD_FAILURE() << "no reply within " << kWait.count() << " s";
      return out;
    }
    out.reply = f.get();
    return out;
  }

  // Every fill issued so far has ended (bounded wait for the event).
  bool fills_settled() {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto s = rt->stats();
      if (s.fills_issued > 0 && s.fills_in_flight == 0 &&
          s.fills_completed + s.fills_failed + s.fills_cancelled == s.fills_issued) {
        return true;
      }
      std::this_thread::yield();
    }
    return false;
  }
};

bool is_error_body(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  return j.is_object() && j.contains("error") && !j.contains("choices");
}

struct FaultCase {
  const char* name;
  Mode mode;
  bool stream;  // the canonical call streams
  int status;   // what the canonical call gets
  std::function<void(engines::OpenAiOptions&)> tune;
};

// What GetParam() prints when a case fails: its name and what it expects, not its bytes.
void PrintTo(const FaultCase& c, std::ostream* os) {
  *os << c.name << " (canonical call " << (c.stream ? "streams" : "does not stream") << ", expects "
      << c.status << ")";
}

class FailedFills : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FailedFills, AreNeverStoredAndTheCanonicalCallGetsACleanError) {
  const FaultCase& c = GetParam();
  FaultRig rig(c.mode, c.tune);
  const Reply routed = rig.call(router_body(), "r1", "router");
  ASSERT_TRUE(routed.ok()) << routed.error;
  ASSERT_TRUE(rig.fills_settled());
  auto s = rig.rt->stats();
  ASSERT_GE(s.fills_issued, 1u) << "the test needs a fill on the faulty engine";
  EXPECT_EQ(s.fills_completed, 0u);
  EXPECT_EQ(s.shadows_stored, 0u);
  EXPECT_EQ(s.csl_shadows, 0u);

  std::vector<std::string> chunks;
  std::promise<Reply> done;
  auto f = done.get_future();
  rig.rt->complete(
      {"/v1/chat/completions", handle_body("weather", c.stream), {"faults", "r1", "handle"}},
      {[&](std::string_view d) { chunks.emplace_back(d); },
       [&](Reply r) { done.set_value(std::move(r)); }, nullptr});
  ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
  const Reply r = f.get();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status, c.status) << r.body;
  EXPECT_EQ(r.served, Served::engine);
  EXPECT_TRUE(is_error_body(r.body)) << "never a partial body: " << r.body;
  if (c.mode == Mode::status_500) {
    EXPECT_NE(r.body.find("engine exploded"), std::string::npos) << "the engine's own body";
  }

  // A second run: the same demand is again executed (and fails again): nothing was kept.
  ASSERT_TRUE(rig.call(router_body(), "r2", "router").ok());
  ASSERT_TRUE(rig.fills_settled());
  const Reply again = rig.call(handle_body("weather"), "r2", "handle");
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(again.served, Served::engine);
  s = rig.rt->stats();
  EXPECT_EQ(s.served_fill, 0u);
  EXPECT_EQ(s.served_cache, 0u);
  EXPECT_EQ(s.shadows_stored, 0u);
  EXPECT_EQ(s.csl_shadows, 0u);
  EXPECT_EQ(s.fills_completed, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, FailedFills,
    ::testing::Values(
        FaultCase{"status_500", Mode::status_500, false, 500, {}},
        FaultCase{"invalid_json", Mode::invalid_json, false, 502, {}},
        FaultCase{"body_truncated", Mode::body_truncated, false, 502, {}},
        FaultCase{"stream_no_done", Mode::stream_no_done, true, 502, {}},
        FaultCase{"stream_reset", Mode::stream_reset, true, 502, {}},
        FaultCase{"no_first_byte", Mode::no_response, false, 504,
                  [](engines::OpenAiOptions& o) { o.first_byte_timeout = milliseconds(300); }},
        FaultCase{"stall_between_chunks", Mode::stream_stall, true, 504,
                  [](engines::OpenAiOptions& o) { o.idle_timeout = milliseconds(300); }},
        FaultCase{"status_503_retry_after_beyond_the_cap", Mode::status_503, false, 503, {}},
        FaultCase{"status_429_retry_after_beyond_the_cap", Mode::status_429, true, 429, {}},
        // An error inside a 200 response: the fill's body is an error object, the canonical
        // call gets the engine's error as sent (mid-stream, or as the whole answer).
        FaultCase{"error_object_200", Mode::error_object_200, false, 500, {}},
        FaultCase{"stream_error_midway", Mode::stream_error_midway, true, 500, {}},
        FaultCase{"stream_error_only", Mode::stream_error_only, true, 500, {}}),
    [](const auto& p) { return std::string(p.param.name); });

// The losing candidate's fill is held by the engine when the router decides: it is cancelled,
// never stored, and the same request later runs on the engine.
TEST(CancelledFills, AreNeverStored) {
  FaultRig rig(Mode::ok);
  rig.server.script("email: route me", {Mode::no_response});
  const Reply routed = rig.call(router_body(), "r1", "router");
  ASSERT_TRUE(routed.ok()) << routed.error;
  ASSERT_TRUE(rig.fills_settled());
  auto s = rig.rt->stats();
  ASSERT_EQ(s.fills_issued, 2u) << "both candidates filled";
  EXPECT_EQ(s.fills_cancelled, 1u) << "the loser's fill, held by the engine, was aborted";
  EXPECT_EQ(s.fills_completed, 1u);
  const Reply weather = rig.call(handle_body("weather"), "r1", "handle");
  ASSERT_TRUE(weather.ok()) << weather.error;
  EXPECT_EQ(weather.served, Served::fill) << "the winner's fill serves its demand";
  const Reply email = rig.call(handle_body("email"), "r1", "handle");
  ASSERT_TRUE(email.ok()) << email.error;
  EXPECT_EQ(email.served, Served::engine) << "nothing of the cancelled fill was kept";
  EXPECT_EQ(email.body, kCompletion);
}

// Fills stop first: once the breaker opens, the next run's fills are refused without reaching
// the engine, while canonical calls still get the engine's own answer.
TEST(BreakerInTheRuntime, FailingEngineGetsNoMoreFills) {
  FaultRig rig(Mode::status_500, [](engines::OpenAiOptions& o) {
    o.breaker.fill_failures = 2;
    o.breaker.cooldown = std::chrono::hours(1);
  });
  ASSERT_TRUE(rig.call(router_body(), "r1", "router").ok());
  ASSERT_TRUE(rig.fills_settled());
  ASSERT_EQ(rig.rt->stats().fills_failed, 2u);
  ASSERT_EQ(rig.faulty->resilience().fills, engines::CircuitState::open);
  const int seen = rig.server.requests();
  ASSERT_TRUE(rig.call(router_body(), "r2", "router").ok());
  ASSERT_TRUE(rig.fills_settled());
  EXPECT_EQ(rig.server.requests(), seen) << "refused fills make no network I/O";
  EXPECT_EQ(rig.faulty->resilience().breaker.fills_refused, 2u);
  EXPECT_EQ(rig.rt->stats().fills_failed, 4u) << "a refused fill is a failed fill: a miss";
  const Reply r = rig.call(handle_body("weather"), "r2", "handle");
  EXPECT_EQ(r.status, 500) << "canonical calls still reach the engine";
  EXPECT_EQ(r.served, Served::engine);
  EXPECT_EQ(rig.rt->stats().csl_shadows, 0u);
}

// -- results that did not complete normally, on the canonical path ---------------------------

// The body a stream's chunks accumulate to, as a client's SDK would have it.
json accumulated(const std::vector<std::string>& chunks) {
  engines::StreamAssembler a(true);
  for (const auto& c : chunks)
    a.add(json::parse(c));
  EXPECT_TRUE(a.complete()) << a.why_incomplete();
  return json::parse(a.body());
}

TEST(StreamFaults, AnErrorEventMidStreamReachesTheCallerAsSentAndIsNeverStored) {
  FaultRig rig(Mode::stream_error_midway);
  const auto first = rig.stream(handle_body("weather", true), "s1", "handle");
  EXPECT_EQ(first.chunks.size(), 2u) << "the chunks before the error, as the engine sent them";
  for (const auto& c : first.chunks)
    EXPECT_NE(c.find("\"content\":\"hi\""), std::string::npos) << c;
  EXPECT_FALSE(first.reply.ok());
  EXPECT_EQ(first.reply.status, 500) << "the error's own code";
  EXPECT_EQ(first.reply.body, kErrorEvent) << "the error event exactly as the engine sent it";
  EXPECT_EQ(first.reply.served, Served::engine);
  EXPECT_EQ(rig.rt->stats().errors, 1u);

  // The identical request, from another run, streamed or not: the engine again, never the
  // library (which would hold the truncated text).
  const auto again = rig.stream(handle_body("weather", true), "s2", "handle");
  EXPECT_EQ(again.reply.served, Served::engine);
  EXPECT_EQ(again.reply.body, kErrorEvent);
  const Reply whole = rig.call(handle_body("weather"), "s3", "handle");
  EXPECT_EQ(whole.served, Served::engine);
  EXPECT_EQ(whole.status, 500);
  EXPECT_EQ(whole.body, kErrorEvent) << "a non-streamed request gets the error body as sent";
  EXPECT_EQ(rig.server.requests(), 3);
  const auto s = rig.rt->stats();
  EXPECT_EQ(s.csl_entries, 0u);
  EXPECT_EQ(s.served_cache, 0u);
  EXPECT_EQ(s.errors, 3u);
}

TEST(StreamFaults, AnErrorOnlyStreamOrAnErrorBodyIsTheEnginesErrorAndNeverStored) {
  for (const auto& [mode, stream] :
       {std::pair{Mode::stream_error_only, true}, std::pair{Mode::error_object_200, false}}) {
    SCOPED_TRACE(stream ? "error-only stream" : "error object in a 200 body");
    FaultRig rig(mode);
    for (const char* run : {"e1", "e2"}) {
      const auto r = rig.stream(handle_body("weather", stream), run, "handle");
      EXPECT_TRUE(r.chunks.empty());
      EXPECT_FALSE(r.reply.ok());
      EXPECT_EQ(r.reply.status, 500);
      EXPECT_EQ(r.reply.body, kErrorEvent);
      EXPECT_EQ(r.reply.served, Served::engine) << "never an empty completion from the library";
    }
    EXPECT_EQ(rig.server.requests(), 2);
    const auto s = rig.rt->stats();
    EXPECT_EQ(s.csl_entries, 0u);
    EXPECT_EQ(s.errors, 2u);
  }
}

TEST(StreamFaults, AResponseWithoutFinishReasonIsPassedAsSentAndNeverStored) {
  FaultRig rig(Mode::stream_no_finish);
  const auto first = rig.stream(handle_body("weather", true), "n1", "handle");
  ASSERT_TRUE(first.reply.ok()) << first.reply.error;
  EXPECT_EQ(first.chunks.size(), 2u);
  EXPECT_TRUE(json::parse(first.reply.body)["choices"][0]["finish_reason"].is_null());
  const auto again = rig.stream(handle_body("weather", true), "n2", "handle");
  EXPECT_EQ(again.reply.served, Served::engine);
  EXPECT_EQ(again.chunks, first.chunks);
  const Reply whole = rig.call(handle_body("weather"), "n3", "handle");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole.served, Served::engine);
  EXPECT_EQ(whole.body, kUnfinishedCompletion) << "passed on as the engine sent it";
  EXPECT_EQ(rig.server.requests(), 3);
  const auto s = rig.rt->stats();
  EXPECT_EQ(s.csl_entries, 0u);
  EXPECT_EQ(s.errors, 0u) << "the engine's answer, not an error";
}

// What LangGraph agents get: a streamed tool call. It is stored whole, so that the identical
// request is answered with the tool calls, streamed or not.
TEST(StreamFaults, StreamedToolCallsAreStoredWholeAndReplayedFaithfully) {
  FaultRig rig(Mode::stream_tool_calls);
  json streamed = handle_body("weather", true);
  streamed["stream_options"] = {{"include_usage", true}};
  const auto first = rig.stream(streamed, "t1", "handle");
  ASSERT_TRUE(first.reply.ok()) << first.reply.error;
  EXPECT_EQ(first.reply.served, Served::engine);
  const json body = json::parse(first.reply.body);
  const json whole = json::parse(kToolCallCompletion);
  EXPECT_EQ(body["choices"], whole["choices"]) << first.reply.body;
  EXPECT_EQ(first.reply.finish_reason, "tool_calls");
  ASSERT_EQ(rig.rt->stats().csl_entries, 1u) << "a complete result is stored";

  const Reply cached = rig.call(handle_body("weather"), "t2", "handle");
  ASSERT_TRUE(cached.ok()) << cached.error;
  EXPECT_EQ(cached.served, Served::cache);
  EXPECT_EQ(cached.body, first.reply.body);
  EXPECT_EQ(json::parse(cached.body)["choices"][0]["message"]["tool_calls"].size(), 2u);

  const auto replayed = rig.stream(streamed, "t3", "handle");
  ASSERT_TRUE(replayed.reply.ok()) << replayed.reply.error;
  EXPECT_EQ(replayed.reply.served, Served::cache);
  const json original = accumulated(first.chunks);
  const json again = accumulated(replayed.chunks);
  EXPECT_EQ(again["choices"], original["choices"]) << "the replay accumulates to the original";
  EXPECT_EQ(again["usage"], original["usage"]);
  EXPECT_EQ(again["choices"], body["choices"]);
  EXPECT_EQ(rig.server.requests(), 1);
}

// Errors are counted once per call whichever path answers it: a call no template claims, a
// call for a stage its template does not have, a tool nobody serves, a workflow's stage, a call
// after shutdown.
TEST(StreamFaults, EveryErrorAnswerIsCountedOnce) {
  FaultRig rig(Mode::status_500);
  auto expect_errors = [&](std::uint64_t n, const char* what) {
    EXPECT_EQ(rig.rt->stats().errors, n) << what;
  };
  EXPECT_EQ(rig.rt->complete({"/v1/chat/completions", handle_body("weather"), {}}).get().status,
            500);
  expect_errors(1, "pass-through");
  EXPECT_EQ(rig.call(handle_body("weather"), "c1", "nosuch").status, 500);
  expect_errors(2, "a stage the template does not have");
  EXPECT_EQ(rig.rt->tool("nosuch", json::object(), {}).get().status, 404);
  expect_errors(3, "no tool engine");
  EXPECT_EQ(rig.call(handle_body("weather"), "c1", "handle").status, 500);
  expect_errors(4, "a workflow's stage");
  EXPECT_EQ(rig.call(router_body(), "c1", "router").status, 200);
  expect_errors(4, "an answer is no error");
}

TEST(StreamFaults, ACallAfterShutdownIsToldWhenToRetry) {
  FaultRig rig(Mode::ok);
  rig.rt->shutdown();
  const Reply r = rig.call(handle_body("weather"), "x1", "handle");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.retry_after, "1");
}

// Demands that joined an execution whose answer cannot be stored are not served it as `cache`:
// they run themselves (and get the engine's answer for themselves).
TEST(StreamFaults, WaitersOfAnAnswerThatCannotBeStoredRunThemselves) {
  FaultyServer server(Mode::stream_no_finish);
  engines::OpenAiOptions oo;
  oo.base_url = server.base_url();
  oo.scrape_interval = Duration::zero();
  oo.first_byte_timeout = seconds(10);
  auto hold = std::make_shared<HoldEngine>(std::make_shared<engines::OpenAiEngine>(oo));
  RuntimeConfig cfg;
  cfg.engines.push_back({"hold", hold, {}});
  cfg.template_texts = {{"co.yaml", R"(version: 1
workflow: co
stages:
  answer:
    kind: model
    speculable: true
    model: m
    params: {temperature: 0, max_tokens: 8}
    request:
      messages: [{role: user, content: "hi"}]
limits:
  wait_ms: 600000
)"}};
  auto created = Runtime::create(cfg);
  ASSERT_TRUE(created.ok()) << created.error().message;
  auto& rt = **created;
  const json body = {{"model", "m"},
                     {"temperature", 0},
                     {"max_tokens", 8},
                     {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  auto leader = rt.complete({"/v1/chat/completions", body, {"co", "lead", "answer"}});
  hold->wait_held(1);
  auto waiter = rt.complete({"/v1/chat/completions", body, {"co", "wait", "answer"}});
  while (rt.stats().coalesced < 1)  // an event: the waiter joined the held execution
    std::this_thread::yield();
  hold->release_first();
  ASSERT_EQ(leader.wait_for(kWait), std::future_status::ready);
  const Reply led = leader.get();
  ASSERT_TRUE(led.ok()) << led.error;
  EXPECT_EQ(led.body, kUnfinishedCompletion);
  // The waiter runs itself: its own execution is held in turn (an event, bounded; a waiter
  // answered without one ends the wait too).
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (hold->held() == 0 && waiter.wait_for(seconds(0)) != std::future_status::ready &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  hold->release_first();
  ASSERT_EQ(waiter.wait_for(kWait), std::future_status::ready);
  const Reply own = waiter.get();
  ASSERT_TRUE(own.ok()) << own.error;
  EXPECT_EQ(own.served, Served::engine) << "never the unfinished answer as `cache`";
  EXPECT_EQ(own.body, kUnfinishedCompletion);
  EXPECT_EQ(server.requests(), 2);
  const auto s = rt.stats();
  EXPECT_EQ(s.csl_entries, 0u);
  EXPECT_EQ(s.served_cache, 0u);
}

// -- fills whose engine reports an error ----------------------------------------------------------

// The handler's fills stream (the template asks for it), so the engine's error comes as an
// event inside a 200 stream.
const std::string kStreamedFills = [] {
  std::string t = kTemplate;
  const std::string from = "params: {temperature: 0, max_tokens: 32}";
  t.replace(t.find(from), from.size(), "params: {temperature: 0, max_tokens: 32, stream: true}");
  return t;
}();

TEST(FillFaults, AFillWhoseStreamCarriesAnErrorEventStoresNoShadow) {
  FaultRig rig(Mode::ok, {}, kStreamedFills);
  rig.server.script("weather: route me", {Mode::stream_error_midway});
  const Reply routed = rig.call(router_body(), "f1", "router");
  ASSERT_TRUE(routed.ok()) << routed.error;
  ASSERT_TRUE(rig.fills_settled());
  auto s = rig.rt->stats();
  ASSERT_EQ(s.fills_issued, 2u) << "both candidates filled";
  EXPECT_EQ(s.fills_failed, 1u) << "the fill that got the error event: a miss";
  const int before = rig.server.requests();
  // The selected candidate's demand: the engine's answer, never the fill's truncated text.
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed demand" : "demand");
    const auto r = rig.stream(handle_body("weather", stream), "f1", "handle");
    ASSERT_TRUE(r.reply.ok()) << r.reply.error;
    EXPECT_EQ(r.reply.served, stream ? Served::cache : Served::engine);
    if (!stream) {
      EXPECT_EQ(r.reply.body, kCompletion) << "the engine's answer";
    }
  }
  EXPECT_EQ(rig.server.requests(), before + 1) << "the demand ran on the engine";
  s = rig.rt->stats();
  EXPECT_EQ(s.served_fill, 0u);
  EXPECT_EQ(s.errors, 0u) << "a failed fill is a miss, not an error";
}

}  // namespace
}  // namespace dynrt::testing
