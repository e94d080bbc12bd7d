// Calls whose tags name nothing loaded, through dynrt::Runtime: each is answered exactly as the
// engine answers it (as an untagged call is), counted by reason in RuntimeStats, and
// RuntimeConfig::on_misdirected hears of each kind once, for a bounded number of kinds.
#include "tests/actors/rig.hpp"

#include <gmock/gmock.h>

#include <mutex>

namespace dynrt::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// One stage is enough: only the tags are wrong.
const char* kTemplate = R"(version: 1
workflow: desk
stages:
  router:
    kind: model
    model: big
    params: {max_tokens: 40}
    request: {messages: [{role: user, content: route me}]}
)";

json router_call() {
  return {{"model", "big"},
          {"max_tokens", 40},
          {"messages", {{{"role", "user"}, {"content", "route me"}}}}};
}

struct Desk {
  std::unique_ptr<Runtime> runtime;
  std::mutex mutex;
  std::vector<json> told;  // what on_misdirected heard

  Desk() {
    engines::sim::SimEngineOptions eo;
    eo.time_scale = 0;
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim",
                           std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{},
                                                                     engines::sim::Script{}, eo),
                           {}});
    cfg.template_texts = {{"desk.yaml", kTemplate}};
    cfg.on_misdirected = [this](const json& m) {
      std::lock_guard lock(mutex);
      told.push_back(m);
    };
    auto rt = Runtime::create(cfg);
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().message);
    runtime = std::move(*rt);
  }

  Reply ask(Tags tags) {
    return runtime->complete(Request{"/v1/chat/completions", router_call(), std::move(tags)}).get();
  }

  std::vector<json> heard() {
    std::lock_guard lock(mutex);
    return told;
  }
};

TEST(Misdirected, EachKindIsAnsweredAsTheEngineAnswersCountedAndToldOnce) {
  Desk d;
  const auto plain = d.ask({});
  ASSERT_TRUE(plain.ok()) << plain.error;
  const std::vector<std::pair<Tags, std::string>> calls = {
      {{"dsek", "t1", "router"}, "unknown_workflow"},
      {{"dsek", "t1", "router"}, ""},
      {{"desk", "", "router"}, "no_workflow_id"},
      {{"desk", "t1", "routr"}, "unknown_stage"},
      {{"desk", "t1", "routr"}, ""},
      {{"desk", "t1", ""}, "unknown_stage"},
      {{"", "t1", ""}, "no_workflow"},
      {{"", "", "router"}, "no_workflow"}};
  for (const auto& [tags, _] : calls) {
    const auto r = d.ask(tags);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.served, Served::engine);
    EXPECT_EQ(r.body, plain.body) << "a misdirected call is answered as the engine answers it";
  }
  const auto st = d.runtime->stats();
  EXPECT_EQ(st.passthrough, calls.size() + 1);
  EXPECT_EQ(st.tags_unknown_workflow, 2u);
  EXPECT_EQ(st.tags_no_run_id, 1u);
  EXPECT_EQ(st.tags_unknown_stage, 3u);
  EXPECT_EQ(st.tags_no_workflow, 2u);
  EXPECT_EQ(st.fills_issued, 0u);

  const auto told = d.heard();
  std::vector<std::string> reasons;
  for (const auto& m : told)
    reasons.push_back(m["reason"]);
  EXPECT_EQ(reasons,
            (std::vector<std::string>{"unknown_workflow", "no_workflow_id", "unknown_stage",
                                      "unknown_stage", "no_workflow", "no_workflow"}))
      << "each kind once, in the order they came";
  ASSERT_EQ(told.size(), 6u);
  EXPECT_EQ(told[0]["workflow"], "dsek");
  EXPECT_THAT(told[0]["detail"].get<std::string>(), HasSubstr("did you mean 'desk'?"));
  EXPECT_EQ(told[2]["stage"], "routr");
  EXPECT_THAT(told[2]["detail"].get<std::string>(), HasSubstr("did you mean 'router'?"));
  EXPECT_THAT(told[3]["detail"].get<std::string>(), HasSubstr("without X-DynRT-Stage"));
}

TEST(Misdirected, TheHookHearsABoundedNumberOfKinds) {
  Desk d;
  constexpr std::size_t kSent = RuntimeConfig::kMisdirectedKindsTold + 44;
  for (std::size_t i = 0; i < kSent; ++i)
    ASSERT_TRUE(d.ask({"flow-" + std::to_string(i), "t1", "router"}).ok());
  EXPECT_EQ(d.heard().size(), RuntimeConfig::kMisdirectedKindsTold);
  EXPECT_EQ(d.runtime->stats().tags_unknown_workflow, kSent) << "every call is counted";
}

TEST(Misdirected, AWellTaggedRunIsNotTold) {
  Desk d;
  ASSERT_TRUE(d.ask({"desk", "t1", "router"}).ok());
  EXPECT_TRUE(d.heard().empty());
  const auto st = d.runtime->stats();
  EXPECT_EQ(
      st.tags_unknown_workflow + st.tags_no_run_id + st.tags_unknown_stage + st.tags_no_workflow,
      0u);
}

}  // namespace
}  // namespace dynrt::testing
