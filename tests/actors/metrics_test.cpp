// Every dynrt_ metric against a scripted scenario: a Routing run, its exact repeat under another
// workflow id, a write, an untagged call and a call to a tool nobody serves, then quiet until
// the runs expire. It runs in simulated time (a stepped Runtime and engine on one clock), so
// every figure is the same on every machine, and each expected value comes from what the
// harness observed (the answers and how each was served) or from the run journals, not from the
// counters themselves. A metric without a row here fails the test: a new counter needs one.
#include "bench/driver.hpp"
#include "bench/sim_world.hpp"
#include "bench/workloads.hpp"
#include "engines/tools/corpus.hpp"
#include "tests/run/graphs.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>

namespace dynrt::testing {
namespace {

using nlohmann::json;

struct Scenario {
  std::shared_ptr<ManualTime> time = std::make_shared<ManualTime>();
  std::shared_ptr<engines::sim::SimEngine> engine;
  std::unique_ptr<bench::SimWorld> world;
  std::unique_ptr<Runtime> runtime;
  bench::Workload workload;
  std::vector<Reply> replies;  // every call's answer, in order
  std::vector<json> journals;  // the runs', at the end
};

// Drives one run to its end in simulated time.
bench::RunResult drive(Scenario& s, const bench::Run& run) {
  std::optional<bench::RunResult> result;
  bench::AsyncDriveOptions o;
  o.clock = s.time.get();
  bench::drive_async(*s.runtime, graph("routing"), run, o,
                     [&](bench::RunResult r) { result = std::move(r); });
  EXPECT_TRUE(s.world->run_until([&] { return result.has_value(); }));
  for (const auto& step : result->steps)
    s.replies.push_back(step.reply);
  return *result;
}

Reply call(Scenario& s, std::function<void(ReplyCallbacks)> send) {
  std::optional<Reply> reply;
  ReplyCallbacks cb;
  cb.on_done = [&](Reply r) { reply = std::move(r); };
  send(std::move(cb));
  EXPECT_TRUE(s.world->run_until([&] { return reply.has_value(); }));
  s.replies.push_back(*reply);
  return *reply;
}

std::unique_ptr<Scenario> run_scenario() {
  auto s = std::make_unique<Scenario>();
  bench::WorkloadOptions wo;
  wo.seed = 5;
  wo.runs = 1;
  wo.selection_first = true;  // the router names its pick first: resolve on emission acts
  s->workload = bench::make_workload(graph("routing"), wo);
  engines::sim::SimEngineOptions eo;
  eo.stepped = true;
  s->engine =
      std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, s->workload.script, eo);
  s->world = std::make_unique<bench::SimWorld>(s->time, s->engine);
  auto corpus = engines::Corpus::from_json(s->workload.corpus);
  EXPECT_TRUE(corpus.ok());
  for (const auto& [name, key] : s->workload.tools)
    (*corpus)->add_tool(name, {engines::Corpus::Kind::lookup, key});
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", s->engine, {}});
  cfg.tools = *corpus;
  cfg.template_paths = {"templates"};
  cfg.stepped = true;
  cfg.time = s->time;
  cfg.threads = 1;
  cfg.workflow_idle = std::chrono::seconds(60);
  cfg.admission.policy = admission::AdmissionPolicy::always;  // every candidate filled
  auto rt = Runtime::create(cfg);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().message);
  s->runtime = std::move(*rt);
  s->world->attach(s->runtime.get());

  const auto& run = s->workload.runs[0];
  drive(*s, run);
  auto repeat = run;
  repeat.workflow_id += "-again";
  drive(*s, repeat);
  // Every handler API changed: whatever read them is invalidated.
  std::optional<std::size_t> removed;
  s->runtime->write({"api:weather", "api:calendar", "api:email"},
                    [&](WriteResult r) { removed = r.removed; });
  EXPECT_TRUE(s->world->run_until([&] { return removed.has_value(); }));
  // Untagged: passed through. A tool nobody serves: an error.
  call(*s, [&](ReplyCallbacks cb) {
    s->runtime->complete({"/v1/chat/completions",
                          {{"model", "sim"},
                           {"messages", {{{"role", "user"}, {"content", "hello"}}}},
                           {"max_tokens", 4}},
                          {}},
                         std::move(cb));
  });
  call(*s, [&](ReplyCallbacks cb) {
    s->runtime->tool("nobody_serves_this", json::object(), {}, std::move(cb));
  });
  for (const auto& id : {run.workflow_id, repeat.workflow_id}) {
    std::optional<std::vector<json>> j;
    s->runtime->explain(id, [&](std::vector<json> runs) { j = std::move(runs); });
    EXPECT_TRUE(s->world->run_until([&] { return j.has_value(); }));
    EXPECT_EQ(j->size(), 1u);
    if (!j->empty()) s->journals.push_back((*j)[0]);
  }
  // Quiet past the idle time: both runs end.
  s->time->advance(std::chrono::seconds(61));
  s->world->run_until([&] { return s->runtime->stats().workflows_live == 0; });
  return s;
}

// What the harness and the journals saw, counted.
struct Observed {
  std::map<Served, double> served;
  double errors = 0, calls = 0;
  double fills = 0, done = 0, failed = 0, cancelled = 0, branches = 0, proposed = 0;
  double cancelled_while_decoding = 0;  // losers of branches whose decider ran on the engine
  double emitting_deciders = 0;         // routers that decoded on the engine
  double waited = 0;
  double promoted = 0;  // fills waited for: a turn's handler and executor wait for one chain
  double router_ms = 0, waited_ms = 0;
  double entry_bytes = 0;  // bodies of run 1's results no write touched (router, handle)
};

Observed observe(const Scenario& s) {
  Observed o;
  for (const auto& r : s.replies) {
    ++o.served[r.served];
    o.errors += r.ok() ? 0 : 1;
    ++o.calls;
  }
  for (const auto& j : s.journals) {
    const auto& calls = j["calls"];
    std::set<int> turns_waited;
    int turn = 0;
    for (const auto& c : calls) {
      if (c["stage"] == "router") ++turn;
      if (c.contains("waited_for_fill_ms")) {
        ++o.waited;
        o.waited_ms += c["waited_for_fill_ms"].get<double>();
        turns_waited.insert(turn);
      }
      if (c["stage"] == "router" && c["served"] == "engine") {
        ++o.emitting_deciders;
        o.router_ms += c["latency_ms"].get<double>();
      }
    }
    o.promoted += static_cast<double>(turns_waited.size());
    for (const auto& b : j["branches"]) {
      ++o.branches;
      if (!b["candidates"].empty()) ++o.proposed;
      for (const auto& c : b["candidates"]) {
        if (!c.contains("fill")) continue;
        ++o.fills;
        o.done += c["status"] == "done";
        o.failed += c["status"] == "failed";
        const bool cancelled = c["status"] == "cancelled";
        o.cancelled += cancelled;
        if (cancelled && j["id"] == s.journals[0]["id"]) ++o.cancelled_while_decoding;
      }
    }
  }
  // Run 1's own answers: steps 0..5 are router, handle, execute, twice.
  for (std::size_t i = 0; i < 6; ++i)
    if (i % 3 != 2) o.entry_bytes += static_cast<double>(s.replies[i].body.size());
  return o;
}

TEST(Metrics, EveryMetricHasItsValueInAScriptedScenario) {
  auto s = run_scenario();
  ASSERT_EQ(s->journals.size(), 2u);
  ASSERT_GE(s->replies.size(), 14u);
  const auto o = observe(*s);
  EXPECT_GT(o.promoted, 0) << "the scenario waits for fills";
  const auto stats = s->runtime->stats();
  std::map<std::string, double> got;
  for (const auto& m : metrics(stats))
    got[std::string(m.name) + std::string(m.labels)] += m.value;

  // Exact values. Routing: two turns, each a router (the decider, which names its pick first),
  // a handler and an executor; `always` fills all three handlers (each chain: handler,
  // executor) when the router is called.
  const std::map<std::string, double> exact = {
      {R"(dynrt_requests_total{served="engine"})", o.served.at(Served::engine)},
      {R"(dynrt_requests_total{served="fill"})", o.served.at(Served::fill)},
      {R"(dynrt_requests_total{served="cache"})", o.served.at(Served::cache)},
      {"dynrt_calls_received_total", o.calls},
      {"dynrt_passthrough_total", 2},  // the untagged call and the tool call
      {R"(dynrt_tags_ignored_total{reason="no_workflow"})", 0},  // every tag named a stage
      {R"(dynrt_tags_ignored_total{reason="unknown_workflow"})", 0},
      {R"(dynrt_tags_ignored_total{reason="no_workflow_id"})", 0},
      {R"(dynrt_tags_ignored_total{reason="unknown_stage"})", 0},
      {"dynrt_errors_total", o.errors},
      {"dynrt_waits_total", o.waited},
      {"dynrt_wait_timeouts_total", 0},  // every fill ended within its wait's bound
      {"dynrt_wait_timeouts_fill_answered_total", 0},
      {"dynrt_fills_issued_total", o.fills},
      {"dynrt_fills_consumed_total", o.served.at(Served::fill)},
      {"dynrt_fills_cancelled_total", o.cancelled},
      // The router names its pick first: both losers of each branch it decoded are stopped then.
      {"dynrt_selections_emitted_total", o.emitting_deciders},
      {"dynrt_fills_cancelled_on_emission_total", o.cancelled_while_decoding},
      {"dynrt_fills_started_on_emission_total", 0},  // `always` had admitted every winner
      {"dynrt_draft_samples_total", 0},              // Routing's candidates are a static list
      {"dynrt_fills_promoted_total", o.promoted},
      {"dynrt_fill_requests_requeued_total", 0},  // 64 slots: no request ever queued
      {"dynrt_engine_drafting_seconds_total", 0},
      {"dynrt_fills_failed_total", o.failed},
      {"dynrt_fills_completed_total", o.done},
      {"dynrt_fills_suppressed_total", 0},         // no fill's first stage was in the library
      {"dynrt_coalesced_total", 0},                // no two identical calls were in flight at once
      {"dynrt_shadows_stored_total", o.done * 2},  // each completed fill stored its chain
      {"dynrt_shadows_discarded_total", 0},        // the losers stopped before storing anything
      {"dynrt_branches_opened_total", o.proposed},
      {"dynrt_branches_gated_total", 0},
      {"dynrt_branches_settled_total", o.branches},
      {"dynrt_writes_total", 1},
      {"dynrt_workflows_live", 0},
      {"dynrt_runs_evicted_total", 0},
      {"dynrt_runs_expired_total", 2},
      {"dynrt_runs_refused_total", 0},
      {"dynrt_fills_running", 0},
      {"dynrt_gate_branches_opened_total", o.proposed},
      {"dynrt_gate_branches_closed_total", 0},
      {"dynrt_gate_fills_admitted_total", o.fills},
      {"dynrt_gate_fills_refused_total", 0},
      {"dynrt_fills_share_refused_total", 0},
      {"dynrt_fills_reserve_refused_total", 0},
      {"dynrt_fills_in_flight", 0},
      {"dynrt_fill_kv_reserved", 0},
      {"dynrt_branches_open", 0},
      // Run 1's six results were kept; the write removed the two executors (they read api:*).
      {"dynrt_csl_entries", 4},
      {"dynrt_csl_shadows", 0},
      {"dynrt_csl_bytes", o.entry_bytes},
      {"dynrt_csl_hits_total", o.served.at(Served::cache)},
      {"dynrt_csl_promotions_total", o.served.at(Served::fill)},
      {"dynrt_csl_invalidations_total", 2},
      // The shipped coding-agent template recognizes untagged Messages calls; the scenario's
      // untagged calls are chat and tool calls no stage claims.
      {R"(dynrt_recognized_total{workflow="coding-agent",stage="turn"})", 0},
      {R"(dynrt_recognized_total{workflow="coding-agent",stage="answer"})", 0},
      {R"(dynrt_unrecognized_total{reason="no_match"})", 2},
      {R"(dynrt_unrecognized_total{reason="ambiguous"})", 0},
      {R"(dynrt_unrecognized_total{reason="no_run"})", 0},
  };
  for (const auto& [name, want] : exact) {
    ASSERT_TRUE(got.count(name)) << name << " is not exported";
    EXPECT_DOUBLE_EQ(got.at(name), want) << name;
  }
  // Bounds, where the value is a measured time or a count of internal probes.
  const auto& saved = got.at("dynrt_engine_saved_seconds_total");
  // The repeat's routers alone saved their engine time; at most, each served result cost no
  // more than its router's decode plus the wait for it.
  EXPECT_GE(saved, o.router_ms / 1000 * 0.99);
  EXPECT_LE(saved, (2 * o.router_ms + 2 * (o.router_ms + o.waited_ms)) / 1000);
  const auto& wasted = got.at("dynrt_engine_wasted_seconds_total");
  EXPECT_GT(wasted, 0) << "the stopped losers ran on the engine until the pick showed";
  EXPECT_LE(wasted, o.cancelled * o.router_ms / o.emitting_deciders / 1000);
  EXPECT_NEAR(wasted * 1000, stats.engine_ms_unfinished, 0.01) << "every waste was a stopped loser";
  // Misses: at least each engine-run router's, and each fill stage's first look.
  EXPECT_GE(got.at("dynrt_csl_misses_total"), o.emitting_deciders + o.fills + o.done);
  EXPECT_GE(got.at("dynrt_load_envelope"), 0);
  EXPECT_LE(got.at("dynrt_load_envelope"), 1);
  // The fill gate's p per admitted fill is an estimate in (0, 1]; each branch's winner served
  // its selection at most once.
  EXPECT_GT(got.at("dynrt_gate_fills_admitted_p_total"), 0);
  EXPECT_LE(got.at("dynrt_gate_fills_admitted_p_total"), o.fills);
  EXPECT_GT(got.at("dynrt_gate_fills_used_total"), 0) << "a winner's fill served its call";
  EXPECT_LE(got.at("dynrt_gate_fills_used_total"), o.branches);
  // The interference fit reads a handful of calls as too little to depart from the curve.
  EXPECT_EQ(got.at("dynrt_gate_interference_scale"), 1.0);
  const std::set<std::string> bounded = {"dynrt_gate_interference_scale",
                                         "dynrt_engine_saved_seconds_total",
                                         "dynrt_engine_wasted_seconds_total",
                                         "dynrt_csl_misses_total",
                                         "dynrt_load_envelope",
                                         "dynrt_gate_fills_admitted_p_total",
                                         "dynrt_gate_fills_used_total"};
  // A metric with no expectation here fails: add its row when you add it.
  for (const auto& [name, value] : got)
    EXPECT_TRUE(exact.count(name) || bounded.count(name)) << name << " has no expected value";
}

// The shipped Grafana dashboard reads only metrics that exist, and shows every group of them.
TEST(Metrics, TheDashboardReadsOnlyExportedMetrics) {
  std::ifstream in("docs/grafana-dashboard.json");
  ASSERT_TRUE(in) << "run from the repository root";
  const auto dash = json::parse(in, nullptr, false);
  ASSERT_FALSE(dash.is_discarded());
  std::set<std::string> exported = {"dynrt_auth_refused_total"};  // the gateway's own
  for (const auto& m : metrics(RuntimeStats{}))
    exported.insert(std::string(m.name));
  std::set<std::string> used;
  const std::regex name(R"(dynrt_[a-z_]+)");
  for (const auto& panel : dash["panels"])
    for (const auto& target : panel["targets"]) {
      const auto expr = target["expr"].get<std::string>();
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name);
           it != std::sregex_iterator(); ++it)
        used.insert(it->str());
    }
  for (const auto& n : used)
    EXPECT_TRUE(exported.count(n)) << n << " is not a dynrt metric";
  for (const auto* group :
       {"dynrt_requests_total", "dynrt_fills_issued_total", "dynrt_fills_consumed_total",
        "dynrt_engine_saved_seconds_total", "dynrt_engine_wasted_seconds_total",
        "dynrt_gate_branches_opened_total", "dynrt_gate_fills_admitted_total", "dynrt_csl_entries"})
    EXPECT_TRUE(used.count(group)) << "the dashboard does not show " << group;
}

}  // namespace
}  // namespace dynrt::testing

namespace dynrt {
namespace {

TEST(Metrics, APoolIsExportedPerReplicaWithItsLabelsEscaped) {
  RuntimeStats s;
  const auto plain = metrics(s);
  EXPECT_TRUE(std::none_of(plain.begin(), plain.end(), [](const Metric& m) {
    return m.name.starts_with("dynrt_engine_replica_") || m.name == "dynrt_engine_failovers_total";
  }));  // no pool, none of its figures
  engines::PoolStats p;
  p.failovers = 3;
  p.replicas.push_back({"http://a:8000", 5, 2, 1, 1, 0.25, engines::CircuitState::closed,
                        engines::CircuitState::closed});
  p.replicas.push_back(
      {"http://b\"x", 7, 0, 4, 0, 0, engines::CircuitState::open, engines::CircuitState::open});
  s.pools.push_back({"qwen", p});
  std::map<std::string, double> got;
  for (const auto& m : metrics(s))
    got[std::string(m.name) + m.labels] = m.value;
  const std::string a = R"({engine="qwen",replica="http://a:8000")";
  const std::string b = R"({engine="qwen",replica="http://b\"x")";
  EXPECT_EQ(got.at("dynrt_engine_replica_requests_total" + a + R"(,kind="canonical"})"), 5);
  EXPECT_EQ(got.at("dynrt_engine_replica_requests_total" + a + R"(,kind="fill"})"), 2);
  EXPECT_EQ(got.at("dynrt_engine_replica_requests_total" + b + R"(,kind="canonical"})"), 7);
  EXPECT_EQ(got.at("dynrt_engine_replica_failures_total" + b + "}"), 4);
  EXPECT_EQ(got.at("dynrt_engine_replica_in_flight" + a + "}"), 1);
  EXPECT_EQ(got.at("dynrt_engine_replica_load" + a + "}"), 0.25);
  EXPECT_EQ(got.at("dynrt_engine_replica_available" + a + "}"), 1);
  EXPECT_EQ(got.at("dynrt_engine_replica_available" + b + "}"), 0);
  EXPECT_EQ(got.at(R"(dynrt_engine_failovers_total{engine="qwen"})"), 3);
}

}  // namespace
}  // namespace dynrt
