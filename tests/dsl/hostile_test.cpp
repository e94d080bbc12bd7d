// Hostile templates end in one clear finding with a position; never a crash, a hang or
// unbounded memory. (How long each takes is measured in bench/, not asserted here.)
#include "test_util.hpp"

#include <gtest/gtest.h>

namespace dynrt::dsl {
namespace {

using testing::lint;
using testing::rules;

TEST(Hostile, BillionLaughs) {
  std::string bomb = "version: 1\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const char p = static_cast<char>(c - 1);
    bomb += std::string(1, c) + ": &" + c + " [*" + p + ", *" + p + ", *" + p + ", *" + p + ", *" +
            p + ", *" + p + ", *" + p + ", *" + p + ", *" + p + ", *" + p + "]\n";
  }
  const LintReport r = lint(bomb);
  EXPECT_EQ(rules(r), (std::vector<std::string>{"resource-limit"}));
  EXPECT_GT(r.diagnostics[0].begin.line, 1);
}

TEST(Hostile, CyclicAlias) {
  EXPECT_EQ(rules(lint("a: &x\n  b: *x\n")), (std::vector<std::string>{"alias-cycle"}));
}

TEST(Hostile, TenThousandDeepFlowNesting) {
  const LintReport r = lint("a: " + std::string(10000, '[') + std::string(10000, ']') + "\n");
  EXPECT_EQ(rules(r), (std::vector<std::string>{"resource-limit"}));
}

TEST(Hostile, TenThousandDeepBlockNesting) {
  std::string text;
  for (int i = 0; i < 10000; ++i)
    text += std::string(static_cast<std::size_t>(i), ' ') + "k:\n";
  EXPECT_EQ(rules(lint(text)), (std::vector<std::string>{"resource-limit"}));
  std::string seq;
  for (int i = 0; i < 10000; ++i)
    seq += "- ";
  EXPECT_EQ(rules(lint(seq + "x\n")), (std::vector<std::string>{"resource-limit"}));
}

TEST(Hostile, TenMegabyteScalar) {
  const LintReport r = lint("a: " + std::string(10u << 20, 'x') + "\n");
  EXPECT_EQ(rules(r), (std::vector<std::string>{"resource-limit"}));
}

TEST(Hostile, ScalarOverTheLimitInsideTheFileLimit) {
  const LintReport r = lint("a: \"" + std::string((1u << 20) + 1, 'x') + "\"\n");
  EXPECT_EQ(rules(r), (std::vector<std::string>{"resource-limit"}));
}

TEST(Hostile, EmptyFile) {
  EXPECT_EQ(rules(lint("")), (std::vector<std::string>{"empty-file"}));
}

TEST(Hostile, ByteOrderMarkIsAWarningAndTheRestIsLinted) {
  const LintReport r = lint("\xEF\xBB\xBFversion: 1\nworkflow: w\nstages:\n  s: {kind: user}\n");
  EXPECT_EQ(rules(r), (std::vector<std::string>{"byte-order-mark"}));
  EXPECT_TRUE(r.files[0].usable);
}

TEST(Hostile, InvalidUtf8) {
  const LintReport r = lint("version: 1\nworkflow: \xC3\x28\n");
  ASSERT_EQ(rules(r), (std::vector<std::string>{"invalid-encoding"}));
  EXPECT_EQ(r.diagnostics[0].begin, (Position{2, 11}));
}

TEST(Hostile, Utf16IsNotUtf8) {
  const std::string utf16("\xFF\xFEv\0e\0r\0", 8);
  EXPECT_EQ(rules(lint(utf16)), (std::vector<std::string>{"invalid-encoding"}));
}

TEST(Hostile, MultiDocument) {
  const LintReport r = lint("version: 1\nworkflow: w\nstages:\n  s: {kind: user}\n---\nx: 1\n");
  EXPECT_EQ(rules(r), (std::vector<std::string>{"multi-document"}));
}

TEST(Hostile, ManyDocuments) {
  std::string text;
  for (int i = 0; i < 100000; ++i)
    text += "---\n";
  const LintReport r = lint(text);
  EXPECT_TRUE(testing::has_rule(r, "multi-document"));
  EXPECT_FALSE(r.files[0].usable);
}

TEST(Hostile, HugeFlatMapping) {
  std::string text = "version: 1\nworkflow: w\nstages:\n  s: {kind: user}\nbulk:\n";
  for (int i = 0; i < 200000; ++i)
    text += "  k" + std::to_string(i) + ": v\n";
  const LintReport r = lint(text);
  EXPECT_EQ(rules(r), (std::vector<std::string>{"resource-limit"}));
}

TEST(Hostile, NotYamlAtAll) {
  for (const char* text : {"{{{{", "]", "key: [unclosed", "\t- a", "- a\nb: c", "&", "*x"}) {
    const LintReport r = lint(text);
    ASSERT_FALSE(r.diagnostics.empty()) << text;
    EXPECT_FALSE(r.files[0].usable) << text;
  }
}

}  // namespace
}  // namespace dynrt::dsl
