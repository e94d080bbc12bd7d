#include "dsl/report.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dynrt::dsl {
namespace {

using nlohmann::json;
using testing::lint;

const char* kTypo = "version: 1\nworkflow: w\nstages:\n  s:\n    kind: user\n    descripton: x\n";

TEST(TextReport, PrintsPositionMessageRuleSnippetAndCaret) {
  EXPECT_EQ(format_text(lint(kTypo, "w.yaml")),
            "w.yaml:6:5: error: unknown key \"descripton\" in UserStage; did you mean "
            "\"description\"? [unknown-key]\n"
            " 6 |     descripton: x\n"
            "   |     ^~~~~~~~~~\n"
            "1 error, 0 warnings in 1 file\n");
}

TEST(TextReport, IsEmptyWhenClean) {
  EXPECT_EQ(format_text(lint("version: 1\nworkflow: w\nstages:\n  s: {kind: user}\n")), "");
}

TEST(TextReport, CaretsCountCodePoints) {
  const std::string out = format_text(
      lint("version: 1\nworkflow: w\nstages:\n  s: {kind: user, description: \"é€\", bogus: 1}\n"));
  EXPECT_NE(out.find(" 4 |   s: {kind: user, description: \"é€\", bogus: 1}\n"
                     "   |                                      ^~~~~\n"),
            std::string::npos)
      << out;
}

TEST(TextReport, LongLinesShowAWindowAroundTheSpan) {
  const std::string pad(400, 'x');
  const std::string out =
      format_text(lint("version: 1\nworkflow: w\nstages:\n  s: {kind: user, "
                       "description: \"" +
                       pad + "\", bogus: 1}\n"));
  const auto snippet = out.substr(out.find(" 4 | "));
  const auto first_line = snippet.substr(0, snippet.find('\n'));
  EXPECT_LT(first_line.size(), 200u);
  EXPECT_NE(first_line.find("..."), std::string::npos);
  EXPECT_NE(first_line.find("bogus"), std::string::npos);
  const auto caret_line = snippet.substr(snippet.find('\n') + 1);
  EXPECT_EQ(caret_line.find('^'), first_line.find("bogus"));  // gutters " 4 | " and "   | "
}

TEST(JsonReport, HasStableFields) {
  const json j = json::parse(format_json(lint(kTypo, "w.yaml")));
  EXPECT_EQ(j["version"], 1);
  ASSERT_EQ(j["findings"].size(), 1u);
  const json& f = j["findings"][0];
  EXPECT_EQ(f["rule"], "unknown-key");
  EXPECT_EQ(f["code"], "DT1001");
  EXPECT_EQ(f["severity"], "error");
  EXPECT_EQ(f["file"], "w.yaml");
  EXPECT_EQ(f["line"], 6);
  EXPECT_EQ(f["column"], 5);
  EXPECT_EQ(f["end_line"], 6);
  EXPECT_EQ(f["end_column"], 15);
  EXPECT_EQ(f["path"], "/stages/s/descripton");
  EXPECT_EQ(f["suggestion"], "description");
  EXPECT_EQ(j["summary"]["errors"], 1);
  EXPECT_EQ(j["summary"]["files"], 1);
  EXPECT_EQ(j["errors"], json::array());
}

// A path that cannot be read is in the document itself, not only on stderr: read alone, an
// empty findings list must not pass for a clean lint.
TEST(JsonReport, NamesThePathsItCouldNotRead) {
  const LintReport r = lint_paths({"/nonexistent/templates"}, {});
  const json j = json::parse(format_json(r));
  EXPECT_EQ(j["findings"], json::array());
  ASSERT_EQ(j["errors"].size(), 1u) << j.dump();
  EXPECT_EQ(j["errors"][0], "/nonexistent/templates: no such file or folder");
  const json sarif = json::parse(format_sarif(r, "9.9.9"));
  const json& inv = sarif["runs"][0]["invocations"][0];
  EXPECT_EQ(inv["executionSuccessful"], false);
  ASSERT_EQ(inv["toolExecutionNotifications"].size(), 1u);
  EXPECT_EQ(inv["toolExecutionNotifications"][0]["level"], "error");
  EXPECT_EQ(inv["toolExecutionNotifications"][0]["message"]["text"],
            "/nonexistent/templates: no such file or folder");
}

TEST(SarifReport, IsSarif210WithTheRuleTable) {
  const json j = json::parse(format_sarif(lint(kTypo, "dir with space/w.yaml"), "9.9.9"));
  EXPECT_EQ(j["version"], "2.1.0");
  const json& run = j["runs"][0];
  EXPECT_EQ(run["tool"]["driver"]["name"], "dynrt-lint");
  EXPECT_EQ(run["tool"]["driver"]["version"], "9.9.9");
  EXPECT_EQ(run["tool"]["driver"]["rules"].size(), all_rules().size());
  const json& result = run["results"][0];
  EXPECT_EQ(result["ruleId"], "DT1001");
  EXPECT_EQ(run["tool"]["driver"]["rules"][result["ruleIndex"].get<int>()]["id"], "DT1001");
  EXPECT_EQ(result["level"], "error");
  const json& loc = result["locations"][0]["physicalLocation"];
  EXPECT_EQ(loc["artifactLocation"]["uri"], "dir%20with%20space/w.yaml");
  EXPECT_EQ(loc["region"]["startLine"], 6);
  EXPECT_EQ(loc["region"]["endColumn"], 15);
  EXPECT_EQ(run["invocations"][0]["executionSuccessful"], true);
  EXPECT_EQ(run["invocations"][0]["toolExecutionNotifications"], json::array());
}

TEST(RuleList, ListsEveryRule) {
  const std::string list = format_rule_list();
  for (const RuleInfo& r : all_rules()) {
    EXPECT_NE(list.find(std::string(r.code) + "  " + std::string(r.name)), std::string::npos);
  }
}

TEST(Rules, NamesAndCodesAreUniqueAndFindable) {
  std::set<std::string_view> names, codes;
  for (const RuleInfo& r : all_rules()) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_TRUE(codes.insert(r.code).second) << r.code;
    EXPECT_EQ(find_rule(r.name), &r);
    EXPECT_EQ(find_rule(r.code), &r);
  }
  EXPECT_EQ(find_rule("UNKNOWN-KEY")->rule, Rule::unknown_key);
  EXPECT_EQ(find_rule("dt1001")->rule, Rule::unknown_key);
  EXPECT_EQ(find_rule("nope"), nullptr);
}

TEST(Rules, EveryRuleIsDocumented) {
  const std::string doc = testing::read_file("docs/lint-rules.md");
  for (const RuleInfo& r : all_rules()) {
    EXPECT_NE(doc.find("## " + std::string(r.name)), std::string::npos) << r.name;
    EXPECT_NE(doc.find(std::string(r.code)), std::string::npos) << r.code;
  }
}

}  // namespace
}  // namespace dynrt::dsl
