// Runtime::reload(): templates edited while dynrt serves. A reload that does not lint clean
// (a torn write, a duplicate workflow) changes nothing and the old graphs keep serving; one
// that does serves new runs from the new graphs.
#include "tests/actors/rig.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dynrt::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::trunc) << text;
}

std::string renamed(std::string text, const std::string& workflow) {
  const std::string from = "\nworkflow: routing\n";
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos);
  return text.replace(at, from.size(), "\nworkflow: " + workflow + "\n");
}

class Reload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dynrt-reload-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    routing_ = read_file("templates/routing.yaml");
    write_file(dir_ / "routing.yaml", routing_);
    // As fast as possible: these scenarios are about templates, not about engine time.
    engine_ =
        std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, engines::sim::Script{},
                                                  engines::sim::SimEngineOptions{0, "sim"});
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", engine_, {}});
    cfg.template_paths = {dir_.string()};
    auto rt = Runtime::create(cfg);
    ASSERT_TRUE(rt.ok()) << rt.error().message;
    runtime_ = std::move(*rt);
  }
  void TearDown() override {
    runtime_.reset();
    fs::remove_all(dir_);
  }

  // Calls `workflow`'s router stage in a fresh run; true when a template claimed the call
  // (it was not forwarded as a pass-through).
  bool claimed(const std::string& workflow) {
    const auto before = runtime_->stats().passthrough;
    const json body = {{"model", "qwen3-32b"},
                       {"max_tokens", 8},
                       {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    const auto r = runtime_
                       ->complete({"/v1/chat/completions",
                                   body,
                                   {workflow, "run-" + std::to_string(++runs_), "router"}})
                       .get();
    EXPECT_TRUE(r.ok()) << r.error;
    return runtime_->stats().passthrough == before;
  }

  fs::path dir_;
  std::string routing_;
  std::shared_ptr<engines::sim::SimEngine> engine_;
  std::unique_ptr<Runtime> runtime_;
  int runs_ = 0;
};

TEST_F(Reload, ATornTemplateIsRefusedAndTheOldGraphKeepsServing) {
  ASSERT_TRUE(claimed("routing"));
  // Half a file, as an editor's non-atomic save can leave it.
  write_file(dir_ / "routing.yaml", routing_.substr(0, routing_.size() / 2));
  const auto r = runtime_->reload();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("routing.yaml:"), std::string::npos) << r.error().message;
  EXPECT_EQ(runtime_->workflows(), std::vector<std::string>{"routing"});
  EXPECT_TRUE(claimed("routing")) << "the old graph must keep serving";
}

TEST_F(Reload, ACleanTemplateServesNewRuns) {
  write_file(dir_ / "routing.yaml", renamed(routing_, "routing2"));
  const auto r = runtime_->reload();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, std::vector<std::string>{"routing2"});
  EXPECT_EQ(runtime_->workflows(), std::vector<std::string>{"routing2"});
  EXPECT_TRUE(claimed("routing2"));
  EXPECT_FALSE(claimed("routing")) << "a workflow no template defines any more is forwarded";
}

TEST_F(Reload, TwoFilesDefiningOneWorkflowAreRefused) {
  write_file(dir_ / "copy.yaml", routing_);
  const auto r = runtime_->reload();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("routing"), std::string::npos) << r.error().message;
  EXPECT_TRUE(claimed("routing"));
}

TEST_F(Reload, AFolderThatVanishedIsRefused) {
  fs::remove_all(dir_);
  const auto r = runtime_->reload();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(runtime_->workflows(), std::vector<std::string>{"routing"});
  EXPECT_TRUE(claimed("routing"));
}

}  // namespace
}  // namespace dynrt::testing
