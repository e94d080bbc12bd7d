// Engine faults through the whole runtime: a dynrt::Runtime whose router model runs on the
// simulated engine and whose handler model runs on an OpenAI engine pointed at a misbehaving
// loopback server (tests/engines/faulty_server.hpp). A fill that fails, is truncated, reset
// mid-stream, times out or is cancelled is never stored in the library, and the canonical call
// gets the engine's error or a clean 502/504, never a partial body. Waits are for events
// (stats reaching a value), bounded; the deadlines under test are the engine's, configured short.
#include "../engines/faulty_server.hpp"
#include "actors/runtime.hpp"
#include "engines/openai/engine.hpp"
#include "engines/sim/engine.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
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

  explicit FaultRig(Mode mode, const std::function<void(engines::OpenAiOptions&)>& tune = {})
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
    cfg.template_texts = {{"faults.yaml", kTemplate}};
    auto created = Runtime::create(cfg);
    EXPECT_TRUE(created.ok()) << (created.ok() ? "" : created.error().message);
    rt = std::move(*created);
  }

  Reply call(const json& body, const std::string& run, const std::string& stage) {
    auto f = rt->complete({"/v1/chat/completions", body, {"faults", run, stage}});
    if (f.wait_for(kWait) != std::future_status::ready) {
      ADD_FAILURE() << "no reply within " << kWait.count() << " s";
      return {};
    }
    return f.get();
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
        FaultCase{"status_429_retry_after_beyond_the_cap", Mode::status_429, true, 429, {}}),
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

}  // namespace
}  // namespace dynrt::testing
