// The run journal behind `dynrt explain`, without an actor system: the request diff, and the
// reason given for each kind of miss, from the events a workflow actor would feed it.
#include "run/journal.hpp"

#include "tests/run/graphs.hpp"

#include <gtest/gtest.h>

namespace dynrt::run {
namespace {

using dynrt::testing::graph;
using nlohmann::json;

GraphPtr routing() {
  return std::make_shared<const dsl::TemplateGraph>(graph("routing"));
}

const dsl::Stage& stage(const GraphPtr& g, const std::string& name) {
  return *g->stage(name);
}

TEST(RequestDiff, NamesEachDifferingLeafByItsPointer) {
  const json a = {{"model", "m"},
                  {"max_tokens", 256},
                  {"messages", {{{"role", "system"}, {"content", "a"}}, {{"role", "user"}}}}};
  json b = a;
  b.erase("max_tokens");
  b["max_completion_tokens"] = 256;
  b["messages"][0]["content"] = "b";
  b["messages"].push_back({{"role", "assistant"}});
  const auto d = request_diff(a, b);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].path, "/max_completion_tokens");
  EXPECT_FALSE(d[0].expected);
  EXPECT_EQ(*d[0].sent, 256);
  EXPECT_EQ(d[1].path, "/max_tokens");
  EXPECT_EQ(*d[1].expected, 256);
  EXPECT_FALSE(d[1].sent);
  EXPECT_EQ(d[2].path, "/messages/0/content");
  EXPECT_EQ(*d[2].expected, "a");
  EXPECT_EQ(*d[2].sent, "b");
  EXPECT_EQ(d[3].path, "/messages/2");
  EXPECT_FALSE(d[3].expected);
}

TEST(RequestDiff, LeavesOutWhatNeverChangesAName) {
  const json a = {{"model", "m"}, {"temperature", 0}};
  json b = a;
  b["stream"] = true;
  b["user"] = "someone";
  b["temperature"] = 0.0;  // the same number, spelt otherwise
  EXPECT_TRUE(request_diff(a, b).empty());
  // ... but only at the top level: a nested "stream" is content.
  EXPECT_EQ(request_diff(json{{"x", json::object()}}, json{{"x", {{"stream", 1}}}}).size(), 1u);
}

TEST(RequestDiff, EscapesPointerTokensAndStopsAtItsLimit) {
  const auto d = request_diff(json{{"a/b~c", 1}}, json{{"a/b~c", 2}});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "/a~1b~0c");
  json big_a = json::object(), big_b = json::object();
  for (int i = 0; i < 100; ++i)
    big_b["k" + std::to_string(i)] = i;
  EXPECT_EQ(request_diff(big_a, big_b, 5).size(), 5u);
}

DemandTrace trace_for(const Hash128& name, bool reusable = true) {
  DemandTrace t;
  t.name = name;
  t.reusable = reusable;
  return t;
}

TEST(RunJournal, CallsAreKeptInOrderWithHowTheyWereServed) {
  const auto g = routing();
  RunJournal j(g, Policy{});
  j.arrived(7, "router", "/v1/chat/completions", 0);
  j.arrived(8, "nope", "/v1/chat/completions", 5);
  j.passed(8, true);
  j.answered(7, stage(g, "router"), json::object(), Served::cache, 200, trace_for({1, 1}), {}, 40);
  const auto out = j.to_json();
  ASSERT_EQ(out["calls"].size(), 2u);
  EXPECT_EQ(out["calls"][0]["served"], "cache");
  EXPECT_EQ(out["calls"][0]["latency_ms"], 40.0);
  EXPECT_FALSE(out["calls"][0].contains("why"));
  EXPECT_EQ(out["calls"][1]["why"]["reason"], "unknown_stage");
}

TEST(RunJournal, EachMissGetsItsReason) {
  const auto g = routing();
  const auto& handle = stage(g, "handle");
  const auto& router = stage(g, "router");
  RunJournal j(g, Policy{});
  std::uint64_t id = 1;
  const auto why = [&](const dsl::Stage& s, const json& body, DemandTrace t) {
    j.arrived(id, s.name, "/v1/chat/completions", 0);
    j.answered(id, s, body, Served::engine, 200, t, {{"handler", "email"}, {"query", "q"}}, 1);
    return j.call(id++)->why;
  };
  EXPECT_EQ(why(router, {}, trace_for({1, 1}))->reason, MissReason::not_downstream);
  EXPECT_EQ(why(router, {}, trace_for({1, 1}, false))->reason, MissReason::not_reusable);
  EXPECT_EQ(why(handle, {}, trace_for({2, 2}))->reason, MissReason::no_branch);

  BranchNote b;
  b.branch = 11;
  b.decision = g->decisions[0].id;
  b.gate = BranchNote::Gate::closed;
  b.gate_reason = "closed";
  j.branch(b);
  auto w = why(handle, {}, trace_for({2, 2}));
  EXPECT_EQ(w->reason, MissReason::not_admitted);
  EXPECT_EQ(w->by, "generation gate");

  b.gate = BranchNote::Gate::open;
  b.proposed = true;
  b.candidates = {{"weather", 0, admission::Refusal::utility, branch::FillStatus::running},
                  {"email", 0, admission::Refusal::max_fills, branch::FillStatus::running}};
  j.branch(b);
  EXPECT_EQ(why(handle, {}, trace_for({2, 2}))->reason, MissReason::unresolved);
  b.outcome = branch::Outcome::selected;
  b.selection = "email";
  j.branch(b);
  w = why(handle, {}, trace_for({2, 2}));
  EXPECT_EQ(w->reason, MissReason::not_admitted);
  EXPECT_EQ(w->by, "fill gate");
  EXPECT_EQ(w->refusal, "max_fills");
  b.selection = "calendar";
  j.branch(b);
  EXPECT_EQ(why(handle, {}, trace_for({2, 2}))->reason, MissReason::unpredicted);

  // A fill rendered the handler: the same name is that fill's fate, another name a diff.
  const json rendered = {{"model", "qwen3-32b"}, {"max_tokens", 256}};
  j.rendered(
      FillRender{21, 11, "email", handle.id, {5, 5}, std::make_shared<const json>(rendered)});
  b.candidates[1].fill = 21;
  b.candidates[1].status = branch::FillStatus::failed;
  b.selection = "email";
  j.branch(b);
  EXPECT_EQ(why(handle, rendered, trace_for({5, 5}))->reason, MissReason::fill_failed);
  auto timed_out = trace_for({5, 5});
  timed_out.wait_timed_out = true;
  EXPECT_EQ(why(handle, rendered, timed_out)->reason, MissReason::fill_running);
  json sent = rendered;
  sent["max_tokens"] = 100;
  w = why(handle, sent, trace_for({6, 6}));
  EXPECT_EQ(w->reason, MissReason::body_differed);
  ASSERT_EQ(w->diff.size(), 1u);
  EXPECT_EQ(w->diff[0].path, "/max_tokens");
  EXPECT_EQ(*w->diff[0].expected, 256);
  EXPECT_EQ(*w->diff[0].sent, 100);
  EXPECT_EQ(w->compared_with, "fill 21 (candidate 'email')");
  EXPECT_EQ(w->detail.find("none of the candidates"), std::string::npos) << w->detail;

  // The pick was none of the candidates the fills rendered: that is the cause, and it is said.
  b.outcome = branch::Outcome::unpredicted;
  b.selection = "calendar";
  j.branch(b);
  w = why(handle, sent, trace_for({6, 6}));
  EXPECT_EQ(w->reason, MissReason::body_differed);
  EXPECT_EQ(w->detail,
            "fills rendered stage 'handle', but the request differed from the closest one at "
            "/max_tokens; decision 'handler' selected 'calendar', which was none of the "
            "candidates ('weather', 'email'), so no fill rendered this request");
}

TEST(RunJournal, StaysWithinItsLimits) {
  const auto g = routing();
  RunJournal j(g, Policy{}, RunJournal::Limits{4, 2, 1});
  for (std::uint64_t i = 1; i <= 10; ++i)
    j.arrived(i, "router", "/v1/completions", 0);
  for (std::uint64_t b = 1; b <= 5; ++b) {
    BranchNote note;
    note.branch = b;
    note.decision = 0;
    j.branch(note);
  }
  const auto out = j.to_json();
  EXPECT_EQ(out["calls"].size(), 4u);
  EXPECT_EQ(out["calls_dropped"], 6);
  EXPECT_EQ(out["calls"][0]["seq"], 7);
  EXPECT_EQ(out["branches"].size(), 2u);
  EXPECT_EQ(j.call(1), nullptr);
  ASSERT_NE(j.call(10), nullptr);
  EXPECT_EQ(j.call(10)->seq, 10u);
}

}  // namespace
}  // namespace dynrt::run
