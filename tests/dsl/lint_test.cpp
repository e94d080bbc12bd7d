#include "dsl/lint.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace dynrt::dsl {
namespace {

namespace fs = std::filesystem;
using testing::has_rule;
using testing::kRouting;
using testing::lint;
using testing::rules;

const char* kOrphan = R"(version: 1
workflow: w
stages:
  start:
    kind: user
  orphan:
    kind: user
    description: x
)";

TEST(InlineIgnore, OnItsOwnLineCoversTheWholeNodeBelow) {
  const LintReport r = lint(R"(version: 1
workflow: w
stages:
  start:
    kind: user
  # dynrt-lint ignore=unreachable-stage -- kept for the next release
  orphan:
    kind: user
)");
  EXPECT_TRUE(r.diagnostics.empty()) << rules(r).size();
  EXPECT_EQ(r.suppressed, 1u);
  EXPECT_TRUE(r.files[0].usable);
}

TEST(InlineIgnore, CoversFindingsInsideTheNode) {
  const LintReport r = lint(R"(version: 1
workflow: w
stages:
  a:
    kind: user
  # dynrt-lint ignore=unknown-key,DT1004 -- experimenting
  b:
    kind: tool
    tool: t
    after: a
    speculabel: true
    ttl_s: -1
)");
  EXPECT_TRUE(r.diagnostics.empty()) << testing::rules(r).size();
  EXPECT_EQ(r.suppressed, 2u);
}

TEST(InlineIgnore, TrailingCommentCoversItsLineOnly) {
  const LintReport r = lint(R"(version: 1
workflow: w
stages:
  a:
    kind: tool
    tool: t
    speculabel: true  # dynrt-lint ignore=unknown-key -- transition
    speculabl: true
)");
  ASSERT_EQ(rules(r), (std::vector<std::string>{"unknown-key"}));
  EXPECT_EQ(r.diagnostics[0].begin.line, 8);
}

TEST(InlineIgnore, FileIgnoreCoversTheFile) {
  const LintReport r =
      lint(std::string("# dynrt-lint file-ignore=unreachable-stage -- drafts\n") + kOrphan);
  EXPECT_TRUE(r.diagnostics.empty());
}

TEST(InlineIgnore, ASuppressedErrorLeavesTheTemplateUsable) {
  std::string text = kRouting;
  const std::string params = "    params: {temperature: 0, max_tokens: 64}\n";
  text.replace(text.find(params), params.size(),
               "    # dynrt-lint ignore=nondeterministic-speculable -- the engine pins a seed\n"
               "    params: {temperature: 0.7, max_tokens: 64}\n");
  const LintReport r = lint(text);
  EXPECT_TRUE(r.diagnostics.empty()) << r.diagnostics.size();
  EXPECT_EQ(r.suppressed, 1u);
  EXPECT_TRUE(r.files[0].usable);
}

TEST(InlineIgnore, OnlyCoversTheNodeRightBelowIt) {
  std::string text = kRouting;
  const std::string kind = "  handle:\n    kind: model\n";
  text.replace(text.find(kind), kind.size(),
               "  handle:\n    # dynrt-lint ignore=nondeterministic-speculable -- misplaced\n"
               "    kind: model\n");
  text.replace(text.find("temperature: 0, max_tokens"), 14, "temperature: 1");
  const LintReport r = lint(text);
  EXPECT_EQ(rules(r), (std::vector<std::string>{"unused-ignore", "nondeterministic-speculable"}));
}

TEST(InlineIgnore, CanBeTurnedOff) {
  LintOptions options;
  options.inline_ignores = false;
  const LintReport r = lint_text("t.yaml", R"(version: 1
workflow: w
stages:
  start: {kind: user}
  # dynrt-lint ignore=unreachable-stage -- x
  orphan: {kind: user}
)",
                                 options);
  EXPECT_EQ(rules(r), (std::vector<std::string>{"unreachable-stage"}));
}

TEST(InlineIgnore, PragmaFindingsCannotBeIgnored) {
  const LintReport r = lint(R"(version: 1
workflow: w
stages:
  # dynrt-lint ignore=ignore-without-reason,unreachable-stage
  start: {kind: user}
)");
  EXPECT_TRUE(has_rule(r, "ignore-without-reason"));
}

TEST(InlineIgnore, AHashInsideAQuotedStringIsNotAPragma) {
  const LintReport r =
      lint(std::string(kOrphan) + "    # dynrt-lint ignore=unreachable-stage -- in a comment\n");
  EXPECT_TRUE(has_rule(r, "unreachable-stage"));  // the comment targets nothing below it
  const LintReport q = lint(R"(version: 1
workflow: w
stages:
  start: {kind: user, description: "see # dynrt-lint ignore=cycle -- x"}
)");
  EXPECT_TRUE(q.diagnostics.empty());
}

TEST(Lint, ErrorsMakeATemplateUnusableWarningsDoNot) {
  EXPECT_FALSE(lint(std::string(kRouting) + "bogus: 1\n").files[0].usable);
  const LintReport warn = lint(kOrphan);
  EXPECT_EQ(warn.count(Severity::warning), 1u);
  EXPECT_TRUE(warn.files[0].usable);
  EXPECT_EQ(warn.graphs().size(), 1u);
}

// A serve configuration or any other YAML among the templates: one finding naming what the file
// is, not an unknown-key error for each of its keys and a missing-key one for each of ours.
TEST(Lint, AFileThatIsNoTemplateGetsOneFindingThatSaysWhatItIs) {
  const LintReport config = lint("engines:\n  - url: sim\nlimits: {max_body_bytes: 1000}\n");
  ASSERT_EQ(rules(config), (std::vector<std::string>{"missing-key"}));
  EXPECT_EQ(config.diagnostics[0].message,
            "not a workflow template but, by its keys \"engines\", a `dynrt serve` "
            "configuration: pass it with --config, and keep it out of the templates' paths");
  EXPECT_EQ(config.diagnostics[0].begin.line, 1);
  EXPECT_FALSE(config.files[0].usable);
  const LintReport other = lint("services:\n  web: {image: nginx}\n");
  ASSERT_EQ(rules(other), (std::vector<std::string>{"missing-key"}));
  EXPECT_NE(other.diagnostics[0].message.find("none of the keys \"version\", \"workflow\" and "
                                              "\"stages\""),
            std::string::npos);
  // A template that lacks one of them is a template with a missing key, as before.
  const LintReport partial = lint("workflow: w\nstages:\n  a: {kind: user}\n");
  EXPECT_EQ(rules(partial), (std::vector<std::string>{"missing-key"}));
  EXPECT_NE(partial.diagnostics[0].message.find("missing required key \"version\""),
            std::string::npos);
}

TEST(Lint, AmbiguousBooleanDefersToWrongType) {
  const LintReport r = lint(R"(version: 1
workflow: w
stages:
  a: {kind: tool, tool: t, speculable: yes}
)");
  EXPECT_EQ(rules(r), (std::vector<std::string>{"wrong-type"}));
}

// -- isolation between tenants ----------------------------------------------------------------

std::vector<const Diagnostic*> findings(const LintReport& r, std::string_view rule) {
  std::vector<const Diagnostic*> out;
  for (const auto& d : r.diagnostics) {
    if (d.info().name == rule) out.push_back(&d);
  }
  return out;
}

// A page fetcher whose record keys are given by the test; `url` comes from the caller.
std::string fetcher(const std::string& reads, const std::string& writes = "[\"page:{{url}}\"]") {
  return R"(version: 1
workflow: pages
inputs:
  url: {description: the page}
stages:
  fetch:
    kind: tool
    tool: fetch_page
    bind: {url: /url}
    arguments: {url: "{{url}}"}
    reads:
      - )" +
         reads + R"(
  save:
    kind: tool
    tool: save_page
    after: fetch
    arguments: {url: "{{url}}"}
    writes: )" +
         writes + "\n";
}

TEST(UnscopedRecordKey, AKeyThatStartsWithATagIsAnErrorAtTheItem) {
  for (const std::string key : {R"("{{url}}")", R"("{{{url}}}")", R"("{{ url }}")", R"("{{&url}}")",
                                R"("{{url}}:meta")", R"("{{! note }}{{url}}")"}) {
    const LintReport r = lint(fetcher(key));
    const auto found = findings(r, "unscoped-record-key");
    ASSERT_EQ(found.size(), 1u) << key << "\n" << rules(r).size();
    const Diagnostic& d = *found[0];
    EXPECT_EQ(d.severity, Severity::error) << key;
    EXPECT_EQ(d.begin.line, 12) << key;
    EXPECT_EQ(d.begin.column, 9) << key;
    EXPECT_EQ(d.end.column, 9 + static_cast<int>(key.size())) << key;
    EXPECT_EQ(d.path, "/stages/fetch/reads/0") << key;
    EXPECT_NE(d.message.find("\"secret:admin\""), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("literal prefix"), std::string::npos) << d.message;
    EXPECT_FALSE(r.files[0].usable) << key;
  }
}

TEST(UnscopedRecordKey, SuggestsAPrefixedKey) {
  const LintReport r = lint(fetcher(R"("{{url}}")"));
  ASSERT_EQ(findings(r, "unscoped-record-key").size(), 1u);
  EXPECT_EQ(findings(r, "unscoped-record-key")[0]->message,
            "record key \"{{url}}\" starts with a mustache tag, so the value rendered there can "
            "name any record (\"secret:admin\", say); begin it with a literal prefix that names "
            "the kind of record, such as \"page:{{url}}\"");
}

TEST(UnscopedRecordKey, KeysWithALiteralPrefixAreAccepted) {
  for (const std::string key :
       {R"("page:{{url}}")", R"("p{{url}}")", R"("{{! note }}page:{{url}}")", R"("page:index")",
        R"("page:{{#url}}{{.}}{{/url}}")"}) {
    const LintReport r = lint(fetcher(key));
    EXPECT_TRUE(r.diagnostics.empty()) << key << ": " << r.diagnostics[0].message;
  }
}

TEST(UnscopedRecordKey, AppliesToWritesToo) {
  const LintReport r = lint(fetcher(R"("page:{{url}}")", R"(["page:{{url}}", "{{url}}"])"));
  const auto found = findings(r, "unscoped-record-key");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0]->path, "/stages/save/writes/1");
  EXPECT_EQ(found[0]->begin.line, 18);
  EXPECT_EQ(found[0]->begin.column, 30);
}

TEST(UnscopedRecordKey, AMalformedTagIsReportedOnceAsInvalidValue) {
  const LintReport r = lint(fetcher(R"("{{url")"));
  EXPECT_EQ(findings(r, "unscoped-record-key").size(), 0u);
  EXPECT_EQ(findings(r, "invalid-value").size(), 1u);
}

TEST(UnscopedRecordKey, EveryShippedTemplateIsScoped) {
  const LintReport r = lint_paths({"templates"});
  EXPECT_EQ(r.graphs().size(), 5u);
  EXPECT_TRUE(findings(r, "unscoped-record-key").empty());
}

// kRouting with `share: global` added to one stage.
std::string routing_sharing(const std::string& stage) {
  std::string text = kRouting;
  const std::string head = "  " + stage + ":\n";
  text.insert(text.find(head) + head.size(), "    share: global\n");
  return text;
}

TEST(SharedStageReadsRecords, WarnsAtTheShareValue) {
  const LintReport r = lint(routing_sharing("execute"));
  const auto found = findings(r, "shared-stage-reads-records");
  ASSERT_EQ(found.size(), 1u);
  const Diagnostic& d = *found[0];
  EXPECT_EQ(d.severity, Severity::warning);
  EXPECT_EQ(d.begin.line, 28);
  EXPECT_EQ(d.begin.column, 12);
  EXPECT_EQ(d.end.column, 18);
  EXPECT_EQ(d.path, "/stages/execute/share");
  EXPECT_NE(d.message.find("reads records (\"api:{{handler}}\")"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("can be served to another tenant that sends the same request"),
            std::string::npos)
      << d.message;
  EXPECT_NE(d.message.find("only within its own tenant and the shared scope"), std::string::npos)
      << d.message;
  EXPECT_TRUE(r.files[0].usable);  // warnings only
}

TEST(SharedStageReadsRecords, NotForTenantStagesOrSharedStagesWithoutReads) {
  EXPECT_TRUE(lint(kRouting).diagnostics.empty());
  const LintReport r = lint(routing_sharing("handle"));
  EXPECT_TRUE(findings(r, "shared-stage-reads-records").empty());
  EXPECT_FALSE(findings(r, "shared-stage-caller-input").empty());
}

// A template whose stage `ask` binds the caller's `query`; `ask_keys` adds to that stage,
// `more` adds stages and sections after it.
std::string asking(const std::string& ask_keys, const std::string& more = "") {
  return R"(version: 1
workflow: w
inputs:
  query: {description: the caller's question}
stages:
  ask:
    kind: model
    model: m
    bind: {query: /messages/0/content}
)" + ask_keys +
         more;
}

TEST(SharedStageCallerInput, ABoundInputRenderedDirectly) {
  const LintReport r = lint(asking(R"(    share: global
    request:
      messages: [{role: user, content: "Answer: {{query}}"}]
)"));
  ASSERT_EQ(rules(r), (std::vector<std::string>{"shared-stage-caller-input"}));
  const Diagnostic& d = r.diagnostics[0];
  EXPECT_EQ(d.severity, Severity::warning);
  EXPECT_EQ(d.begin.line, 12);
  EXPECT_EQ(d.begin.column, 49);
  EXPECT_EQ(d.end.column, 58);
  EXPECT_EQ(d.message,
            "stage \"ask\" is shared across tenants (share: global) but renders \"query\", which "
            "stage \"ask\" binds from a caller's request; a result shared across tenants that was "
            "computed from one tenant's data can be served to another tenant that sends the same "
            "request; keep `share: tenant` unless that value is the same for every tenant");
  EXPECT_TRUE(r.files[0].usable);
}

TEST(SharedStageCallerInput, TracesOutputsAndDecisionsBackToTheRequest) {
  // router binds query and decides handler; handle renders both and outputs call.
  const LintReport r = lint(routing_sharing("execute"));
  const auto found = findings(r, "shared-stage-caller-input");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_NE(found[0]->message.find("renders \"handler\", which stage \"router\" decides from "
                                   "\"query\", which stage \"router\" binds from a caller's "
                                   "request"),
            std::string::npos)
      << found[0]->message;
  EXPECT_NE(found[1]->message.find("renders \"call\", which stage \"handle\" produces from "
                                   "\"handler\", which stage \"router\" decides from"),
            std::string::npos)
      << found[1]->message;
  EXPECT_EQ(found[0]->begin.line, 33);  // arguments: {api: "{{handler}}", call: "{{call}}"}
  EXPECT_EQ(found[0]->begin.column, 23);
  EXPECT_EQ(found[1]->begin.line, 33);
  EXPECT_EQ(found[1]->begin.column, 44);
}

TEST(SharedStageCallerInput, ABindOfItsOwnThatNoTemplateRendersIsFlaggedAtTheBind) {
  const LintReport r = lint(asking("    share: global\n", R"(  answer:
    kind: model
    model: m
    after: ask
    request:
      messages: [{role: user, content: "{{query}}"}]
)"));
  const auto found = findings(r, "shared-stage-caller-input");
  ASSERT_EQ(found.size(), 1u) << rules(r).size();
  EXPECT_EQ(found[0]->begin.line, 9);
  EXPECT_EQ(found[0]->begin.column, 12);
  EXPECT_EQ(found[0]->path, "/stages/ask/bind/query");
  EXPECT_NE(found[0]->message.find("its request carries \"query\", which it binds from a "
                                   "caller's request"),
            std::string::npos)
      << found[0]->message;
}

TEST(SharedStageCallerInput, AUserPickBoundFromARequestIsCallerInput) {
  const LintReport r = lint(R"(version: 1
workflow: w
stages:
  pick:
    kind: user
    decides: plan
  act:
    kind: tool
    tool: run_plan
    after: pick
    share: global
    bind: {plan: /plan}
    arguments: {plan: "{{plan}}"}
decisions:
  plan:
    promotion: independent
    candidates: {source: static, values: [basic, pro]}
)");
  const auto found = findings(r, "shared-stage-caller-input");
  ASSERT_EQ(found.size(), 1u) << rules(r).size();
  EXPECT_NE(found[0]->message.find("renders \"plan\", which stage \"act\" binds"),
            std::string::npos)
      << found[0]->message;
}

TEST(SharedStageCallerInput, ValuesNoCallerChoosesAreNotFlagged) {
  // The loop index, and the output of a stage whose request is fixed by the template.
  const LintReport r = lint(asking(R"(    request:
      messages: [{role: user, content: "{{query}}"}]
)",
                                   R"(  headlines:
    kind: tool
    tool: headlines
    after: ask
    arguments: {section: world, page: "{{hop}}"}
    outputs: {top: /top}
  summarize:
    kind: model
    model: m
    after: headlines
    share: global
    request:
      messages: [{role: user, content: "Summarize {{top}}, page {{hop}}"}]
loops:
  hop:
    stages: [headlines, summarize]
    max: 3
)"));
  EXPECT_TRUE(findings(r, "shared-stage-caller-input").empty()) << r.diagnostics[0].message;
}

TEST(SharedStageCallerInput, CarriedAcrossALoopRepetition) {
  // think renders the previous repetition's `note`, which read produces from the caller's
  // query, and act renders think's `idea`: one pass in declaration order would miss it.
  const LintReport r = lint(asking("", R"(  think:
    kind: model
    model: m
    after: [ask, read]
    request:
      messages: [{role: user, content: "{{note}}"}]
    outputs: {idea: /choices/0/message/content}
  act:
    kind: model
    model: m
    after: think
    share: global
    request:
      messages: [{role: user, content: "{{idea}}"}]
  read:
    kind: model
    model: m
    after: act
    request:
      messages: [{role: user, content: "{{query}}"}]
    outputs: {note: /choices/0/message/content}
loops:
  hop:
    stages: [think, act, read]
    max: 3
)"));
  const auto found = findings(r, "shared-stage-caller-input");
  ASSERT_EQ(found.size(), 1u) << rules(r).size();
  EXPECT_EQ(found[0]->message.substr(0, found[0]->message.find(';')),
            "stage \"act\" is shared across tenants (share: global) but renders \"idea\", which "
            "stage \"think\" produces from \"note\", which stage \"read\" produces from \"query\", "
            "which stage \"ask\" binds from a caller's request");
}

class LintFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dynrt-lint-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(LintFiles, WalksFoldersForYamlFilesSkippingHiddenOnes) {
  write("a.yaml", kOrphan);
  write("sub/b.yml", "version: 1\nworkflow: b\nstages:\n  s: {kind: user}\n");
  write("notes.txt", "not a template");
  write(".hidden/c.yaml", "garbage: [");
  write(".d.yaml", "garbage: [");
  const LintReport r = lint_paths({dir_.string()});
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.graphs().size(), 2u);
  EXPECT_TRUE(r.usage_errors.empty());
}

TEST_F(LintFiles, AMissingPathIsAUsageError) {
  const LintReport r = lint_paths({(dir_ / "nope").string()});
  ASSERT_EQ(r.usage_errors.size(), 1u);
  EXPECT_NE(r.usage_errors[0].find("no such file or folder"), std::string::npos);
}

TEST_F(LintFiles, SymlinkLoopsEndInFindings) {
  write("ok.yaml", kOrphan);
  fs::create_symlink(dir_, dir_ / "again");  // a folder that contains itself
  fs::create_symlink(dir_ / "x.yaml", dir_ / "y.yaml");
  fs::create_symlink(dir_ / "y.yaml", dir_ / "x.yaml");  // x -> y -> x
  const LintReport r = lint_paths({dir_.string()});
  std::size_t io = 0;
  for (const auto& d : r.diagnostics)
    io += d.rule == Rule::io_error ? 1 : 0;
  EXPECT_EQ(io, 3u);
  EXPECT_EQ(r.graphs().size(), 1u);
}

TEST_F(LintFiles, SpecialFilesAreNotOpened) {
  const fs::path fifo = dir_ / "pipe.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const LintReport r = lint_paths({fifo.string()});  // opening a FIFO would block forever
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].rule, Rule::io_error);
}

TEST_F(LintFiles, OversizedFilesAreRefusedUnread) {
  write("big.yaml", "a: " + std::string(5u << 20, 'x') + "\n");
  const LintReport r = lint_paths({(dir_ / "big.yaml").string()});
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].rule, Rule::resource_limit);
}

TEST_F(LintFiles, TwoTemplatesCannotShareAWorkflowName) {
  write("a.yaml", "version: 1\nworkflow: same\nstages:\n  s: {kind: user}\n");
  write("b.yaml", "version: 1\nworkflow: same\nstages:\n  t: {kind: user}\n");
  const LintReport r = lint_paths({dir_.string()});
  EXPECT_EQ(rules(r), (std::vector<std::string>{"duplicate-workflow"}));
  EXPECT_EQ(r.graphs().size(), 1u);
}

TEST_F(LintFiles, AFileNamedTwiceIsLintedOnce) {
  write("a.yaml", kOrphan);
  const LintReport r = lint_paths({(dir_ / "a.yaml").string(), dir_.string()});
  EXPECT_EQ(r.files.size(), 1u);
}

}  // namespace
}  // namespace dynrt::dsl
