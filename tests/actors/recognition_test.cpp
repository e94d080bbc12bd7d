// Recognition without tags through dynrt::Runtime: an untagged call that a template's match
// rules claim runs exactly as its tagged twin would (same answers, same fills), tags win, and
// what was and was not recognized is counted.
#include "tests/actors/rig.hpp"

#include <algorithm>

namespace dynrt::testing {
namespace {

using nlohmann::json;

const char* kTemplate = R"(version: 1
workflow: desk
recognize:
  run: {header: X-Session-Id}
inputs:
  query: {description: the request}
stages:
  router:
    kind: model
    model: big
    params: {temperature: 0, max_tokens: 400}
    bind: {query: /messages/1/content}
    decides: handler
    match:
      - {pointer: /messages/0/content, regex: '^You route requests'}
    request:
      messages:
        - {role: system, content: You route requests.}
        - {role: user, content: "{{query}}"}
  handle:
    kind: model
    after: router
    speculable: true
    model: big
    params: {temperature: 0, max_tokens: 32}
    match:
      - {pointer: /messages/0/content, regex: '^You are the \w+ handler'}
    request:
      messages:
        - {role: system, content: "You are the {{handler}} handler."}
        - {role: user, content: "{{query}}"}
decisions:
  handler:
    promotion: exclusive
    candidates: {source: static, values: [email, weather], max: 2}
    selection: {regex: 'HANDLER:\s*(\w+)'}
)";

json router_call(const std::string& query) {
  return {{"model", "big"},
          {"temperature", 0},
          {"max_tokens", 400},
          {"messages",
           {{{"role", "system"}, {"content", "You route requests."}},
            {{"role", "user"}, {"content", query}}}}};
}

json handle_call(const std::string& handler, const std::string& query) {
  return {{"model", "big"},
          {"temperature", 0},
          {"max_tokens", 32},
          {"messages",
           {{{"role", "system"}, {"content", "You are the " + handler + " handler."}},
            {{"role", "user"}, {"content", query}}}}};
}

struct Desk {
  std::unique_ptr<Runtime> runtime;

  Desk() {
    engines::sim::Script script;
    std::string reasoning;  // a long router decode: the handler's fill finishes inside it
    for (int i = 0; i < 300; ++i)
      reasoning += "hmm ";
    script.add_contains("route me", reasoning + "HANDLER: email");
    engines::sim::SimEngineOptions eo;
    eo.time_scale = 10;
    RuntimeConfig cfg;
    cfg.engines.push_back(
        {"sim",
         std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, script, eo),
         {}});
    cfg.template_texts = {{"desk.yaml", kTemplate}};
    auto rt = Runtime::create(cfg);
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().message);
    runtime = std::move(*rt);
  }

  Reply ask(json body, Tags tags = {}, std::string session = {}) {
    Request r{"/v1/chat/completions", std::move(body), std::move(tags)};
    if (!session.empty()) r.headers = {{"x-session-id", session}, {"user-agent", "test"}};
    return runtime->complete(std::move(r)).get();
  }
};

TEST(Recognition, AnUntaggedRunIsServedAsItsTaggedTwin) {
  Desk tagged, untagged;
  const auto a1 = tagged.ask(router_call("route me"), {"desk", "t1", "router"});
  const auto a2 = tagged.ask(handle_call("email", "route me"), {"desk", "t1", "handle"});
  const auto b1 = untagged.ask(router_call("route me"), {}, "session-1");
  const auto b2 = untagged.ask(handle_call("email", "route me"), {}, "session-1");
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok() && b2.ok()) << b1.error << b2.error;
  EXPECT_EQ(a2.served, Served::fill);
  EXPECT_EQ(b2.served, a2.served) << "recognized, the handler's call is served by its fill";
  EXPECT_EQ(b1.body, a1.body);
  EXPECT_EQ(b2.body, a2.body);
  const auto st = untagged.runtime->stats();
  EXPECT_TRUE(st.recognition.enabled);
  EXPECT_EQ(st.recognition.recognized.at({"desk", "router"}), 1u);
  EXPECT_EQ(st.recognition.recognized.at({"desk", "handle"}), 1u);
  EXPECT_EQ(st.passthrough, 0u);
  EXPECT_EQ(st.fills_issued, tagged.runtime->stats().fills_issued);
  // Tagged calls are never counted as recognized.
  EXPECT_EQ(tagged.runtime->stats().recognition.recognized.at({"desk", "router"}), 0u);
}

TEST(Recognition, TagsWinEvenWhenTheRulesHold) {
  Desk d;
  // A partial tag: not a workflow run, passed through, and not recognized either.
  const auto r = d.ask(router_call("route me"), {"", "", "router"}, "session-1");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.served, Served::engine);
  const auto st = d.runtime->stats();
  EXPECT_EQ(st.passthrough, 1u);
  EXPECT_EQ(st.recognition.recognized.at({"desk", "router"}), 0u);
  EXPECT_EQ(st.recognition.no_match + st.recognition.no_run + st.recognition.ambiguous, 0u);
}

TEST(Recognition, UnrecognizedCallsPassThroughCountedByWhy) {
  Desk d;
  json other = router_call("route me");
  other["messages"][0]["content"] = "You are a poet.";
  const auto direct = d.ask(other, {}, "session-1");
  ASSERT_TRUE(direct.ok()) << direct.error;
  const auto no_session = d.ask(router_call("route me"), {});
  ASSERT_TRUE(no_session.ok()) << no_session.error;
  const auto st = d.runtime->stats();
  EXPECT_EQ(st.passthrough, 2u);
  EXPECT_EQ(st.recognition.no_match, 1u);
  EXPECT_EQ(st.recognition.no_run, 1u);
  EXPECT_EQ(st.fills_issued, 0u);

  std::vector<std::string> lines;
  for (const auto& m : metrics(st))
    lines.push_back(std::string(m.name) + m.labels + " " + std::to_string(int(m.value)));
  auto has = [&](const std::string& l) {
    return std::find(lines.begin(), lines.end(), l) != lines.end();
  };
  EXPECT_TRUE(has("dynrt_recognized_total{workflow=\"desk\",stage=\"router\"} 0"));
  EXPECT_TRUE(has("dynrt_recognized_total{workflow=\"desk\",stage=\"handle\"} 0"));
  EXPECT_TRUE(has("dynrt_unrecognized_total{reason=\"no_match\"} 1"));
  EXPECT_TRUE(has("dynrt_unrecognized_total{reason=\"no_run\"} 1"));
  EXPECT_TRUE(has("dynrt_unrecognized_total{reason=\"ambiguous\"} 0"));
}

TEST(Recognition, WithoutRulesNothingIsCounted) {
  std::string no_rules = kTemplate;
  for (const char* cut : {"recognize:\n  run: {header: X-Session-Id}\n",
                          "    match:\n      - {pointer: /messages/0/content, regex: '^You route "
                          "requests'}\n",
                          "    match:\n      - {pointer: /messages/0/content, regex: '^You are the "
                          "\\w+ handler'}\n"}) {
    const auto at = no_rules.find(cut);
    ASSERT_NE(at, std::string::npos) << cut;
    no_rules.erase(at, std::string(cut).size());
  }
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", std::make_shared<engines::sim::SimEngine>(), {}});
  cfg.template_texts = {{"desk.yaml", no_rules}};
  auto rt = Runtime::create(cfg);
  ASSERT_TRUE(rt.ok()) << rt.error().message;
  const auto r = (*rt)->complete({"/v1/chat/completions", router_call("hi"), {}}).get();
  ASSERT_TRUE(r.ok()) << r.error;
  const auto st = (*rt)->stats();
  EXPECT_FALSE(st.recognition.enabled);
  for (const auto& m : metrics(st))
    EXPECT_EQ(std::string(m.name).find("recognized"), std::string::npos) << m.name;
}

}  // namespace
}  // namespace dynrt::testing
