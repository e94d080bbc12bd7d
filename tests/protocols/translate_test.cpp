// The Anthropic Messages and OpenAI Responses protocols over chat completions: requests in,
// whole answers and streams out, and what is refused (docs/protocols.md).
#include "protocols/protocols.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dynrt::protocols {
namespace {

using nlohmann::json;

json chat_of(Api api, const json& body) {
  ToChat t = to_chat(api, body);
  EXPECT_TRUE(t.ok()) << t.refused.message;
  return t.chat;
}

Refusal refusal_of(Api api, const json& body) {
  ToChat t = to_chat(api, body);
  EXPECT_FALSE(t.ok()) << t.chat.dump();
  return t.refused;
}

// The frames of a translated stream as (event, data) pairs; every frame names its event, and
// the event's data says the same type.
std::vector<std::pair<std::string, json>> frames(const std::string& text) {
  std::vector<std::pair<std::string, json>> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto end = text.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "a frame ends with a blank line";
    if (end == std::string::npos) break;
    const std::string f = text.substr(at, end - at);
    at = end + 2;
    EXPECT_EQ(f.rfind("event: ", 0), 0u) << f;
    const auto nl = f.find("\ndata: ");
    EXPECT_NE(nl, std::string::npos) << f;
    const std::string name = f.substr(7, nl - 7);
    json data = json::parse(f.substr(nl + 7));
    EXPECT_EQ(data.value("type", ""), name);
    out.emplace_back(name, std::move(data));
  }
  return out;
}

std::vector<std::string> names(const std::vector<std::pair<std::string, json>>& fs) {
  std::vector<std::string> n;
  for (const auto& [name, data] : fs)
    n.push_back(name);
  return n;
}

// A chat stream as vLLM sends it: role, text in pieces, two tool calls, finish, usage.
std::vector<std::string> chat_stream(bool with_tools) {
  std::vector<std::string> c = {
      R"({"id":"chatcmpl-abc","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})",
      R"({"id":"chatcmpl-abc","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]})",
      R"({"id":"chatcmpl-abc","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"look."},"finish_reason":null}]})"};
  if (with_tools) {
    c.push_back(
        R"({"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]},"finish_reason":null}]})");
    c.push_back(
        R"({"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": "}}]},"finish_reason":null}]})");
    c.push_back(
        R"({"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.c\"}"}}]},"finish_reason":null}]})");
    c.push_back(
        R"({"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"ls","arguments":"{}"}}]},"finish_reason":null}]})");
  }
  c.push_back(
      std::string(R"({"id":"chatcmpl-abc","choices":[{"index":0,"delta":{},"finish_reason":")") +
      (with_tools ? "tool_calls" : "stop") + R"("}]})");
  c.push_back(
      R"({"id":"chatcmpl-abc","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}})");
  return c;
}

// The same answer whole.
std::string chat_whole(bool with_tools) {
  json message = {{"role", "assistant"}, {"content", "Let me look."}};
  if (with_tools)
    message["tool_calls"] =
        json::array({{{"id", "call_1"},
                      {"type", "function"},
                      {"function", {{"name", "read_file"}, {"arguments", "{\"path\": \"a.c\"}"}}}},
                     {{"id", "call_2"},
                      {"type", "function"},
                      {"function", {{"name", "ls"}, {"arguments", "{}"}}}}});
  return json{{"id", "chatcmpl-abc"},
              {"object", "chat.completion"},
              {"created", 7},
              {"model", "m"},
              {"choices", json::array({{{"index", 0},
                                        {"message", message},
                                        {"finish_reason", with_tools ? "tool_calls" : "stop"}}})},
              {"usage", {{"prompt_tokens", 11}, {"completion_tokens", 5}, {"total_tokens", 16}}}}
      .dump();
}

std::string run_stream(StreamTranslator& t, const std::vector<std::string>& chunks) {
  std::string out;
  for (const auto& c : chunks)
    out += t.chunk(c);
  return out + t.finish();
}

// -- Messages requests --------------------------------------------------------------------------

TEST(MessagesRequest, ATurnWithToolUseAndResultsBecomesChatMessagesInOrder) {
  const json body = json::parse(R"({
    "model": "claude-x", "max_tokens": 300,
    "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": "fix the bug"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.c"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "int x;"}]},
        {"type": "text", "text": "go on"}]}],
    "tools": [{"name": "read_file", "description": "Reads a file",
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "stop_sequences": ["###"], "temperature": 0, "top_k": 5,
    "metadata": {"user_id": "u1"}, "stream": true})");
  const json chat = chat_of(Api::messages, body);
  EXPECT_EQ(chat["model"], "claude-x");
  EXPECT_EQ(chat["max_tokens"], 300);
  const json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u) << chat.dump();
  EXPECT_EQ(m[0], (json{{"role", "system"}, {"content", "You are a coding agent."}}));
  EXPECT_EQ(m[1], (json{{"role", "user"}, {"content", "fix the bug"}}));
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Reading.");  // the thinking block is dropped
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "read_file");
  EXPECT_EQ(json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            (json{{"path", "a.c"}}));
  EXPECT_EQ(m[3], (json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "int x;"}}));
  EXPECT_EQ(m[4], (json{{"role", "user"}, {"content", "go on"}}));
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"]["properties"]["path"]["type"], "string");
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["stop"], json::array({"###"}));
  EXPECT_EQ(chat["top_k"], 5);
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"], (json{{"include_usage", true}}));
  EXPECT_FALSE(chat.contains("metadata"));
}

TEST(MessagesRequest, WhatCarriesNoMeaningForTheAnswerMapsToTheSameChatRequest) {
  json a = json::parse(R"({"model": "m", "max_tokens": 9,
    "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]})");
  json b = a;
  b["metadata"] = {{"user_id", "someone"}};
  b["system"][0].erase("cache_control");
  EXPECT_EQ(chat_of(Api::messages, a).dump(), chat_of(Api::messages, b).dump());
}

TEST(MessagesRequest, ImagesBecomeDataUrls) {
  const json chat = chat_of(Api::messages, json::parse(R"({"model": "m", "max_tokens": 9,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "what is it"},
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]})"));
  EXPECT_EQ(chat["messages"][0]["content"][1]["image_url"]["url"], "data:image/png;base64,AAAA");
}

TEST(MessagesRequest, WhatCannotBeMappedIsRefusedNamingTheField) {
  const json base = json::parse(
      R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "q"}]})");
  json b = base;
  b.erase("max_tokens");
  EXPECT_EQ(refusal_of(Api::messages, b).param, "max_tokens");
  b = base;
  b["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  EXPECT_EQ(refusal_of(Api::messages, b).param, "thinking");
  b["thinking"] = {{"type", "disabled"}};
  EXPECT_TRUE(to_chat(Api::messages, b).ok());
  // Of another shape, it is refused too, not thrown on.
  for (const json& odd : {json("x"), json(5), json::object({{"type", 5}})}) {
    b["thinking"] = odd;
    EXPECT_EQ(refusal_of(Api::messages, b).param, "thinking") << odd;
  }
  b = base;
  b["mcp_servers"] = json::array();
  EXPECT_EQ(refusal_of(Api::messages, b).param, "mcp_servers");
  b = base;
  b["tools"] = json::parse(R"([{"type": "web_search_20250305", "name": "web_search"}])");
  EXPECT_EQ(refusal_of(Api::messages, b).param, "tools[0].type");
  b = base;
  b["messages"][0]["content"] = json::parse(R"([{"type": "document", "source": {}}])");
  const Refusal r = refusal_of(Api::messages, b);
  EXPECT_EQ(r.param, "messages[0].content[0].type");
  EXPECT_NE(r.message.find("document"), std::string::npos) << r.message;
  b = base;
  b["messages"][0]["role"] = "system";
  EXPECT_EQ(refusal_of(Api::messages, b).param, "messages[0].role");
  b = base;
  b["stream"] = "yes";
  EXPECT_EQ(refusal_of(Api::messages, b).param, "stream");
  EXPECT_FALSE(to_chat(Api::messages, json::array()).ok());
}

// -- Responses requests -------------------------------------------------------------------------

TEST(ResponsesRequest, ItemsBecomeChatMessagesAndCallsJoinTheirTurn) {
  const json body = json::parse(R"({
    "model": "gpt-x", "instructions": "Be brief.", "max_output_tokens": 64,
    "input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
      {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
      {"type": "function_call", "call_id": "c2", "name": "pwd", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "a.c b.c"},
      {"type": "function_call_output", "call_id": "c2", "output": "/src"}],
    "tools": [{"type": "function", "name": "ls", "description": "lists", "parameters": {"type": "object"}, "strict": false}],
    "tool_choice": {"type": "function", "name": "ls"},
    "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": true}},
    "reasoning": {"effort": "low", "summary": "auto"},
    "store": false, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k"})");
  const json chat = chat_of(Api::responses, body);
  const json& m = chat["messages"];
  ASSERT_EQ(m.size(), 6u) << chat.dump();
  EXPECT_EQ(m[0], (json{{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1], (json{{"role", "system"}, {"content", "Use tools."}}));
  EXPECT_EQ(m[2], (json{{"role", "user"}, {"content", "list files"}}));
  EXPECT_EQ(m[3]["role"], "assistant");
  ASSERT_EQ(m[3]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[3]["tool_calls"][1]["function"]["name"], "pwd");
  EXPECT_EQ(m[4], (json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "a.c b.c"}}));
  EXPECT_EQ(chat["max_tokens"], 64);
  EXPECT_EQ(chat["tools"][0]["function"]["name"], "ls");
  EXPECT_EQ(chat["tool_choice"]["function"]["name"], "ls");
  EXPECT_EQ(chat["response_format"]["json_schema"]["name"], "out");
  EXPECT_EQ(chat["reasoning_effort"], "low");
  EXPECT_FALSE(chat.contains("store"));
}

TEST(ResponsesRequest, AStringInputIsOneUserTurn) {
  const json chat =
      chat_of(Api::responses, json{{"model", "m"}, {"input", "hi"}, {"stream", true}});
  EXPECT_EQ(chat["messages"], json::array({{{"role", "user"}, {"content", "hi"}}}));
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
}

TEST(ResponsesRequest, WhatCannotBeMappedIsRefusedNamingTheField) {
  const json base = {{"model", "m"}, {"input", "hi"}};
  json b = base;
  b["previous_response_id"] = "resp_1";
  const Refusal r = refusal_of(Api::responses, b);
  EXPECT_EQ(r.param, "previous_response_id");
  EXPECT_NE(r.message.find("whole conversation"), std::string::npos);
  b = base;
  b["tools"] = json::parse(R"([{"type": "web_search"}])");
  EXPECT_EQ(refusal_of(Api::responses, b).param, "tools[0].type");
  b = base;
  b["background"] = true;
  EXPECT_EQ(refusal_of(Api::responses, b).param, "background");
  b = base;
  b["input"] = json::parse(R"([{"type": "computer_call_output", "call_id": "x"}])");
  EXPECT_EQ(refusal_of(Api::responses, b).param, "input[0].type");
  b = base;
  b.erase("input");
  EXPECT_EQ(refusal_of(Api::responses, b).param, "input");
}

// -- whole answers --------------------------------------------------------------------------------

TEST(MessagesAnswer, TextAndToolCallsBecomeContentBlocks) {
  const json req = {{"model", "claude-x"}, {"max_tokens", 9}};
  const auto out = from_chat(Api::messages, req, chat_whole(true));
  ASSERT_TRUE(out);
  const json m = json::parse(*out);
  EXPECT_EQ(m["id"], "msg_abc");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["model"], "claude-x");
  ASSERT_EQ(m["content"].size(), 3u);
  EXPECT_EQ(m["content"][0], (json{{"type", "text"}, {"text", "Let me look."}}));
  EXPECT_EQ(m["content"][1]["type"], "tool_use");
  EXPECT_EQ(m["content"][1]["input"], (json{{"path", "a.c"}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"], (json{{"input_tokens", 11}, {"output_tokens", 5}}));
  EXPECT_EQ(json::parse(*from_chat(Api::messages, req, chat_whole(false)))["stop_reason"],
            "end_turn");
  EXPECT_FALSE(from_chat(Api::messages, req, "{\"error\": 1}"));
}

// A model's tool-call arguments are its own text: an object nested 300,000 levels deep would
// overflow the stack once parsed and written again as the tool_use's input (it did). They stay
// the text they are.
TEST(MessagesAnswer, ArgumentsNestedTooDeepStayText) {
  std::string deep;
  for (int i = 0; i < 300000; ++i)
    deep += R"({"a":)";
  deep += "1" + std::string(300000, '}');
  json chat = json::parse(chat_whole(true));
  chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = deep;
  const auto out = from_chat(Api::messages, json::object(), chat.dump());
  ASSERT_TRUE(out);
  const json m = json::parse(*out);
  EXPECT_EQ(m["content"][1]["type"], "tool_use");
  EXPECT_EQ(m["content"][1]["input"], deep);
}

TEST(MessagesAnswer, AStopStringVllmNamesIsAStopSequence) {
  json chat = json::parse(chat_whole(false));
  chat["choices"][0]["stop_reason"] = "###";
  const json m = json::parse(*from_chat(Api::messages, json::object(), chat.dump()));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "###");
  chat["choices"][0]["finish_reason"] = "length";
  EXPECT_EQ(json::parse(*from_chat(Api::messages, json::object(), chat.dump()))["stop_reason"],
            "max_tokens");
}

// A "type" that is present but not a string is the caller's error, refused naming the field, in
// every place a request's objects carry one. (json::value threw a type_error out of the
// translation for it: the HTTP fuzzer's crash with `"tools": [{"type": null}]` and its kin.)
TEST(Translate, ATypeThatIsNotAStringIsRefusedNotThrown) {
  const json responses = json::parse(R"({"model": "m", "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "q"}]}]})");
  const json messages = json::parse(
      R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "q"}]})");
  for (const json& bad : {json(nullptr), json(5), json::array(), json::object()}) {
    json b = responses;
    b["tools"] = json::array({{{"type", bad}, {"name", "ls"}}});
    EXPECT_EQ(refusal_of(Api::responses, b).param, "tools[0].type") << bad.dump();
    b = responses;
    b["input"][0]["content"][0]["type"] = bad;
    EXPECT_FALSE(to_chat(Api::responses, b).ok()) << bad.dump();
    b = responses;
    b["input"].push_back({{"type", bad}, {"role", "user"}, {"content", "again"}});
    if (bad.is_null()) {  // absent: a message, as the API defaults it
      EXPECT_TRUE(to_chat(Api::responses, b).ok());
    } else {
      EXPECT_EQ(refusal_of(Api::responses, b).param, "input[1].type");
    }
    b = messages;
    b["tool_choice"] = {{"type", bad}};
    EXPECT_EQ(refusal_of(Api::messages, b).param, "tool_choice.type") << bad.dump();
    b = responses;
    b["tool_choice"] = {{"type", bad}, {"name", "ls"}};
    EXPECT_EQ(refusal_of(Api::responses, b).param, "tool_choice") << bad.dump();
    b = messages;
    b["thinking"] = {{"type", bad}};
    EXPECT_EQ(refusal_of(Api::messages, b).param, "thinking") << bad.dump();
    b = messages;
    b["system"] = json::array({{{"type", bad}, {"text", "s"}}});
    EXPECT_FALSE(to_chat(Api::messages, b).ok()) << bad.dump();
    b = messages;
    b["messages"][0]["content"] = json::array({{{"type", bad}, {"text", "q"}}});
    EXPECT_FALSE(to_chat(Api::messages, b).ok()) << bad.dump();
  }
}

TEST(ResponsesAnswer, TextAndToolCallsBecomeOutputItems) {
  const json req = {{"model", "gpt-x"}, {"input", "q"}, {"instructions", "I"}};
  const json r = json::parse(*from_chat(Api::responses, req, chat_whole(true)));
  EXPECT_EQ(r["id"], "resp_abc");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["instructions"], "I");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Let me look.");
  EXPECT_EQ(r["output"][1]["type"], "function_call");
  EXPECT_EQ(r["output"][1]["call_id"], "call_1");
  EXPECT_EQ(r["output"][1]["arguments"], "{\"path\": \"a.c\"}");
  EXPECT_EQ(r["usage"]["total_tokens"], 16);
  json cut = json::parse(chat_whole(false));
  cut["choices"][0]["finish_reason"] = "length";
  const json inc = json::parse(*from_chat(Api::responses, req, cut.dump()));
  EXPECT_EQ(inc["status"], "incomplete");
  EXPECT_EQ(inc["incomplete_details"]["reason"], "max_output_tokens");
}

// -- streams --------------------------------------------------------------------------------------

TEST(MessagesStream, EventsFollowAnthropicsOrderAndAddUpToTheWholeAnswer) {
  const json req = {{"model", "claude-x"}, {"max_tokens", 9}, {"stream", true}};
  StreamTranslator t(Api::messages, req);
  const auto fs = frames(run_stream(t, chat_stream(true)));
  EXPECT_EQ(names(fs), (std::vector<std::string>{
                           "message_start", "content_block_start", "content_block_delta",
                           "content_block_delta", "content_block_stop", "content_block_start",
                           "content_block_delta", "content_block_delta", "content_block_stop",
                           "content_block_start", "content_block_delta", "content_block_stop",
                           "message_delta", "message_stop"}));
  EXPECT_EQ(fs[0].second["message"]["id"], "msg_abc");
  // Rebuild the message from the events, as the SDK's accumulator does.
  json content = json::array();
  std::vector<std::string> partial;
  for (const auto& [name, d] : fs) {
    if (name == "content_block_start") {
      EXPECT_EQ(d["index"], content.size());
      content.push_back(d["content_block"]);
      partial.emplace_back();
    } else if (name == "content_block_delta") {
      const json& delta = d["delta"];
      if (delta["type"] == "text_delta")
        content[d["index"].get<std::size_t>()]["text"] =
            content[d["index"].get<std::size_t>()]["text"].get<std::string>() +
            delta["text"].get<std::string>();
      else
        partial[d["index"].get<std::size_t>()] += delta["partial_json"].get<std::string>();
    } else if (name == "content_block_stop") {
      auto& block = content[d["index"].get<std::size_t>()];
      if (block["type"] == "tool_use") {
        const auto& p = partial[d["index"].get<std::size_t>()];
        block["input"] = p.empty() ? json::object() : json::parse(p);
      }
    }
  }
  const json whole = json::parse(*from_chat(Api::messages, req, chat_whole(true)));
  EXPECT_EQ(content, whole["content"]);
  EXPECT_EQ(fs[12].second["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(fs[12].second["usage"]["output_tokens"], 5);
}

TEST(MessagesStream, AFailureIsAnErrorEvent) {
  StreamTranslator t(Api::messages, json{{"model", "m"}});
  std::string text = t.chunk(chat_stream(false)[0]);
  text += t.fail("engine went away", 502);
  const auto fs = frames(text);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[1].first, "error");
  EXPECT_EQ(fs[1].second["error"]["type"], "api_error");
  EXPECT_EQ(fs[1].second["error"]["message"], "engine went away");
}

TEST(ResponsesStream, EventsAreNumberedAndTheLastCarriesTheWholeResponse) {
  const json req = {{"model", "gpt-x"}, {"input", "q"}, {"stream", true}};
  StreamTranslator t(Api::responses, req);
  const auto fs = frames(run_stream(t, chat_stream(true)));
  const auto n = names(fs);
  ASSERT_GE(n.size(), 3u);
  EXPECT_EQ(n.front(), "response.created");
  EXPECT_EQ(n[1], "response.in_progress");
  EXPECT_EQ(n.back(), "response.completed");
  for (std::size_t i = 0; i < fs.size(); ++i)
    EXPECT_EQ(fs[i].second["sequence_number"], i);
  std::string text, args;
  for (const auto& [name, d] : fs) {
    if (name == "response.output_text.delta") text += d["delta"].get<std::string>();
    if (name == "response.function_call_arguments.delta" && d["output_index"] == 1)
      args += d["delta"].get<std::string>();
  }
  EXPECT_EQ(text, "Let me look.");
  EXPECT_EQ(args, "{\"path\": \"a.c\"}");
  const json whole = json::parse(*from_chat(Api::responses, req, chat_whole(true)));
  EXPECT_EQ(fs.back().second["response"]["output"], whole["output"]);
  EXPECT_EQ(fs.back().second["response"]["usage"], whole["usage"]);
}

TEST(ResponsesStream, TextAfterAToolCallIsAMessageItemOfItsOwn) {
  StreamTranslator t(Api::responses, json{{"model", "m"}, {"input", "q"}});
  std::string text =
      t.chunk(R"({"id":"chatcmpl-y","choices":[{"index":0,"delta":{"content":"one"}}]})");
  text += t.chunk(
      R"({"id":"chatcmpl-y","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"ls","arguments":"{}"}}]}}]})");
  text += t.chunk(R"({"id":"chatcmpl-y","choices":[{"index":0,"delta":{"content":"two"}}]})");
  text += t.finish();
  const json output = frames(text).back().second["response"]["output"];
  ASSERT_EQ(output.size(), 3u) << output.dump();
  EXPECT_EQ(output[0]["content"][0]["text"], "one");
  EXPECT_EQ(output[2]["content"][0]["text"], "two");
  EXPECT_NE(output[0]["id"], output[2]["id"]);
}

TEST(ResponsesStream, AnEmptyAnswerStillHasItsMessageAndACutOneIsIncomplete) {
  StreamTranslator t(Api::responses, json{{"model", "m"}, {"input", "q"}});
  std::string text =
      t.chunk(R"({"id":"chatcmpl-z","choices":[{"index":0,"delta":{},"finish_reason":"length"}]})");
  text += t.finish();
  const auto fs = frames(text);
  EXPECT_EQ(fs.back().first, "response.incomplete");
  EXPECT_EQ(fs.back().second["response"]["output"].size(), 1u);
}

// -- errors ---------------------------------------------------------------------------------------

TEST(ProtocolErrors, EachProtocolAnswersInItsOwnShape) {
  const json a = json::parse(error_body(Api::messages, "no key", 401));
  EXPECT_EQ(a, (json{{"type", "error"},
                     {"error", {{"type", "authentication_error"}, {"message", "no key"}}}}));
  EXPECT_EQ(json::parse(error_body(Api::messages, "x", 503))["error"]["type"], "overloaded_error");
  EXPECT_EQ(json::parse(error_body(Api::messages, "x", 429))["error"]["type"], "rate_limit_error");
  EXPECT_EQ(json::parse(error_body(Api::responses, "x", 400, "input"))["error"]["param"], "input");
  const std::string engine =
      R"({"error": {"message": "model overloaded", "type": "server_error", "code": 503}})";
  EXPECT_EQ(json::parse(translate_error(Api::messages, engine, 503))["error"]["message"],
            "model overloaded");
  EXPECT_EQ(translate_error(Api::responses, engine, 503), engine);
}

TEST(ProtocolNames, PathsAndNamesRoundTrip) {
  for (const Api a : {Api::chat, Api::completions, Api::messages, Api::responses}) {
    EXPECT_EQ(api_of_path(path_of(a)), a);
    EXPECT_EQ(api_of_name(to_string(a)), a);
  }
  EXPECT_FALSE(api_of_path("/v1/embeddings"));
}

}  // namespace
}  // namespace dynrt::protocols
