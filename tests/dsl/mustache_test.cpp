#include "dsl/mustache.hpp"

#include <gtest/gtest.h>

namespace dynrt::dsl {
namespace {

using Type = MustacheTag::Type;

TEST(Mustache, FindsEveryTagWithItsOffset) {
  const auto s = scan_mustache("Hi {{ name }}, {{{raw}}} {{&amp}}{{! note }}{{#xs}}{{.}}{{/xs}}");
  ASSERT_FALSE(s.error);
  ASSERT_EQ(s.tags.size(), 7u);
  EXPECT_EQ(s.tags[0].type, Type::variable);
  EXPECT_EQ(s.tags[0].name, "name");
  EXPECT_EQ(s.tags[0].offset, 3u);
  EXPECT_EQ(s.tags[0].length, 10u);
  EXPECT_EQ(s.tags[1].type, Type::unescaped);
  EXPECT_EQ(s.tags[1].name, "raw");
  EXPECT_EQ(s.tags[2].type, Type::unescaped);
  EXPECT_EQ(s.tags[3].type, Type::comment);
  EXPECT_EQ(s.tags[4].type, Type::section);
  EXPECT_EQ(s.tags[5].name, ".");
  EXPECT_EQ(s.tags[5].section_depth, 1);
  EXPECT_EQ(s.tags[6].type, Type::end);
  EXPECT_EQ(s.tags[6].section_depth, 0);
  EXPECT_FALSE(s.whole_variable);
}

TEST(Mustache, WholeVariable) {
  EXPECT_TRUE(scan_mustache("{{messages}}").whole_variable);
  EXPECT_TRUE(scan_mustache("{{{messages}}}").whole_variable);
  EXPECT_FALSE(scan_mustache(" {{messages}}").whole_variable);
  EXPECT_FALSE(scan_mustache("{{#a}}{{/a}}").whole_variable);
  EXPECT_FALSE(scan_mustache("plain").whole_variable);
}

TEST(Mustache, ReportsMalformedTemplates) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"{{open", "unclosed"},
      {"{{#a}}x", "never closed"},
      {"{{/a}}", "closes no open section"},
      {"{{#a}}{{/b}}", "closes section \"a\""},
      {"{{> part}}", "partials"},
      {"{{=<% %>=}}", "delimiter"},
      {"{{}}", "empty"},
      {"{{a b}}", "not a valid variable name"},
  };
  for (const Case& c : cases) {
    const auto s = scan_mustache(c.text);
    ASSERT_TRUE(s.error) << c.text;
    EXPECT_NE(s.error->message.find(c.message), std::string::npos)
        << c.text << ": " << s.error->message;
  }
}

TEST(Mustache, RootName) {
  EXPECT_EQ(root_name("a.b.c"), "a");
  EXPECT_EQ(root_name("a"), "a");
  EXPECT_EQ(root_name("."), ".");
}

}  // namespace
}  // namespace dynrt::dsl
