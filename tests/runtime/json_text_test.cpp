#include "runtime/json_text.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

namespace dynrt {
namespace {

using nlohmann::json;

std::size_t depth_of(const json& v) {
  std::size_t below = 0;
  if (v.is_structured())
    for (const auto& item : v)
      below = std::max(below, depth_of(item));
  return v.is_structured() ? below + 1 : 0;
}

TEST(JsonText, CountsNestingOutsideStrings) {
  EXPECT_FALSE(json_nests_deeper("1", 0));
  EXPECT_TRUE(json_nests_deeper("[]", 0));
  EXPECT_FALSE(json_nests_deeper("[]", 1));
  EXPECT_FALSE(json_nests_deeper(R"({"a": [1, {"b": []}], "c": {}})", 4));
  EXPECT_TRUE(json_nests_deeper(R"({"a": [1, {"b": []}], "c": {}})", 3));
  // Brackets, escaped quotes and backslashes inside strings do not count.
  EXPECT_FALSE(json_nests_deeper(R"(["[[[{{{", "\"[[[", "\\", "]]]"])", 1));
  EXPECT_TRUE(json_nests_deeper(R"(["\\", ["x"]])", 1));
}

TEST(JsonText, TextNestedTooDeepReadsAsNotJson) {
  // A megabyte of `[`: nlohmann parses it, then overflows the stack writing or copying it.
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  EXPECT_TRUE(parse_json(deep).is_discarded());
  EXPECT_TRUE(parse_json<nlohmann::ordered_json>(deep).is_discarded());
  const std::string at_limit =
      std::string(kMaxJsonDepth, '[') + "1" + std::string(kMaxJsonDepth, ']');
  const json ok = parse_json(at_limit);
  ASSERT_FALSE(ok.is_discarded());
  EXPECT_EQ(depth_of(ok), kMaxJsonDepth);
  EXPECT_TRUE(parse_json("[" + at_limit + "]").is_discarded());
  EXPECT_TRUE(parse_json("{\"a\": ").is_discarded());
  EXPECT_EQ(parse_json(R"({"a": ["[", 2]})"), json({{"a", {"[", 2}}}));
}

// A value built from a list of steps: open an array or an object, add a string full of the
// characters a scanner could mistake, add a number, or close the innermost container.
json build(const std::vector<int>& steps) {
  std::vector<json> stack{json::array()};
  const auto add = [&](json v) {
    json& top = stack.back();
    if (top.is_array())
      top.push_back(std::move(v));
    else
      top[std::to_string(top.size()) + "\"[{\\"] = std::move(v);
  };
  for (const int step : steps) {
    switch (step % 5) {
      case 0:
        stack.push_back(json::array());
        break;
      case 1:
        stack.push_back(json::object());
        break;
      case 2:
        add("]\\\"}[{\\");
        break;
      case 3:
        add(step);
        break;
      default:
        if (stack.size() > 1) {
          json done = std::move(stack.back());
          stack.pop_back();
          add(std::move(done));
        }
    }
  }
  while (stack.size() > 1) {
    json done = std::move(stack.back());
    stack.pop_back();
    add(std::move(done));
  }
  return stack.front();
}

RC_GTEST_PROP(JsonText, DepthOfWrittenJsonIsExact, (const std::vector<int>& steps)) {
  const json v = build(steps);
  const std::size_t d = depth_of(v);
  for (const int indent : {-1, 2}) {
    const std::string text = v.dump(indent);
    RC_ASSERT(!json_nests_deeper(text, d));
    RC_ASSERT(json_nests_deeper(text, d - 1));
    RC_ASSERT(parse_json(text, d) == v);
    RC_ASSERT(parse_json(text, d - 1).is_discarded());
  }
}

}  // namespace
}  // namespace dynrt
