#include "runtime/canonical_json.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

namespace dynrt {
namespace {

using nlohmann::json;

std::string canon(const char* text) {
  return canonical_json(json::parse(text));
}

TEST(CanonicalJson, KeyOrderAndWhitespaceDoNotMatter) {
  EXPECT_EQ(canon(R"({"b": 1, "a": [1, 2, {"y": true, "x": null}]})"),
            canon(R"({"a":[1,2,{"x":null,"y":true}],"b":1})"));
  EXPECT_EQ(canon(R"({"b": 1, "a": 2})"), R"({"a":2,"b":1})");
}

TEST(CanonicalJson, NumberSpellingDoesNotMatter) {
  EXPECT_EQ(canon("1"), "1");
  EXPECT_EQ(canon("1.0"), "1");
  EXPECT_EQ(canon("1e0"), "1");
  EXPECT_EQ(canon("10E-1"), "1");
  EXPECT_EQ(canon("-0.0"), "0");
  EXPECT_EQ(canon("0.5"), "0.5");
  EXPECT_EQ(canon("5e-1"), "0.5");
  EXPECT_EQ(canon("0.1"), "0.1");
  EXPECT_EQ(canon("1152921504606846976"), canon("1152921504606846976.0"));
  EXPECT_EQ(canon("1e300"), "1e+300");
}

TEST(CanonicalJson, DifferentValuesStayDifferent) {
  EXPECT_NE(canon("1"), canon("\"1\""));
  EXPECT_NE(canon("0.7"), canon("0.70000001"));
  EXPECT_NE(canon("[1, 2]"), canon("[2, 1]"));
  EXPECT_NE(canon("null"), canon("false"));
  EXPECT_NE(canon(R"({"a": 1})"), canon(R"({"a": 1, "b": null})"));
  EXPECT_NE(canon("9007199254740993"), canon("9007199254740992"));  // beyond 2^53
}

TEST(CanonicalJson, StringsUseMinimalEscapesAndKeepUnicode) {
  EXPECT_EQ(canonical_json(json("a\"b\\c\n\t\x01")), R"("a\"b\\c\n\t\u0001")");
  EXPECT_EQ(canonical_json(json("caf\xC3\xA9 \\u00e9")), "\"caf\xC3\xA9 \\\\u00e9\"");
  EXPECT_EQ(canon(R"("caf\u00e9")"), "\"caf\xC3\xA9\"");  // escapes decode to the same text
}

RC_GTEST_PROP(CanonicalJson, IsIdempotent,
              (const std::map<std::string, int>& m, const std::vector<double>& v,
               const std::string& s)) {
  json j;
  for (const auto& [k, val] : m)
    j["m"][k] = val;
  for (const double d : v) {
    if (std::isfinite(d)) j["v"].push_back(d);
  }
  j["s"] = s;
  const std::string once = canonical_json(j);
  const json again = json::parse(once, nullptr, false);
  if (again.is_discarded()) return;  // arbitrary bytes in s need not be valid UTF-8
  RC_ASSERT(canonical_json(again) == once);
}

}  // namespace
}  // namespace dynrt
