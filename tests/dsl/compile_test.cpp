#include "dsl/compile.hpp"
#include "dsl/lint.hpp"
#include "dsl/report.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <regex>

namespace dynrt::dsl {
namespace {

using testing::compile_clean;
using testing::kRouting;
using testing::read_file;

std::vector<std::string> names(const TemplateGraph& g, const std::vector<StageId>& ids) {
  std::vector<std::string> out;
  for (const StageId id : ids)
    out.push_back(g.stages[id].name);
  return out;
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

TEST(ShippedTemplates, AllLintClean) {
  const LintReport r = lint_paths({"templates"});
  EXPECT_TRUE(r.diagnostics.empty()) << format_text(r);
  ASSERT_EQ(r.graphs().size(), 5u);
}

// The benchmark's own templates (bench/templates) lint clean too: ReAct with a drafter.
TEST(BenchTemplates, LintClean) {
  const LintReport r = lint_paths({"bench/templates"});
  EXPECT_TRUE(r.diagnostics.empty()) << format_text(r);
  ASSERT_EQ(r.graphs().size(), 1u);
  const TemplateGraph& g = *r.graphs()[0];
  ASSERT_EQ(g.decisions.size(), 1u);
  EXPECT_EQ(g.decisions[0].candidates.kind, CandidateSourceKind::drafter);
  EXPECT_EQ(g.decisions[0].candidates.samples, 8);
}

TEST(ShippedTemplates, RoutingCompilesToItsBranchStructure) {
  const TemplateGraph g = compile_clean(read_file("templates/routing.yaml"));
  EXPECT_EQ(g.workflow, "routing");
  EXPECT_EQ(names(g, g.topological_order),
            (std::vector<std::string>{"router", "handle", "execute"}));
  ASSERT_EQ(g.decisions.size(), 1u);
  const Decision& d = g.decisions[0];
  EXPECT_EQ(g.stages[d.decided_by].name, "router");
  EXPECT_EQ(d.window, Window::decode);
  EXPECT_EQ(d.promotion, Promotion::exclusive);
  EXPECT_EQ(d.candidates.kind, CandidateSourceKind::learned);
  EXPECT_EQ(d.candidates.values, (std::vector<std::string>{"weather", "calendar", "email"}));
  EXPECT_EQ(names(g, d.downstream), (std::vector<std::string>{"handle", "execute"}));
  ASSERT_EQ(g.loops.size(), 1u);
  EXPECT_EQ(g.loops[0].max, 2);
  // router runs after the previous turn's executor: a loop-carried edge, not a cycle.
  const Stage* router = g.stage("router");
  EXPECT_TRUE(router->after.empty());
  EXPECT_EQ(names(g, router->after_previous), (std::vector<std::string>{"execute"}));
  EXPECT_EQ(g.stage("execute")->endpoint(), "/v1/dynrt/tools/call_api");
  EXPECT_EQ(g.stage("handle")->endpoint(), "/v1/chat/completions");
}

TEST(ShippedTemplates, ReactLoopsOverHops) {
  const TemplateGraph g = compile_clean(read_file("templates/react.yaml"));
  const Decision* d = g.decision("entity");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->candidates.kind, CandidateSourceKind::extract);
  EXPECT_EQ(g.stages[d->candidates.stage].name, "retrieve");
  EXPECT_EQ(names(g, d->downstream), (std::vector<std::string>{"retrieve", "read"}));
  int carried = 0;
  for (const Edge& e : g.edges)
    carried += e.loop_carried ? 1 : 0;
  EXPECT_EQ(carried, 1);
  EXPECT_EQ(g.stage("retrieve")->reads, (std::vector<std::string>{"corpus:{{entity}}"}));
}

TEST(ShippedTemplates, SubAgentStopsSpeculatingAtTheSampledSynthesis) {
  const TemplateGraph g = compile_clean(read_file("templates/subagent.yaml"));
  const Decision* d = g.decision("subagent");
  EXPECT_EQ(names(g, d->downstream),
            (std::vector<std::string>{"research", "summarize", "synthesize"}));
  EXPECT_TRUE(g.stage("summarize")->speculable);
  EXPECT_FALSE(g.stage("synthesize")->speculable);
  EXPECT_EQ(d->selection.extract.json_pointer, "/subagent");
}

TEST(ShippedTemplates, HciWaitsForTheUserAndKeepsEveryOffer) {
  const TemplateGraph g = compile_clean(read_file("templates/hci.yaml"));
  const Decision* d = g.decision("action");
  EXPECT_EQ(d->window, Window::user);
  EXPECT_EQ(d->promotion, Promotion::independent);
  EXPECT_EQ(g.stages[d->decided_by].kind, StageKind::user);
  EXPECT_EQ(names(g, d->downstream), (std::vector<std::string>{"act"}));
}

TEST(Compile, StageIdsFollowDeclarationOrder) {
  const TemplateGraph g = compile_clean(kRouting);
  ASSERT_EQ(g.stages.size(), 3u);
  for (StageId i = 0; i < g.stages.size(); ++i)
    EXPECT_EQ(g.stages[i].id, i);
  EXPECT_EQ(g.stages[2].name, "execute");
  EXPECT_EQ(g.entry, (std::vector<StageId>{0}));
  EXPECT_EQ(g.stage("handle")->uses, (std::vector<std::string>{"handler", "query"}));
}

TEST(Compile, EdgesAreInTopologicalOrder) {
  const TemplateGraph g = compile_clean(kRouting);
  ASSERT_EQ(g.edges.size(), 2u);
  EXPECT_EQ(g.stages[g.edges[0].from].name, "router");
  EXPECT_EQ(g.stages[g.edges[0].to].name, "handle");
  EXPECT_EQ(g.stages[g.edges[1].from].name, "handle");
  EXPECT_EQ(g.stages[g.edges[1].to].name, "execute");
}

// The same template, reformatted: flow/block, key order, quoting, comments, number spelling,
// descriptions and limits (which do not change what a stage computes).
const char* kRoutingReformatted = R"(# reformatted
version: 1
workflow: routing
decisions:
  handler:
    selection: {regex: 'HANDLER: (\w+)'}
    candidates:
      values: [weather, calendar, email]
      source: static
    promotion: exclusive
    limits: {max_fills: 1}
stages:
  router:
    decides: handler
    kind: model
    description: decides
    params:
      temperature: 0.0
    model: "qwen3-32b"
    bind: {query: {pointer: /messages/1/content}}
  handle:
    request: {messages: [{content: 'You are the {{handler}} handler.', role: system},
                         {role: "user", content: "{{query}}"}]}
    params: {max_tokens: 64.0, temperature: 0}
    model: qwen3-32b
    speculable: true
    after: [router]
    kind: model
    outputs: {call: {pointer: /choices/0/message/content}}
  execute:
    reads:
      - "api:{{handler}}"
    arguments:
      call: "{{call}}"
      api: "{{handler}}"
    tool: call_api
    kind: tool
    speculable: true
    after: handle
inputs:
  query: {description: a different description}
)";

TEST(Fingerprint, StableUnderReformatting) {
  const TemplateGraph a = compile_clean(kRouting);
  const TemplateGraph b = compile_clean(kRoutingReformatted);
  for (const char* name : {"router", "handle", "execute"}) {
    EXPECT_EQ(a.stage(name)->fingerprint, b.stage(name)->fingerprint) << name;
  }
  EXPECT_EQ(a.decision("handler")->coordinate, b.decision("handler")->coordinate);
}

struct Edit {
  const char* what;
  const char* from;
  const char* to;
  const char* stage;
};

TEST(Fingerprint, ChangedByEverySemanticEdit) {
  const TemplateGraph base = compile_clean(kRouting);
  const Edit edits[] = {
      {"model", "    speculable: true\n    model: qwen3-32b",
       "    speculable: true\n    model: qwen3-8b", "handle"},
      {"temperature", "params: {temperature: 0, max_tokens: 64}",
       "params: {temperature: 0, max_tokens: 64, seed: 1}", "handle"},
      {"max_tokens", "max_tokens: 64", "max_tokens: 65", "handle"},
      {"prompt", "You are the {{handler}} handler.", "You are the {{handler}} handler!", "handle"},
      {"role", "        - role: system", "        - role: developer", "handle"},
      {"api", "    speculable: true\n    model: qwen3-32b",
       "    speculable: true\n    api: chat\n    model: qwen3-32b", nullptr},
      {"tool", "tool: call_api", "tool: call_api2", "execute"},
      {"arguments", R"(call: "{{call}}"})", R"(call: "{{call}}", dry_run: false})", "execute"},
      {"reads", R"(reads: ["api:{{handler}}"])", R"(reads: ["api:v2:{{handler}}"])", "execute"},
      {"string vs number", "max_tokens: 64", "max_tokens: \"64\"", "handle"},
      {"share global", "    speculable: true\n    model: qwen3-32b",
       "    speculable: true\n    share: global\n    model: qwen3-32b", "handle"},
      {"share tenant, the default", "    speculable: true\n    model: qwen3-32b",
       "    speculable: true\n    share: tenant\n    model: qwen3-32b", nullptr},
  };
  for (const Edit& e : edits) {
    const std::string text = replace(kRouting, e.from, e.to);
    LintReport r = lint_text("t.yaml", text);
    ASSERT_TRUE(r.files[0].graph) << e.what;
    const TemplateGraph& g = *r.files[0].graph;
    for (const Stage& s : g.stages) {
      const bool should_change = e.stage && s.name == e.stage;
      EXPECT_EQ(s.fingerprint != base.stage(s.name)->fingerprint, should_change)
          << e.what << " on stage " << s.name;
    }
  }
}

// Fingerprints are part of every reuse name: a change to what they cover must not move the
// fingerprints of templates that do not use the change (their stored results would be lost).
// These are the values from before stages could declare `share`.
TEST(Fingerprint, PinnedForAnUnchangedTemplate) {
  const TemplateGraph g = compile_clean(kRouting);
  EXPECT_EQ(g.stage("router")->fingerprint.hex(), "c04f465d8dbe937c9f0da679ba8ee300");
  EXPECT_EQ(g.stage("handle")->fingerprint.hex(), "3f17fff39cf2451b5ac6d02338491fb6");
  EXPECT_EQ(g.stage("execute")->fingerprint.hex(), "b998697a24725a2fe9131b50367af7a4");
}

const char* kShared = R"(version: 1
workflow: shared
stages:
  terms:
    kind: model
    model: m
    params: {temperature: 0}
    request:
      messages: [{role: user, content: "List the terms of service."}]
  rates:
    kind: tool
    after: terms
    tool: exchange_rates
    share: global
    arguments: {base: EUR}
  chat:
    kind: model
    after: rates
    model: m
    share: tenant
)";

TEST(Share, ParsedPerStageWithTenantAsTheDefault) {
  const TemplateGraph g = compile_clean(kShared);
  EXPECT_EQ(g.stage("terms")->share, Share::tenant);  // no `share`
  EXPECT_EQ(g.stage("rates")->share, Share::global);
  EXPECT_EQ(g.stage("chat")->share, Share::tenant);
  EXPECT_EQ(to_string(g.stage("rates")->share), "global");
}

TEST(Share, AnyOtherValueIsAPositionedError) {
  const LintReport r = lint_text("t.yaml", replace(kShared, "share: global", "share: everyone"));
  ASSERT_EQ(r.diagnostics.size(), 1u) << format_text(r);
  const Diagnostic& d = r.diagnostics[0];
  EXPECT_EQ(d.info().name, "invalid-value");
  EXPECT_EQ(d.severity, Severity::error);
  EXPECT_EQ(d.begin.line, 14);
  EXPECT_EQ(d.begin.column, 12);
  EXPECT_EQ(d.end.column, 20);
  EXPECT_EQ(d.message, "\"everyone\" is not one of \"tenant\" or \"global\"");
  EXPECT_EQ(d.path, "/stages/rates/share");
  EXPECT_FALSE(r.files[0].usable);
}

TEST(Share, NotAKeyOfUserStages) {
  const LintReport r = lint_text("t.yaml", R"(version: 1
workflow: w
stages:
  pick: {kind: user, share: global}
)");
  ASSERT_EQ(r.diagnostics.size(), 1u) << format_text(r);
  EXPECT_EQ(r.diagnostics[0].info().name, "unknown-key");
  ASSERT_TRUE(r.files[0].graph);
  EXPECT_EQ(r.files[0].graph->stage("pick")->share, Share::tenant);  // no results to share
}

TEST(Fingerprint, CompletionsApiIsADifferentStage) {
  const std::string chat = kRouting;
  std::string completions =
      replace(chat, "    speculable: true\n    model: qwen3-32b",
              "    speculable: true\n    api: completions\n    model: qwen3-32b");
  completions =
      replace(completions,
              "      messages:\n        - role: system\n          content: \"You are the "
              "{{handler}} handler.\"\n        - role: user\n          content: \"{{query}}\"",
              "      prompt: \"You are the {{handler}} handler. {{query}}\"");
  const TemplateGraph a = compile_clean(chat);
  const TemplateGraph b = compile_clean(completions);
  EXPECT_NE(a.stage("handle")->fingerprint, b.stage("handle")->fingerprint);
  EXPECT_EQ(b.stage("handle")->endpoint(), "/v1/completions");
}

TEST(Coordinate, NamesTheWorkflowAndTheDecision) {
  const TemplateGraph a = compile_clean(kRouting);
  const TemplateGraph b =
      compile_clean(replace(kRouting, "workflow: routing", "workflow: routing2"));
  EXPECT_NE(a.decision("handler")->coordinate, b.decision("handler")->coordinate);
}

TEST(TemplateFingerprint, FollowsContentNotFormatting) {
  const TemplateGraph a = compile_clean(kRouting);
  const TemplateGraph b = compile_clean(std::string("# a comment\n") + kRouting);
  const TemplateGraph c = compile_clean(replace(kRouting, "max_tokens: 64", "max_tokens: 65"));
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_NE(a.fingerprint, c.fingerprint);
}

TEST(Compile, DecisionLimitsOverrideTemplateLimits) {
  const std::string text = std::string(kRouting) + "limits: {max_fills: 5, wait_ms: 100}\n";
  const std::string with_override = replace(
      text, "    promotion: exclusive\n", "    promotion: exclusive\n    limits: {max_fills: 2}\n");
  const TemplateGraph g = compile_clean(with_override);
  EXPECT_EQ(g.limits.max_fills, 5);
  EXPECT_EQ(g.decision("handler")->limits.max_fills, 2);
  EXPECT_EQ(g.decision("handler")->limits.wait_ms, 100);
  EXPECT_EQ(g.decision("handler")->limits.ttl_s, 600);
}

TEST(ToJson, FollowsTheYaml12CoreSchema) {
  const LintReport r = lint_text("t.yaml", std::string(kRouting) + "\n");
  ASSERT_TRUE(r.files[0].graph);
  const Stage* h = r.files[0].graph->stage("handle");
  EXPECT_TRUE(h->params["temperature"].is_number_integer());
  EXPECT_EQ(h->params["max_tokens"], 64);
  EXPECT_TRUE(h->request["messages"].is_array());
}

}  // namespace
}  // namespace dynrt::dsl

namespace dynrt::dsl {
namespace {

// Found by fuzzing: `max_fills: 3.3e31` was reported out of range, then converted to int
// anyway (undefined behaviour). Out-of-range settings keep their defaults.
TEST(Regression, OutOfRangeSettingsAreReportedNotConverted) {
  const LintReport r = testing::lint(
      testing::read_file("tests/fuzz/corpus/template/crash-limits-float-to-int.yaml"));
  ASSERT_TRUE(r.files[0].graph);
  const TemplateGraph& g = *r.files[0].graph;
  EXPECT_EQ(g.limits.max_fills, SpeculationLimits{}.max_fills);
  EXPECT_EQ(g.limits.wait_ms, SpeculationLimits{}.wait_ms);
  EXPECT_EQ(g.limits.max_chain, SpeculationLimits{}.max_chain);
  EXPECT_EQ(g.loops[0].max, 1);
  EXPECT_EQ(testing::rules(r), (std::vector<std::string>{"invalid-value", "invalid-value",
                                                         "invalid-value", "invalid-value"}));
}

}  // namespace
}  // namespace dynrt::dsl
