// Recognition without tags (dsl/recognize.hpp): match rules, run identities, and the lint
// of rules that fit the same calls.
#include "dsl/recognize.hpp"
#include "dsl/render.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>

namespace dynrt::dsl {
namespace {

using nlohmann::json;
using testing::compile_clean;
using testing::has_rule;
using testing::lint;
using testing::rules;

// A coding agent in the Messages protocol: a first turn (the task, as text) and the turns after
// a tool ran (the latest message carries a tool_result), told apart by the latest message.
const char* kAgent = R"(version: 1
workflow: agent
recognize:
  run: conversation
stages:
  plan:
    kind: model
    api: messages
    model: m
    params: {max_tokens: 64}
    match:
      - {pointer: /system, regex: '^You are a coding agent'}
      - {pointer: /messages/-1/content/0/type, literal: text}
  act:
    kind: model
    api: messages
    model: m
    params: {max_tokens: 64}
    after: plan
    match:
      - {pointer: /system, regex: '^You are a coding agent'}
      - {pointer: /messages/-1/content/0/type, literal: tool_result}
)";

json first_turn(const std::string& task) {
  return {{"model", "m"},
          {"max_tokens", 64},
          {"system", "You are a coding agent. Be brief."},
          {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", task}}}}}}}};
}

json after_tool(const std::string& task) {
  json b = first_turn(task);
  b["messages"].push_back(
      {{"role", "assistant"},
       {"content",
        {{{"type", "tool_use"}, {"id", "t1"}, {"name", "Read"}, {"input", json::object()}}}}});
  b["messages"].push_back(
      {{"role", "user"},
       {"content", {{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", "file"}}}}});
  return b;
}

// The chat completion a messages body runs as, as far as a conversation's id reads it.
json chat_of(const json& messages_body) {
  json chat{{"model", messages_body["model"]}, {"messages", json::array()}};
  chat["messages"].push_back({{"role", "system"}, {"content", messages_body["system"]}});
  for (const auto& m : messages_body["messages"])
    chat["messages"].push_back({{"role", m["role"]}, {"content", m["content"].dump()}});
  return chat;
}

Recognizer recognizer_of(const std::string& text) {
  return Recognizer({std::make_shared<const TemplateGraph>(compile_clean(text))});
}

// The same for a template whose rules lint warns may overlap (the cases under test).
Recognizer recognizer_despite_warnings(const std::string& text) {
  LintReport r = lint(text);
  EXPECT_TRUE(has_rule(r, "ambiguous-match"));
  EXPECT_TRUE(!r.files.empty() && r.files[0].usable);
  return Recognizer({std::make_shared<const TemplateGraph>(*r.files[0].graph)});
}

// Two chat stages, `a` then `b`, with the match rules given (YAML after `match:`).
std::string two_stages(const std::string& a_rules, const std::string& b_rules) {
  return "version: 1\nworkflow: w\nrecognize: {run: conversation}\nstages:\n  a:\n"
         "    kind: model\n    model: m\n    match: " +
         a_rules + "\n  b:\n    kind: model\n    model: m\n    after: a\n    match: " + b_rules +
         "\n";
}

const HeaderLookup kNoHeaders = [](std::string_view) { return std::optional<std::string>(); };

TEST(MatchPointer, MinusOneIsTheLastElementAndEverythingElseIsRfc6901) {
  const json doc = {{"a", {1, 2, 3}}, {"b~/c", {{"x", "y"}}}, {"e", json::array()}};
  ASSERT_NE(resolve_pointer(doc, "/a/-1"), nullptr);
  EXPECT_EQ(*resolve_pointer(doc, "/a/-1"), 3);
  EXPECT_EQ(*resolve_pointer(doc, "/a/0"), 1);
  EXPECT_EQ(*resolve_pointer(doc, "/b~0~1c/x"), "y");
  EXPECT_EQ(resolve_pointer(doc, "/a/3"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "/a/01"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "/a/-"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "/e/-1"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "/a/0/x"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "a"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, ""), &doc);
}

TEST(Recognize, EachCallIsTheStageWhoseRulesAllHold) {
  const Recognizer r = recognizer_of(kAgent);
  ASSERT_FALSE(r.empty());
  const json first = first_turn("fix the bug");
  const Recognized a = r.recognize("/v1/messages", first, chat_of(first), kNoHeaders);
  ASSERT_EQ(a.outcome, Recognized::Outcome::recognized) << a.detail;
  EXPECT_EQ(a.workflow, "agent");
  EXPECT_EQ(a.stage, "plan");
  const json later = after_tool("fix the bug");
  const Recognized b = r.recognize("/v1/messages", later, chat_of(later), kNoHeaders);
  ASSERT_EQ(b.outcome, Recognized::Outcome::recognized) << b.detail;
  EXPECT_EQ(b.stage, "act");
  // One conversation, one run: the turns before the first assistant turn name it.
  EXPECT_EQ(a.run, b.run);
  EXPECT_EQ(a.run.rfind("c-", 0), 0u);
  const json other = first_turn("write the docs");
  EXPECT_NE(r.recognize("/v1/messages", other, chat_of(other), kNoHeaders).run, a.run);
}

TEST(Recognize, OtherRoutesAndOtherRequestsAreNotRecognized) {
  const Recognizer r = recognizer_of(kAgent);
  const json first = first_turn("fix the bug");
  // The same body on the chat route: the stages speak Messages.
  EXPECT_EQ(r.recognize("/v1/chat/completions", first, chat_of(first), kNoHeaders).outcome,
            Recognized::Outcome::no_match);
  json other = first;
  other["system"] = "You are a travel agent.";
  EXPECT_EQ(r.recognize("/v1/messages", other, chat_of(other), kNoHeaders).outcome,
            Recognized::Outcome::no_match);
  json no_system = first;
  no_system.erase("system");
  EXPECT_EQ(r.recognize("/v1/messages", no_system, chat_of(first), kNoHeaders).outcome,
            Recognized::Outcome::no_match);
}

TEST(Recognize, AValueThatIsNotAStringIsMatchedAsItsJsonText) {
  std::string t = kAgent;
  t.replace(t.find("      - {pointer: /messages/-1/content/0/type, literal: text}"),
            std::string("      - {pointer: /messages/-1/content/0/type, literal: text}").size(),
            "      - {pointer: /max_tokens, literal: '64'}\n"
            "      - {pointer: /messages/-1/content, regex: '\"type\":\"text\"'}");
  const Recognizer r = recognizer_despite_warnings(t);
  const json first = first_turn("fix the bug");
  const Recognized a = r.recognize("/v1/messages", first, chat_of(first), kNoHeaders);
  ASSERT_EQ(a.outcome, Recognized::Outcome::recognized) << a.detail;
  EXPECT_EQ(a.stage, "plan");
}

TEST(Recognize, TwoStagesWhoseRulesBothHoldAreAmbiguous) {
  const std::string both = two_stages("[{pointer: /messages/0/content, regex: 'bug'}]",
                                      "[{pointer: /messages/0/content, regex: 'fix'}]");
  const Recognizer r = recognizer_despite_warnings(both);
  const json body{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "fix the bug"}}}}};
  const Recognized x = r.recognize("/v1/chat/completions", body, body, kNoHeaders);
  EXPECT_EQ(x.outcome, Recognized::Outcome::ambiguous);
  EXPECT_NE(x.detail.find("w.a and w.b"), std::string::npos) << x.detail;
  const json only_a{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "a bug"}}}}};
  EXPECT_EQ(r.recognize("/v1/chat/completions", only_a, only_a, kNoHeaders).stage, "a");
}

TEST(Recognize, TheMostSpecificStageWins) {
  const Recognizer r = recognizer_of(
      two_stages("[{pointer: /messages/0/content, regex: 'bug'}]",
                 "[{pointer: /messages/0/content, regex: 'bug'}, {pointer: /model, literal: m}]"));
  const json m{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "a bug"}}}}};
  json n = m;
  n["model"] = "n";
  EXPECT_EQ(r.recognize("/v1/chat/completions", m, m, kNoHeaders).stage, "b");
  EXPECT_EQ(r.recognize("/v1/chat/completions", n, n, kNoHeaders).stage, "a");
}

TEST(Recognize, ARunByHeaderTakesTheHeadersValueOrIsNotRecognized) {
  std::string t = kAgent;
  t.replace(t.find("run: conversation"), std::string("run: conversation").size(),
            "run: {header: X-Session-Id}");
  const Recognizer r = recognizer_of(t);
  const json first = first_turn("fix the bug");
  const Recognized a =
      r.recognize("/v1/messages", first, chat_of(first), [](std::string_view name) {
        return name == "x-session-id" ? std::optional<std::string>("s-42") : std::nullopt;
      });
  ASSERT_EQ(a.outcome, Recognized::Outcome::recognized) << a.detail;
  EXPECT_EQ(a.run, "s-42");
  const Recognized b = r.recognize("/v1/messages", first, chat_of(first), kNoHeaders);
  EXPECT_EQ(b.outcome, Recognized::Outcome::no_run);
  EXPECT_NE(b.detail.find("x-session-id"), std::string::npos) << b.detail;
}

TEST(Recognize, AConversationWithoutAUserTurnHasNoRun) {
  EXPECT_FALSE(conversation_run(json{{"model", "m"}, {"messages", json::array()}}));
  EXPECT_FALSE(conversation_run(
      json{{"model", "m"}, {"messages", {{{"role", "assistant"}, {"content", "hi"}}}}}));
  EXPECT_FALSE(conversation_run(json{{"prompt", "hi"}}));
  // A role of another type is no user's (an embedder's body is not checked before this).
  EXPECT_FALSE(conversation_run(json{{"model", "m"}, {"messages", {{{"role", 5}}, 7}}}));
  const json a{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  json b = a;
  b["model"] = "n";
  EXPECT_NE(conversation_run(a), conversation_run(b));  // another model, another run
}

TEST(Recognize, TemplatesWithoutRulesRecognizeNothing) {
  const Recognizer r = recognizer_of(testing::kRouting);
  EXPECT_TRUE(r.empty());
  EXPECT_TRUE(r.stages().empty());
}

TEST(RecognizeLint, RulesThatMayBothHoldAreAWarningWithBothPositions) {
  const LintReport r = lint(two_stages("[{pointer: /messages/0/content, regex: 'bug'}]",
                                       "[{pointer: /messages/0/content, regex: 'fix'}]"));
  ASSERT_TRUE(has_rule(r, "ambiguous-match")) << ::testing::PrintToString(rules(r));
  const Diagnostic& d = r.diagnostics.front();
  EXPECT_EQ(d.severity, Severity::warning);
  EXPECT_EQ(d.begin.line, 13);  // b's `match`
  EXPECT_EQ(d.path, "/stages/b/match");
  EXPECT_NE(d.message.find("stage \"w.b\"'s match rules and stage \"w.a\"'s (t.yaml:8:5)"),
            std::string::npos)
      << d.message;
  EXPECT_TRUE(r.files[0].usable) << "the runtime passes an ambiguous call through";
}

TEST(RecognizeLint, AMoreSpecificStageOrRulesThatExcludeEachOtherAreNotAmbiguous) {
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           // b has every rule of a, and one more: b is more specific and wins
           {"[{pointer: /messages/0/content, regex: 'bug'}]",
            "[{pointer: /messages/0/content, regex: 'bug'}, {pointer: /model, literal: m}]"},
           // two literals on one pointer
           {"[{pointer: /model, literal: m}]", "[{pointer: /model, literal: n}]"},
           // a literal the other's pattern does not match
           {"[{pointer: /model, literal: big}]", "[{pointer: /model, regex: '^small'}]"},
       }) {
    const LintReport r = lint(two_stages(a, b));
    EXPECT_FALSE(has_rule(r, "ambiguous-match")) << a << " / " << b;
  }
  // The same rules twice: neither can ever be told apart.
  const LintReport same =
      lint(two_stages("[{pointer: /model, literal: m}]", "[{pointer: /model, literal: m}]"));
  ASSERT_TRUE(has_rule(same, "ambiguous-match"));
  EXPECT_NE(same.diagnostics.front().message.find("have the same match rules"), std::string::npos);
}

TEST(RecognizeLint, AcrossTemplatesOnTheSameRouteOnly) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "dynrt-recognize-lint";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string rule = "    match: [{pointer: /messages/0/content, regex: 'bug'}]\n";
  auto write = [&](const std::string& name, const std::string& workflow, const std::string& api) {
    std::ofstream(dir / name) << "version: 1\nworkflow: " << workflow
                              << "\nrecognize: {run: conversation}\nstages:\n  s:\n    kind: "
                                 "model\n    model: m\n    api: "
                              << api << "\n    params: {max_tokens: 8}\n"
                              << rule;
  };
  write("a.yaml", "one", "chat");
  write("b.yaml", "two", "messages");
  EXPECT_FALSE(has_rule(lint_paths({dir.string()}), "ambiguous-match"));
  write("b.yaml", "two", "chat");
  const LintReport r = lint_paths({dir.string()});
  ASSERT_TRUE(has_rule(r, "ambiguous-match"));
  std::size_t n = 0;
  for (const auto& d : r.diagnostics)
    n += d.info().name == "ambiguous-match";
  EXPECT_EQ(n, 1u);  // the same rules twice: one finding, at the later stage
  fs::remove_all(dir);
}

TEST(RecognizeLint, DistinctRulesAreNotAmbiguous) {
  const LintReport r = lint(kAgent);
  EXPECT_TRUE(r.diagnostics.empty()) << ::testing::PrintToString(rules(r));
}

TEST(RecognizeLint, BadRulesAreFindingsWithPositions) {
  const LintReport r = lint(R"(version: 1
workflow: w
stages:
  a:
    kind: model
    model: m
    match:
      - {pointer: messages, literal: x}
      - {pointer: /a, regex: '(', literal: y}
      - {pointer: /a}
      - {pointer: /a, regex: '('}
  u:
    kind: user
    after: a
    match: [{pointer: /a, literal: x}]
)");
  const auto found = rules(r);
  EXPECT_TRUE(has_rule(r, "invalid-value"));  // not a pointer; both kinds; bad regex
  EXPECT_TRUE(has_rule(r, "missing-key"));    // neither kind; and no `recognize:`
  EXPECT_TRUE(has_rule(r, "unknown-key"));    // a user stage has no requests to match
  bool no_recognize = false;
  for (const auto& d : r.diagnostics)
    no_recognize = no_recognize || d.message.find("no `recognize:`") != std::string::npos;
  EXPECT_TRUE(no_recognize);
  EXPECT_FALSE(r.files[0].usable);
}

TEST(RecognizeLint, AHeaderMustBeAHeaderTheClientSendsOnItsOwn) {
  for (const char* h : {"'x session'", "X-DynRT-Workflow-Id"}) {
    std::string t = kAgent;
    t.replace(t.find("run: conversation"), std::string("run: conversation").size(),
              std::string("run: {header: ") + h + "}");
    EXPECT_TRUE(has_rule(lint(t), "invalid-value")) << h;
  }
}

TEST(RecognizeLint, MatchRulesDoNotChangeAStagesFingerprint) {
  const TemplateGraph with = compile_clean(kAgent);
  // The same template without any `match`: every line of the rules dropped.
  std::string without;
  std::istringstream in(kAgent);
  for (std::string line; std::getline(in, line);)
    if (line.find("match:") == std::string::npos && line.find("{pointer:") == std::string::npos)
      without += line + "\n";
  const LintReport r = lint(without);
  ASSERT_FALSE(r.files.empty());
  ASSERT_TRUE(r.files[0].graph);
  EXPECT_EQ(r.files[0].graph->stages[0].fingerprint, with.stages[0].fingerprint);
  EXPECT_EQ(r.files[0].graph->stages[1].fingerprint, with.stages[1].fingerprint);
}

// templates/coding-agent.yaml: a session's turns are recognized, and the turn after a pick
// renders exactly as the agent sends it (the conversation spliced in, then the pick).
TEST(ShippedCodingAgent, RecognizesItsTurnsAndRendersTheTurnAfterAPick) {
  const auto g = std::make_shared<const TemplateGraph>(
      compile_clean(testing::read_file("templates/coding-agent.yaml")));
  const Recognizer r({g});
  json asks = first_turn("fix the bug");
  asks["temperature"] = 0;
  asks["max_tokens"] = 1024;
  asks["model"] = "qwen3-32b";
  asks["tools"] = json::array({{{"name", "ask_user"}, {"input_schema", {{"type", "object"}}}}});
  const json reply = {{{"type", "text"}, {"text", "Which way?"}},
                      {{"type", "tool_use"},
                       {"id", "toolu_1"},
                       {"name", "ask_user"},
                       {"input", {{"options", {"A", "B"}}}}}};
  EXPECT_EQ(r.recognize("/v1/messages", asks, chat_of(asks), kNoHeaders).stage, "turn");
  json picked = asks;
  picked["messages"].push_back({{"role", "assistant"}, {"content", reply}});
  picked["messages"].push_back(
      {{"role", "user"},
       {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "B"}}}}});
  const Recognized a = r.recognize("/v1/messages", picked, chat_of(picked), kNoHeaders);
  EXPECT_EQ(a.stage, "answer") << "the more specific stage wins";
  EXPECT_EQ(a.run, r.recognize("/v1/messages", asks, chat_of(asks), kNoHeaders).run);

  // What a fill for option B renders is the call the agent then sends.
  const Stage& turn = *g->stage("turn");
  const Stage& answer = *g->stage("answer");
  auto vars = bind_request(turn, asks);
  ASSERT_TRUE(vars.ok()) << vars.error().message;
  (*vars)["reply"] = reply;
  (*vars)["ask"] = "toolu_1";
  (*vars)["option"] = "B";
  const auto rendered = render_stage(answer, *vars);
  ASSERT_TRUE(rendered.ok()) << rendered.error().message;
  EXPECT_EQ(rendered->wire, picked);
  const auto bound = bind_request(answer, picked);
  ASSERT_TRUE(bound.ok()) << bound.error().message;
  EXPECT_EQ(bound->at("option"), "B");
  // The options are read from the turn's answer in its own protocol.
  const Decision& d = g->decisions[0];
  EXPECT_EQ(extract_candidates(d.candidates, json{{"content", reply}}),
            (std::vector<std::string>{"A", "B"}));
}

TEST(Render, ASpliceInsertsAListsElementsAndRefusesAnythingElse) {
  Stage s;
  s.kind = StageKind::model;
  s.model = "m";
  s.request = json::parse(R"({"messages": [{"$splice": "{{history}}"}, {"role": "user",
    "content": "{{next}}"}]})");
  const auto r =
      render_stage(s, {{"history", json::array({{{"role", "user"}, {"content", "a"}},
                                                {{"role", "assistant"}, {"content", "b"}}})},
                       {"next", "c"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->body["messages"].size(), 3u);
  EXPECT_EQ(r->body["messages"][1]["content"], "b");
  EXPECT_EQ(r->body["messages"][2]["content"], "c");
  EXPECT_FALSE(render_stage(s, {{"history", "not a list"}, {"next", "c"}}).ok());
  EXPECT_FALSE(render_stage(s, {{"next", "c"}}).ok()) << "an unbound list is not rendered empty";
}

}  // namespace
}  // namespace dynrt::dsl
