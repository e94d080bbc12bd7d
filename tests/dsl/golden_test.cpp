// Golden files: for every lint rule, tests/dsl/golden/<rule>.yaml (or a folder <rule>/) holds
// a template that breaks it, and <rule>.out the exact text `dynrt lint` prints for it.
// DYNRT_UPDATE_GOLDEN=1 rewrites the .out files from the current output (review the diff).
#include "dsl/report.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace dynrt::dsl {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = "tests/dsl/golden";

std::vector<std::string> cases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kGolden)) {
    const fs::path p = e.path();
    if (e.is_directory() || p.extension() == ".yaml") out.push_back(p.stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path input_of(const std::string& name) {
  return fs::is_directory(kGolden / name) ? kGolden / name : kGolden / (name + ".yaml");
}

TEST(Golden, EveryRuleHasACase) {
  const auto all = cases();
  for (const RuleInfo& r : all_rules()) {
    EXPECT_NE(std::find(all.begin(), all.end(), r.name), all.end())
        << "no golden case for rule " << r.name;
  }
}

class GoldenCase : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenCase, OutputMatches) {
  const std::string name = GetParam();
  const LintReport report = lint_paths({input_of(name).string()});
  const std::string actual = format_text(report);
  const fs::path expected_path = kGolden / (name + ".out");
  if (std::getenv("DYNRT_UPDATE_GOLDEN")) {
    std::ofstream(expected_path, std::ios::binary) << actual;
    GTEST_SKIP() << "rewrote " << expected_path;
  }
  ASSERT_TRUE(fs::exists(expected_path)) << "missing " << expected_path;
  EXPECT_EQ(actual, testing::read_file(expected_path.string()));
  if (const RuleInfo* rule = find_rule(name)) {
    EXPECT_NE(actual.find("[" + std::string(rule->name) + "]"), std::string::npos)
        << "the case for " << name << " does not trigger it";
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, GoldenCase, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string n = param.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace dynrt::dsl
