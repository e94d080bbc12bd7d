#include "runtime/reuse_name.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

namespace dynrt {
namespace {

using nlohmann::json;

const Hash128 kStage = xxh3_128("stage");
constexpr std::string_view kChat = "/v1/chat/completions";

const char* kBase = R"({
  "model": "qwen3-32b",
  "messages": [{"role": "system", "content": "You route requests."},
               {"role": "user", "content": "Rain in Oslo?"}],
  "temperature": 0,
  "max_tokens": 256
})";

Hash128 name_of(const json& body, std::string_view endpoint = kChat, Hash128 stage = kStage) {
  return reuse_name(stage, endpoint, body);
}

TEST(ReuseName, HashesExactlyTheInspectableEncoding) {
  const json body = json::parse(kBase);
  const std::string enc = reuse_encoding(kStage, kChat, body);
  EXPECT_EQ(name_of(body), xxh3_128(enc));
  EXPECT_TRUE(enc.starts_with("dynrt.reuse.v1\nstage:" + kStage.hex() +
                              "\nendpoint:/v1/chat/completions\n{"));
  // Bodies larger than the hashing buffer take the streaming path through several flushes.
  json big = body;
  big["messages"][1]["content"] = std::string(10000, 'x') + "\"\n\x01";
  EXPECT_EQ(name_of(big), xxh3_128(reuse_encoding(kStage, kChat, big)));
}

TEST(ReuseName, KeyOrderWhitespaceAndNumberSpellingDoNotMatter) {
  const json a = json::parse(kBase);
  const json b = json::parse(R"({"max_tokens":256.0,"temperature":0.0,"messages":[
      {"content":"You route requests.","role":"system"},{"content":"Rain in Oslo?","role":"user"}],
      "model":"qwen3-32b"})");
  const json c = json::parse(R"({"model": "qwen3-32b", "max_tokens": 2.56e2, "temperature": -0.0,
      "messages": [{"role": "system", "content": "You route requests."},
                   {"role": "user", "content": "Rain in \u004Fslo?"}]})");
  EXPECT_EQ(name_of(a), name_of(b));
  EXPECT_EQ(name_of(a), name_of(c));
}

TEST(ReuseName, OutputNeutralFieldsAreLeftOut) {
  const json base = json::parse(kBase);
  for (const char* field : {"stream", "stream_options", "user", "request_id"}) {
    json with = base;
    with[field] = field == std::string("stream_options")
                      ? json{{"include_usage", true}}
                      : json(field == std::string("stream") ? json(true) : json("x"));
    EXPECT_EQ(name_of(with), name_of(base)) << field;
    EXPECT_TRUE(is_output_neutral(field));
  }
  EXPECT_EQ(output_neutral_fields().size(), 4u);
  // Only at the top level: a nested "user" is content.
  json nested = base;
  nested["messages"][1]["user"] = "x";
  EXPECT_NE(name_of(nested), name_of(base));
}

// Every parameter that can change the output changes the name: set, changed, or removed.
TEST(ReuseName, EveryResultDeterminingParameterCounts) {
  struct Param {
    const char* field;
    json a;
    json b;
  };
  const std::vector<Param> params = {
      {"model", "qwen3-32b", "qwen3-8b"},
      {"temperature", 0, 0.7},
      {"top_p", 1, 0.9},
      {"top_k", 20, 40},
      {"min_p", 0, 0.05},
      {"seed", 1, 2},
      {"max_tokens", 256, 257},
      {"max_completion_tokens", 256, 512},
      {"stop", "\n", json::array({"\n"})},
      {"n", 1, 2},
      {"logprobs", false, true},
      {"top_logprobs", 0, 5},
      {"presence_penalty", 0, 0.5},
      {"frequency_penalty", 0, 0.5},
      {"repetition_penalty", 1, 1.1},
      {"logit_bias", json::object(), json{{"50256", -100}}},
      {"response_format", json{{"type", "text"}}, json{{"type", "json_object"}}},
      {"tools", json::array(),
       json::array({json{{"type", "function"}, {"function", {{"name", "f"}}}}})},
      {"tool_choice", "auto", "none"},
      {"parallel_tool_calls", true, false},
      {"reasoning_effort", "low", "high"},
      {"chat_template_kwargs", json{{"enable_thinking", false}}, json{{"enable_thinking", true}}},
      {"guided_json", json{{"type", "object"}}, json{{"type", "array"}}},
      {"some_future_parameter", 1, 2},
  };
  const json base = json::parse(kBase);
  for (const Param& p : params) {
    json with_a = base;
    with_a[p.field] = p.a;
    json with_b = base;
    with_b[p.field] = p.b;
    json without = base;
    without.erase(p.field);
    EXPECT_NE(name_of(with_a), name_of(with_b)) << p.field;
    if (with_a != without) {
      EXPECT_NE(name_of(with_a), name_of(without)) << p.field;
    }
    EXPECT_NE(name_of(with_b), name_of(without)) << p.field;
  }
}

TEST(ReuseName, MessagesAndPromptsCountToTheByte) {
  const json base = json::parse(kBase);
  json content = base;
  content["messages"][1]["content"] = "Rain in Oslo? ";
  json role = base;
  role["messages"][0]["role"] = "developer";
  json order = base;
  std::swap(order["messages"][0], order["messages"][1]);
  json extra = base;
  extra["messages"].push_back(json{{"role", "assistant"}, {"content", ""}});
  json name_field = base;
  name_field["messages"][1]["name"] = "ada";
  for (const json* changed : {&content, &role, &order, &extra, &name_field}) {
    EXPECT_NE(name_of(*changed), name_of(base)) << changed->dump();
  }
  json prompt = json::parse(R"({"model": "m", "prompt": "a"})");
  json prompt2 = json::parse(R"({"model": "m", "prompt": "a "})");
  EXPECT_NE(name_of(prompt, "/v1/completions"), name_of(prompt2, "/v1/completions"));
}

TEST(ReuseName, TypesAreContent) {
  EXPECT_NE(name_of(json::parse(R"({"seed": 1})")), name_of(json::parse(R"({"seed": "1"})")));
  EXPECT_NE(name_of(json::parse(R"({"x": null})")), name_of(json::parse(R"({})")));
  EXPECT_NE(name_of(json::parse(R"({"x": false})")), name_of(json::parse(R"({"x": 0})")));
  EXPECT_NE(name_of(json::parse(R"({"x": []})")), name_of(json::parse(R"({"x": {}})")));
}

TEST(ReuseName, StageAndEndpointAreContent) {
  const json body = json::parse(kBase);
  EXPECT_NE(name_of(body, kChat, kStage), name_of(body, kChat, xxh3_128("other stage")));
  EXPECT_NE(name_of(body, kChat), name_of(body, "/v1/completions"));
  EXPECT_NE(name_of(body, "/v1/dynrt/tools/a"), name_of(body, "/v1/dynrt/tools/b"));
}

TEST(ReuseName, NoCollisionsAcrossManyDistinctRequests) {
  std::unordered_set<Hash128> seen;
  json body = json::parse(kBase);
  for (int i = 0; i < 20000; ++i) {
    body["messages"][1]["content"] = "question " + std::to_string(i);
    ASSERT_TRUE(seen.insert(name_of(body)).second) << i;
  }
}

RC_GTEST_PROP(ReuseName, EqualContentAlwaysNamesEqually,
              (const std::map<std::string, int>& ints, const std::string& text)) {
  json a = json::object();
  for (const auto& [k, v] : ints)
    a[k] = v;
  a["text"] = text;
  json b = json::object();  // the same members, inserted in reverse order, as doubles
  for (auto it = ints.rbegin(); it != ints.rend(); ++it)
    b[it->first] = static_cast<double>(it->second);
  b["text"] = text;
  RC_ASSERT(name_of(a) == name_of(b));
}

}  // namespace
}  // namespace dynrt
