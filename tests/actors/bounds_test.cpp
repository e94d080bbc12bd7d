// Bounded state under bursts: the fill budget comes back after a burst of runs, live workflow
// runs are bounded in number and in time (a dropped run loses speculation, never a result), and
// statistics are read without waiting on the actor graph.
#include "tests/actors/hold_engine.hpp"
#include "tests/actors/rig.hpp"

#include "dsl/render.hpp"

#include <future>
#include <latch>
#include <thread>

namespace dynrt::testing {
namespace {

using bench::RunResult;

std::vector<RunResult> drive_all(Rig& rig, const std::vector<bench::Run>& runs,
                                 std::size_t threads) {
  std::vector<RunResult> out(runs.size());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < out.size(); i = next++)
        out[i] = rig.drive(runs[i]);
    });
  for (auto& t : pool)
    t.join();
  return out;
}

std::size_t served(const std::vector<RunResult>& runs, const std::string& stage, Served how) {
  std::size_t n = 0;
  for (const auto& r : runs)
    for (const auto& s : r.steps)
      n += s.stage == stage && s.reply.served == how;
  return n;
}

// A burst of concurrent runs used to leave fill slots reserved with no fill running (a branch
// that ended while Action 1 was answering never released what it was granted, and one that
// ended before Action 0 answered left its cold trial pending for ever), after which every
// branch was refused and speculation was off until a restart.
TEST(FillBudget, ABurstOfRunsReturnsEveryReservationAndSpeculationGoesOn) {
  // 2,000 runs in a burst, then 12 one at a time (one workload: the engine's script has them).
  const auto w = bench::make_workload(graph("routing"), {21, 2012, 1.0});
  const std::vector<bench::Run> first(w.runs.begin(), w.runs.begin() + 2000);
  const std::vector<bench::Run> later(w.runs.begin() + 2000, w.runs.end());
  RigOptions o;
  o.time_scale = 0;  // the router answers at once, often before its branch is priced
  o.settle_after = std::chrono::milliseconds(20);
  Rig rig(w, o);
  const auto burst = drive_all(rig, first, 32);
  for (const auto& r : burst)
    ASSERT_TRUE(r.ok()) << r.error;
  expect_budget_returned(*rig.runtime, "after the burst");
  rig.time->advance(o.settle_after);  // resolved branches nobody demanded settle now
  const auto s = await_stats(*rig.runtime, [](const auto& x) { return x.branches_open == 0; });
  EXPECT_EQ(s.branches_open, 0u) << "a branch the gate opened never settled";

  // Afterwards, runs one at a time still get their handlers from fills.
  const auto issued = rig.runtime->stats().fills_issued;
  std::vector<RunResult> after;
  for (const auto& run : later) {
    after.push_back(rig.drive(run));
    ASSERT_TRUE(after.back().ok()) << after.back().error;
  }
  EXPECT_GT(rig.runtime->stats().fills_issued, issued) << "speculation stayed off";
  EXPECT_GE(served(after, "handle", Served::fill), 6u);
}

// -- live runs ------------------------------------------------------------------------------

TEST(LiveRuns, AreBoundedAndTheLeastRecentlyActiveIsRetired) {
  auto w = bench::make_workload(graph("routing"), {31, 10, 1.0});
  Rig rig(w, RigOptions{});
  RuntimeConfig cfg;  // rebuilt with a cap of three runs
  cfg.engines.push_back({"sim", rig.engine, {}});
  cfg.tools = rig.corpus;
  cfg.template_paths = {"templates"};
  cfg.max_live_runs = 3;
  rig.restart(cfg);
  for (const auto& run : w.runs)
    ASSERT_TRUE(rig.drive(run).ok());
  const auto s = await_stats(*rig.runtime, [](const auto& x) { return x.workflows_live <= 3; });
  EXPECT_LE(s.workflows_live, 3u);
  EXPECT_EQ(s.runs_evicted, w.runs.size() - 3);
}

// A run dropped between its router and its handler: the handler is still answered, exactly as
// the engine answers it; only its fill is lost.
TEST(LiveRuns, ARunDroppedMidwayLosesSpeculationNeverAResult) {
  auto w = bench::make_workload(graph("routing"), {32, 3, 1.0});
  RigOptions o;
  o.time_scale = 1;
  Rig rig(w, o);
  rig.runtime.reset();
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", rig.engine, {}});
  cfg.tools = rig.corpus;
  cfg.template_paths = {"templates"};
  cfg.max_live_runs = 1;
  auto rt = Runtime::create(cfg);
  ASSERT_TRUE(rt.ok()) << rt.error().message;
  rig.runtime = std::move(*rt);
  const auto& g = graph("routing");
  const auto& run = w.runs[0];
  const Tags router_tags{"routing", run.workflow_id, "router"};
  auto router = dsl::render_stage(*g.stage("router"), {{"query", bench::routing_query(run, 0)}});
  ASSERT_TRUE(router.ok());
  const auto routed = rig.runtime->complete({router->endpoint, router->body, router_tags}).get();
  ASSERT_TRUE(routed.ok()) << routed.error;
  // Another run takes the only place: the first is retired, with its branch and fills.
  ASSERT_TRUE(rig.drive(w.runs[1]).ok());
  EXPECT_GE(
      await_stats(*rig.runtime, [](const auto& x) { return x.runs_evicted >= 1; }).runs_evicted,
      1u);
  // The harness goes on with the first run as if nothing happened.
  dsl::Bindings vars{{"query", bench::routing_query(run, 0)}};
  const auto* decision = g.decisions.empty() ? nullptr : &g.decisions[0];
  ASSERT_NE(decision, nullptr);
  const auto sel = dsl::read_selection(*decision, nlohmann::json::parse(routed.body));
  ASSERT_EQ(sel.status, dsl::SelectionResult::Status::selected);
  vars[decision->name] = sel.value;
  auto handle = dsl::render_stage(*g.stage("handle"), vars);
  ASSERT_TRUE(handle.ok());
  const auto answered =
      rig.runtime
          ->complete({handle->endpoint, handle->body, {"routing", run.workflow_id, "handle"}})
          .get();
  ASSERT_TRUE(answered.ok()) << answered.error;
  EXPECT_EQ(answered.body, bench::ask_engine(*rig.engine, handle->endpoint, handle->body));
}

// A run retired while its call is on the engine still answers that call.
TEST(LiveRuns, ARunRetiredWithACallInFlightAnswersIt) {
  auto w = bench::make_workload(graph("routing"), {33, 2, 1.0});
  Rig rig(w, RigOptions{});
  auto hold = std::make_shared<HoldEngine>(rig.engine);
  rig.runtime.reset();
  RuntimeConfig cfg;
  cfg.engines.push_back({"held", hold, {}});
  cfg.tools = rig.corpus;
  cfg.template_paths = {"templates"};
  cfg.fills = false;
  cfg.max_live_runs = 1;
  auto rt = Runtime::create(cfg);
  ASSERT_TRUE(rt.ok()) << rt.error().message;
  rig.runtime = std::move(*rt);
  const auto& g = graph("routing");
  auto first =
      dsl::render_stage(*g.stage("router"), {{"query", bench::routing_query(w.runs[0], 0)}});
  auto second =
      dsl::render_stage(*g.stage("router"), {{"query", bench::routing_query(w.runs[1], 0)}});
  auto a = rig.runtime->complete(
      {first->endpoint, first->body, {"routing", w.runs[0].workflow_id, "router"}});
  hold->wait_held(1);
  auto b = rig.runtime->complete(
      {second->endpoint, second->body, {"routing", w.runs[1].workflow_id, "router"}});
  hold->wait_held(2);
  EXPECT_EQ(rig.runtime->stats().runs_evicted, 1u);
  hold->release_all();
  const auto ra = a.get();
  const auto rb = b.get();
  ASSERT_TRUE(ra.ok()) << ra.error;
  ASSERT_TRUE(rb.ok()) << rb.error;
  EXPECT_EQ(ra.body, bench::ask_engine(*rig.engine, first->endpoint, first->body));
  EXPECT_EQ(
      await_stats(*rig.runtime, [](const auto& x) { return x.workflows_live <= 1; }).workflows_live,
      1u);
}

TEST(LiveRuns, QuietRunsExpireAndTheirIdsStartAfresh) {
  auto w = bench::make_workload(graph("subagent"), {4, 40, 1.0});
  RigOptions o;
  o.workflow_idle = std::chrono::milliseconds(20);
  Rig rig(w, o);
  for (const auto& run : w.runs)
    ASSERT_TRUE(rig.drive(run).ok());
  EXPECT_EQ(rig.runtime->stats().runs_expired, 0u);  // no time has passed
  rig.time->advance(o.workflow_idle * 2);            // every run is quiet for the idle time
  const auto s = await_stats(*rig.runtime, [](const auto& x) { return x.workflows_live == 0; });
  EXPECT_EQ(s.workflows_live, 0u);
  EXPECT_EQ(s.runs_expired, w.runs.size());
  EXPECT_EQ(s.runs_evicted, 0u);
  EXPECT_TRUE(rig.drive(w.runs[0]).ok());
}

// -- statistics -----------------------------------------------------------------------------

// A tool whose call blocks the thread that makes it until the test lets it go: with one
// scheduler thread, the actor graph can then process nothing at all.
class BlockingTool final : public engines::ToolEngine {
 public:
  bool has(std::string_view tool) const override { return tool == "block"; }
  void call(engines::ToolCall, engines::ToolCallback done) override {
    entered_.count_down();
    release_.wait();
    done(engines::ToolResult{nlohmann::json{{"ok", true}}, {}, {}});
  }
  std::latch entered_{1};
  std::latch release_{1};
};

TEST(Statistics, AreReadWithoutWaitingOnABusyActorGraph) {
  auto w = bench::make_workload(graph("routing"), {34, 1, 1.0});
  Rig rig(w, RigOptions{});
  auto tool = std::make_shared<BlockingTool>();
  rig.runtime.reset();
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", rig.engine, {}});
  cfg.tools = tool;
  cfg.template_paths = {"templates"};
  cfg.threads = 1;
  auto rt = Runtime::create(cfg);
  ASSERT_TRUE(rt.ok()) << rt.error().message;
  rig.runtime = std::move(*rt);
  auto call = rig.runtime->tool("block", nlohmann::json::object(), {"routing", "r1", "x"});
  tool->entered_.wait();  // the only scheduler thread is now inside the tool
  auto stats = std::async(std::launch::async, [&] { return rig.runtime->stats(); });
  const bool answered = stats.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  tool->release_.count_down();
  EXPECT_TRUE(answered) << "stats() waited for the actor graph";
  EXPECT_TRUE(call.get().ok());
  EXPECT_GE(stats.get().requests, 1u);
}

}  // namespace
}  // namespace dynrt::testing
