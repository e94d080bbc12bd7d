// Tenancy through the whole runtime (runtime/tenancy.hpp): a call is served only results its
// own tenant's calls caused (library entries, shadows, fills), except from `share: global`
// stages; workflow ids are per tenant; a tenant's write reaches its own results and the shared
// ones, an everywhere write reaches all; a key's live runs are bounded (429 with Retry-After).
// Each test fails on a runtime without tenants: the second tenant would be served `cache` or
// `fill` from the first tenant's work.
#include "tests/actors/rig.hpp"

#include "dsl/render.hpp"

#include <thread>

namespace dynrt::testing {
namespace {

using nlohmann::json;

constexpr const char* kYaml = R"(version: 1
workflow: tn
inputs:
  topic: {description: the topic}
stages:
  answer:
    kind: model
    speculable: true
    model: m
    params: {temperature: 0, max_tokens: 32}
    bind:
      topic: {pointer: /messages/0/content, regex: '^Topic: (.*)$'}
    reads: ["doc:{{topic}}"]
    request:
      messages: [{role: user, content: "Topic: {{topic}}"}]
  public:
    kind: model
    speculable: true
    share: global
    model: m
    params: {temperature: 0, max_tokens: 32}
    bind:
      topic: {pointer: /messages/0/content, regex: '^Public facts about (.*)$'}
    reads: ["doc:{{topic}}"]
    request:
      messages: [{role: user, content: "Public facts about {{topic}}"}]
)";

Caller caller(const char* tenant, const char* key, std::size_t max_live_runs = 0) {
  Caller c;
  c.tenant = tenant;
  c.key = key;
  c.max_live_runs = max_live_runs;
  return c;
}

struct TenantRig {
  std::shared_ptr<engines::sim::SimEngine> sim = std::make_shared<engines::sim::SimEngine>(
      engines::sim::SimParams{}, engines::sim::Script{}, engines::sim::SimEngineOptions{0, "sim"});
  std::unique_ptr<Runtime> rt;
  json answer_body, public_body;

  explicit TenantRig(std::vector<std::string> shared_stages = {}) {
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", sim, {}});
    cfg.template_texts = {{"tn.yaml", kYaml}};
    cfg.shared_stages = std::move(shared_stages);
    auto r = Runtime::create(cfg);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    rt = std::move(*r);
    const auto report = dsl::lint_text("tn.yaml", kYaml);
    const auto& g = *report.graphs().front();
    const dsl::Bindings vars = {{"topic", "x"}};
    answer_body = dsl::render_stage(*g.stage("answer"), vars)->body;
    public_body = dsl::render_stage(*g.stage("public"), vars)->body;
  }
  ~TenantRig() {
    if (rt) expect_budget_returned(*rt, "at the end of the scenario");
  }

  Reply call(const Caller& who, const std::string& run, const std::string& stage = "answer") {
    const json& body = stage == "answer" ? answer_body : public_body;
    return rt->complete({"/v1/chat/completions", body, {"tn", run, stage}, who}).get();
  }
};

TEST(Tenancy, LibraryEntriesServeOnlyTheirOwnTenant) {
  TenantRig rig;
  const Reply a1 = rig.call(caller("acme", "acme-1"), "r1");
  ASSERT_TRUE(a1.ok()) << a1.error;
  EXPECT_EQ(a1.served, Served::engine);
  // The same tenant through another key, in another run: the library serves it.
  const Reply a2 = rig.call(caller("acme", "acme-2"), "r2");
  EXPECT_EQ(a2.served, Served::cache);
  EXPECT_EQ(a2.body, a1.body);
  // Another tenant's identical request runs on the engine, then has its own entry.
  const Reply b1 = rig.call(caller("beta", "beta-1"), "r3");
  EXPECT_EQ(b1.served, Served::engine);
  EXPECT_EQ(b1.body, bench::ask_engine(*rig.sim, "/v1/chat/completions", rig.answer_body))
      << "value equivalence: what the engine answers for the exact request";
  EXPECT_EQ(rig.call(caller("beta", "beta-1"), "r4").served, Served::cache);
  // The default tenant (an embedder that does not partition) is a tenant of its own too.
  EXPECT_EQ(rig.call(Caller{}, "r5").served, Served::engine);
}

TEST(Tenancy, SharedStagesServeEveryTenant) {
  TenantRig rig;
  EXPECT_EQ(rig.call(caller("acme", "acme-1"), "r1", "public").served, Served::engine);
  EXPECT_EQ(rig.call(caller("beta", "beta-1"), "r2", "public").served, Served::cache);
  EXPECT_EQ(rig.call(Caller{}, "r3", "public").served, Served::cache);
}

// The configuration may share a stage its template keeps per tenant; a name that is no stage
// refuses the runtime.
TEST(Tenancy, TheConfigurationMayShareAStage) {
  TenantRig rig({"tn.answer"});
  EXPECT_EQ(rig.call(caller("acme", "acme-1"), "r1").served, Served::engine);
  EXPECT_EQ(rig.call(caller("beta", "beta-1"), "r2").served, Served::cache);
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", rig.sim, {}});
  cfg.template_texts = {{"tn.yaml", kYaml}};
  cfg.shared_stages = {"tn.nope"};
  const auto bad = Runtime::create(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("tn.nope"), std::string::npos) << bad.error().message;
}

TEST(Tenancy, WorkflowIdsAreScopedByTenant) {
  TenantRig rig;
  rig.call(caller("acme", "acme-1"), "same");
  rig.call(caller("beta", "beta-1"), "same");
  EXPECT_EQ(rig.rt->stats().workflows_live, 2u) << "two tenants' runs with one id are two runs";
  rig.call(caller("acme", "acme-2"), "same");
  EXPECT_EQ(rig.rt->stats().workflows_live, 2u) << "one tenant's keys share its runs";
}

TEST(Tenancy, ATenantsWriteReachesItsOwnAndTheSharedResultsOnly) {
  TenantRig rig;
  const auto acme = caller("acme", "acme-1"), beta = caller("beta", "beta-1");
  rig.call(acme, "r1");
  rig.call(beta, "r2");
  rig.call(acme, "r3", "public");
  // beta writes doc:x: its entry and the shared one go, acme's stays.
  EXPECT_EQ(rig.rt->write({"doc:x"}, tenancy::WriteScope::of("beta")).get(), 2u);
  EXPECT_EQ(rig.call(acme, "r4").served, Served::cache);
  EXPECT_EQ(rig.call(beta, "r5").served, Served::engine);
  EXPECT_EQ(rig.call(acme, "r6", "public").served, Served::engine);
  // A write everywhere (an admin's, or an embedder's plain write) reaches every tenant.
  EXPECT_EQ(rig.rt->write({"doc:x"}).get(), 3u);
  EXPECT_EQ(rig.call(acme, "r7").served, Served::engine);
  EXPECT_EQ(rig.call(beta, "r8").served, Served::engine);
  EXPECT_EQ(rig.call(beta, "r9", "public").served, Served::engine);
}

TEST(Tenancy, AKeysLiveRunsAreBoundedWith429AndRetryAfter) {
  TenantRig rig;
  const auto limited = caller("acme", "acme-1", 2);
  EXPECT_TRUE(rig.call(limited, "r1").ok());
  EXPECT_TRUE(rig.call(limited, "r2").ok());
  const Reply refused = rig.call(limited, "r3");
  EXPECT_EQ(refused.status, 429);
  EXPECT_FALSE(refused.retry_after.empty());
  EXPECT_NE(refused.body.find("\"rate_limit_exceeded\""), std::string::npos) << refused.body;
  EXPECT_EQ(rig.rt->stats().runs_refused, 1u);
  // Its runs still serve; another key of the tenant has a limit of its own.
  EXPECT_EQ(rig.call(limited, "r1").served, Served::cache);
  EXPECT_TRUE(rig.call(caller("acme", "acme-2", 2), "r3").ok());
}

// Fills: tenant acme's router opens a branch and its fill for the handler completes as a
// shadow. Before acme's handler demand, tenant beta sends the exact same handler request: it
// must run on the engine (a shadow is promotable by an exact demand of its own tenant only).
// Then acme's demand is served by its fill, and the promoted entry is acme's alone too.
TEST(Tenancy, FillsAndShadowsServeOnlyTheirOwnTenant) {
  auto w = bench::make_workload(graph("routing"), {11, 1, 1.0});
  Rig rig(w, {true, true, 10});
  const auto& run = rig.workload.runs[0];
  const auto acme = caller("acme", "acme-1"), beta = caller("beta", "beta-1");
  std::vector<bench::Step> acme_steps;
  bool checked = false;
  bench::DriveOptions o;
  o.caller = acme;
  o.intercept = [&](bench::Step& s) {
    if (s.stage != "handle" || checked) return false;
    checked = true;
    // Every fill has ended (the winner stored, the losers aborted).
    for (;;) {
      const auto st = rig.runtime->stats();
      if (st.fills_issued > 0 &&
          st.fills_completed + st.fills_failed + st.fills_cancelled == st.fills_issued)
        break;
      std::this_thread::yield();
    }
    EXPECT_GE(rig.runtime->stats().csl_shadows, 1u);
    const Reply b =
        rig.runtime->complete({s.endpoint, s.request, {w.workflow, "beta-run", "handle"}, beta})
            .get();
    EXPECT_EQ(b.served, Served::engine) << "beta was served acme's shadow";
    return false;
  };
  o.after_step = [&](const bench::Step& s) { acme_steps.push_back(s); };
  const auto r = rig.drive(run, o);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_TRUE(checked);
  std::size_t from_fill = 0;
  for (const auto& s : acme_steps)
    from_fill += s.reply.served == Served::fill;
  EXPECT_GE(from_fill, 1u) << "acme's own fills serve acme";
  // Every result acme's run produced is served to acme's other key and to nobody else.
  for (const auto& s : acme_steps) {
    if (s.stage == "router") continue;
    const Reply b =
        rig.runtime->complete({s.endpoint, s.request, {w.workflow, "beta-2", s.stage}, beta}).get();
    EXPECT_NE(b.served, Served::fill) << s.stage;
    if (s.stage != "handle") {
      EXPECT_EQ(b.served, Served::engine) << s.stage;
    }
    if (s.endpoint.rfind("/v1/dynrt/tools/", 0) != 0) {
      EXPECT_EQ(b.body, bench::ask_engine(*rig.engine, s.endpoint, s.request)) << s.stage;
    }
  }
}

}  // namespace
}  // namespace dynrt::testing
