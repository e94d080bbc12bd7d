// `dynrt explain` through the whole runtime: a Routing run driven as a harness drives it, with
// the one change a test makes (a renamed field, an admission policy), and what the run's
// journal then says of each call. Every answer stays the engine's exact one.
#include "tests/actors/rig.hpp"

#include <gtest/gtest.h>

#include <mutex>

namespace dynrt::testing {
namespace {

using nlohmann::json;

bench::Workload routing_workload() {
  return bench::make_workload(graph("routing"), {21, 1, 1.0});
}

// The run's journal, as Runtime::explain() gives it.
json journal(Rig& rig, const std::string& id, const std::string& tenant = {}) {
  auto runs = rig.runtime->explain(id, "", tenant).get();
  if (runs.size() != 1) return json();
  return runs[0];
}

const json* call_of(const json& run, const std::string& stage, std::size_t nth = 0) {
  for (const auto& c : run["calls"])
    if (c["stage"] == stage && nth-- == 0) return &c;
  return nullptr;
}

// What LangChain JS sends for ordinary model names: the template says max_tokens, the client
// sends max_completion_tokens (or the other way round). No fill can serve it.
TEST(Explain, ABodyThatDiffersInOneFieldNamesThatField) {
  const auto w = routing_workload();
  std::mutex m;
  std::vector<json> near_misses;
  RigOptions o{false, true, 10};
  o.configure = [&](RuntimeConfig& cfg) {
    cfg.on_near_miss = [&](const json& miss) {
      std::lock_guard lock(m);
      near_misses.push_back(miss);
    };
  };
  Rig rig(w, o);
  bench::DriveOptions d;
  d.intercept = [](bench::Step& step) {
    if (step.stage == "handle" && step.request.contains("max_tokens")) {
      step.request["max_completion_tokens"] = step.request["max_tokens"];
      step.request.erase("max_tokens");
    }
    return false;  // sent, as changed
  };
  const auto r = rig.drive(w.runs[0], d);
  ASSERT_TRUE(r.ok()) << r.error;
  for (const auto& s : r.steps)
    if (s.stage == "handle") {
      EXPECT_EQ(s.reply.served, Served::engine);
    }

  const auto run = journal(rig, w.runs[0].workflow_id);
  ASSERT_TRUE(run.is_object()) << "no journal for the run";
  EXPECT_EQ(run["workflow"], "routing");
  EXPECT_EQ(run["live"], true);
  const auto* handle = call_of(run, "handle");
  ASSERT_NE(handle, nullptr) << run.dump(2);
  EXPECT_EQ((*handle)["served"], "engine");
  const auto& why = (*handle)["why"];
  EXPECT_EQ(why["reason"], "body_differed") << why.dump(2);
  ASSERT_TRUE(why["diff"].is_array());
  std::map<std::string, json> paths;
  for (const auto& e : why["diff"])
    paths[e["path"].get<std::string>()] = e;
  ASSERT_EQ(paths.size(), 2u) << why["diff"].dump();
  ASSERT_TRUE(paths.count("/max_tokens") && paths.count("/max_completion_tokens"));
  EXPECT_TRUE(paths["/max_tokens"].contains("expected"));
  EXPECT_FALSE(paths["/max_tokens"].contains("sent"));
  EXPECT_FALSE(paths["/max_completion_tokens"].contains("expected"));
  EXPECT_EQ(paths["/max_completion_tokens"]["sent"], paths["/max_tokens"]["expected"]);
  EXPECT_NE(why["compared_with"].get<std::string>().find("fill"), std::string::npos);
  // The router was never a fill's to serve: it says so, without a diff.
  const auto* router = call_of(run, "router");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ((*router)["why"]["reason"], "not_downstream");
  // Each near miss was heard once, with the call as the journal has it.
  rig.runtime->explain(w.runs[0].workflow_id).get();  // everything answered is reported by now
  std::lock_guard lock(m);
  ASSERT_FALSE(near_misses.empty());
  std::size_t handles = 0;
  for (const auto& n : near_misses) {
    EXPECT_EQ(n["workflow"], "routing");
    EXPECT_EQ(n["id"], w.runs[0].workflow_id);
    if (n["call"]["stage"] == "handle") {
      ++handles;
      EXPECT_EQ(n["call"]["why"]["reason"], "body_differed");
    }
    EXPECT_NE(n["call"]["why"]["reason"], "not_downstream");
  }
  EXPECT_EQ(handles, 2u);  // one per routing turn
}

// The fill gate's fixed threshold no candidate reaches: the selected candidate was not
// admitted, and the journal names the gate and its reason.
TEST(Explain, ACandidateTheFillGateRefusedSaysWhy) {
  const auto w = routing_workload();
  RigOptions o{false, true, 10};
  o.configure = [](RuntimeConfig& cfg) {
    cfg.admission.policy = admission::AdmissionPolicy::threshold;
    cfg.admission.fixed_threshold = 1.01;
  };
  Rig rig(w, o);
  const auto r = rig.drive(w.runs[0]);
  ASSERT_TRUE(r.ok()) << r.error;
  const auto run = journal(rig, w.runs[0].workflow_id);
  const auto* handle = call_of(run, "handle");
  ASSERT_NE(handle, nullptr) << run.dump(2);
  const auto& why = (*handle)["why"];
  EXPECT_EQ(why["reason"], "not_admitted") << why.dump(2);
  EXPECT_EQ(why["by"], "fill gate");
  EXPECT_EQ(why["refusal"], "threshold");
  ASSERT_FALSE(run["branches"].empty());
  for (const auto& b : run["branches"]) {
    EXPECT_EQ(b["gate"], "open");
    for (const auto& c : b["candidates"])
      EXPECT_EQ(c["refused"], "threshold") << b.dump();
  }
  EXPECT_EQ(rig.runtime->stats().fills_issued, 0u);
}

// A generation gate held closed by a fixed load limit no load is under.
TEST(Explain, ABranchTheGenerationGateClosedSaysWhy) {
  const auto w = routing_workload();
  RigOptions o{false, true, 10};
  o.configure = [](RuntimeConfig& cfg) {
    cfg.admission.policy = admission::AdmissionPolicy::fixed_load;
    cfg.admission.static_max_rho = -1;
  };
  Rig rig(w, o);
  ASSERT_TRUE(rig.drive(w.runs[0]).ok());
  const auto run = journal(rig, w.runs[0].workflow_id);
  const auto* handle = call_of(run, "handle");
  ASSERT_NE(handle, nullptr) << run.dump(2);
  EXPECT_EQ((*handle)["why"]["reason"], "not_admitted");
  EXPECT_EQ((*handle)["why"]["by"], "generation gate");
  EXPECT_FALSE((*handle)["why"]["refusal"].get<std::string>().empty());
}

// Served by fills: no reason to give. The journal outlives the run (for explain_keep), is
// scoped by tenant, and is gone for ids never seen.
TEST(Explain, FillsNeedNoReasonAndEndedRunsStayReadable) {
  const auto w = routing_workload();
  RigOptions o{false, true, 10};
  o.workflow_idle = std::chrono::milliseconds(20);
  Rig rig(w, o);
  const auto r = rig.drive(w.runs[0]);
  ASSERT_TRUE(r.ok()) << r.error;
  rig.time->advance(o.workflow_idle * 2);
  await_stats(*rig.runtime, [](const auto& s) { return s.workflows_live == 0; });
  const auto run = journal(rig, w.runs[0].workflow_id);
  ASSERT_TRUE(run.is_object());
  EXPECT_EQ(run["live"], false);
  ASSERT_EQ(run["calls"].size(), r.steps.size());
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    const auto& c = run["calls"][i];
    EXPECT_EQ(c["stage"], r.steps[i].stage);
    EXPECT_EQ(c["served"], std::string(to_string(r.steps[i].reply.served)));
    if (r.steps[i].reply.served != Served::engine) {
      EXPECT_FALSE(c.contains("why")) << c.dump();
    }
  }
  EXPECT_TRUE(rig.runtime->explain(w.runs[0].workflow_id, "", "another-tenant").get().empty());
  EXPECT_TRUE(rig.runtime->explain("never-ran").get().empty());
  EXPECT_EQ(rig.runtime->explain(w.runs[0].workflow_id, "routing").get().size(), 1u);
  EXPECT_TRUE(rig.runtime->explain(w.runs[0].workflow_id, "hci").get().empty());
}

TEST(Explain, NoJournalsWhenTurnedOff) {
  const auto w = routing_workload();
  RigOptions o{false, true, 10};
  o.configure = [](RuntimeConfig& cfg) { cfg.explain_runs = 0; };
  Rig rig(w, o);
  ASSERT_TRUE(rig.drive(w.runs[0]).ok());
  EXPECT_TRUE(rig.runtime->explain(w.runs[0].workflow_id).get().empty());
}

}  // namespace
}  // namespace dynrt::testing
