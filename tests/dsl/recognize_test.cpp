// Recognition without tags (dsl/recognize.hpp): match rules, run identities, and the lint
// of rules that fit the same calls.
#include "dsl/recognize.hpp"
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
  ASSERT_NE(resolve_match_pointer(doc, "/a/-1"), nullptr);
  EXPECT_EQ(*resolve_match_pointer(doc, "/a/-1"), 3);
  EXPECT_EQ(*resolve_match_pointer(doc, "/a/0"), 1);
  EXPECT_EQ(*resolve_match_pointer(doc, "/b~0~1c/x"), "y");
  EXPECT_EQ(resolve_match_pointer(doc, "/a/3"), nullptr);
  EXPECT_EQ(resolve_match_pointer(doc, "/a/01"), nullptr);
  EXPECT_EQ(resolve_match_pointer(doc, "/a/-"), nullptr);
  EXPECT_EQ(resolve_match_pointer(doc, "/e/-1"), nullptr);
  EXPECT_EQ(resolve_match_pointer(doc, "/a/0/x"), nullptr);
  EXPECT_EQ(resolve_match_pointer(doc, "a"), nullptr);
  EXPECT_EQ(resolve_match_pointer(doc, ""), &doc);
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
  const Recognizer r = recognizer_of(t);
  const json first = first_turn("fix the bug");
  const Recognized a = r.recognize("/v1/messages", first, chat_of(first), kNoHeaders);
  ASSERT_EQ(a.outcome, Recognized::Outcome::recognized) << a.detail;
  EXPECT_EQ(a.stage, "plan");
}

TEST(Recognize, TwoStagesWhoseRulesBothHoldAreAmbiguous) {
  const std::string both = two_stages("[{pointer: /messages/0/content, regex: 'bug'}]",
                                      "[{pointer: /messages/0/content, regex: 'fix'}]");
  const Recognizer r = recognizer_of(both);
  const json body{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "fix the bug"}}}}};
  const Recognized x = r.recognize("/v1/chat/completions", body, body, kNoHeaders);
  EXPECT_EQ(x.outcome, Recognized::Outcome::ambiguous);
  EXPECT_NE(x.detail.find("w.a and w.b"), std::string::npos) << x.detail;
  const json only_a{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "a bug"}}}}};
  EXPECT_EQ(r.recognize("/v1/chat/completions", only_a, only_a, kNoHeaders).stage, "a");
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

TEST(RecognizeLint, RulesThatCoverAnotherStagesAreAmbiguousWithBothPositions) {
  const std::string covered = two_stages("[{pointer: /messages/0/content, regex: 'bug'}]",
                                         "\n      - {pointer: /messages/0/content, regex: 'bug'}"
                                         "\n      - {pointer: /model, literal: m}");
  const LintReport r = lint(covered);
  ASSERT_TRUE(has_rule(r, "ambiguous-match")) << ::testing::PrintToString(rules(r));
  const Diagnostic* d = nullptr;
  for (const auto& x : r.diagnostics)
    if (x.info().name == "ambiguous-match") d = &x;
  EXPECT_EQ(d->begin.line, 13);  // b's `match`
  EXPECT_EQ(d->path, "/stages/b/match");
  EXPECT_NE(d->message.find("stage \"w.b\" is never recognized"), std::string::npos) << d->message;
  EXPECT_NE(d->message.find("\"w.a\" (t.yaml:8:5)"), std::string::npos) << d->message;
  EXPECT_FALSE(r.files[0].usable);
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

}  // namespace
}  // namespace dynrt::dsl
