// The simulated engine: its timing model in simulated time (batching, queueing, interference,
// KV limits, cancellation), the determinism of its outputs, and the threaded engine.
#include "engines/sim/engine.hpp"
#include "engines/sim/model.hpp"
#include "engines/sim/profiles.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <sstream>

namespace dynrt::engines::sim {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

SimTime at_ms(double v) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(v));
}
double in_ms(Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

EngineRequest chat(const std::string& content, int max_tokens = 20, bool stream = false,
                   RequestKind kind = RequestKind::canonical, int priority = 0) {
  EngineRequest r;
  r.body = {{"model", "m"},
            {"messages", json::array({{{"role", "user"}, {"content", content}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  if (stream) r.body["stream"] = true;
  r.kind = kind;
  r.priority = priority;
  return r;
}

struct Sim {
  SimModel model;
  std::vector<SimEvent> events;
  explicit Sim(SimParams p = {}, Script s = {}) : model(std::move(p), std::move(s)) {}
  void until(double ms) { model.advance(at_ms(ms), events); }
  void all() {
    while (auto t = model.next_event())
      model.advance(*t, events);
  }
  const SimEvent* completion(RequestHandle h) const {
    for (const auto& e : events) {
      if (e.handle == h && e.type != SimEvent::Type::chunk && e.type != SimEvent::Type::progress)
        return &e;
    }
    return nullptr;
  }
  double done_ms(RequestHandle h) const { return in_ms(completion(h)->at); }
};

// The request's generation, as the model would produce it.
Generation gen_of(const EngineRequest& r, const SimParams& p = {}) {
  return *generate(r.endpoint, r.body, Script{}, p.text);
}

TEST(SimModel, ALoneRequestTakesPrefillThenOneStepPerToken) {
  SimParams p;
  Sim run(p);
  const EngineRequest req = chat("hello", 10);
  const Generation g = gen_of(req);
  ASSERT_EQ(g.tokens.size(), 10u);  // the pseudo-text is longer than max_tokens
  run.model.submit(1, req, at_ms(0));
  run.all();
  ASSERT_NE(run.completion(1), nullptr);
  const EngineResult& r = run.completion(1)->result;
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.usage.completion_tokens, 10);
  EXPECT_EQ(r.usage.prompt_tokens, g.prompt_tokens);
  // Alone, a step is 25 ms stretched only by the request's own (tiny) KV share.
  const double prefill = 10 + 0.05 * static_cast<double>(g.prompt_tokens);
  double t = prefill;
  for (int i = 0; i < 10; ++i) {
    const double kv = static_cast<double>(g.prompt_tokens + i) / 600000.0;
    t += 25 * (1 + InterferenceModel{}.stretch(0, kv));
  }
  EXPECT_NEAR(run.done_ms(1), t, 1e-3);
  EXPECT_NEAR(in_ms(r.engine_time), t, 1e-3);
}

TEST(SimModel, ABatchSharesStepsAndEachStepIsStretched) {
  Sim alone;
  alone.model.submit(1, chat("a", 20), at_ms(0));
  alone.all();
  Sim pair;
  pair.model.submit(1, chat("a", 20), at_ms(0));
  pair.model.submit(2, chat("b", 20), at_ms(0));
  pair.all();
  // Both finish; each is slower than alone by about the 4.5% sharing overhead.
  const double ratio = pair.done_ms(1) / alone.done_ms(1);
  EXPECT_GT(ratio, 1.03);
  EXPECT_LT(ratio, 1.06);
  EXPECT_EQ(pair.model.counters().steps, 20u);  // one step per token, shared
}

// The token counters a load reading carries: one gap per request per step, each as long as its
// step; the mean batch is the gaps over the steps; the lone request's gap is the profile's step.
TEST(SimModel, LoadCountsTokenGapsStepsAndTheLoneGap) {
  SimParams p;
  p.chunked_prefill_tokens = 64;
  Sim pair(p);
  pair.model.submit(1, chat("a", 20), at_ms(0));
  pair.model.submit(2, chat("b", 10), at_ms(0));
  pair.all();
  const auto& c = pair.model.counters();
  const LoadSnapshot l = pair.model.load();
  EXPECT_EQ(l.lone_token_ms, p.decode_step_ms);
  // Request 1 advanced in 20 steps and request 2 in 10 of them.
  EXPECT_EQ(l.token_gaps, 30.0);
  EXPECT_EQ(l.decode_steps, static_cast<double>(c.decode_steps));
  EXPECT_GE(c.decode_steps, 20u);
  EXPECT_LE(c.decode_steps, c.steps);
  // Ten shared steps stretched by the sharing overhead, ten alone: the gaps' mean is between.
  const double mean_ms = l.token_gap_s * 1000.0 / l.token_gaps;
  EXPECT_GT(mean_ms, p.decode_step_ms);
  EXPECT_LT(mean_ms, p.decode_step_ms * 1.2);
  // Prompts processed beside a decoding request stall it; the first prompt chunks, in a step
  // with nothing decoding yet, stalled no one.
  EXPECT_LE(l.prompt_tokens, static_cast<double>(c.prompt_tokens));
}

// Past the compute-bound batch a step lasts the batch's compute, so throughput stops growing:
// 40 requests at 2 ms of compute each make 80 ms steps, not 10 ms ones stretched a little.
TEST(SimModel, ALargeBatchIsComputeBound) {
  SimParams p;
  p.decode_step_ms = 10;
  p.decode_compute_ms_per_token = 2;
  p.interference = InterferenceModel{0, 0, 0, 0};  // no stretch: the floor alone
  p.prefill_base_ms = 0;
  p.prefill_ms_per_token = 0;
  Sim few(p), many(p);
  for (RequestHandle h = 1; h <= 4; ++h)
    few.model.submit(h, chat("q" + std::to_string(h), 10), at_ms(0));
  for (RequestHandle h = 1; h <= 40; ++h)
    many.model.submit(h, chat("q" + std::to_string(h), 10), at_ms(0));
  few.all();
  many.all();
  EXPECT_NEAR(few.done_ms(1), 10 * 10, 1e-6);    // 4 x 2 ms < 10 ms: memory-bound
  EXPECT_NEAR(many.done_ms(40), 10 * 80, 1e-6);  // 40 x 2 ms per step
  EXPECT_EQ(many.model.load().concurrency, 5);   // 10 ms / 2 ms
}

TEST(SimModel, RequestsQueueForSlots) {
  SimParams p;
  p.slots = 1;
  Sim run(p);
  run.model.submit(1, chat("first", 5), at_ms(0));
  run.model.submit(2, chat("second", 5), at_ms(0));
  run.until(1);
  EXPECT_EQ(run.model.load().slots_busy, 1);
  EXPECT_EQ(run.model.load().queued, 1);
  run.all();
  const double first = run.done_ms(1);
  const double second_engine = in_ms(run.completion(2)->result.engine_time);
  EXPECT_NEAR(run.done_ms(2), first + second_engine, 1e-6);  // admitted when the first left
}

TEST(SimModel, RequestsQueueForKvAndOversizedOnesAreRejected) {
  SimParams p;
  const EngineRequest big = chat(std::string(4000, 'x'), 100);
  const Generation g = gen_of(big);
  p.kv_tokens = g.prompt_tokens + 100 + 50;  // room for one such request, not two
  Sim run(p);
  run.model.submit(1, big, at_ms(0));
  run.model.submit(2, chat(std::string(4000, 'y'), 100), at_ms(0));
  run.until(1);
  EXPECT_EQ(run.model.load().slots_busy, 1);
  EXPECT_EQ(run.model.load().queued, 1);
  run.all();
  EXPECT_GT(run.done_ms(2), run.done_ms(1));

  SimParams tiny;
  tiny.kv_tokens = 100;
  Sim small(tiny);
  small.model.submit(1, big, at_ms(0));
  small.all();
  ASSERT_NE(small.completion(1), nullptr);
  EXPECT_EQ(small.completion(1)->type, SimEvent::Type::error);
  EXPECT_EQ(small.completion(1)->error.kind, ErrorKind::rejected);
}

// The counters say how full the KV pool was and how long the queue waited for KV with a slot
// free: the second request waits exactly as long as the first holds its KV, and the pool holds
// one request's reservation throughout (kv_need = prompt + completion tokens).
TEST(SimModel, CountersIntegrateTheKvInUseAndTheWaitForIt) {
  SimParams p;
  const EngineRequest first = chat(std::string(4000, 'x'), 100);
  const EngineRequest second = chat(std::string(4000, 'y'), 100);
  auto need = [](const EngineRequest& r) {
    const Generation g = gen_of(r);
    return static_cast<double>(g.prompt_tokens) + static_cast<double>(g.tokens.size());
  };
  p.kv_tokens = gen_of(first).prompt_tokens + 100 + 50;  // room for one, not two
  Sim run(p);
  run.model.submit(1, first, at_ms(0));
  run.model.submit(2, second, at_ms(0));
  run.all();
  const SimCounters& c = run.model.counters();
  EXPECT_NEAR(in_ms(c.kv_wait), run.done_ms(1), 1e-6);
  const double expected =
      (need(first) * run.done_ms(1) + need(second) * (run.done_ms(2) - run.done_ms(1))) / 1000;
  EXPECT_NEAR(c.kv_token_s, expected, 1e-6 * expected);
  // Nothing waits when slots, not KV, are short: one slot, two small requests.
  SimParams one;
  one.slots = 1;
  Sim slots(one);
  slots.model.submit(1, chat("a", 10), at_ms(0));
  slots.model.submit(2, chat("b", 10), at_ms(0));
  slots.all();
  EXPECT_EQ(slots.model.counters().kv_wait, Duration::zero());
  EXPECT_GT(slots.model.counters().kv_token_s, 0);
}

// Figure 5b in the engine: a canonical request decoding beside 48 fills that hold 0.244% of
// the KV pool each is about 53% slower per token than alone.
TEST(SimModel, InterferenceFollowsFigure5b) {
  std::string long_answer;
  for (int i = 0; i < 400; ++i)
    long_answer += i ? " word" : "word";
  auto decode_ms = [&](int fills) {
    SimParams p;
    p.kv_tokens = 1'000'000;
    Script script;
    script.add_contains("FILL", long_answer);  // fills outlive the canonical request
    Sim run(p, script);
    for (int i = 0; i < fills; ++i) {
      // About 2,230 prompt tokens each, and about 100 generated over the canonical's decode:
      // 0.244% of the pool per fill, the count sweep's share.
      run.model.submit(100 + i,
                       chat("FILL " + std::to_string(i) + std::string(8900, 'a'), 400, false,
                            RequestKind::fill, 10),
                       at_ms(0));
    }
    const EngineRequest canonical = chat("canonical", 200);
    run.model.submit(1, canonical, at_ms(300));  // once the fills are decoding
    run.all();
    const double prefill = 10 + 0.05 * static_cast<double>(gen_of(canonical).prompt_tokens);
    return run.done_ms(1) - 300 - prefill;
  };
  const double alone = decode_ms(0);
  EXPECT_NEAR(decode_ms(48) / alone, 1.53, 0.04);  // 48 co-resident fills: +53%
  EXPECT_NEAR(decode_ms(1) / alone, 1.05, 0.01);   // 1 fill: +4-6%
  EXPECT_NEAR(decode_ms(3) / alone, 1.06, 0.01);   // 3 fills: +4-6%
}

// A caller whose clock is ahead of the model's last event (SimEngine after an idle spell)
// submits for its own time: the request arrives then, not back-dated to the model's time.
TEST(SimModel, RequestsSubmittedAheadArriveAtTheirTime) {
  Sim run;
  const EngineRequest req = chat("later", 10);
  run.model.submit(1, req, at_ms(1000));
  run.model.submit(2, chat("never", 10), at_ms(1500));
  EXPECT_EQ(run.model.load().slots_busy, 0);
  run.until(999);
  EXPECT_EQ(run.model.load().slots_busy, 0);
  EXPECT_EQ(run.model.load().queued, 0);
  run.model.cancel(2, at_ms(999));  // cancelled before it arrived: never admitted
  run.all();
  const double prefill = 10 + 0.05 * static_cast<double>(gen_of(req).prompt_tokens);
  EXPECT_NEAR(run.done_ms(1), 1000 + prefill + 25.0 * gen_of(req).tokens.size(), 1e-3);
  ASSERT_NE(run.completion(2), nullptr);
  EXPECT_EQ(run.completion(2)->error.kind, ErrorKind::cancelled);
  EXPECT_EQ(run.model.counters().wasted, Duration::zero());
  EXPECT_EQ(run.model.in_flight(), 0u);
}

// Figure 5b's context sweep: 24 fills whose context grows from none to 4,500 words (about
// 5,900 tokens), their KV share from 3% to 24% of the pool; the canonical request's decode
// slows by 11% and by 145%. The fills' prompts are sized so that, with what they generate
// while the canonical request decodes, they hold those shares of the default 600,000-token
// pool on average over its decode.
TEST(SimModel, InterferenceGrowsWithTheFillsContextAsInFigure5b) {
  std::string long_answer;
  for (int i = 0; i < 400; ++i)
    long_answer += i ? " word" : "word";
  auto decode_ms = [&](int fills, std::size_t prompt_chars, double* kv_share) {
    Script script;
    script.add_contains("FILL", long_answer);
    script.add_contains("CANONICAL", long_answer);  // 200 tokens: cut at max_tokens
    Sim run(SimParams{}, script);
    for (int i = 0; i < fills; ++i) {
      run.model.submit(100 + i,
                       chat("FILL " + std::to_string(i) + std::string(prompt_chars, 'a'), 400,
                            false, RequestKind::fill, 10),
                       at_ms(0));
    }
    const EngineRequest canonical = chat("CANONICAL", 200);
    run.model.submit(1, canonical, at_ms(1000));  // once every fill is decoding
    run.until(1000);
    const double start_share = run.model.load().kv_occupancy();
    while (run.completion(1) == nullptr)
      run.model.advance(*run.model.next_event(), run.events);
    *kv_share = (start_share + run.model.load().kv_occupancy()) / 2;  // it grows linearly
    const double prefill = 10 + 0.05 * static_cast<double>(gen_of(canonical).prompt_tokens);
    return run.done_ms(1) - 1000 - prefill;
  };
  double share = 0;
  const double alone = decode_ms(0, 0, &share);
  const double none = decode_ms(24, 2444, &share);
  EXPECT_NEAR(share, 0.03, 0.002);
  EXPECT_NEAR(none / alone, 1.11, 0.02);  // no extra context: +11%
  const double full = decode_ms(24, 23536, &share);
  EXPECT_NEAR(share, 0.24, 0.005);
  EXPECT_NEAR(full / alone, 2.45, 0.06);  // 4,500 words each: +145%
}

// Long answers for requests whose last message contains "LONG".
Script long_script() {
  std::string answer;
  for (int i = 0; i < 400; ++i)
    answer += i ? " word" : "word";
  Script s;
  s.add_contains("LONG", answer);
  return s;
}

TEST(SimModel, CancellationFreesTheSlotAndKvAtOnce) {
  SimParams p;
  p.slots = 1;
  Sim run(p, long_script());
  run.model.submit(1, chat("LONG fill", 200, false, RequestKind::fill, 10), at_ms(0));
  run.model.submit(2, chat("waiting", 5, false, RequestKind::fill, 10), at_ms(1));
  run.until(500);
  EXPECT_EQ(run.model.load().slots_busy, 1);
  EXPECT_EQ(run.model.load().queued, 1);
  EXPECT_GT(run.model.load().kv_used, 0);
  run.model.cancel(1, at_ms(500));
  EXPECT_EQ(run.model.load().kv_used, 0);  // freed at once, before time moves
  EXPECT_EQ(run.model.load().slots_busy, 0);
  run.until(500);
  ASSERT_NE(run.completion(1), nullptr);
  EXPECT_EQ(run.completion(1)->error.kind, ErrorKind::cancelled);
  EXPECT_EQ(run.model.load().slots_busy, 1);  // the queued request took the slot at 500 ms
  run.all();
  EXPECT_NEAR(in_ms(run.model.counters().wasted), 500, 1e-6);
  EXPECT_EQ(run.model.counters().cancelled, 1u);
  EXPECT_EQ(run.model.counters().completed, 1u);
  run.model.cancel(1, at_ms(600));  // unknown now: ignored
  EXPECT_EQ(run.model.counters().cancelled, 1u);
}

TEST(SimModel, LowerPriorityValuesAreAdmittedFirst) {
  SimParams p;
  p.slots = 1;
  Sim run(p);
  run.model.submit(1, chat("busy", 5), at_ms(0));
  run.model.submit(2, chat("fill", 5, false, RequestKind::fill, 10), at_ms(1));
  run.model.submit(3, chat("canonical", 5), at_ms(2));
  run.all();
  EXPECT_LT(run.done_ms(3), run.done_ms(2));
}

// A queued fill promoted to priority 0 goes before canonical requests that arrived after it,
// counts as canonical from then on, and is still a fill's work in the counters; a request
// already admitted, or one asked to go lower, is left as it is.
TEST(SimModel, APromotedQueuedRequestKeepsItsArrivalAmongItsNewPriority) {
  SimParams p;
  p.slots = 1;
  Sim run(p);
  run.model.submit(1, chat("busy", 5, false, RequestKind::fill, 10), at_ms(0));
  run.until(0);  // admitted
  run.model.submit(2, chat("fill", 5, false, RequestKind::fill, 10), at_ms(0));
  run.model.submit(3, chat("canonical", 5), at_ms(0));
  EXPECT_EQ(run.model.canonical_in_flight(), 1);
  EXPECT_FALSE(run.model.promote(1, 0));   // admitted: it keeps its slot
  EXPECT_FALSE(run.model.promote(2, 10));  // not lower than its own
  EXPECT_FALSE(run.model.promote(9, 0));   // unknown
  EXPECT_TRUE(run.model.promote(2, 0));
  EXPECT_EQ(run.model.canonical_in_flight(), 2);
  run.all();
  EXPECT_LT(run.done_ms(2), run.done_ms(3));
  EXPECT_EQ(run.model.canonical_in_flight(), 0);
  EXPECT_NEAR(
      in_ms(run.model.counters().background_busy),
      in_ms(run.completion(1)->result.engine_time) + in_ms(run.completion(2)->result.engine_time),
      1e-6);
}

// Submitted ahead of the model's time, a request is promoted before it even arrives.
TEST(SimModel, ARequestNotYetArrivedCanBePromoted) {
  SimParams p;
  p.slots = 1;
  Sim run(p);
  run.model.submit(1, chat("busy", 5), at_ms(0));
  run.model.submit(2, chat("fill", 5, false, RequestKind::fill, 10), at_ms(1));
  run.model.submit(3, chat("canonical", 5), at_ms(2));
  EXPECT_TRUE(run.model.promote(2, 0));
  run.all();
  EXPECT_LT(run.done_ms(2), run.done_ms(3));
}

// Chunked prefill with nothing decoding: the prompt runs in steps of at most N tokens, each
// lasting prefill_base_ms plus its tokens' prefill; decoding starts the step after the last.
TEST(SimModel, ChunkedPrefillRunsThePromptInStepsOfAtMostNTokens) {
  SimParams p;
  p.chunked_prefill_tokens = 100;
  Sim run(p);
  const EngineRequest req = chat(std::string(1000, 'x'), 10);
  const Generation g = gen_of(req, p);
  ASSERT_GT(g.prompt_tokens, 200);
  run.model.submit(1, req, at_ms(0));
  run.all();
  const std::int64_t steps = (g.prompt_tokens + 99) / 100;
  double t = static_cast<double>(steps) * 10 + 0.05 * static_cast<double>(g.prompt_tokens);
  for (int i = 0; i < 10; ++i) {
    const double kv = static_cast<double>(g.prompt_tokens + i) / 600000.0;
    t += 25 * (1 + InterferenceModel{}.stretch(0, kv));
  }
  EXPECT_NEAR(run.done_ms(1), t, 1e-3);
  EXPECT_EQ(run.model.counters().steps, static_cast<std::uint64_t>(steps) + 10);
}

// A long prompt admitted beside a decoding request: chunked, its whole prefill lands inside
// that request's steps; run beside decode (no chunking), the request feels only the
// interference of one more co-resident request.
TEST(SimModel, ChunkedPrefillStallsTheRequestsDecodingBesideIt) {
  const EngineRequest lone = chat("a", 40);
  const EngineRequest big = chat(std::string(8000, 'x'), 5);
  const Generation gb = gen_of(big);
  ASSERT_GT(gb.prompt_tokens, 1000);
  auto lone_done = [&](const SimParams& q, bool with_big) {
    Sim s(q);
    s.model.submit(1, lone, at_ms(0));
    if (with_big) s.model.submit(2, big, at_ms(100));
    s.all();
    return s.done_ms(1);
  };
  SimParams chunked;
  chunked.chunked_prefill_tokens = 256;
  const SimParams beside;
  const double prefill_ms = 0.05 * static_cast<double>(gb.prompt_tokens);
  EXPECT_GE(lone_done(chunked, true) - lone_done(chunked, false), prefill_ms - 1e-6);
  EXPECT_LT(lone_done(beside, true) - lone_done(beside, false), 0.25 * prefill_ms);
}

// The engine's truth: the fitted stretch capped at max_stretch, then scaled.
TEST(SimModel, TheStretchIsCappedThenScaled) {
  const EngineRequest req = chat(std::string(4000, 'x'), 10);
  const Generation g = gen_of(req);
  for (const double scale : {0.5, 1.0, 2.0}) {
    SimParams p;
    p.kv_tokens = g.prompt_tokens + 20;  // the request holds most of the pool
    p.max_stretch = 1.456;
    p.interference_scale = scale;
    Sim run(p);
    run.model.submit(1, req, at_ms(0));
    run.all();
    double t = 10 + 0.05 * static_cast<double>(g.prompt_tokens);
    for (int i = 0; i < 10; ++i) {
      const double kv = static_cast<double>(g.prompt_tokens + i) / static_cast<double>(p.kv_tokens);
      ASSERT_GT(InterferenceModel{}.stretch(0, kv), 1.456);  // the fit alone would exceed it
      t += 25 * (1 + scale * 1.456);
    }
    EXPECT_NEAR(run.done_ms(1), t, 1e-3) << "scale " << scale;
  }
}

TEST(SimOutput, IsDeterministicAndContentDependent) {
  const EngineRequest a = chat("what is the weather", 50);
  Sim one;
  one.model.submit(1, a, at_ms(0));
  one.all();
  Sim two;
  two.model.submit(7, a, at_ms(123));
  two.all();
  EXPECT_EQ(one.completion(1)->result.body, two.completion(7)->result.body);
  EXPECT_NE(gen_of(a).tokens, gen_of(chat("what is the weather?", 50)).tokens);
  // Output-neutral fields do not change the answer.
  EngineRequest b = a;
  b.body["user"] = "someone";
  EXPECT_EQ(gen_of(a).tokens, gen_of(b).tokens);
}

TEST(SimOutput, ScriptsAnswerExactRequestsAndNeedles) {
  const EngineRequest routed = chat("route: rain in Oslo?", 50);
  const auto script = Script::parse(std::string(R"({"request": )") + routed.body.dump() +
                                    R"(, "response": "HANDLER: weather"}
# a comment
{"contains": "Oslo", "response": "Oslo is in Norway"})");
  ASSERT_TRUE(script.ok()) << script.error().message;
  EXPECT_EQ(script->size(), 2u);
  auto text = [&](const EngineRequest& r) {
    const Generation g = *generate(r.endpoint, r.body, *script, {});
    std::string t;
    for (const auto& tok : g.tokens)
      t += tok;
    return t;
  };
  EXPECT_EQ(text(routed), "HANDLER: weather");
  EXPECT_EQ(text(chat("tell me about Oslo", 50)), "Oslo is in Norway");
  EXPECT_FALSE(Script::parse("{\"response\": 1}").ok());
  EXPECT_FALSE(Script::parse("not json").ok());
}

// A script written out reads back the same: `dynrt bench sweep --http` hands a workload's
// script to dynrt-sim-engine this way. A later exact entry for the same content still wins.
TEST(SimOutput, AWrittenScriptReadsBackTheSame) {
  const EngineRequest a = chat("route: rain in Oslo?", 50);
  const EngineRequest b = chat("mail Bob \"the\" agenda\n", 50);
  Script s;
  s.add_exact(a.body, "HANDLER: weather");
  s.add_exact(b.body, "first");
  s.add_exact(b.body, "HANDLER: email");
  s.add_contains("Oslo", "Oslo is in Norway");
  std::ostringstream out;
  s.write_jsonl(out);
  const auto back = Script::parse(out.str());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->size(), s.size());
  s.add_contains("read", "Reading.",
                 nlohmann::json::parse(R"([{"name": "cat", "arguments": {"f": "a"}}])"));
  std::ostringstream again;
  s.write_jsonl(again);
  const auto with_calls = Script::parse(again.str());
  ASSERT_TRUE(with_calls.ok()) << with_calls.error().message;
  for (const auto& r :
       {a, b, chat("tell me about Oslo", 50), chat("nothing scripted", 50), chat("read it", 50)}) {
    const Scripted* want = s.find(r.body);
    const Scripted* got = with_calls->find(r.body);
    ASSERT_EQ(want == nullptr, got == nullptr);
    if (want) {
      EXPECT_EQ(got->text, want->text);
      EXPECT_EQ(got->tool_calls, want->tool_calls);
    }
  }
  EXPECT_EQ(back->find(b.body)->text, "HANDLER: email");
}

// A scripted answer may end in tool calls: in the whole body as message.tool_calls, streamed
// as tool_calls deltas before the last chunk, with finish_reason tool_calls.
TEST(SimOutput, ScriptedToolCallsEndTheAnswer) {
  const auto script = Script::parse(
      R"({"contains": "[tool]", "response": "Looking at the source.", "tool_calls": [{"name": "ls", "arguments": {"dir": "src"}}]})");
  ASSERT_TRUE(script.ok()) << script.error().message;
  EngineRequest r = chat("[tool] list src", 50);
  const Generation g = *generate(r.endpoint, r.body, *script, {});
  ASSERT_EQ(g.tool_calls.size(), 1u);
  EXPECT_EQ(g.finish_reason, "tool_calls");
  EXPECT_EQ(g.tool_calls[0].name, "ls");
  EXPECT_EQ(nlohmann::json::parse(g.tool_calls[0].arguments), (nlohmann::json{{"dir", "src"}}));
  const auto meta = response_meta(r.endpoint, r.body);
  const auto whole = nlohmann::json::parse(full_response(meta, g));
  EXPECT_EQ(whole["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "ls");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "Looking at the source.");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  const auto chunk = nlohmann::json::parse(tool_call_chunk(meta, 0, g.tool_calls[0]));
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["id"], g.tool_calls[0].id);
  // Cut by max_tokens, the answer has no tool calls: the model never got to them.
  r.body["max_tokens"] = 1;
  EXPECT_TRUE(generate(r.endpoint, r.body, *script, {})->tool_calls.empty());
  EXPECT_FALSE(
      Script::parse(R"({"contains": "x", "response": "", "tool_calls": [{"arguments": {}}]})")
          .ok());
}

TEST(SimOutput, StopSequencesAndMaxTokens) {
  Script s;
  s.add_contains("x", "alpha beta gamma delta");
  EngineRequest r = chat("x", 100);
  r.body["stop"] = " gamma";
  const Generation g = *generate(r.endpoint, r.body, s, {});
  EXPECT_EQ(g.tokens, (std::vector<std::string>{"alpha", " beta"}));
  EXPECT_EQ(g.finish_reason, "stop");
  const Generation cut = *generate(r.endpoint, chat("x", 3).body, s, {});
  EXPECT_EQ(cut.tokens.size(), 3u);
  EXPECT_EQ(cut.finish_reason, "length");
  EXPECT_FALSE(generate(r.endpoint, json{{"model", "m"}}, s, {}).ok());
  EngineRequest many = chat("x", 5);
  many.body["n"] = 2;
  EXPECT_FALSE(generate(many.endpoint, many.body, s, {}).ok());
}

TEST(SimOutput, FieldsOfTheWrongTypeAreRefusedByName) {
  Script s;
  const struct {
    const char* name;
    json value;
    const char* message;
  } cases[] = {
      {"max_tokens", "abc", "`max_tokens` must be an integer of at least 0"},
      {"max_tokens", -3, "`max_tokens` must be an integer of at least 0"},
      {"max_tokens", 2.5, "`max_tokens` must be an integer of at least 0"},
      {"max_completion_tokens", -1, "`max_completion_tokens` must be an integer of at least 0"},
      {"n", "5", "`n` must be an integer"},
      {"stream", "yes", "`stream` must be a boolean"},
      {"stream_options", 5, "`stream_options` must be an object"},
      {"stream_options",
       {{"include_usage", "x"}},
       "`stream_options.include_usage` must be a boolean"},
      {"stop", json::array({1, 2}), "`stop` must be a string or an array of strings"},
  };
  for (const auto& c : cases) {
    EngineRequest r = chat("x", 5);
    r.body[c.name] = c.value;
    const auto g = generate(r.endpoint, r.body, s, {});
    ASSERT_FALSE(g.ok()) << c.name << " " << c.value;
    EXPECT_EQ(g.error().message, c.message);
    // Read on its own, the same body answers without throwing.
    EXPECT_FALSE(response_meta(r.endpoint, r.body).include_usage);
  }
  // Null counts as absent, and 0 tokens is an answer of none.
  EngineRequest fine = chat("x", 5);
  fine.body["max_tokens"] = nullptr;
  fine.body["stream_options"] = {{"include_usage", nullptr}};
  fine.body["stop"] = nullptr;
  EXPECT_TRUE(generate(fine.endpoint, fine.body, s, {}).ok());
  EXPECT_TRUE(generate(fine.endpoint, chat("x", 0).body, s, {}).ok());
}

TEST(SimStream, ChunksReassembleTheResponse) {
  SimParams p;
  p.chunk_tokens = 3;
  Sim run(p);
  EngineRequest r = chat("stream me", 10, /*stream=*/true);
  r.body["stream_options"] = {{"include_usage", true}};
  run.model.submit(1, r, at_ms(0));
  run.all();
  std::string text;
  std::vector<json> chunks;
  for (const auto& e : run.events) {
    if (e.type == SimEvent::Type::chunk) chunks.push_back(json::parse(e.data));
  }
  ASSERT_GE(chunks.size(), 5u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  for (const auto& c : chunks) {
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  const json full = json::parse(run.completion(1)->result.body);
  EXPECT_EQ(text, full["choices"][0]["message"]["content"]);
  const json& last = chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 10);
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
}

// A request that does not stream but asks for progress: the chunks a stream would carry come as
// progress events, in time with the decode, and the response is the non-streamed one, byte
// for byte.
TEST(SimStream, ProgressReportsTheDecodeOfARequestThatDoesNotStream) {
  SimParams p;
  p.chunk_tokens = 3;
  Sim plain(p), watched(p);
  EngineRequest r = chat("watch me", 10);
  plain.model.submit(1, r, at_ms(0));
  plain.all();
  r.progress = true;
  watched.model.submit(1, r, at_ms(0));
  watched.all();
  std::string text;
  std::size_t progress = 0;
  for (const auto& e : watched.events) {
    EXPECT_NE(e.type, SimEvent::Type::chunk) << "nothing streams";
    if (e.type != SimEvent::Type::progress) continue;
    ++progress;
    EXPECT_LT(e.at, watched.completion(1)->at + std::chrono::nanoseconds(1));
    const json c = json::parse(e.data);
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_GE(progress, 4u);
  EXPECT_LT(watched.events.front().at, watched.completion(1)->at) << "reported as decoded";
  EXPECT_EQ(watched.completion(1)->result.body, plain.completion(1)->result.body);
  EXPECT_EQ(text,
            json::parse(plain.completion(1)->result.body)["choices"][0]["message"]["content"]);
  EXPECT_EQ(plain.events.size(), 1u) << "no progress unless asked for";
}

// -- the threaded engine ------------------------------------------------------------------------

struct Collect : ResponseSink {
  std::vector<std::string> chunks;
  std::promise<std::variant<EngineResult, EngineError>> done;
  void on_chunk(std::string_view d) override { chunks.emplace_back(d); }
  void on_complete(EngineResult r) override { done.set_value(std::move(r)); }
  void on_error(EngineError e) override { done.set_value(std::move(e)); }
};

TEST(SimEngine, AtTimeScaleZeroItRunsAsFastAsItCan) {
  SimEngineOptions o;
  o.time_scale = 0;
  SimEngine engine({}, long_script(), o);
  std::vector<std::shared_ptr<Collect>> sinks;
  std::vector<std::future<std::variant<EngineResult, EngineError>>> futures;
  for (int i = 0; i < 50; ++i) {
    auto s = std::make_shared<Collect>();
    futures.push_back(s->done.get_future());
    engine.submit(chat("LONG q" + std::to_string(i), 30, i % 2 == 0), s);
    sinks.push_back(s);
  }
  for (auto& f : futures) {
    const auto v = f.get();
    ASSERT_TRUE(std::holds_alternative<EngineResult>(v));
    EXPECT_EQ(std::get<EngineResult>(v).usage.completion_tokens, 30);
  }
  engine.drain();
  EXPECT_EQ(engine.counters().completed, 50u);
  EXPECT_EQ(engine.load().slots_busy, 0);
  EXPECT_GT(engine.simulated_now(), milliseconds(500));  // simulated time passed, not real
  EXPECT_FALSE(sinks[0]->chunks.empty());
  EXPECT_TRUE(sinks[1]->chunks.empty());
}

// Stepped, the engine moves only when told and calls its sinks on the caller's thread.
TEST(SimEngine, SteppedItMovesOnlyWhenAdvancedAndAnswersOnTheCallersThread) {
  SimEngineOptions o;
  o.stepped = true;
  SimEngine engine({}, long_script(), o);
  auto a = std::make_shared<Collect>();
  auto b = std::make_shared<Collect>();
  auto fa = a->done.get_future();
  auto fb = b->done.get_future();
  engine.submit(chat("LONG a", 10, true), a);
  engine.submit(chat("LONG b", 20, false), b);
  EXPECT_EQ(fa.wait_for(milliseconds(0)), std::future_status::timeout);
  ASSERT_TRUE(engine.next_event().has_value());
  EXPECT_EQ(*engine.next_event(), milliseconds(0));  // admission, at once
  std::vector<milliseconds> stops;
  while (const auto t = engine.next_event()) {
    engine.advance_to(*t);
    stops.push_back(std::chrono::duration_cast<milliseconds>(*t));
    if (fa.wait_for(milliseconds(0)) == std::future_status::ready) break;
  }
  // a (10 tokens) is answered before b (20): its answer came in an advance_to() of this thread.
  ASSERT_EQ(fa.wait_for(milliseconds(0)), std::future_status::ready);
  EXPECT_EQ(fb.wait_for(milliseconds(0)), std::future_status::timeout);
  EXPECT_TRUE(std::holds_alternative<EngineResult>(fa.get()));
  EXPECT_GT(stops.size(), 10u);  // one stop per decode step at least
  EXPECT_TRUE(std::is_sorted(stops.begin(), stops.end()));
  EXPECT_FALSE(a->chunks.empty());  // streamed
  // Advancing past every event answers the rest; the clock never runs backwards.
  engine.advance_to(std::chrono::seconds(60));
  ASSERT_EQ(fb.wait_for(milliseconds(0)), std::future_status::ready);
  EXPECT_EQ(std::get<EngineResult>(fb.get()).usage.completion_tokens, 20);
  EXPECT_FALSE(engine.next_event().has_value());
  engine.advance_to(std::chrono::seconds(1));
  EXPECT_EQ(engine.simulated_now(), std::chrono::seconds(60));
  EXPECT_EQ(engine.counters().completed, 2u);
  // drain() steps through whatever is pending instead of waiting for a thread.
  auto c = std::make_shared<Collect>();
  auto fc = c->done.get_future();
  engine.submit(chat("LONG c", 5, false), c);
  engine.drain();
  EXPECT_EQ(fc.wait_for(milliseconds(0)), std::future_status::ready);
}

TEST(SimEngine, CancelReleasesTheSlotAndReportsCancelled) {
  SimEngineOptions o;
  o.time_scale = 1e12;  // simulated time stands still: nothing finishes on its own
  SimEngine engine({}, {}, o);
  auto s = std::make_shared<Collect>();
  auto f = s->done.get_future();
  const RequestHandle h = engine.submit(chat("x", 50), s);
  engine.cancel(h);
  const auto v = f.get();
  ASSERT_TRUE(std::holds_alternative<EngineError>(v));
  EXPECT_EQ(std::get<EngineError>(v).kind, ErrorKind::cancelled);
  EXPECT_EQ(engine.load().slots_busy, 0);
  EXPECT_EQ(engine.load().kv_used, 0);
  engine.cancel(h);  // idempotent
}

TEST(SimEngine, AFieldOfTheWrongTypeIsRejectedNotThrown) {
  SimEngine engine({}, {}, {});
  auto s = std::make_shared<Collect>();
  auto f = s->done.get_future();
  EngineRequest r = chat("x", 5);
  r.body["stream"] = true;
  r.body["stream_options"] = {{"include_usage", "yes"}};
  engine.submit(std::move(r), s);
  const auto v = f.get();
  ASSERT_TRUE(std::holds_alternative<EngineError>(v));
  EXPECT_EQ(std::get<EngineError>(v).kind, ErrorKind::rejected);
  EXPECT_EQ(std::get<EngineError>(v).message, "`stream_options.include_usage` must be a boolean");
}

TEST(SimEngine, PendingRequestsAreErroredWhenTheEngineStops) {
  SimEngineOptions o;
  o.time_scale = 1e12;
  auto s = std::make_shared<Collect>();
  auto f = s->done.get_future();
  {
    SimEngine engine({}, {}, o);
    engine.submit(chat("x", 50), s);
  }
  const auto v = f.get();
  ASSERT_TRUE(std::holds_alternative<EngineError>(v));
  EXPECT_EQ(std::get<EngineError>(v).kind, ErrorKind::internal);
}

// An engine of several workers, with what each has running or queued.
struct Workers {
  explicit Workers(SimEngineOptions o) : engine({}, {}, o) {}
  int in_flight(int w) const {
    const LoadSnapshot l = engine.worker_load(w);
    return l.slots_busy + l.queued;
  }
  RequestHandle submit(EngineRequest r) {
    sinks.push_back(std::make_shared<Collect>());
    return engine.submit(std::move(r), sinks.back());
  }
  SimEngine engine;
  std::vector<std::shared_ptr<Collect>> sinks;
};

// Several workers behind one engine: canonical requests spread to the least-loaded worker, and
// a fill goes to a worker with no canonical request while there is one.
TEST(SimEngine, WorkersTakeRequestsLeastLoadedFirstAndFillsWhereNoCanonicalOneRunsOnATie) {
  SimEngineOptions o;
  o.stepped = true;  // nothing moves, not even admission: the picks do not race a thread
  o.workers = 3;
  Workers workers(o);
  SimEngine& engine = workers.engine;
  auto in_flight = [&](int w) { return workers.in_flight(w); };
  auto submit = [&](EngineRequest r) { return workers.submit(std::move(r)); };
  submit(chat("c1", 50));
  submit(chat("c2", 50));
  EXPECT_EQ(in_flight(0), 1);
  EXPECT_EQ(in_flight(1), 1);
  EXPECT_EQ(in_flight(2), 0);
  submit(chat("f1", 50, false, RequestKind::fill, 1));
  EXPECT_EQ(in_flight(2), 1);  // the worker with no canonical request
  // A second fill: every worker runs one request now; it goes where no canonical one runs.
  submit(chat("f2", 50, false, RequestKind::fill, 1));
  EXPECT_EQ(in_flight(2), 2);
  // A third does not pile onto that worker: it is now the busiest, and every step of a worker
  // is shared by all it runs, fills included.
  submit(chat("f3", 50, false, RequestKind::fill, 1));
  EXPECT_EQ(in_flight(0), 2);
  EXPECT_EQ(in_flight(2), 2);
  const LoadSnapshot total = engine.load();
  EXPECT_EQ(total.slots_total, 3 * 64);
  EXPECT_EQ(total.kv_total, 3 * 600000.0);
  EXPECT_EQ(total.slots_busy + total.queued, 5);
}

// On the real clock a worker's own clock moves only when its thread collects its events, so a
// request submitted between two collections waits to arrive there; it is load all the same. Else
// a branch's fills (or a run's parallel calls), submitted together, all go to one worker.
TEST(SimEngine, RequestsSubmittedBetweenTheEnginesStepsCountAsLoadForTheNextPick) {
  SimEngineOptions o;
  o.time_scale = 1e6;  // a simulated second takes 1,000 real seconds: nothing here finishes
  o.workers = 3;
  Workers workers(o);
  SimEngine& engine = workers.engine;
  auto in_flight = [&](int w) { return workers.in_flight(w); };
  auto submit = [&](EngineRequest r) { return workers.submit(std::move(r)); };
  submit(chat("f1", 50, false, RequestKind::fill, 1));
  submit(chat("f2", 50, false, RequestKind::fill, 1));
  submit(chat("f3", 50, false, RequestKind::fill, 1));
  EXPECT_EQ(in_flight(0), 1);
  EXPECT_EQ(in_flight(1), 1);
  EXPECT_EQ(in_flight(2), 1);
  submit(chat("c1", 50));
  submit(chat("c2", 50));
  // One snapshot: the engine's thread may admit c1 or c2 to a slot between two of them.
  const LoadSnapshot load = engine.load();
  EXPECT_EQ(load.slots_busy + load.queued, 5);
  for (int w = 0; w < 3; ++w)
    EXPECT_LE(in_flight(w), 2) << "worker " << w;
}

TEST(SimProfiles, DeriveTheirPoolsAndRefuseUnknownNames) {
  const auto h200 = sim_profile("h200x4-32b");
  ASSERT_TRUE(h200.ok());
  EXPECT_EQ(h200->workers, 4);
  // (0.9 x 141 GiB - 65.6 GB of weights - 3 GB) / 256 KiB per token.
  EXPECT_EQ(h200->params.kv_tokens, 258094);
  EXPECT_GT(h200->params.chunked_prefill_tokens, 0);
  const auto rtx = sim_profile("rtx4090x4-8b");
  ASSERT_TRUE(rtx.ok());
  EXPECT_EQ(rtx->params.kv_tokens, 35894);  // tight: about twenty 1,800-token requests
  EXPECT_EQ(sim_profile("default")->workers, 1);
  // The compute floor: a decoded token costs a prompt token's forward pass, so a worker is
  // compute-bound past 15.2 / 0.157 = 96 requests, and its load says so.
  EXPECT_DOUBLE_EQ(h200->params.decode_compute_ms_per_token, h200->params.prefill_ms_per_token);
  SimEngineOptions o;
  o.stepped = true;
  o.workers = h200->workers;
  EXPECT_EQ(SimEngine(h200->params, {}, o).load().concurrency, 4 * 96);
  // Under chunked prefill a prompt token stalls its worker's decode steps by its prefill time;
  // the four workers are four batches.
  EXPECT_EQ(SimEngine(h200->params, {}, o).load().batches, 4);
  EXPECT_DOUBLE_EQ(SimEngine(h200->params, {}, o).load().prefill_ms_per_token,
                   h200->params.prefill_ms_per_token);
  EXPECT_EQ(SimEngine().load().prefill_ms_per_token, 0);  // prefill beside decode: no stall
  EXPECT_EQ(SimEngine().load().concurrency, 0);           // the default profile has no floor
  const auto unknown = sim_profile("a100");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("h200x4-32b"), std::string::npos);
}

}  // namespace
}  // namespace dynrt::engines::sim
