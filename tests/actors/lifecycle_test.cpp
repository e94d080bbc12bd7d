// The DynBranch lifecycle end to end on the simulated engine: value equivalence against the
// floor, early fills and chained promotion, non-interference, cross-request reuse with write
// invalidation, and clean shutdown with fills in flight.
#include "tests/actors/rig.hpp"

#include "dsl/render.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace dynrt::testing {
namespace {

using bench::RunResult;

std::vector<RunResult> drive_all(Rig& rig, std::size_t threads = 1,
                                 const bench::DriveOptions& o = {}) {
  std::vector<RunResult> out(rig.workload.runs.size());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < out.size(); i = next++)
        out[i] = rig.drive(rig.workload.runs[i], o);
    });
  for (auto& t : pool)
    t.join();
  return out;
}

// Every response byte-identical to the floor's, stage by stage.
void expect_same(const std::vector<RunResult>& floor, const std::vector<RunResult>& arm,
                 const std::string& what) {
  ASSERT_EQ(floor.size(), arm.size());
  for (std::size_t i = 0; i < floor.size(); ++i) {
    ASSERT_TRUE(floor[i].ok()) << what << " floor run " << i << ": " << floor[i].error;
    ASSERT_TRUE(arm[i].ok()) << what << " run " << i << ": " << arm[i].error;
    ASSERT_EQ(floor[i].steps.size(), arm[i].steps.size()) << what << " run " << i;
    for (std::size_t s = 0; s < floor[i].steps.size(); ++s) {
      const auto& a = floor[i].steps[s];
      const auto& b = arm[i].steps[s];
      EXPECT_EQ(a.stage, b.stage);
      EXPECT_EQ(a.request, b.request) << what << " run " << i << " step " << s;
      EXPECT_EQ(a.reply.status, b.reply.status);
      EXPECT_EQ(a.reply.body, b.reply.body) << what << " run " << i << " stage " << a.stage
                                            << " served by " << to_string(b.reply.served);
    }
  }
}

std::size_t served(const std::vector<RunResult>& runs, Served how) {
  std::size_t n = 0;
  for (const auto& r : runs)
    for (const auto& s : r.steps)
      n += s.reply.served == how;
  return n;
}

class ValueEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(ValueEquivalence, EveryArmAnswersByteForByteLikeTheFloor) {
  const auto w = bench::make_workload(graph(GetParam()), {7, 10, 1.0});
  ASSERT_FALSE(w.runs.empty());
  std::vector<RunResult> floor;
  {
    Rig rig(w, {false, false, 0});
    floor = drive_all(rig);
    EXPECT_EQ(rig.runtime->stats().fills_issued, 0u);
    EXPECT_EQ(served(floor, Served::engine), rig.runtime->stats().requests);
  }
  struct Arm {
    const char* name;
    bool reuse, fills;
    std::size_t threads;
  };
  for (const Arm arm : {Arm{"full", true, true, 1}, Arm{"full, 3 concurrent runs", true, true, 3},
                        Arm{"c1-only", true, false, 1}, Arm{"c2-only", false, true, 1}}) {
    Rig rig(w, {arm.reuse, arm.fills, 1});
    const auto runs = drive_all(rig, arm.threads);
    expect_same(floor, runs, arm.name);
    const auto st = rig.runtime->stats();
    if (!arm.fills) {
      EXPECT_EQ(st.fills_issued, 0u) << arm.name;
    }
    if (!arm.reuse) {
      EXPECT_EQ(st.served_cache, 0u) << arm.name;
    }
    // The comparison is not vacuous: the arm served something without execution.
    if (arm.fills && GetParam() != "react") {
      EXPECT_GT(st.served_fill, 0u) << arm.name;
    }
  }
}

TEST_P(ValueEquivalence, StreamedAnswersCarryTheSameText) {
  const auto w = bench::make_workload(graph(GetParam()), {3, 4, 1.0});
  std::vector<RunResult> floor, full;
  {
    Rig rig(w, {false, false, 0});
    floor = drive_all(rig, 1, {true, nullptr, nullptr, nullptr, nullptr});
  }
  {
    Rig rig(w, {true, true, 1});
    full = drive_all(rig, 1, {true, nullptr, nullptr, nullptr, nullptr});
  }
  expect_same(floor, full, "streamed");
  // A served answer is replayed as chunks whose text is the body's text.
  for (const auto& run : full)
    for (const auto& s : run.steps) {
      if (s.endpoint.rfind("/v1/dynrt/tools/", 0) == 0) continue;
      ASSERT_FALSE(s.chunks.empty()) << s.stage << " served by " << to_string(s.reply.served);
      std::string text;
      bool usage = false;
      for (const auto& c : s.chunks) {
        const auto j = nlohmann::json::parse(c);
        EXPECT_EQ(j["object"], "chat.completion.chunk");
        if (!j["choices"].empty() && j["choices"][0]["delta"].contains("content"))
          text += j["choices"][0]["delta"]["content"].get<std::string>();
        usage = usage || (j.contains("usage") && j["usage"].is_object());
      }
      const auto body = nlohmann::json::parse(s.reply.body);
      EXPECT_EQ(text, body["choices"][0]["message"]["content"].get<std::string>()) << s.stage;
      EXPECT_TRUE(usage) << s.stage << ": include_usage asked for the usage chunk";
    }
}

INSTANTIATE_TEST_SUITE_P(Templates, ValueEquivalence,
                         ::testing::Values("routing", "react", "subagent", "hci"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Routing: while the router decodes its reasoning, the selected handler's fill and its
// executor's run; both demands are promoted with no engine work. The router's window is about
// half the downstream work (as the paper's F3 measures), so a demand may arrive before its fill
// ends: it then waits for the fill rather than running the stage again.
TEST(EarlyFill, HandlerAndExecutorAreServedFromTheFillWithoutEngineWork) {
  auto w = bench::make_workload(graph("routing"), {11, 1, 1.0});
  Rig rig(w, {true, true, 10});
  const auto& run = rig.workload.runs[0];
  std::uint64_t submitted_before = 0;
  bench::DriveOptions o;
  o.before_step = [&](const bench::Step&) { submitted_before = rig.engine->counters().submitted; };
  o.after_step = [&](const bench::Step& s) {
    if (s.stage == "handle") {
      EXPECT_EQ(s.reply.served, Served::fill);
      EXPECT_EQ(rig.engine->counters().submitted, submitted_before) << "the handler demand ran";
    }
    if (s.stage == "execute") {
      EXPECT_EQ(s.reply.served, Served::fill) << "chained promotion";
    }
  };
  const auto r = rig.drive(run, o);
  ASSERT_TRUE(r.ok()) << r.error;
  const auto st =
      await_stats(*rig.runtime, [](const RuntimeStats& s) { return s.fills_consumed >= 2; });
  EXPECT_EQ(st.served_fill, 4u);  // two turns, handler and executor each
  EXPECT_EQ(st.wait_timeouts, 0u) << "a demand stopped waiting and ran the stage itself";
  EXPECT_GE(st.fills_consumed, 2u);
  EXPECT_GT(st.engine_ms_saved, 0);
}

bench::Workload with_router_answers(bench::Workload w, const std::vector<std::string>& answers) {
  engines::sim::Script script;
  const auto& g = graph("routing");
  std::size_t i = 0;
  for (const auto& run : w.runs)
    for (std::size_t turn = 0; turn < 2; ++turn) {
      const auto body =
          dsl::render_stage(*g.stage("router"), {{"query", bench::routing_query(run, turn)}});
      script.add_exact(body->body, answers[i++ % answers.size()]);
    }
  w.script = std::move(script);
  return w;
}

// Sends fill requests on to the wrapped engine at once, but holds each of the first `demands`
// canonical requests (a harness's demands) until `fills_each` more speculative fills have
// reached the engine: the n-th demand goes on once n * fills_each were submitted; later demands
// go on at once. A scenario about what happens to fills when a demand resolves their branch
// then does not depend on the actor graph issuing them within the demand's few simulated
// milliseconds, which a sanitized build on a loaded machine does not. Only speculative fills
// count (priority above 0): a fill started for an emitted winner runs at canonical priority
// (0) after its demand went on, and counted, it would let the next turn's demand go before
// that turn's fills were issued. A demand held for `guard` is sent on anyway, so a scenario
// whose fills never come fails on its own assertions instead of hanging.
class FillsFirstEngine final : public engines::Engine {
 public:
  FillsFirstEngine(std::shared_ptr<engines::Engine> inner, std::size_t fills_each,
                   std::size_t demands, std::chrono::seconds guard = std::chrono::seconds(30))
      : inner_(std::move(inner)), fills_each_(fills_each), demands_(demands), guard_(guard) {
    guard_thread_ = std::thread([this] { guard_loop(); });
  }
  ~FillsFirstEngine() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    guard_thread_.join();
  }
  FillsFirstEngine(const FillsFirstEngine&) = delete;
  FillsFirstEngine& operator=(const FillsFirstEngine&) = delete;

  engines::RequestHandle submit(engines::EngineRequest request,
                                std::shared_ptr<engines::ResponseSink> sink) override {
    engines::RequestHandle h = 0;
    {
      std::lock_guard lock(mutex_);
      h = next_++;
      if (request.kind == engines::RequestKind::fill) fill_priorities_.push_back(request.priority);
      if (request.kind == engines::RequestKind::canonical && gated_ < demands_) {
        ++gated_;
        held_.emplace(h, Held{std::move(request), std::move(sink),
                              std::chrono::steady_clock::now() + guard_});
        changed_.notify_all();
        return h;
      }
    }
    const bool speculative = request.kind == engines::RequestKind::fill && request.priority > 0;
    forward(h, std::move(request), std::move(sink));
    if (speculative) {
      {
        std::lock_guard lock(mutex_);
        ++fills_;  // counted once it is in the engine
      }
      changed_.notify_all();
    }
    return h;
  }
  void cancel(engines::RequestHandle handle) override {
    std::shared_ptr<engines::ResponseSink> sink;
    engines::RequestHandle inner = 0;
    {
      std::lock_guard lock(mutex_);
      if (auto it = held_.find(handle); it != held_.end()) {
        sink = std::move(it->second.sink);
        held_.erase(it);
      } else if (auto f = forwarded_.find(handle); f != forwarded_.end()) {
        inner = f->second;
      }
    }
    if (sink) sink->on_error({engines::ErrorKind::cancelled, 0, {}, "cancelled"});
    if (inner != 0) inner_->cancel(inner);
  }
  engines::LoadSnapshot load() const override { return inner_->load(); }
  // The priority of each fill request, in the order they came.
  std::vector<int> fill_priorities() const {
    std::lock_guard lock(mutex_);
    return fill_priorities_;
  }
  std::string name() const override { return inner_->name(); }

 private:
  struct Held {
    engines::EngineRequest request;
    std::shared_ptr<engines::ResponseSink> sink;
    std::chrono::steady_clock::time_point guard;
  };
  void forward(engines::RequestHandle h, engines::EngineRequest request,
               std::shared_ptr<engines::ResponseSink> sink) {
    const auto inner = inner_->submit(std::move(request), std::move(sink));
    std::lock_guard lock(mutex_);
    forwarded_[h] = inner;
  }
  // Sends on the oldest held demand once its fills have come (or its guard has passed).
  void guard_loop() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (!held_.empty()) {
        auto it = held_.begin();
        if (fills_ >= (released_ + 1) * fills_each_ ||
            std::chrono::steady_clock::now() >= it->second.guard) {
          const auto h = it->first;
          Held held = std::move(it->second);
          held_.erase(it);
          ++released_;
          lock.unlock();
          forward(h, std::move(held.request), std::move(held.sink));
          lock.lock();
          continue;
        }
      }
      changed_.wait_for(lock, std::chrono::milliseconds(100));
    }
  }

  std::shared_ptr<engines::Engine> inner_;
  const std::size_t fills_each_;
  const std::size_t demands_;
  const std::chrono::seconds guard_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<engines::RequestHandle, Held> held_;
  std::map<engines::RequestHandle, engines::RequestHandle> forwarded_;
  engines::RequestHandle next_ = 1;
  std::size_t fills_ = 0;     // speculative fill requests sent on so far
  std::size_t gated_ = 0;     // demands held so far
  std::size_t released_ = 0;  // demands sent on so far
  std::vector<int> fill_priorities_;
  bool stop_ = false;
  std::thread guard_thread_;
};

// The handler answers of the losers (weather, email) of both turns of the first run, scripted to
// run to the handler's max_tokens (256 tokens).
void script_long_losers(bench::Workload& w) {
  std::string long_answer;
  for (int i = 0; i < 400; ++i)
    long_answer += " word";
  for (std::size_t turn = 0; turn < 2; ++turn)
    for (const char* loser : {"weather", "email"}) {
      const auto body =
          dsl::render_stage(*graph("routing").stage("handle"),
                            {{"handler", loser}, {"query", bench::routing_query(w.runs[0], turn)}});
      w.script.add_exact(body->body, long_answer);
    }
}

// A router that answers at once resolves while every fill still decodes: the losers are
// aborted in the engine and their slots and KV come back; the winner is waited for. Each
// router demand reaches the engine only after its branch's three fills (weather, calendar,
// email) have: the order the scenario is about, made certain rather than hoped for. The
// losers' answers are scripted to run to the handler's max_tokens (256 tokens, 320 ms at
// this time scale, where the router takes about 8 ms), so the cancel has that long to come.
TEST(NonInterference, ExclusiveLosersAreAbortedInTheEngine) {
  auto w = with_router_answers(bench::make_workload(graph("routing"), {5, 1, 1.0}),
                               {"HANDLER: calendar"});
  w.runs[0].picks = {"calendar", "calendar"};
  script_long_losers(w);
  RigOptions o{true, true, 50};
  o.wrap_engine = [](std::shared_ptr<engines::Engine> sim) {
    return std::make_shared<FillsFirstEngine>(std::move(sim), 3, 2);  // two turns' routers
  };
  Rig rig(w, o);
  const auto r = rig.drive(w.runs[0]);
  ASSERT_TRUE(r.ok()) << r.error;
  for (const auto& s : r.steps)
    if (s.stage == "handle") {
      EXPECT_EQ(s.reply.served, Served::fill) << "the winner, after a wait";
    }
  rig.engine->drain();
  // A fill actor counts its cancel as it ends, after the engine let go of its request.
  const auto st =
      await_stats(*rig.runtime, [](const RuntimeStats& x) { return x.fills_cancelled >= 2; });
  EXPECT_GE(st.fills_cancelled, 2u);
  // No loser ran to completion: the engine completed the two routers and the two winning
  // handler fills, and aborted every other request it had started (a loser cancelled before
  // it reached the engine never started).
  const auto c = rig.engine->counters();
  EXPECT_EQ(c.completed, 4u);
  EXPECT_EQ(c.submitted, c.completed + c.cancelled);
  EXPECT_GE(c.cancelled, 1u) << "losers aborted in the engine";
  const auto load = rig.engine->load();
  EXPECT_EQ(load.slots_busy, 0);
  EXPECT_EQ(load.kv_used, 0);
  EXPECT_GT(rig.engine->counters().wasted.count(), 0) << "the aborted work is counted as waste";
}

// Resolve on emission: a router that writes its HANDLER line first and then goes on decoding
// stops the losers' fills as soon as that line is complete. The losers are scripted shorter than
// the router's decode (256 tokens against its 300-odd), so without the emission they would run
// to their end; with it the engine completes only the routers and the winners. The router's
// answer is still the whole output, and the whole output still resolves the branch: the handler
// demand is served by the winner's fill.
TEST(Emission, LosersStopWhenTheDeciderEmitsItsSelection) {
  std::string reasoning;
  for (int i = 0; i < 300; ++i)
    reasoning += " because";
  const std::string router_answer = "HANDLER: calendar\n" + reasoning;
  auto w =
      with_router_answers(bench::make_workload(graph("routing"), {5, 1, 1.0}), {router_answer});
  w.runs[0].picks = {"calendar", "calendar"};
  script_long_losers(w);
  for (const bool emission : {true, false}) {
    SCOPED_TRACE(emission ? "resolve on emission" : "resolve at the end of the decode");
    RigOptions o{true, true, 50};
    o.emission = emission;
    o.wrap_engine = [](std::shared_ptr<engines::Engine> sim) {
      return std::make_shared<FillsFirstEngine>(std::move(sim), 3, 2);  // two turns' routers
    };
    Rig rig(w, o);
    const auto r = rig.drive(w.runs[0]);
    ASSERT_TRUE(r.ok()) << r.error;
    for (const auto& s : r.steps) {
      if (s.stage == "router") {
        EXPECT_EQ(nlohmann::json::parse(s.reply.body)["choices"][0]["message"]["content"],
                  router_answer);
      }
      if (s.stage == "handle") {
        EXPECT_EQ(s.reply.served, Served::fill);
      }
    }
    rig.engine->drain();
    const auto st =
        await_stats(*rig.runtime, [](const RuntimeStats& x) { return x.branches_settled >= 2; });
    const auto c = rig.engine->counters();
    if (emission) {
      EXPECT_EQ(st.emissions, 2u);
      EXPECT_EQ(st.fills_outrun, 4u) << "both losers of both turns, still decoding";
      EXPECT_EQ(c.completed, 4u) << "no loser ran to its end";
    } else {
      EXPECT_EQ(st.emissions, 0u);
      EXPECT_EQ(st.fills_outrun, 0u);
      EXPECT_GT(c.completed, 4u) << "losers shorter than the decode ran to their end";
    }
  }
}

// The emitted winner had no fill (one fill per branch, and Action 1 chose weather's): its fill
// starts when the router emits its pick, and serves the handler demand. (In the second turn
// the frequency predictor ranks calendar first, but Action 1 learned from the first that the
// second-ranked candidate was selected, and fills weather again.)
TEST(Emission, AWinnerWithoutAFillStartsWhenItIsEmitted) {
  std::string reasoning;
  for (int i = 0; i < 300; ++i)
    reasoning += " because";
  auto w = with_router_answers(bench::make_workload(graph("routing"), {5, 1, 1.0}),
                               {"HANDLER: calendar\n" + reasoning});
  w.runs[0].picks = {"calendar", "calendar"};
  script_long_losers(w);
  RigOptions o{true, true, 50};
  o.fanout = 1;
  std::shared_ptr<FillsFirstEngine> gate;
  o.wrap_engine = [&gate](std::shared_ptr<engines::Engine> sim) {
    gate = std::make_shared<FillsFirstEngine>(std::move(sim), 1, 2);
    return gate;
  };
  Rig rig(w, o);
  const auto r = rig.drive(w.runs[0]);
  ASSERT_TRUE(r.ok()) << r.error;
  for (const auto& s : r.steps)
    if (s.stage == "handle") {
      EXPECT_EQ(s.reply.served, Served::fill);
    }
  rig.engine->drain();
  const auto st =
      await_stats(*rig.runtime, [](const RuntimeStats& x) { return x.branches_settled >= 2; });
  EXPECT_EQ(st.emissions, 2u);
  EXPECT_EQ(st.fills_outrun, 2u) << "each turn's weather fill";
  EXPECT_EQ(st.fills_emitted, 2u) << "each turn's calendar fill";
  EXPECT_EQ(st.fills_issued, 4u);
  EXPECT_EQ(st.served_fill, 4u) << "both turns' handler and executor";
  // The winners' handler fills ran at canonical priority (0), the losers' at fill priority.
  const auto priorities = gate->fill_priorities();
  EXPECT_EQ(std::count(priorities.begin(), priorities.end(), 0), 2)
      << ::testing::PrintToString(priorities);
  EXPECT_EQ(std::count(priorities.begin(), priorities.end(), 10), 2);
}

// An emission that the rest of the output contradicts promotes nothing: the losers were
// stopped early, and the whole output, ambiguous, discards the winner's fill too.
TEST(Emission, AnEmissionTheWholeOutputContradictsPromotesNothing) {
  auto w = with_router_answers(bench::make_workload(graph("routing"), {6, 1, 1.0}),
                               {"HANDLER: weather\n" + std::string(200, 'x') + " HANDLER: email"});
  RigOptions o{true, true, 10};
  o.wrap_engine = [](std::shared_ptr<engines::Engine> sim) {
    return std::make_shared<FillsFirstEngine>(std::move(sim), 3, 1);
  };
  Rig rig(w, o);
  ASSERT_FALSE(rig.drive(w.runs[0]).ok()) << "the harness cannot read a selection either";
  rig.engine->drain();
  auto body =
      dsl::render_stage(*graph("routing").stage("handle"),
                        {{"handler", "weather"}, {"query", bench::routing_query(w.runs[0], 0)}});
  const auto reply =
      rig.runtime
          ->complete(
              {"/v1/chat/completions", body->body, {"routing", w.runs[0].workflow_id, "handle"}})
          .get();
  EXPECT_EQ(reply.served, Served::engine) << "the emitted selection's fill was promoted";
  EXPECT_EQ(rig.runtime->stats().emissions, 1u);
}

// An ambiguous selection promotes nothing: every demand runs on the engine. The router's
// demand reaches the engine after its three fills, so there is speculation to discard.
TEST(NonInterference, AmbiguousSelectionPromotesNothing) {
  auto w = with_router_answers(bench::make_workload(graph("routing"), {6, 1, 1.0}),
                               {std::string(200, 'x') + " HANDLER: weather or HANDLER: email"});
  RigOptions o{true, true, 10};
  o.wrap_engine = [](std::shared_ptr<engines::Engine> sim) {
    return std::make_shared<FillsFirstEngine>(std::move(sim), 3, 1);
  };
  Rig rig(w, o);
  const auto r = rig.drive(w.runs[0]);
  // The harness cannot read a selection either, so it cannot render the handler: it stops.
  ASSERT_FALSE(r.ok());
  rig.engine->drain();
  // Render the handler's request as a harness that guessed "weather" would, and send it.
  auto body =
      dsl::render_stage(*graph("routing").stage("handle"),
                        {{"handler", "weather"}, {"query", bench::routing_query(w.runs[0], 0)}});
  auto reply =
      rig.runtime
          ->complete(
              {"/v1/chat/completions", body->body, {"routing", w.runs[0].workflow_id, "handle"}})
          .get();
  EXPECT_EQ(reply.served, Served::engine);
  const auto st = await_stats(*rig.runtime, [](const RuntimeStats& x) {
    return x.shadows_discarded + x.fills_cancelled > 0;
  });
  EXPECT_EQ(st.served_fill, 0u);
  EXPECT_GT(st.shadows_discarded + st.fills_cancelled, 0u);
}

// A request that differs from a shadow's in one result-determining field does not get it, and
// neither does an exact request for a loser after resolution.
TEST(NonInterference, NearMissesAndLosersAreNeverServedFromFills) {
  auto w = bench::make_workload(graph("routing"), {8, 5, 1.0});
  w = with_router_answers(std::move(w), {std::string(1200, 'y') + "\nHANDLER: weather"});
  Rig rig(w, {true, true, 10});
  const auto& g = graph("routing");
  // The exact call first: it takes the winner's fill (waiting for it if it still runs). A near
  // miss sent first would settle the branch and, while the fill still ran, discard it. On a
  // heavily loaded (sanitized) build the router can end before its fills are even issued; the
  // next run (another query) is then tried, a few at most.
  Served served = Served::engine;
  bench::Run run;
  nlohmann::json exact;
  Tags handle_tags;
  for (std::size_t attempt = 0; attempt < 5 && served != Served::fill; ++attempt) {
    run = w.runs[attempt];
    auto router = dsl::render_stage(*g.stage("router"), {{"query", bench::routing_query(run, 0)}});
    ASSERT_EQ(
        rig.runtime
            ->complete(
                {"/v1/chat/completions", router->body, {"routing", run.workflow_id, "router"}})
            .get()
            .status,
        200);
    const dsl::Bindings vars{{"handler", "weather"}, {"query", bench::routing_query(run, 0)}};
    exact = dsl::render_stage(*g.stage("handle"), vars)->body;
    handle_tags = {"routing", run.workflow_id, "handle"};
    served = rig.runtime->complete({"/v1/chat/completions", exact, handle_tags}).get().served;
  }
  EXPECT_EQ(served, Served::fill);
  // Then the near miss (one field differs) and the loser: neither may get that result.
  auto near = exact;
  near["max_tokens"] = 255;
  EXPECT_EQ(rig.runtime->complete({"/v1/chat/completions", near, handle_tags}).get().served,
            Served::engine);
  auto loser = dsl::render_stage(*g.stage("handle"),
                                 {{"handler", "email"}, {"query", bench::routing_query(run, 0)}});
  EXPECT_EQ(rig.runtime->complete({"/v1/chat/completions", loser->body, handle_tags}).get().served,
            Served::engine);
}

// Sub-Agent: a later run with the same sub-task is served from the library; a write to a
// record the sub-task read makes the next demand a miss that re-executes.
TEST(CrossRequestReuse, LaterRunIsServedFromTheLibraryUntilAWrite) {
  auto w = bench::make_workload(graph("subagent"), {9, 3, 1.0});
  for (auto& run : w.runs) {
    run.entity = "Entity3";
    run.picks = {"history"};
  }
  // Re-render the plan answers for the fixed entity and pick.
  engines::sim::Script script;
  for (auto& run : w.runs) {
    run.input = "Research [[Entity3]] for me [q " + run.workflow_id + "]";
    script.add_exact(bench::subagent_plan_request(run), R"({"subagent": "history"})");
  }
  w.script = std::move(script);
  Rig rig(w, {true, false, 0});  // C1 only: reuse alone must do it
  auto first = rig.drive(w.runs[0]);
  ASSERT_TRUE(first.ok()) << first.error;
  for (const auto& s : first.steps)
    EXPECT_EQ(s.reply.served, Served::engine) << s.stage;
  auto second = rig.drive(w.runs[1]);
  ASSERT_TRUE(second.ok()) << second.error;
  for (const auto& s : second.steps)
    if (s.stage == "research" || s.stage == "summarize") {
      EXPECT_EQ(s.reply.served, Served::cache) << s.stage;
    }
  // The record changes, and the write is acknowledged before the next run.
  rig.corpus->put("kb:history:Entity3", "New findings about Entity3.");
  EXPECT_GE(rig.runtime->write({"kb:history:Entity3"}).get(), 1u);
  auto third = rig.drive(w.runs[2]);
  ASSERT_TRUE(third.ok()) << third.error;
  for (const auto& s : third.steps) {
    if (s.stage != "research" && s.stage != "summarize") continue;
    EXPECT_EQ(s.reply.served, Served::engine) << s.stage << " after the write";
    if (s.stage == "research") {
      EXPECT_EQ(nlohmann::json::parse(s.reply.body)["passage"], "New findings about Entity3.");
    }
  }
  EXPECT_GE(rig.runtime->stats().csl.invalidated, 1u);
}

// Shutdown with fills and a canonical request in flight: returns, answers the waiting call,
// aborts the engine work, and leaves no actor behind.
TEST(Shutdown, WithFillsInFlightIsCleanAndPrompt) {
  auto w = bench::make_workload(graph("routing"), {12, 1, 1.0});
  Rig rig(w, {true, true, 1000});  // real time: the router decodes for seconds
  const auto& run = w.runs[0];
  auto router = dsl::render_stage(*graph("routing").stage("router"),
                                  {{"query", bench::routing_query(run, 0)}});
  auto pending = rig.runtime->complete(
      {"/v1/chat/completions", router->body, {"routing", run.workflow_id, "router"}});
  // Wait until the fills are on the engine (an event, not a duration).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (rig.engine->load().slots_busy < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_GE(rig.engine->load().slots_busy, 2);
  EXPECT_GT(rig.runtime->stats().fills_issued, 0u);
  rig.runtime->shutdown();
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(pending.get().status, 503);
  EXPECT_EQ(rig.runtime->stats().workflows_live, 0u);
  rig.engine->drain();
  EXPECT_EQ(rig.engine->load().slots_busy, 0);
  EXPECT_GE(rig.engine->counters().cancelled, 2u);
  // Calls after shutdown are answered at once.
  EXPECT_EQ(rig.runtime->complete({"/v1/chat/completions", router->body, {}}).get().status, 503);
}

}  // namespace
}  // namespace dynrt::testing
