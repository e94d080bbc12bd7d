// dynrt::Runtime as an embedder sees it: pass-through, configuration errors, the drafter
// predictor, workflow idle timeouts; and the reply helpers (stream replay, answered once).
#include "tests/actors/rig.hpp"

#include "actors/reply.hpp"
#include "bench/sim_world.hpp"
#include "dsl/render.hpp"
#include "engines/openai/assembly.hpp"

#include <thread>

namespace dynrt::testing {
namespace {

using nlohmann::json;

json chat_body(const std::string& text) {
  return {{"model", "qwen3-32b"},
          {"max_tokens", 16},
          {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
}

TEST(Runtime, UntaggedUnknownWorkflowAndUnknownStagePassStraightThrough) {
  Rig rig(bench::make_workload(graph("routing"), {1, 1, 1.0}), {});
  const json body = chat_body("hello");
  engines::sim::SimEngine e(engines::sim::SimParams{}, rig.workload.script, {0, "sim"});
  const auto direct = bench::ask_engine(e, "/v1/chat/completions", body);
  for (const Tags& tags : {Tags{}, Tags{"no-such-workflow", "w1", "x"},
                           Tags{"routing", "w1", "nope"}, Tags{"routing", "", "router"}}) {
    const auto r = rig.runtime->complete({"/v1/chat/completions", body, tags}).get();
    EXPECT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.served, Served::engine);
    EXPECT_EQ(r.body, direct) << "pass-through must not change the answer";
  }
  const auto st = rig.runtime->stats();
  EXPECT_EQ(st.passthrough, 4u);
  EXPECT_EQ(st.fills_issued, 0u);
}

TEST(Runtime, BadCallsGetSpecificErrors) {
  Rig rig(bench::make_workload(graph("routing"), {1, 1, 1.0}), {});
  auto r = rig.runtime->complete({"/v1/chat/completions", json::array(), {}}).get();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "invalid_request_error");
  r = rig.runtime->tool("no_such_tool", json::object()).get();
  EXPECT_EQ(r.status, 404);
  EXPECT_FALSE(r.ok());
  r = rig.runtime->complete({"/v1/chat/completions", json{{"model", "m"}}, {}}).get();
  EXPECT_EQ(r.status, 400) << "the engine rejects a body without messages: " << r.body;
}

// An embedder's body is not checked by the gateway: a field of any type, in a call tagged with
// a template's stage or not, is answered (by the engine, or refused with a 400), never thrown on.
TEST(Runtime, BodiesOfOddShapesAreAnsweredNotThrown) {
  Rig rig(bench::make_workload(graph("routing"), {1, 1, 1.0}), {});
  const json values[] = {"x",
                         -1,
                         2.5,
                         true,
                         nullptr,
                         json::array(),
                         json::object(),
                         {{"include_usage", "x"}},
                         json::array({{{"type", 5}}}),
                         json::array({5}),
                         json::array({{{"role", 5}, {"content", "x"}}})};
  std::size_t answered = 0, refused = 0;
  for (const char* name : {"model", "messages", "max_tokens", "n", "stream", "stream_options",
                           "stop", "temperature", "tools", "tool_choice", "priority", "seed"})
    for (const json& v : values)
      for (const Tags& tags : {Tags{}, Tags{"routing", "odd", "router"}}) {
        json body = chat_body("odd");
        body[name] = v;
        const Reply r = rig.runtime->complete({"/v1/chat/completions", body, tags}).get();
        EXPECT_TRUE(r.status == 200 || r.status == 400) << name << " " << v << ": " << r.status;
        (r.status == 200 ? answered : refused) += 1;
      }
  EXPECT_GT(answered, 0u);
  EXPECT_GT(refused, 0u);
  json usage = chat_body("odd");
  usage["stream"] = true;
  usage["stream_options"] = {{"include_usage", "x"}};
  const Reply r = rig.runtime->complete({"/v1/chat/completions", usage, {}}).get();
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("stream_options.include_usage"), std::string::npos) << r.body;
}

TEST(Runtime, RefusesTemplatesThatDoNotLintAndMissingEngines) {
  RuntimeConfig cfg;
  EXPECT_FALSE(Runtime::create(cfg).ok());
  cfg.engines.push_back({"sim", std::make_shared<engines::sim::SimEngine>(), {}});
  cfg.template_texts = {{"bad.yaml", "version: 1\nworkflow: w\nstages:\n  a: {kind: model}\n"}};
  const auto rt = Runtime::create(cfg);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.error().message.find("bad.yaml:"), std::string::npos) << rt.error().message;
  cfg.template_texts.clear();
  cfg.template_paths = {"templates/routing.yaml"};
  cfg.template_texts = {
      {"copy.yaml", shipped_templates().source("templates/routing.yaml")
                        ? std::string(shipped_templates().source("templates/routing.yaml")->text())
                        : std::string()}};
  const auto twice = Runtime::create(cfg);
  ASSERT_FALSE(twice.ok()) << "one workflow defined twice";
  EXPECT_NE(twice.error().message.find("routing"), std::string::npos);
}

TEST(Runtime, ToolCallsRunOnTheToolEngine) {
  Rig rig(bench::make_workload(graph("react"), {1, 1, 1.0}), {});
  const auto r = rig.runtime->tool("retrieve", {{"entity", "Entity1"}}).get();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(json::parse(r.body)["key"], "corpus:Entity1");
}

// A routing template whose handler's candidates come from `candidates` (the keys of the
// decision's `candidates` block, indented).
std::string decided_yaml(const std::string& candidates) {
  return R"(version: 1
workflow: drafted
inputs:
  query: {description: the request}
stages:
  router:
    kind: model
    model: big
    params: {temperature: 0, max_tokens: 400}
    bind: {query: /messages/0/content}
    decides: handler
    request:
      messages: [{role: user, content: "{{query}}"}]
  handle:
    kind: model
    after: router
    speculable: true
    model: big
    params: {temperature: 0, max_tokens: 32}
    request:
      messages: [{role: user, content: "{{handler}}: {{query}}"}]
decisions:
  handler:
    promotion: exclusive
    candidates:
)" + candidates +
         R"(    selection:
      regex: 'HANDLER:\s*(\w+)'
)";
}

// ... drafted by `small` with `drafter` (extra keys of the candidates).
std::string drafted_yaml(const std::string& drafter) {
  return decided_yaml("      source: drafter\n      model: small\n" + drafter + R"(
      request:
        messages: [{role: user, content: "Guess the handler for {{query}}"}]
)");
}

std::string hmm(int words) {
  std::string reasoning;
  for (int i = 0; i < words; ++i)
    reasoning += "hmm ";
  return reasoning;
}

json drafted_call(int max_tokens, const std::string& content) {
  return {{"model", "big"},
          {"temperature", 0},
          {"max_tokens", max_tokens},
          {"messages", json::array({{{"role", "user"}, {"content", content}}})}};
}

// A run of drafted_yaml(drafter): the router's call, then the handler's for `handler`. Returns
// how the handler's call was served and the fills issued.
std::pair<Served, std::uint64_t> run_drafted(const std::string& drafter,
                                             engines::sim::Script script,
                                             const std::string& handler) {
  const std::string yaml = drafted_yaml(drafter);
  std::string reasoning;
  for (int i = 0; i < 300; ++i)
    reasoning += "hmm ";
  script.add_contains("route me", reasoning + "HANDLER: " + handler);
  engines::sim::SimEngineOptions eo;
  eo.time_scale = 10;
  auto engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, script, eo);
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", engine, {}});
  cfg.template_texts = {{"drafted.yaml", yaml}};
  auto rt = Runtime::create(cfg);
  EXPECT_TRUE(rt.ok()) << rt.error().message;
  if (!rt.ok()) return {Served::engine, 0};
  const auto call = drafted_call;
  EXPECT_TRUE(
      (*rt)
          ->complete({"/v1/chat/completions", call(400, "route me"), {"drafted", "d1", "router"}})
          .get()
          .ok());
  const auto r = (*rt)
                     ->complete({"/v1/chat/completions",
                                 call(32, handler + ": route me"),
                                 {"drafted", "d1", "handle"}})
                     .get();
  return {r.served, (*rt)->stats().fills_issued};
}

// A drafter source: the draft model is sampled, its answers are read with the decision's
// selection, and the most named candidate is filled.
TEST(Runtime, DrafterPredictorRanksByVotesAndFills) {
  engines::sim::Script script;
  script.add_contains("Guess the handler", "HANDLER: email");
  const auto [served, fills] = run_drafted("      samples: 4\n      max: 2", script, "email");
  EXPECT_EQ(served, Served::fill);
  EXPECT_EQ(fills, 1u) << "four votes for one candidate: one fill";
}

// Each drafter sample carries its own seed (0, 1, ...), so a draft model that samples gives
// distinct answers: here three of four name sms, and sms, the only candidate kept, is filled.
TEST(Runtime, DrafterSamplesCarryTheirOwnSeeds) {
  engines::sim::Script script;
  // Unseeded samples would all get this answer, and the wrong candidate would be filled.
  script.add_contains("Guess the handler", "HANDLER: email");
  for (int seed = 0; seed < 4; ++seed)
    script.add_exact(
        {{"model", "small"},
         {"temperature", 1},
         {"seed", seed},
         {"messages",
          json::array({{{"role", "user"}, {"content", "Guess the handler for route me"}}})}},
        seed == 2 ? "HANDLER: email" : "HANDLER: sms");
  const auto [served, fills] =
      run_drafted("      params: {temperature: 1}\n      samples: 4\n      max: 1", script, "sms");
  EXPECT_EQ(served, Served::fill) << "the samples' majority, sms, was filled";
  EXPECT_EQ(fills, 1u);
}

// A stepped runtime and engine on one simulated clock (bench::SimWorld) serving one template;
// calls are made with call() and answered into the slots it is given.
struct Stepped {
  std::shared_ptr<engines::sim::SimEngine> engine;
  std::shared_ptr<ManualTime> time = std::make_shared<ManualTime>();
  std::unique_ptr<bench::SimWorld> world;
  std::unique_ptr<Runtime> runtime;

  Stepped(const engines::sim::Script& script, const std::string& yaml,
          engines::sim::SimParams params = {}, int decode_slots = 0) {
    engines::sim::SimEngineOptions eo;
    eo.stepped = true;
    engine = std::make_shared<engines::sim::SimEngine>(params, script, eo);
    world = std::make_unique<bench::SimWorld>(time, engine);
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", engine, {}});
    cfg.decode_slots = decode_slots;
    cfg.template_texts = {{"drafted.yaml", yaml}};
    cfg.stepped = true;
    cfg.time = time;
    auto rt = Runtime::create(cfg);
    EXPECT_TRUE(rt.ok()) << rt.error().message;
    if (!rt.ok()) return;
    runtime = std::move(*rt);
    world->attach(runtime.get());
  }
  ~Stepped() {
    if (runtime) runtime->shutdown();
    engine->drain();
  }
  // A chat call for `stage` of run d1 (untagged when `stage` is empty); its answer goes to
  // `into`, and the simulated time it came at to `at`.
  void call(const json& body, const std::string& stage, std::optional<Reply>& into,
            double* at = nullptr) {
    const Tags tags = stage.empty() ? Tags{} : Tags{"drafted", "d1", stage};
    runtime->complete({"/v1/chat/completions", body, tags},
                      ReplyCallbacks{nullptr,
                                     [this, &into, at](Reply r) {
                                       into = std::move(r);
                                       if (at) *at = world->now_s();
                                     },
                                     nullptr});
  }
  bool until(const std::function<bool()>& done) { return world->run_until(done); }
};

// The drafter's time box ranks the samples that answered and stops the others: a sample still
// decoding then is of no use. In simulated time, so the box and the decodes are exact.
TEST(Runtime, TheDraftersTimeBoxStopsTheSamplesStillRunning) {
  engines::sim::Script script;
  for (int seed = 0; seed < 4; ++seed)
    script.add_exact(
        {{"model", "small"},
         {"temperature", 1},
         {"max_tokens", 4000},
         {"seed", seed},
         {"messages",
          json::array({{{"role", "user"}, {"content", "Guess the handler for route me"}}})}},
        seed == 3 ? hmm(3000) + "HANDLER: email" : "HANDLER: sms");
  script.add_contains("route me", hmm(300) + "HANDLER: sms");
  Stepped sim(script, drafted_yaml("      params: {temperature: 1, max_tokens: 4000}\n"
                                   "      samples: 4\n      max: 1\n      timeout_ms: 2000"));
  ASSERT_NE(sim.runtime, nullptr);
  std::optional<Reply> router;
  sim.call(drafted_call(400, "route me"), "router", router);
  ASSERT_TRUE(sim.until([&] { return router.has_value(); }));
  ASSERT_TRUE(router->ok());
  EXPECT_GT(sim.world->now_s(), 2.0) << "the router decoded past the drafter's time box";
  EXPECT_EQ(sim.runtime->stats().draft_samples, 4u);
  EXPECT_EQ(sim.engine->counters().cancelled, 1u) << "the long sample was stopped at the box";
  EXPECT_EQ(sim.runtime->stats().fills_issued, 1u) << "the three that answered named sms";
}

// A demand that comes to wait for its fill while the fill is still queued at fill priority
// promotes it: the fill goes before canonical calls that arrived after it, where it would
// otherwise wait behind every one of them. One decode slot, in simulated time:
//   router (decoding) | the fill queued | other 1, other 2 queued | router ends: other 1 runs
//   | the handler's call waits for the fill, which moves ahead of other 2.
TEST(Runtime, ACallWaitingForAQueuedFillPromotesItAheadOfLaterCalls) {
  engines::sim::Script script;
  script.add_contains("route me", hmm(300) + "HANDLER: email");
  script.add_contains("other", hmm(400));
  engines::sim::SimParams one_slot;
  one_slot.slots = 1;
  // Priced as a large engine (64 slots): the gate admits the fill at once.
  Stepped sim(script, decided_yaml("      source: static\n      values: [email]\n"), one_slot, 64);
  ASSERT_NE(sim.runtime, nullptr);
  std::optional<Reply> router, other1, other2, handle;
  double other1_s = 0, other2_s = 0, handle_s = 0;
  sim.call(drafted_call(400, "route me"), "router", router);
  ASSERT_TRUE(sim.until([&] { return sim.runtime->stats().fills_issued == 1; }));
  sim.call(drafted_call(100, "other 1"), "", other1, &other1_s);
  sim.call(drafted_call(100, "other 2"), "", other2, &other2_s);
  ASSERT_TRUE(sim.until([&] { return router.has_value(); }));
  ASSERT_TRUE(router->ok());
  EXPECT_EQ(sim.runtime->stats().fills_promoted, 0u);
  sim.call(drafted_call(32, "email: route me"), "handle", handle, &handle_s);
  ASSERT_TRUE(sim.until([&] { return handle && other1 && other2; }));
  EXPECT_EQ(handle->served, Served::fill);
  EXPECT_LT(other1_s, handle_s) << "other 1 had the slot when the call came";
  EXPECT_LT(handle_s, other2_s) << "the promoted fill went before other 2";
  const auto st = sim.runtime->stats();
  EXPECT_EQ(st.waits, 1u);
  EXPECT_EQ(st.fills_promoted, 1u);
  EXPECT_EQ(st.fills_requeued, 1u);
}

// Resolve on emission for a selection the predictor missed: the router names sms, which no
// candidate named, on its first line and decodes on; sms's fill starts then, at canonical
// priority, and serves the handler's call. In simulated time.
TEST(Runtime, AnEmittedSelectionNoCandidateNamedIsFilledWhileTheDeciderDecodes) {
  engines::sim::Script script;
  script.add_contains("route me", "HANDLER: sms\n" + hmm(300));
  Stepped sim(script, decided_yaml("      source: static\n      values: [email]\n"));
  ASSERT_NE(sim.runtime, nullptr);
  std::optional<Reply> router, handle;
  sim.call(drafted_call(400, "route me"), "router", router);
  ASSERT_TRUE(sim.until([&] { return router.has_value(); }));
  ASSERT_TRUE(router->ok());
  const auto st = sim.runtime->stats();
  EXPECT_EQ(st.emissions, 1u);
  EXPECT_EQ(st.fills_outrun, 1u) << "email's fill stopped at the emission";
  EXPECT_EQ(st.fills_emitted, 1u) << "sms's fill started then";
  EXPECT_EQ(st.fills_issued, 2u);
  sim.call(drafted_call(32, "sms: route me"), "handle", handle);
  ASSERT_TRUE(sim.until([&] { return handle.has_value(); }));
  EXPECT_EQ(handle->served, Served::fill);
  engines::sim::SimEngine direct(engines::sim::SimParams{}, script, {0, "sim"});
  EXPECT_EQ(handle->body,
            bench::ask_engine(direct, "/v1/chat/completions", drafted_call(32, "sms: route me")))
      << "the fill's answer is the engine's";
}

// One open-loop simulation of `runs` Routing runs on a stepped runtime and engine: every
// answer's body per run, and the runtime's figures.
struct Simulated {
  std::vector<std::vector<std::string>> bodies;
  RuntimeStats stats;
};

Simulated simulate(const bench::Workload& w) {
  engines::sim::SimEngineOptions eo;
  eo.stepped = true;
  auto engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, w.script, eo);
  auto time = std::make_shared<ManualTime>();
  bench::SimWorld world(time, engine);
  auto corpus = engines::Corpus::from_json(w.corpus);
  EXPECT_TRUE(corpus.ok());
  for (const auto& [name, key] : w.tools)
    (*corpus)->add_tool(name, {engines::Corpus::Kind::lookup, key});
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", engine, {}});
  cfg.tools = *corpus;
  cfg.template_paths = {"templates"};
  cfg.stepped = true;
  cfg.time = time;
  auto rt = Runtime::create(cfg);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().message);
  world.attach(rt->get());
  Simulated out;
  out.bodies.resize(w.runs.size());
  std::size_t done = 0;
  for (std::size_t i = 0; i < w.runs.size(); ++i)
    world.at(0.7 * static_cast<double>(i), [&, i] {
      bench::drive_async(**rt, graph(w.workflow), w.runs[i], {}, [&, i](bench::RunResult r) {
        EXPECT_TRUE(r.ok()) << r.error;
        for (const auto& step : r.steps)
          out.bodies[i].push_back(step.reply.body);
        ++done;
      });
    });
  EXPECT_TRUE(world.run_until([&] { return done == w.runs.size(); }));
  out.stats = (*rt)->stats();
  (*rt)->shutdown();
  engine->drain();
  return out;
}

// Stepped, the graph runs only inside run_pending() on the caller's thread: an open-loop
// simulation answers byte for byte like the threaded runtime without dynrt's help (the floor),
// uses fills and the library as that one does, and gives the same figures every time.
TEST(Runtime, SteppedItRunsOnlyWhenAskedAndGivesTheSameResultEveryTime) {
  const auto w = bench::make_workload(graph("routing"), {5, 10, 1.0, 0.4});
  {
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", std::make_shared<engines::sim::SimEngine>(), {}});
    cfg.template_paths = {"templates"};
    cfg.stepped = true;
    const auto rt = Runtime::create(cfg);
    ASSERT_FALSE(rt.ok());
    EXPECT_NE(rt.error().message.find("stepped"), std::string::npos) << rt.error().message;
  }
  {
    // Nothing moves until the caller steps the actors and the engine.
    engines::sim::SimEngineOptions eo;
    eo.stepped = true;
    auto engine =
        std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, w.script, eo);
    auto time = std::make_shared<ManualTime>();
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", engine, {}});
    cfg.template_paths = {"templates"};
    cfg.stepped = true;
    cfg.time = time;
    auto rt = Runtime::create(cfg);
    ASSERT_TRUE(rt.ok()) << rt.error().message;
    bench::RunSteps steps(graph("routing"), w.runs[0], false);
    bench::Step first;
    ASSERT_EQ(steps.next(first), bench::RunSteps::Next::request);
    std::optional<Reply> answer;
    (*rt)->complete({first.endpoint, first.request, {"routing", "r-1", first.stage}},
                    ReplyCallbacks{nullptr, [&](Reply r) { answer = std::move(r); }, nullptr});
    EXPECT_EQ(engine->counters().submitted, 0u);
    EXPECT_GT((*rt)->run_pending(), 0u);          // the demand reaches the engine
    EXPECT_GE(engine->counters().submitted, 1u);  // and the branch's fills
    EXPECT_FALSE(answer);
    bench::SimWorld world(time, engine);
    world.attach(rt->get());
    ASSERT_TRUE(world.run_until([&] { return answer.has_value(); }));
    EXPECT_EQ(answer->status, 200);
    EXPECT_GT(world.now_s(), 0.1);  // the router decoded in simulated time
  }
  // The floor: the threaded runtime with neither reuse nor fills.
  Rig floor(w, {false, false});
  std::vector<std::vector<std::string>> expected;
  for (const auto& run : w.runs) {
    const auto r = floor.drive(run);
    ASSERT_TRUE(r.ok()) << r.error;
    expected.emplace_back();
    for (const auto& step : r.steps)
      expected.back().push_back(step.reply.body);
  }
  const Simulated once = simulate(w);
  EXPECT_EQ(once.bodies, expected);
  EXPECT_GT(once.stats.fills_issued, 0u);
  EXPECT_GT(once.stats.served_fill + once.stats.served_cache, 0u);
  const Simulated again = simulate(w);
  EXPECT_EQ(again.bodies, expected);
  EXPECT_EQ(again.stats.fills_issued, once.stats.fills_issued);
  EXPECT_EQ(again.stats.fills_consumed, once.stats.fills_consumed);
  EXPECT_EQ(again.stats.served_fill, once.stats.served_fill);
  EXPECT_EQ(again.stats.served_cache, once.stats.served_cache);
  EXPECT_EQ(again.stats.engine_ms_wasted, once.stats.engine_ms_wasted);
}

TEST(Runtime, IdleWorkflowsEnd) {
  auto w = bench::make_workload(graph("subagent"), {4, 3, 1.0});
  RigOptions o;
  o.workflow_idle = std::chrono::milliseconds(20);
  Rig rig(w, o);
  for (const auto& run : w.runs)
    ASSERT_TRUE(rig.drive(run).ok());
  rig.time->advance(o.workflow_idle * 2);
  // Waits for an event (the actors ending), bounded.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (rig.runtime->stats().workflows_live > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(rig.runtime->stats().workflows_live, 0u);
  // A run id seen before starts afresh.
  EXPECT_TRUE(rig.drive(w.runs[0]).ok());
}

TEST(Reply, ReplayedChunksCarryTheTextFinishAndUsage) {
  const std::string body =
      R"({"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"one two three four five six"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":6,"total_tokens":9}})";
  const auto chunks = actors::replay_chunks("/v1/chat/completions", body, true);
  ASSERT_EQ(chunks.size(), 5u);  // role, two text pieces, finish, usage
  std::string text;
  for (std::size_t i = 1; i < 3; ++i)
    text += json::parse(chunks[i])["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(text, "one two three four five six");
  EXPECT_EQ(json::parse(chunks[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(chunks[3])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json::parse(chunks[4])["usage"]["completion_tokens"], 6);
  EXPECT_EQ(json::parse(chunks[4])["id"], "c1");
  const auto completion = actors::replay_chunks(
      "/v1/completions",
      R"({"id":"x","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a b","finish_reason":"stop"}]})",
      false);
  ASSERT_EQ(completion.size(), 2u);
  EXPECT_EQ(json::parse(completion[0])["choices"][0]["text"], "a b");
  EXPECT_TRUE(actors::replay_chunks("/v1/chat/completions", "not json", true).empty());
  // An answer of odd shapes is replayed as it is, never thrown on: a numeric id and model, a
  // message that is no object, a role that is no string.
  const auto odd = actors::replay_chunks(
      "/v1/chat/completions",
      R"({"id":5,"model":7,"choices":[{"index":0,"message":"x","finish_reason":"stop"},{"index":1,"message":{"role":3,"content":"y"}}]})",
      false);
  ASSERT_EQ(odd.size(), 5u);  // role and finish of the first, role, text and finish of the second
  EXPECT_EQ(json::parse(odd[0])["id"], 5);
  EXPECT_EQ(json::parse(odd[0])["model"], 7);
  EXPECT_EQ(json::parse(odd[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(odd[2])["choices"][0]["delta"]["role"], 3);
  EXPECT_EQ(json::parse(odd[3])["choices"][0]["delta"]["content"], "y");
}

// Streaming a stored answer back loses nothing an SDK accumulates: every choice, its
// reasoning, tool calls, refusal, finish reason and stop_reason, and the logprobs of a
// non-streamed answer that has them.
TEST(Reply, ReplayedChunksAccumulateToTheStoredChoices) {
  const json body = json::parse(R"({"id":"c2","object":"chat.completion","created":7,"model":"m",
    "choices":[
      {"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"first think, then call",
        "tool_calls":[
          {"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}},
          {"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]},
       "logprobs":null,"finish_reason":"tool_calls","stop_reason":null},
      {"index":1,"message":{"role":"assistant","content":"one two three four five","refusal":"no"},
       "logprobs":null,"finish_reason":"stop","stop_reason":7}],
    "usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}})");
  engines::StreamAssembler a(true);
  for (const auto& c : actors::replay_chunks("/v1/chat/completions", body.dump(), true))
    a.add(json::parse(c));
  EXPECT_TRUE(a.complete()) << a.why_incomplete();
  const json replayed = json::parse(a.body());
  EXPECT_EQ(replayed["choices"], body["choices"]);
  EXPECT_EQ(replayed["usage"], body["usage"]);

  // Logprobs go with the text, in one piece: an accumulator concatenating them gets them all.
  const json with_logprobs = json::parse(R"({"id":"c3","object":"chat.completion","created":1,
    "model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a b c d e f"},
    "logprobs":{"content":[{"token":"a","logprob":-0.1}]},"finish_reason":"length"}]})");
  const auto chunks = actors::replay_chunks("/v1/chat/completions", with_logprobs.dump(), false);
  std::string text;
  json logprobs = json::array();
  for (const auto& c : chunks) {
    const json j = json::parse(c);
    const json& choice = j["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (choice["logprobs"].is_object())
      for (const auto& t : choice["logprobs"]["content"])
        logprobs.push_back(t);
  }
  EXPECT_EQ(text, "a b c d e f");
  EXPECT_EQ(logprobs, with_logprobs["choices"][0]["logprobs"]["content"]);
  EXPECT_EQ(json::parse(chunks.back())["choices"][0]["finish_reason"], "length");
}

TEST(Reply, SinkAnswersOnceAndAnswersWhenAbandoned) {
  int answers = 0;
  Reply last;
  {
    actors::ReplySink sink({nullptr,
                            [&](Reply r) {
                              ++answers;
                              last = std::move(r);
                            },
                            nullptr},
                           "/v1/chat/completions", json::object());
    EXPECT_TRUE(sink.done(Reply{}));
    EXPECT_FALSE(sink.done(Reply{}));
  }
  EXPECT_EQ(answers, 1);
  {
    actors::ReplySink sink({nullptr,
                            [&](Reply r) {
                              ++answers;
                              last = std::move(r);
                            },
                            nullptr},
                           "/v1/chat/completions", json::object());
  }
  EXPECT_EQ(answers, 2);
  EXPECT_EQ(last.status, 503) << "a sink nobody answered answers on destruction";
}

}  // namespace
}  // namespace dynrt::testing

namespace dynrt::testing {
namespace {

// A stage that writes records invalidates what read them before its answer goes out: the next
// read is a miss and sees the new text.
TEST(Runtime, AWritingStageInvalidatesBeforeItAnswers) {
  const std::string yaml = R"(version: 1
workflow: notes
inputs:
  entity: {description: the document}
  text: {description: its new text}
stages:
  read_doc:
    kind: tool
    tool: lookup
    speculable: true
    bind: {entity: /entity}
    arguments: {entity: "{{entity}}"}
    reads: ["doc:{{entity}}"]
  edit_doc:
    kind: tool
    tool: update
    after: read_doc
    bind: {entity: /entity, text: /text}
    arguments: {entity: "{{entity}}", text: "{{text}}"}
    writes: ["doc:{{entity}}"]
  touch_doc:
    kind: tool
    tool: update
    after: edit_doc
    bind: {entity: /entity, text: /text}
    arguments: {entity: "{{entity}}", text: "{{text}}"}
)";
  auto corpus = *engines::Corpus::from_json(json::array({{{"key", "doc:a"}, {"text", "old"}}}));
  corpus->add_tool("lookup", {engines::Corpus::Kind::lookup, "doc:{{entity}}"});
  corpus->add_tool("update", {engines::Corpus::Kind::write, "doc:{{entity}}"});
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", std::make_shared<engines::sim::SimEngine>(), {}});
  cfg.tools = corpus;
  cfg.template_texts = {{"notes.yaml", yaml}};
  auto rt = Runtime::create(cfg);
  ASSERT_TRUE(rt.ok()) << rt.error().message;
  auto& r = **rt;
  const json a = {{"entity", "a"}};
  EXPECT_EQ(r.tool("lookup", a, {"notes", "n1", "read_doc"}).get().served, Served::engine);
  const auto cached = r.tool("lookup", a, {"notes", "n2", "read_doc"}).get();
  EXPECT_EQ(cached.served, Served::cache);
  EXPECT_EQ(json::parse(cached.body)["passage"], "old");
  const auto edit =
      r.tool("update", {{"entity", "a"}, {"text", "new"}}, {"notes", "n2", "edit_doc"}).get();
  ASSERT_TRUE(edit.ok()) << edit.error;
  const auto fresh = r.tool("lookup", a, {"notes", "n3", "read_doc"}).get();
  EXPECT_EQ(fresh.served, Served::engine);
  EXPECT_EQ(json::parse(fresh.body)["passage"], "new");
  EXPECT_GE(r.stats().csl.invalidated, 1u);
  // A stage that declares no writes, whose tool reports one, invalidates just the same.
  EXPECT_EQ(r.tool("lookup", a, {"notes", "n4", "read_doc"}).get().served, Served::cache);
  ASSERT_TRUE(r.tool("update", {{"entity", "a"}, {"text", "newer"}}, {"notes", "n4", "touch_doc"})
                  .get()
                  .ok());
  const auto newer = r.tool("lookup", a, {"notes", "n5", "read_doc"}).get();
  EXPECT_EQ(newer.served, Served::engine);
  EXPECT_EQ(json::parse(newer.body)["passage"], "newer");
}

// A request that is not what the template renders from the run's variables may read other
// records than the template's keys say: its result is answered but never stored.
TEST(Runtime, ResultsWhoseReadSetIsUnknownAreNotStored) {
  Rig rig(bench::make_workload(graph("routing"), {2, 1, 1.0}), {true, false, 0});
  const auto& run = rig.workload.runs[0];
  const auto r = rig.drive(run);
  ASSERT_TRUE(r.ok()) << r.error;
  // The executor's call with an api other than the routed handler's, in the same run.
  std::string other = run.picks[1] == "weather" ? "email" : "weather";
  const json args = {{"api", other}, {"call", "{}"}};
  const Tags tags{"routing", run.workflow_id, "execute"};
  EXPECT_EQ(rig.runtime->tool("call_api", args, tags).get().served, Served::engine);
  EXPECT_EQ(rig.runtime->tool("call_api", args, tags).get().served, Served::engine)
      << "stored under a read-set of api:" << run.picks[1];
}

}  // namespace
}  // namespace dynrt::testing

namespace dynrt::testing {
namespace {

// Calls, writes and stats racing shutdown: every call is answered (200 before, 503 after),
// nothing touches the stopped actor system (ASan runs this too).
TEST(Runtime, CallsRacingShutdownAreAnsweredAndSafe) {
  Rig rig(bench::make_workload(graph("subagent"), {5, 4, 1.0}), {});
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, other{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const Tags tags =
            t == 0 ? Tags{} : Tags{"subagent", "race-" + std::to_string(t), "research"};
        auto r = rig.runtime->tool("kb_search", {{"collection", "history"}, {"entity", "Entity1"}},
                                   tags);
        const int status = r.get().status;
        (status == 200 || status == 503 ? answered : other)++;
        if (t == 2) rig.runtime->write({"kb:history:Entity1"}).get();
        if (t == 1) (void)rig.runtime->stats();
      }
    });
  while (answered < 50)
    std::this_thread::yield();
  rig.runtime->shutdown();
  const int before = answered;
  while (answered < before + 10)
    std::this_thread::yield();  // calls after shutdown: 503 at once
  stop = true;
  for (auto& t : callers)
    t.join();
  EXPECT_EQ(other.load(), 0);
}

}  // namespace
}  // namespace dynrt::testing
