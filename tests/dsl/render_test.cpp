#include "dsl/render.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>
#include <re2/re2.h>

namespace dynrt::dsl {
namespace {

using nlohmann::json;
using testing::compile_clean;
using testing::kRouting;

class RenderTest : public ::testing::Test {
 protected:
  TemplateGraph g_ = compile_clean(kRouting);
  const Stage& stage(const char* name) { return *g_.stage(name); }
};

TEST_F(RenderTest, RendersTheExactRequestBody) {
  const auto r =
      render_stage(stage("handle"), {{"handler", "weather"}, {"query", "Rain in Oslo?"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->endpoint, "/v1/chat/completions");
  EXPECT_EQ(r->body, json::parse(R"({
    "model": "qwen3-32b", "temperature": 0, "max_tokens": 64,
    "messages": [{"role": "system", "content": "You are the weather handler."},
                 {"role": "user", "content": "Rain in Oslo?"}]})"));
}

TEST_F(RenderTest, AnUnboundVariableIsAnErrorNotAnEmptyString) {
  const auto r = render_stage(stage("handle"), {{"handler", "weather"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("\"query\" is not bound"), std::string::npos)
      << r.error().message;
}

TEST_F(RenderTest, PromptsAreNotHtmlEscaped) {
  const auto r =
      render_stage(stage("handle"), {{"handler", "a&b"}, {"query", "<b>\"x\" & 'y'</b>"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body["messages"][1]["content"], "<b>\"x\" & 'y'</b>");
  EXPECT_EQ(r->body["messages"][0]["content"], "You are the a&b handler.");
}

TEST_F(RenderTest, ToolStagesRenderArgumentsAndRecordKeys) {
  const auto r = render_stage(stage("execute"), {{"handler", "email"}, {"call", "{\"f\": 1}"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->endpoint, "/v1/dynrt/tools/call_api");
  EXPECT_EQ(r->body, json::parse(R"({"api": "email", "call": "{\"f\": 1}"})"));
  EXPECT_EQ(r->reads, (std::vector<std::string>{"api:email"}));
  EXPECT_TRUE(r->writes.empty());
}

// Stages written in the Anthropic Messages and OpenAI Responses protocols: rendered in their
// form, run as the chat completion it translates to; outputs and selections read the answer in
// their form.
TEST(RenderProtocols, AMessagesStageRendersItsWireFormAndRunsAsChat) {
  const TemplateGraph g =
      compile_clean(testing::read_file("tests/e2e/data/protocols/triage-messages.yaml"));
  const Stage& handle = *g.stage("handle");
  EXPECT_EQ(handle.api, ModelApi::messages);
  const auto r = render_stage(handle, {{"handler", "email"}, {"query", "mail Ana"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->endpoint, "/v1/chat/completions");
  EXPECT_EQ(r->wire["system"], "You are the email handler. Answer in one short paragraph.");
  EXPECT_EQ(r->wire["max_tokens"], 256);
  EXPECT_EQ(r->body, json::parse(R"({"model": "qwen3-32b", "temperature": 0, "max_tokens": 256,
    "messages": [{"role": "system", "content": "You are the email handler. Answer in one short paragraph."},
                 {"role": "user", "content": "mail Ana"}]})"));
  // `bind` reads the request as the agent sent it.
  const auto bound = bind_request(*g.stage("router"), r->wire);
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ(bound->at("query"), "mail Ana");
  // The selection reads the chat answer as the message it becomes.
  const json chat = json::parse(R"({"id": "chatcmpl-1", "choices": [{"index": 0,
    "message": {"role": "assistant", "content": "Thinking.\nHANDLER: calendar"},
    "finish_reason": "stop"}]})");
  const auto sel = read_selection(g.decisions[0], chat);
  EXPECT_EQ(sel.status, SelectionResult::Status::selected) << sel.reason;
  EXPECT_EQ(sel.value, "calendar");
  const auto as_message = answer_in(ModelApi::messages, chat);
  ASSERT_TRUE(as_message);
  EXPECT_EQ((*as_message)["content"][0]["text"], "Thinking.\nHANDLER: calendar");
}

TEST(RenderProtocols, AResponsesStageRendersInstructionsAndInput) {
  const TemplateGraph g =
      compile_clean(testing::read_file("tests/e2e/data/protocols/triage-responses.yaml"));
  const auto r = render_stage(*g.stage("router"), {{"query", "rain?"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->wire["input"], "rain?");
  EXPECT_EQ(r->body["max_tokens"], 512);
  EXPECT_EQ(r->body["messages"][1], (json{{"role", "user"}, {"content", "rain?"}}));
  const auto sel =
      read_selection(g.decisions[0], json::parse(R"({"id": "chatcmpl-2", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "HANDLER: weather"}, "finish_reason": "stop"}]})"));
  EXPECT_EQ(sel.value, "weather") << sel.reason;
}

TEST(RenderProtocols, AMessagesStageWithoutMaxTokensIsAFinding) {
  std::string text = testing::read_file("tests/e2e/data/protocols/triage-messages.yaml");
  const auto at = text.find("params: {temperature: 0, max_tokens: 256}");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 41, "params: {temperature: 0}");
  const LintReport r = testing::lint(text);
  bool found = false;
  for (const auto& d : r.diagnostics)
    found = found || (d.message.find("a messages request needs") != std::string::npos &&
                      d.message.find("max_tokens") != std::string::npos);
  EXPECT_TRUE(found) << "a messages request without max_tokens cannot be sent";
}

TEST(RenderText, AWholeTagInsertsTheJsonValueItself) {
  const json history = json::parse(R"([{"role": "user", "content": "hi"}])");
  const auto r = render_text("{{history}}", {{"history", history}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, history);
  const auto n = render_text("{{n}}", {{"n", 3}});
  EXPECT_EQ(*n, 3);
}

TEST(RenderText, NonStringsInsideTextRenderAsJson) {
  EXPECT_EQ(*render_text("n={{n}} ok={{ok}} x={{x}}", {{"n", 2.5}, {"ok", true}, {"x", nullptr}}),
            "n=2.5 ok=true x=null");
}

TEST(RenderText, SectionsIterateListsAndTestBooleans) {
  const Bindings vars{
      {"items", json::parse(R"([{"name": "a"}, {"name": "b"}])")}, {"flag", false}, {"on", true}};
  EXPECT_EQ(*render_text("{{#items}}[{{name}}]{{/items}}", vars), "[a][b]");
  EXPECT_EQ(*render_text("{{#flag}}yes{{/flag}}{{^flag}}no{{/flag}}", vars), "no");
  EXPECT_EQ(*render_text("{{#on}}yes{{/on}}", vars), "yes");
}

TEST(RenderText, DottedNamesReachIntoObjects) {
  EXPECT_EQ(*render_text("{{user.name}}!", {{"user", json{{"name", "Ada"}}}}), "Ada!");
  // A missing field inside a bound object renders empty, as mustache does.
  EXPECT_EQ(*render_text("[{{user.age}}]", {{"user", json{{"name", "Ada"}}}}), "[]");
}

TEST(RenderText, MalformedTemplatesAreErrors) {
  EXPECT_FALSE(render_text("{{#a}}x", {{"a", true}}).ok());
  EXPECT_FALSE(render_text("{{> p}}", {}).ok());
}

TEST(RenderStage, UserStagesHaveNoRequest) {
  const TemplateGraph g = compile_clean(testing::read_file("templates/hci.yaml"));
  EXPECT_FALSE(render_stage(*g.stage("pick"), {}).ok());
}

TEST(Pointer, FollowsRfc6901) {
  const json doc = json::parse(R"({"a/b": {"m~n": [10, 20]}, "": 1, "list": [0, 1]})");
  EXPECT_EQ(*resolve_pointer(doc, "/a~1b/m~0n/1"), 20);
  EXPECT_EQ(*resolve_pointer(doc, "/"), 1);
  EXPECT_EQ(resolve_pointer(doc, ""), &doc);
  EXPECT_EQ(resolve_pointer(doc, "/list/01"), nullptr);  // no leading zeros
  EXPECT_EQ(resolve_pointer(doc, "/list/2"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "/list/-"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "a"), nullptr);
  EXPECT_EQ(resolve_pointer(doc, "/a~2"), nullptr);
  EXPECT_FALSE(valid_pointer("x"));
  EXPECT_TRUE(valid_pointer("/~0~1"));
}

TEST_F(RenderTest, BindReadsVariablesFromTheIncomingRequest) {
  const json request = json::parse(R"({"messages": [{"role": "system", "content": "s"},
                                                     {"role": "user", "content": "Rain?"}]})");
  const auto b = bind_request(stage("router"), request);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->at("query"), "Rain?");
  const auto missing = bind_request(stage("router"), json::parse(R"({"messages": []})"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/messages/1/content"), std::string::npos);
}

TEST_F(RenderTest, OutputsReadTheResponse) {
  const json response = json::parse(R"({"choices": [{"message": {"content": "{\"f\": 1}"}}]})");
  const auto o = read_outputs(stage("handle"), response);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->at("call"), "{\"f\": 1}");
}

json chat_response(const std::string& content) {
  return json{{"choices", json::array({json{{"message", json{{"content", content}}}}})}};
}

TEST_F(RenderTest, SelectionIsReadFromTheDecidersOutput) {
  const Decision& d = *g_.decision("handler");
  auto s = read_selection(d, chat_response("Thinking...\nHANDLER: email"));
  EXPECT_EQ(s.status, SelectionResult::Status::selected);
  EXPECT_EQ(s.value, "email");
  s = read_selection(d, chat_response("HANDLER: email. I repeat, HANDLER: email"));
  EXPECT_EQ(s.status, SelectionResult::Status::selected);
}

TEST_F(RenderTest, AnAmbiguousSelectionSelectsNothing) {
  const auto s = read_selection(*g_.decision("handler"),
                                chat_response("HANDLER: email or maybe HANDLER: weather"));
  EXPECT_EQ(s.status, SelectionResult::Status::ambiguous);
  EXPECT_TRUE(s.value.empty());
}

TEST_F(RenderTest, AnUnreadableSelectionSelectsNothing) {
  const Decision& d = *g_.decision("handler");
  EXPECT_EQ(read_selection(d, chat_response("I do not know")).status,
            SelectionResult::Status::unreadable);
  EXPECT_EQ(read_selection(d, json::parse(R"({"error": "x"})")).status,
            SelectionResult::Status::unreadable);
}

TEST(Selection, MapsAndParsesJson) {
  const TemplateGraph g = compile_clean(testing::read_file("templates/subagent.yaml"));
  const Decision& d = *g.decision("subagent");
  auto s = read_selection(d, chat_response(R"({"subagent": "history"})"));
  EXPECT_EQ(s.status, SelectionResult::Status::selected);
  EXPECT_EQ(s.value, "history");
  EXPECT_EQ(read_selection(d, chat_response("not json")).status,
            SelectionResult::Status::unreadable);

  Decision mapped;
  mapped.selection.extract.pointer = "/choices/0/message/content";
  mapped.selection.map = {{"1", "weather"}, {"2", "email"}};
  EXPECT_EQ(read_selection(mapped, chat_response(" 2\n")).value, "email");
  EXPECT_EQ(read_selection(mapped, chat_response("3")).status, SelectionResult::Status::unreadable);
}

// -- what a decode has emitted so far ----------------------------------------------------------

TEST_F(RenderTest, AnEmittedRegexSelectionNeedsItsLineComplete) {
  const Decision& d = *g_.decision("handler");
  EXPECT_EQ(emitted_selection(d, chat_response("Thinking...\nHANDLER: cal")), std::nullopt);
  // "HANDLER: calendar" may still become something else until its line ends.
  EXPECT_EQ(emitted_selection(d, chat_response("HANDLER: calendar")), std::nullopt);
  EXPECT_EQ(emitted_selection(d, chat_response("HANDLER: calendar\nBecause the")), "calendar");
  // Two different values on complete lines: the whole output will be ambiguous.
  EXPECT_EQ(emitted_selection(d, chat_response("HANDLER: email\nHANDLER: weather\n")),
            std::nullopt);
  EXPECT_EQ(emitted_selection(d, chat_response("HANDLER: email\nHANDLER: email\n")), "email");
  EXPECT_EQ(emitted_selection(d, json::parse(R"({"choices": []})")), std::nullopt);
}

TEST(Emission, AJsonSelectionNeedsItsClosingQuote) {
  const TemplateGraph g = compile_clean(testing::read_file("templates/subagent.yaml"));
  const Decision& d = *g.decision("subagent");
  EXPECT_EQ(emitted_selection(d, chat_response(R"({"subagent": "hist)")), std::nullopt);
  EXPECT_EQ(emitted_selection(d, chat_response(R"({"subagent": "history")")), "history");
  EXPECT_EQ(
      emitted_selection(
          d, chat_response(R"({"reasoning": "a \"b\" [1, {}]", "subagent": "science", "why)")),
      "science");
  // A string elsewhere, even one named alike, is not the selection.
  EXPECT_EQ(emitted_selection(d, chat_response(R"({"notes": {"subagent": "history"}, "sub)")),
            std::nullopt);
  EXPECT_EQ(emitted_selection(d, chat_response("not json")), std::nullopt);

  Decision nested;
  nested.selection.extract.pointer = "/choices/0/message/content";
  nested.selection.extract.json_pointer = "/plan/1/agent";
  EXPECT_EQ(
      emitted_selection(nested, chat_response(R"({"plan": [{"agent": "a"}, {"agent": "b"}, )")),
      "b");
  EXPECT_EQ(emitted_selection(nested, chat_response(R"({"plan": [{"agent": "a"}, {"agent": "b)")),
            std::nullopt);
  // A model's text nested a million levels deep is read no deeper than a request body may nest,
  // whole or partial, and selects nothing.
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  EXPECT_EQ(emitted_selection(nested, chat_response(R"({"plan": )" + deep)), std::nullopt);
  const auto whole = read_selection(nested, chat_response(R"({"plan": )" + deep + "}"));
  EXPECT_EQ(whole.status, SelectionResult::Status::unreadable);
  EXPECT_NE(whole.reason.find("deeper than 256 levels"), std::string::npos) << whole.reason;
}

TEST(Emission, AToolCallNameIsEmittedWholeAndAWholeTextSelectionOnlyAtTheEnd) {
  Decision tool;
  tool.selection.extract.pointer = "/choices/0/message/tool_calls/0/function/name";
  const json call = json::parse(R"({"choices": [{"message": {"content": null, "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"ci"}}]}}]})");
  EXPECT_EQ(emitted_selection(tool, call), "get_weather");
  Decision whole;
  whole.selection.extract.pointer = "/choices/0/message/content";
  whole.selection.map = {{"1", "weather"}};
  EXPECT_EQ(emitted_selection(whole, chat_response("1")), std::nullopt);
  // A map applies to what was emitted as it does to the whole output.
  Decision mapped;
  mapped.selection.extract.pointer = "/choices/0/message/content";
  mapped.selection.extract.regex_source = "PICK (\\d)";
  mapped.selection.extract.regex = std::make_shared<const re2::RE2>("PICK (\\d)");
  mapped.selection.map = {{"1", "weather"}};
  EXPECT_EQ(emitted_selection(mapped, chat_response("PICK 1\n")), "weather");
  EXPECT_EQ(emitted_selection(mapped, chat_response("PICK 2\n")), std::nullopt);
}

TEST(Candidates, ExtractReadsTheLatestOutputInOrder) {
  const TemplateGraph g = compile_clean(testing::read_file("templates/react.yaml"));
  const CandidateSource& src = g.decision("entity")->candidates;
  const json passage = {{"passage",
                         "[[Oslo]] is the capital of [[Norway]]; see [[Oslo]], "
                         "[[Bergen]] and [[Tromso]]."}};
  EXPECT_EQ(extract_candidates(src, passage),
            (std::vector<std::string>{"Oslo", "Norway", "Bergen"}));
  EXPECT_TRUE(extract_candidates(src, json{{"other", 1}}).empty());
}

TEST(Candidates, ExtractTakesEachListElement) {
  const TemplateGraph g = compile_clean(testing::read_file("templates/hci.yaml"));
  const CandidateSource& src = g.decision("action")->candidates;
  const json offer = chat_response(
      R"({"actions": ["Book a table", "Call a taxi", "Book a table", "Wait", "More"]})");
  EXPECT_EQ(extract_candidates(src, offer),
            (std::vector<std::string>{"Book a table", "Call a taxi", "Wait"}));
}

// A drafter's samples: rendered like a model stage, each with its own seed.
TEST(Candidates, DrafterSamplesCarryTheirOwnSeeds) {
  CandidateSource src;
  src.kind = CandidateSourceKind::drafter;
  src.model = "small";
  src.params = {{"temperature", 1}, {"max_tokens", 8}};
  src.request = {{"messages", {{{"role", "user"}, {"content", "Guess for {{q}}"}}}}};
  const auto a = render_draft(src, {{"q", "x"}}, 0);
  const auto b = render_draft(src, {{"q", "x"}}, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->body["seed"], 0);
  EXPECT_EQ(b->body["seed"], 3);
  EXPECT_EQ(a->body["model"], "small");
  EXPECT_EQ(a->body["temperature"], 1);
  EXPECT_EQ(a->body["messages"][0]["content"], "Guess for x");
  EXPECT_EQ(a->endpoint, "/v1/chat/completions");
  src.params["seed"] = 40;  // a seed of the drafter's own is the first sample's
  EXPECT_EQ(render_draft(src, {{"q", "x"}}, 2)->body["seed"], 42);
  EXPECT_FALSE(render_draft(src, {}, 0).ok()) << "an unbound variable fails the draft";
}

}  // namespace
}  // namespace dynrt::dsl
