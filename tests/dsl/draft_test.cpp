// dsl::draft_templates on synthetic recordings: each test writes the traffic a harness would
// send (as `dynrt serve --record` writes it) and checks what the draft infers, that it lints
// clean, and that the drafted stage renders the recorded request byte for byte.
#include "dsl/draft.hpp"
#include "dsl/lint.hpp"
#include "dsl/render.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dynrt::dsl {
namespace {

using json = nlohmann::json;

struct Recorder {
  std::vector<json> records;
  double now = 1'000'000;
  void call(const std::string& workflow, const std::string& id, const std::string& stage,
            const std::string& endpoint, json request, json response, int status = 200) {
    now += 100;
    records.push_back({{"workflow", workflow},
                       {"id", id},
                       {"stage", stage},
                       {"endpoint", endpoint},
                       {"tenant", ""},
                       {"request", std::move(request)},
                       {"response", std::move(response)},
                       {"status", status},
                       {"served", "engine"},
                       {"latency_ms", 50.0},
                       {"ts_ms", now}});
  }
  void chat(const std::string& workflow, const std::string& id, const std::string& stage,
            json messages, const std::string& answer, double temperature = 0) {
    call(workflow, id, stage, "/v1/chat/completions",
         {{"model", "m"},
          {"temperature", temperature},
          {"max_tokens", 64},
          {"messages", std::move(messages)}},
         {{"choices", json::array({{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", answer}}}}})}});
  }
};

json msg(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

const char* kHandlers[] = {"weather", "weather", "calendar", "email", "weather"};

// A router names a handler; the handler's request names it twice; a read-only tool runs it.
Recorder routing(int runs) {
  Recorder r;
  for (int i = 0; i < runs; ++i) {
    const std::string id = "run-" + std::to_string(i);
    const std::string query = "Please sort out item " + std::to_string(i * 7) + " today";
    const std::string h = kHandlers[i % 5];
    r.chat("routing", id, "router",
           json::array({msg("system", "Route it. End with HANDLER: <name>."), msg("user", query)}),
           "I think about it.\nHANDLER: " + h);
    r.chat("routing", id, "handle",
           json::array({msg("system", "You are the " + h + " handler. Call the " + h + " API."),
                        msg("user", query)}),
           "{\"function\": \"f" + std::to_string(i) + "\"}");
    r.call("routing", id, "execute", "/v1/dynrt/tools/call_api",
           {{"api", h}, {"call", "{\"function\": \"f" + std::to_string(i) + "\"}"}},
           {{"passage", "done " + std::to_string(i)}});
  }
  return r;
}

Draft only(const std::vector<Draft>& drafts) {
  EXPECT_EQ(drafts.size(), 1u);
  return drafts.empty() ? Draft{} : drafts.front();
}

TEST(Draft, InfersADecisionItsSelectionAndWhereEachValueCameFrom) {
  const Recorder r = routing(40);
  DraftOptions o;
  o.read_only_tools["call_api"].reads = {"api:{{api}}"};
  const Draft d = only(draft_templates(r.records, o));
  EXPECT_EQ(d.workflow, "routing");
  EXPECT_EQ(d.runs, 40u);
  EXPECT_EQ(d.calls, 120u);
  EXPECT_TRUE(d.todos.empty()) << d.yaml;
  const LintReport lint = lint_text("routing.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml << lint.diagnostics.front().message;
  ASSERT_EQ(lint.graphs().size(), 1u) << d.yaml;
  const TemplateGraph& g = *lint.graphs().front();

  // The varying part of the router's request is an input; the router decides `handler`, read
  // from its answer, learned from the values seen, most frequent first.
  EXPECT_NE(d.yaml.find("regex: \"^Please sort out item (.*) today$\""), std::string::npos);
  EXPECT_NE(d.yaml.find("decides: handler"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("values: [weather, calendar, email]"), std::string::npos) << d.yaml;
  // The tool is read-only: speculable, reading the record its argument names.
  EXPECT_NE(d.yaml.find("reads: [\"api:{{handler}}\"]"), std::string::npos) << d.yaml;

  // Each drafted stage renders the recorded request exactly, from the variables the draft
  // binds: the query from the router's request, the handler from its answer, the call from
  // the handler's answer.
  const Stage* handle = g.stage("handle");
  const Stage* execute = g.stage("execute");
  ASSERT_TRUE(handle && execute);
  EXPECT_TRUE(handle->speculable);
  EXPECT_TRUE(execute->speculable);
  const json& recorded_handle = r.records[4]["request"];  // run-1: weather
  const json& recorded_execute = r.records[5]["request"];
  const auto h = render_stage(*handle, {{"handler", "weather"}, {"item", "7"}});
  ASSERT_TRUE(h.ok()) << d.yaml << h.error().message;
  EXPECT_EQ(h->body, recorded_handle);
  const auto e =
      render_stage(*execute, {{"handler", "weather"}, {"call", "{\"function\": \"f1\"}"}});
  ASSERT_TRUE(e.ok()) << d.yaml;
  EXPECT_EQ(e->body, recorded_execute);
  EXPECT_EQ(e->reads, std::vector<std::string>{"api:weather"});
}

TEST(Draft, AFewCallsThatFitNoRuleAreLeftToTheEngineAndSaidSo) {
  Recorder r = routing(40);
  // One handler request names a handler its router did not (a harness fallback).
  r.records[4]["request"]["messages"][0]["content"] =
      "You are the email handler. Call the email API.";
  const Draft d = only(draft_templates(r.records));
  EXPECT_NE(d.yaml.find("decides: handler"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("1 of 40 recorded calls do not fit the text at /messages/0/content"),
            std::string::npos)
      << d.yaml;
}

TEST(Draft, AnOriginMostButNotNearlyAllCallsShareIsNamedInTheTodo) {
  Recorder r = routing(40);
  // In every fourth run the router's answer names no handler and the harness fell back to
  // "weather": too many odd calls for the draft to rely on the router, so it asks, and says
  // where the value comes from in the others.
  for (std::size_t i = 0; i < 40; i += 4) {
    r.records[3 * i]["response"]["choices"][0]["message"]["content"] = "I cannot tell.";
    r.records[3 * i + 1]["request"]["messages"][0]["content"] =
        "You are the weather handler. Call the weather API.";
  }
  Draft d = only(draft_templates(r.records));
  EXPECT_EQ(d.yaml.find("decides: handler"), std::string::npos) << d.yaml;
  // Drafted as the handler's own input, which no fill can render: a to-do says why to look.
  EXPECT_NE(d.yaml.find("the text at /messages/0/content is drafted as this stage's own input, "
                        "so no fill can render it before the call, but in 30 of 40 calls it is "
                        "named in the answer of stage router at /choices/0/message/content (run "
                        "run-0 is one it does not fit): if the other calls are a fallback of the "
                        "harness"),
            std::string::npos)
      << d.yaml;
  // That one, the tool's `api` (the same value), and whether the tool is read-only.
  EXPECT_EQ(d.todos.size(), 3u) << d.yaml;
  EXPECT_NE(d.yaml.find("the text at /api is drafted as this stage's own input, so no fill can "
                        "render it before the call, but in 30 of 40 calls it is named in the "
                        "answer of stage router"),
            std::string::npos)
      << d.yaml;

  // Where the text is not even an input (the router's request lists every handler, so the
  // draft looks there first and finds no regex), the to-do that keeps the first call's text
  // names the same origin.
  for (std::size_t i = 0; i < 40; ++i)
    r.records[3 * i]["request"]["messages"][0]["content"] =
        "Route it to weather, calendar or email. End with HANDLER: <name>.";
  d = only(draft_templates(r.records));
  EXPECT_EQ(d.yaml.find("decides: handler"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("found no source that nearly every call shares, but in 30 of 40 calls "
                        "it is named in the answer of stage router at /choices/0/message/content "
                        "(run run-0 is one it does not fit): if the other calls are a fallback of "
                        "the harness"),
            std::string::npos)
      << d.yaml;
}

TEST(Draft, AStageThatRepeatsMakesALoopWhoseIndexTemplatesUse) {
  Recorder r;
  for (int i = 0; i < 30; ++i) {
    const std::string id = "q" + std::to_string(i);
    const std::string question = "Who knows item " + std::to_string(i) + "?";
    std::string passage;
    const int hops = 1 + i % 3;
    for (int hop = 0; hop < hops; ++hop) {
      // The next entity is usually one the previous passage linked to.
      const std::string entity = "E" + std::to_string(hop == 0 ? i : (i * 3 + hop) % 40) + "x";
      r.chat("react", id, "think",
             json::array({msg("system", "Name the next entity as Search[entity]."),
                          msg("user", "Question: " + question),
                          msg("user", "Hop " + std::to_string(hop) + ".")}),
             "Reasoning.\nSearch[" + entity + "]");
      passage = entity + " links to [[E" + std::to_string((i * 3 + hop + 1) % 40) + "x]] [[E" +
                std::to_string((i + hop) % 40 + 40) + "x]].";
      r.call("react", id, "retrieve", "/v1/dynrt/tools/retrieve", {{"entity", entity}},
             {{"passage", passage}});
    }
  }
  DraftOptions o;
  o.read_only_tools["retrieve"].reads = {"corpus:{{entity}}"};
  const Draft d = only(draft_templates(r.records, o));
  const LintReport lint = lint_text("react.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml;
  EXPECT_NE(d.yaml.find("content: \"Hop {{turn}}.\""), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("stages: [think, retrieve]"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("max: 3"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("after: retrieve"), std::string::npos) << d.yaml;  // the back edge
  EXPECT_NE(d.yaml.find("regex: \"^Question: Who knows item (.*)\\\\?$\""), std::string::npos)
      << d.yaml;
  // Open vocabulary: candidates come from the previous passage's links.
  EXPECT_NE(d.yaml.find("source: extract"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("stage: retrieve"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("regex: \"\\\\[\\\\[([^\\\\s\\\\]]+)\\\\]\\\\]\""), std::string::npos)
      << d.yaml;  // every link, not only the first
}

// Replays `records` run by run as the runtime binds them (each stage's `bind` from its
// request, its `outputs` from its answer) and renders every call of `stage`, which must give the
// recorded request exactly: the chat body, or for a stage in another protocol the body in that
// protocol (`wire`). Returns how many it rendered.
std::size_t render_replayed(const std::vector<json>& records, const TemplateGraph& g,
                            const std::string& stage, const std::string& yaml) {
  std::map<std::string, Bindings> runs;
  std::size_t rendered = 0;
  for (const json& rec : records) {
    Bindings& vars = runs[rec["id"].get<std::string>()];
    const Stage* st = g.stage(rec["stage"].get<std::string>());
    EXPECT_TRUE(st) << yaml;
    if (!st) return rendered;
    for (const auto& [name, ex] : st->bind) {
      auto v = extract(ex, rec["request"]);
      EXPECT_TRUE(v.ok()) << name << " " << yaml;
      if (v.ok()) vars[name] = *v;
    }
    if (st->name == stage) {
      const auto a = render_stage(*st, vars);
      EXPECT_TRUE(a.ok()) << yaml << (a.ok() ? "" : a.error().message);
      if (!a.ok()) continue;
      EXPECT_EQ(a->wire.is_null() ? a->body : a->wire, rec["request"]) << yaml;
      ++rendered;
    }
    for (const auto& [name, ex] : st->outputs)
      if (auto v = extract(ex, rec["response"]); v.ok()) vars[name] = *v;
  }
  return rendered;
}

// A chat agent that resends its conversation (as LangGraph's ReAct agent does): each think call
// carries the question, every earlier thought and observation, and the new hop's prompt.
TEST(Draft, AStageThatResendsItsConversationBindsTheWholeList) {
  Recorder r;
  for (int i = 0; i < 30; ++i) {
    const std::string id = "c" + std::to_string(i);
    const std::string question = "Who knows item " + std::to_string(i) + "?";
    json history = json::array({msg("system", "Name the next entity as Search[entity]."),
                                msg("user", "Question: " + question)});
    const int hops = 1 + i % 3;
    for (int hop = 0; hop < hops; ++hop) {
      const std::string entity = "E" + std::to_string((i * 3 + hop) % 40) + "x";
      json messages = history;
      messages.push_back(msg("user", "Hop " + std::to_string(hop) + "."));
      const std::string thought = "Reasoning " + std::to_string(hop) + ".\nSearch[" + entity + "]";
      r.chat("react", id, "think", messages, thought);
      const std::string passage = entity + " links to [[E" + std::to_string(hop) + "x]].";
      r.call("react", id, "retrieve", "/v1/dynrt/tools/retrieve", {{"entity", entity}},
             {{"passage", passage}});
      // The reader needs the question, which only the resent list carries.
      r.chat("react", id, "read",
             json::array({msg("system", "Extract the facts."),
                          msg("user", "Question: " + question + "\nPassage: " + passage)}),
             "Facts " + std::to_string(hop) + ".");
      history.push_back(msg("assistant", thought));
      history.push_back(msg("user", "Observation: " + passage));
    }
  }
  DraftOptions o;
  o.read_only_tools["retrieve"].reads = {"corpus:{{entity}}"};
  const Draft d = only(draft_templates(r.records, o));
  EXPECT_TRUE(d.todos.empty()) << d.yaml;
  const LintReport lint = lint_text("react.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml;
  ASSERT_EQ(lint.graphs().size(), 1u) << d.yaml;
  EXPECT_NE(d.yaml.find("history: /messages"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("messages: \"{{history}}\""), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("resend the conversation so far (3 to 7 messages)"), std::string::npos)
      << d.yaml;
  // The question is still bound from the list's second message, for the reader.
  EXPECT_NE(d.yaml.find("regex: \"^Question: Who knows item (.*)\\\\?$\""), std::string::npos)
      << d.yaml;

  // The think stage renders every recorded call exactly: the list it sent.
  const TemplateGraph& g = *lint.graphs().front();
  const Stage* think = g.stage("think");
  ASSERT_TRUE(think);
  EXPECT_TRUE(think->speculable);
  std::size_t thinks = 0;
  for (const json& rec : r.records) {
    if (rec["stage"] != "think") continue;
    ++thinks;
    const auto t = render_stage(*think, {{"history", rec["request"]["messages"]}});
    ASSERT_TRUE(t.ok()) << d.yaml << t.error().message;
    EXPECT_EQ(t->body, rec["request"]);
  }
  EXPECT_EQ(thinks, 60u);
}

// A coding agent on the Anthropic Messages API: the system prompt beside the messages, the
// conversation resent with each turn's tool call and its result.
TEST(Draft, AnAnthropicAgentsTurnsAreAMessagesStageWithItsHistory) {
  Recorder r;
  for (int i = 0; i < 12; ++i) {
    const std::string id = "a" + std::to_string(i);
    json history = json::array({msg("user", "Fix bug " + std::to_string(i) + " in the parser")});
    for (int turn = 0; turn <= i % 3; ++turn) {
      const std::string use = "tu_" + std::to_string(i) + "_" + std::to_string(turn);
      const json content = json::array({{{"type", "tool_use"},
                                         {"id", use},
                                         {"name", "read_file"},
                                         {"input", {{"path", "f" + std::to_string(turn)}}}}});
      r.call("coder", id, "turn", "/v1/messages",
             {{"model", "m"},
              {"max_tokens", 512},
              {"temperature", 0},
              {"system", "You are a coding agent in repository r" + std::to_string(i) + "."},
              {"tools",
               json::array({{{"name", "read_file"}, {"input_schema", {{"type", "object"}}}}})},
              {"messages", history}},
             {{"type", "message"}, {"role", "assistant"}, {"content", content}});
      history.push_back({{"role", "assistant"}, {"content", content}});
      history.push_back(
          {{"role", "user"},
           {"content",
            json::array({{{"type", "tool_result"}, {"tool_use_id", use}, {"content", "ok"}}})}});
    }
  }
  const Draft d = only(draft_templates(r.records));
  EXPECT_TRUE(d.todos.empty()) << d.yaml;
  const LintReport lint = lint_text("coder.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml;
  ASSERT_EQ(lint.graphs().size(), 1u) << d.yaml;
  EXPECT_NE(d.yaml.find("api: messages"), std::string::npos) << d.yaml;
  const Stage* turn = lint.graphs().front()->stage("turn");
  ASSERT_TRUE(turn);
  EXPECT_EQ(turn->api, ModelApi::messages);
  // Each call renders from its list and its system prompt, the rest as it was sent.
  for (const json& rec : r.records) {
    const std::string system = rec["request"]["system"];
    const std::string prefix = "You are a coding agent in repository ";
    const std::string repo = system.substr(prefix.size(), system.size() - prefix.size() - 1);
    Bindings vars{{"history", rec["request"]["messages"]}};
    // The system prompt's varying part is bound under whatever name the draft chose.
    for (const auto& [name, v] : turn->bind)
      if (name != "history") vars[name] = repo;
    const auto t = render_stage(*turn, vars);
    ASSERT_TRUE(t.ok()) << d.yaml << t.error().message;
    EXPECT_EQ(t->wire, rec["request"]) << d.yaml;  // in its protocol, before translation
  }
}

// A coding agent's turns as chat (how dynrt records an Anthropic agent's calls, translated):
// each turn resends the conversation; when a turn asks the person to pick an option, the next
// call carries on that conversation with the asking answer and the pick as the tool's result.
TEST(Draft, AStageThatCarriesOnAResentConversationSplicesItIn) {
  Recorder r;
  auto answer = [](const std::string& text, const std::string& id, const std::string& tool,
                   const json& arguments) {
    return json{{"role", "assistant"},
                {"content", text},
                {"tool_calls",
                 json::array({{{"id", id},
                               {"type", "function"},
                               {"function", {{"name", tool}, {"arguments", arguments.dump()}}}}})}};
  };
  auto call = [&](const std::string& id, const std::string& stage, const json& messages,
                  const json& reply) {
    r.call("agent", id, stage, "/v1/chat/completions",
           {{"model", "m"}, {"temperature", 0}, {"messages", messages}},
           {{"choices", json::array({{{"index", 0}, {"message", reply}}})}});
  };
  for (int i = 0; i < 30; ++i) {
    const std::string id = "s" + std::to_string(i), n = std::to_string(i);
    json messages = json::array(
        {msg("system", "You are a coding agent."), msg("user", "Make test " + n + " pass")});
    const json read = answer("Reading module " + n + ".", "call_" + n + "_0", "read_file",
                             {{"path", "m" + n + ".py"}});
    call(id, "turn", messages, read);
    messages.push_back(read);
    messages.push_back(
        {{"role", "tool"}, {"tool_call_id", "call_" + n + "_0"}, {"content", "code " + n}});
    // Every other session asks twice: the answer stage's lists then grow along the run too,
    // and it still carries turn's conversation on.
    for (int ask_no = 1; ask_no <= 1 + i % 2; ++ask_no) {
      const std::string k = n + "_" + std::to_string(ask_no);
      const json options = json::array({"Patch " + k, "Rewrite " + k, "Test " + k});
      const json ask = answer("How should I fix " + k + "?", "call_" + k, "ask_user",
                              {{"question", "Fix " + k + "?"}, {"options", options}});
      call(id, "turn", messages, ask);
      messages.push_back(ask);
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", "call_" + k},
                          {"content", options[i % 4 == 0 ? 1 : 0]}});
      const json done = msg("assistant", "Done " + k + ".");
      call(id, "answer", messages, done);
      messages.push_back(done);
      messages.push_back(msg("user", "And the next one."));
    }
  }
  const Draft d = only(draft_templates(r.records));
  EXPECT_TRUE(d.todos.empty()) << d.yaml;
  const LintReport lint = lint_text("agent.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml;
  ASSERT_EQ(lint.graphs().size(), 1u) << d.yaml;
  EXPECT_NE(d.yaml.find("\"$splice\": \"{{history}}\""), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("carry on turn's conversation"), std::string::npos) << d.yaml;
  // The pick is a person's decision among the options the asking answer offered, read from the
  // end of the list: the answer's next turn can be filled for each option while the person
  // reads them.
  EXPECT_NE(d.yaml.find("window: user"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("json: /options"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("option: /messages/-1/content"), std::string::npos) << d.yaml;

  // Replayed run by run as the runtime binds it, the answer stage renders every recorded
  // request exactly.
  EXPECT_EQ(render_replayed(r.records, *lint.graphs().front(), "answer", d.yaml), 45u);
}

// The same on the Anthropic Messages API, where the options are a JSON list in the tool call's
// `input`, not text: the pick is still a person's decision among them.
TEST(Draft, APickAmongAnAnthropicToolCallsOptionsIsAPersonsDecision) {
  Recorder r;
  const json base = {
      {"model", "m"},
      {"max_tokens", 512},
      {"temperature", 0},
      {"system", "You are a coding agent."},
      {"tools", json::array({{{"name", "ask_user"}, {"input_schema", {{"type", "object"}}}}})}};
  auto call = [&](const std::string& id, const std::string& stage, const json& messages,
                  const json& content) {
    json request = base;
    request["messages"] = messages;
    r.call("coder", id, stage, "/v1/messages", request,
           {{"type", "message"}, {"role", "assistant"}, {"content", content}});
  };
  for (int i = 0; i < 20; ++i) {
    const std::string id = "p" + std::to_string(i), n = std::to_string(i);
    json messages = json::array({{{"role", "user"}, {"content", "Fix bug " + n}}});
    const json options = json::array({"Patch " + n, "Rewrite " + n, "Test " + n});
    const json ask =
        json::array({{{"type", "text"}, {"text", "How should I fix " + n + "?"}},
                     {{"type", "tool_use"},
                      {"id", "tu_" + n},
                      {"name", "ask_user"},
                      {"input", {{"question", "Fix " + n + "?"}, {"options", options}}}}});
    call(id, "turn", messages, ask);
    messages.push_back({{"role", "assistant"}, {"content", ask}});
    messages.push_back({{"role", "user"},
                        {"content", json::array({{{"type", "tool_result"},
                                                  {"tool_use_id", "tu_" + n},
                                                  {"content", options[i % 4 == 0 ? 1 : 0]}}})}});
    call(id, "answer", messages, json::array({{{"type", "text"}, {"text", "Done " + n}}}));
    messages.push_back({{"role", "assistant"}, {"content", "Done " + n}});
    messages.push_back({{"role", "user"}, {"content", "Thanks."}});
    call(id, "turn", messages, json::array({{{"type", "text"}, {"text", "Bye " + n}}}));
  }
  const Draft d = only(draft_templates(r.records));
  EXPECT_TRUE(d.todos.empty()) << d.yaml;
  const LintReport lint = lint_text("coder.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml;
  ASSERT_EQ(lint.graphs().size(), 1u) << d.yaml;
  EXPECT_NE(d.yaml.find("window: user"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("pointer: /content/1/input/options"), std::string::npos) << d.yaml;
  EXPECT_EQ(d.yaml.find("json:"), std::string::npos) << d.yaml;  // a list already, not text

  // Replayed run by run as the runtime binds it, the answer stage renders every recorded
  // request exactly.
  EXPECT_EQ(render_replayed(r.records, *lint.graphs().front(), "answer", d.yaml), 20u);
}

// Calls whose lists shrink along a run, or never grow within one, are not a resent history.
TEST(Draft, ListsThatDoNotGrowAlongARunAreNotAHistory) {
  Recorder r;
  for (int i = 0; i < 10; ++i) {
    const std::string id = "s" + std::to_string(i);
    json longer = json::array({msg("user", "Check"), msg("user", "twice")});
    json shorter = json::array({msg("user", "Check")});
    r.chat("shrink", id, "check", longer, "fine");
    r.chat("shrink", id, "check", shorter, "fine");
  }
  const Draft d = only(draft_templates(r.records));
  EXPECT_EQ(d.yaml.find("{{history}}"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("10 of 20 calls have a different request shape"), std::string::npos)
      << d.yaml;
}

TEST(Draft, AnItemPickedFromAnOfferedListIsAPersonsDecision) {
  Recorder r;
  const char* offers[] = {"book a flight", "find a hotel", "rent a car"};
  for (int i = 0; i < 30; ++i) {
    const std::string id = "d" + std::to_string(i);
    const std::string dialog = "Trip number " + std::to_string(i);
    json actions = json::array();
    for (const char* o : offers)
      actions.push_back(std::string(o) + " " + std::to_string(i));
    r.chat("hci", id, "offer",
           json::array({msg("system", "Offer three actions."), msg("user", dialog)}),
           json({{"actions", actions}}).dump());
    const std::string picked = actions[i % 7 == 0 ? 1 : 0];
    r.chat("hci", id, "act",
           json::array({msg("system", "The user said: " + dialog), msg("user", "Do: " + picked)}),
           "Done.");
  }
  const Draft d = only(draft_templates(r.records));
  const LintReport lint = lint_text("hci.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml;
  ASSERT_EQ(lint.graphs().size(), 1u);
  const TemplateGraph& g = *lint.graphs().front();
  const Stage* pick = g.stage("pick");
  ASSERT_TRUE(pick) << d.yaml;
  EXPECT_EQ(pick->kind, StageKind::user);
  EXPECT_NE(d.yaml.find("window: user"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("json: /actions"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("regex: \"^Do: (.*)$\""), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("content: \"Do: {{action}}\""), std::string::npos) << d.yaml;
}

// A person approves or escalates a drafted reply; the last stage's request names which. Nothing
// earlier offers the two values, but each comes back run after run: a person's pick among fixed
// options, which the draft fills while the workflow waits. A value new in every run stays an
// input.
TEST(Draft, AFewValuesALaterRequestNamesAgainAndAgainAreAPersonsPick) {
  Recorder r;
  for (int i = 0; i < 30; ++i) {
    const std::string id = "t" + std::to_string(i);
    const std::string ticket = "Ticket " + std::to_string(i);
    r.chat("triage", id, "draft",
           json::array({msg("system", "Draft a reply."), msg("user", ticket)}),
           "Reply " + std::to_string(i));
    const std::string action = i % 3 == 0 ? "escalate" : "send";
    r.chat("triage", id, "finalize",
           json::array({msg("system", "Action: " + action + ". Rewrite it."),
                        msg("user", "Reply " + std::to_string(i)),
                        msg("user", "Signed, agent " + std::to_string(500 + i * 7))}),
           "Final " + std::to_string(i));
  }
  const Draft d = only(draft_templates(r.records));
  const LintReport lint = lint_text("triage.yaml", d.yaml);
  EXPECT_TRUE(lint.diagnostics.empty()) << d.yaml;
  ASSERT_EQ(lint.graphs().size(), 1u) << d.yaml;
  const TemplateGraph& g = *lint.graphs().front();
  const Stage* pick = g.stage("pick");
  ASSERT_TRUE(pick) << d.yaml;
  EXPECT_EQ(pick->kind, StageKind::user);
  EXPECT_NE(d.yaml.find("decides: action"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("values: [send, escalate]"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("window: user"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("the request names one of 2 values at /messages/0/content"),
            std::string::npos)
      << d.yaml;
  // The agent's number is new in every run: the caller's input, as before.
  EXPECT_NE(d.yaml.find("content: \"Signed, agent {{agent}}\""), std::string::npos) << d.yaml;
  EXPECT_EQ(render_replayed(r.records, g, "finalize", d.yaml), 30u);
}

TEST(Draft, WhatItCannotInferIsAPositionedTodo) {
  Recorder r;
  for (int i = 0; i < 10; ++i) {
    const std::string id = "n" + std::to_string(i);
    // Sampled: not speculable. A tool nobody said is read-only.
    r.chat("notes", id, "write", json::array({msg("user", "Note " + std::to_string(i))}), "ok",
           0.8);
    json body = {{"id", id}};
    r.call("notes", id, "save", "/v1/dynrt/tools/save", body, {{"saved", true}});
    // Calls of one stage with different shapes.
    json messages = json::array({msg("user", "Check")});
    if (i % 2) messages.push_back(msg("user", "twice"));
    r.chat("notes", id, "check", messages, "fine");
  }
  const Draft d = only(draft_templates(r.records));
  EXPECT_EQ(d.todos.size(), 2u) << d.yaml;
  const LintReport lint = lint_text("notes.yaml", d.yaml);
  EXPECT_EQ(lint.count(Severity::error), 0u) << d.yaml;
  std::size_t todos = 0;
  for (const Diagnostic& diag : lint.diagnostics) {
    if (diag.rule != Rule::draft_todo) continue;
    ++todos;
    EXPECT_GT(diag.begin.line, 0);
    EXPECT_EQ(diag.message.rfind("to do: ", 0), 0u) << diag.message;
  }
  EXPECT_EQ(todos, 2u) << d.yaml;
  EXPECT_NE(d.yaml.find("is tool save read-only?"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("5 of 10 calls have a different request shape"), std::string::npos)
      << d.yaml;
  EXPECT_NE(d.yaml.find("# not speculable: it samples"), std::string::npos) << d.yaml;
  ASSERT_EQ(lint.graphs().size(), 1u);
  EXPECT_FALSE(lint.graphs().front()->stage("save")->speculable);
  EXPECT_FALSE(lint.graphs().front()->stage("write")->speculable);
}

TEST(Draft, SkipsWhatIsNotARecordedAnsweredCall) {
  Recorder r = routing(3);
  std::vector<json> records = {json("not an object"), json::object(),
                               json{{"workflow", "routing"}, {"id", "x"}}};
  for (auto& rec : r.records) {
    rec["status"] = 500;  // failed calls say nothing of the workflow
    records.push_back(rec);
  }
  EXPECT_TRUE(draft_templates(records).empty());
  EXPECT_TRUE(draft_templates({}).empty());
  // A hand-edited line with members of other types is read leniently, never thrown on: a status
  // that is no number says nothing, times that are no numbers count as 0, and a model or
  // temperature of another type is drafted as it is (the draft's lint then names it).
  Recorder odd = routing(3);
  odd.records[0]["status"] = "200";
  for (auto& rec : odd.records) {
    rec["latency_ms"] = "slow";
    rec["ts_ms"] = "now";
    if (rec["stage"] == "handle") {
      rec["request"]["model"] = 5;
      rec["request"]["temperature"] = "hot";
    }
  }
  const Draft d = only(draft_templates(odd.records));
  EXPECT_NE(d.yaml.find("temperature: hot"), std::string::npos) << d.yaml;
  EXPECT_GT(lint_text("routing.yaml", d.yaml).count(Severity::error), 0u) << d.yaml;
}

TEST(Draft, EachWorkflowGetsItsOwnTemplate) {
  Recorder r = routing(10);
  Recorder other;
  for (int i = 0; i < 5; ++i)
    other.chat("echo", "e" + std::to_string(i), "say", json::array({msg("user", "hi")}), "hi");
  r.records.insert(r.records.end(), other.records.begin(), other.records.end());
  const auto drafts = draft_templates(r.records);
  ASSERT_EQ(drafts.size(), 2u);
  EXPECT_EQ(drafts[0].workflow, "echo");
  EXPECT_EQ(drafts[1].workflow, "routing");
  EXPECT_TRUE(lint_text("echo.yaml", drafts[0].yaml).diagnostics.empty()) << drafts[0].yaml;
}

}  // namespace
}  // namespace dynrt::dsl
