// The gateway's socket-free request path: strict JSON, field checks, tags.
#include "gateway/request.hpp"

#include <gtest/gtest.h>

#include <string>

namespace dynrt::gateway {
namespace {

using nlohmann::json;

std::string nested(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(StrictJson, NestingIsLimitedWhileParsing) {
  EXPECT_TRUE(parse_strict_json(nested(kMaxJsonDepth)).ok());
  const auto deep = parse_strict_json(nested(kMaxJsonDepth + 1));
  EXPECT_FALSE(deep.ok());
  EXPECT_NE(deep.invalid.message.find("deeper than 256"), std::string::npos);
  EXPECT_FALSE(parse_strict_json(std::string(1'000'000, '[')).ok());
  EXPECT_FALSE(parse_strict_json(std::string(1'000'000, '{')).ok());
  EXPECT_TRUE(parse_strict_json(nested(3), 3).ok());
  EXPECT_FALSE(parse_strict_json(nested(4), 3).ok());
}

TEST(StrictJson, DuplicateKeysAreRefusedAtAnyDepth) {
  EXPECT_FALSE(parse_strict_json(R"({"a": 1, "a": 1})").ok());
  const auto inner = parse_strict_json(R"({"x": [{"b": 1, "c": {"d": 1, "d": 2}}]})");
  ASSERT_FALSE(inner.ok());
  EXPECT_NE(inner.invalid.message.find("\"d\" appears twice"), std::string::npos);
  // The same key in sibling objects is fine.
  EXPECT_TRUE(parse_strict_json(R"([{"a": 1}, {"a": 2}])").ok());
}

TEST(StrictJson, BuildsTheSameDocumentAsNlohmann) {
  const std::string text =
      R"({"a": [1, -2, 3.5, 18446744073709551615, true, null, "s\u00e9"], "b": {}, "c": []})";
  const auto parsed = parse_strict_json(text);
  ASSERT_TRUE(parsed.ok()) << parsed.invalid.message;
  EXPECT_EQ(parsed.value, json::parse(text));
}

TEST(StrictJson, InvalidTextIsRefusedWithItsPosition) {
  for (const std::string bad : {"", "{", "{\"a\":}", "[1,]", "\"\\ud800\"", "\"\\udc00\"",
                                "\"\xff\"", "\"\xc0\x80\"", "1e400", "{} {}", "nul"}) {
    SCOPED_TRACE(bad);
    const auto r = parse_strict_json(bad);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.invalid.message.find("not valid JSON"), std::string::npos) << r.invalid.message;
    EXPECT_EQ(r.invalid.message.find("last read"), std::string::npos) << r.invalid.message;
  }
}

TEST(ParseCall, NullFieldsCountAsAbsent) {
  const auto r = parse_call("/v1/chat/completions",
                            R"({"messages": [{"role": "assistant", "content": null}],
                                "max_tokens": null, "stop": null, "model": null})",
                            {});
  EXPECT_TRUE(r.ok()) << r.invalid.message;
}

TEST(ParseCall, KeepsTheBodyTheStreamFlagAndTheTags) {
  const std::string body =
      R"({"model": "m", "stream": true, "unknown_knob": [1, {"x": 2}], "messages": []})";
  const auto r = parse_call("/v1/chat/completions", body, {"wf", "run-1", "router"});
  ASSERT_TRUE(r.ok()) << r.invalid.message;
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.request.body, json::parse(body));
  EXPECT_EQ(r.request.endpoint, "/v1/chat/completions");
  EXPECT_EQ(r.request.tags.stage, "router");
}

TEST(ParseCall, IntegersMustFitAndBeIntegers) {
  auto check = [](const std::string& field) {
    return parse_call("/v1/completions", R"({"prompt": "p", "max_tokens": )" + field + "}", {})
        .ok();
  };
  EXPECT_TRUE(check("0"));
  EXPECT_TRUE(check("2147483647"));
  EXPECT_FALSE(check("2147483648"));
  EXPECT_FALSE(check("18446744073709551615"));
  EXPECT_FALSE(check("-1"));
  EXPECT_FALSE(check("1.0"));
  EXPECT_FALSE(check("true"));
  EXPECT_FALSE(parse_call("/v1/completions", R"({"prompt": "p", "n": 0})", {}).ok());
  EXPECT_TRUE(parse_call("/v1/completions", R"({"prompt": "p", "n": 1})", {}).ok());
}

TEST(ParseCall, ToolsTakeAnyObjectAndANamedPath) {
  EXPECT_TRUE(parse_call("/v1/dynrt/tools/search", R"({"q": [1, 2]})", {}).ok());
  EXPECT_FALSE(parse_call("/v1/dynrt/tools/", "{}", {}).ok());
  EXPECT_FALSE(parse_call("/v1/dynrt/tools/a/b", "{}", {}).ok());
  EXPECT_FALSE(parse_call("/v1/dynrt/tools/\xff", "{}", {}).ok());
  EXPECT_FALSE(parse_call("/v1/other", "{}", {}).ok());
}

TEST(ParseCall, TagsMustBeShortPrintableUtf8) {
  const std::string body = R"({"messages": []})";
  EXPECT_TRUE(parse_call("/v1/chat/completions", body, {"w\xc3\xa9", "1", "s"}).ok());
  EXPECT_EQ(parse_call("/v1/chat/completions", body, {"w", "\xc3", "s"}).invalid.param,
            "X-DynRT-Workflow-Id");
  EXPECT_EQ(parse_call("/v1/chat/completions", body, {"w", "1", "a\tb"}).invalid.param,
            "X-DynRT-Stage");
  EXPECT_FALSE(parse_call("/v1/chat/completions", body, {std::string(257, 'w'), "", ""}).ok());
}

TEST(ParseWrites, TakesTheKeys) {
  const auto r = parse_writes(R"({"keys": ["a", "b"]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(parse_writes(R"({"keys": [1]})").ok());
  EXPECT_FALSE(parse_writes("{}").ok());
}

TEST(ValidUtf8, RefusesEveryIllFormedSequence) {
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("plain"));
  EXPECT_TRUE(valid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_TRUE(valid_utf8("\xf4\x8f\xbf\xbf"));                      // U+10FFFF
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));                             // overlong
  EXPECT_FALSE(valid_utf8("\xe0\x80\xaf"));                         // overlong
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));                         // surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));                     // over U+10FFFF
  EXPECT_FALSE(valid_utf8("\xe2\x82"));                             // cut short
  EXPECT_FALSE(valid_utf8("\x80"));                                 // lone continuation
  EXPECT_FALSE(valid_utf8("\xff"));
}

TEST(RunQuery, ReadsTheIdAndItsFilters) {
  auto q = parse_run_query("/v1/dynrt/runs/ticket-1");
  ASSERT_TRUE(q.ok()) << q.invalid.message;
  EXPECT_EQ(q.id, "ticket-1");
  EXPECT_TRUE(q.workflow.empty());
  EXPECT_FALSE(q.tenant_given);
  q = parse_run_query("/v1/dynrt/runs/a%2Fb%20c?workflow=triage&tenant=acme");
  ASSERT_TRUE(q.ok()) << q.invalid.message;
  EXPECT_EQ(q.id, "a/b c");
  EXPECT_EQ(q.workflow, "triage");
  EXPECT_EQ(q.tenant, "acme");
  EXPECT_TRUE(q.tenant_given);
  EXPECT_EQ(parse_run_query("/v1/dynrt/runs/x?tenant=").tenant, "");  // the default tenant
}

TEST(RunQuery, RefusesWhatItCannotRead) {
  EXPECT_EQ(parse_run_query("/v1/dynrt/runs/x?colour=red").invalid.param, "colour");
  EXPECT_FALSE(parse_run_query("/v1/dynrt/runs/%zz").ok());
  EXPECT_FALSE(parse_run_query("/v1/dynrt/runs/%4").ok());
  EXPECT_FALSE(parse_run_query("/v1/dynrt/runs/a%0Ab").ok());   // a control character
  EXPECT_FALSE(parse_run_query("/v1/dynrt/runs/%C0%AF").ok());  // not UTF-8
  EXPECT_FALSE(parse_run_query("/v1/dynrt/runs/" + std::string(300, 'x')).ok());
  EXPECT_FALSE(parse_run_query("/v1/dynrt/runs/x?workflow=%").ok());
}

}  // namespace
}  // namespace dynrt::gateway
