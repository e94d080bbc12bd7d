// The openai adapter end to end: against the simulated engine's server on 127.0.0.1, port 0
// (in-process, and the real dynrt-sim-engine binary), and against a server that fails on
// purpose. Waits are on the adapter's callbacks; the deadlines under test are real time.
#include "engines/completion.hpp"
#include "engines/openai/assembly.hpp"
#include "engines/openai/engine.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/server.hpp"
#include "faulty_server.hpp"

#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <boost/asio.hpp>
#include <csignal>
#include <cstdio>
#include <future>
#include <thread>

extern char** environ;

namespace dynrt::engines {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FaultyServer;
using testing::kCompletion;

constexpr auto kWait = seconds(30);  // a safety net against hangs, not a timing assertion

struct Outcome {
  std::vector<std::string> chunks;
  std::optional<EngineResult> result;
  std::optional<EngineError> error;
};

struct Collect : ResponseSink {
  Outcome out;
  std::promise<Outcome> done;
  std::promise<void> first_chunk;
  bool first = true;
  void on_chunk(std::string_view d) override {
    out.chunks.emplace_back(d);
    if (std::exchange(first, false)) first_chunk.set_value();
  }
  void on_complete(EngineResult r) override {
    out.result = std::move(r);
    done.set_value(std::move(out));
  }
  void on_error(EngineError e) override {
    out.error = std::move(e);
    done.set_value(std::move(out));
  }
};

Outcome await(std::future<Outcome>& f) {
  if (f.wait_for(kWait) != std::future_status::ready) {
    ADD_FAILURE() << "no answer within " << kWait.count() << " s";
    return {};
  }
  return f.get();
}

EngineRequest chat(const std::string& content, int max_tokens, bool stream) {
  EngineRequest r;
  r.body = {{"model", "sim"},
            {"messages", json::array({{{"role", "user"}, {"content", content}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  if (stream) {
    r.body["stream"] = true;
    r.body["stream_options"] = {{"include_usage", true}};
  }
  return r;
}

sim::Script long_answers() {
  std::string answer;
  for (int i = 0; i < 3000; ++i)
    answer += i ? " word" : "word";
  sim::Script s;
  s.add_contains("LONG", answer);
  return s;
}

// A simulated engine served on a free port.
struct SimBackend {
  sim::SimEngine engine;
  std::unique_ptr<sim::SimServer> server;
  explicit SimBackend(double time_scale = 0)
      : engine({}, long_answers(), sim::SimEngineOptions{time_scale, "sim"}),
        server(sim::SimServer::create(engine, sim::SimServerOptions{}).value()) {}
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
};

OpenAiOptions options_for(const std::string& url) {
  OpenAiOptions o;
  o.base_url = url;
  o.scrape_interval = milliseconds(50);
  o.max_num_seqs = 64;
  return o;
}

std::pair<std::shared_ptr<Collect>, std::future<Outcome>> sink() {
  auto s = std::make_shared<Collect>();
  auto f = s->done.get_future();
  return {s, std::move(f)};
}

TEST(OpenAiAdapter, NonStreamedAnswersAreTheEngineAnswers) {
  SimBackend backend;
  OpenAiEngine adapter(options_for(backend.url()));
  auto [s, f] = sink();
  adapter.submit(chat("hello", 16, false), s);
  const Outcome o = await(f);
  ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
  // Byte for byte what the engine produces in-process for the same request.
  auto [s2, f2] = sink();
  backend.engine.submit(chat("hello", 16, false), s2);
  const Outcome direct = await(f2);
  EXPECT_EQ(o.result->body, direct.result->body);
  EXPECT_EQ(o.result->usage.completion_tokens, 16);
  EXPECT_EQ(o.result->finish_reason, "length");
  EXPECT_TRUE(o.chunks.empty());
}

TEST(OpenAiAdapter, StreamedChunksArriveAndReassemble) {
  SimBackend backend;
  OpenAiEngine adapter(options_for(backend.url()));
  auto [s, f] = sink();
  adapter.submit(chat("hello", 16, true), s);
  const Outcome o = await(f);
  ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
  ASSERT_GE(o.chunks.size(), 4u);
  for (const auto& c : o.chunks)
    EXPECT_TRUE(json::parse(c, nullptr, false).is_object()) << c;
  auto [s2, f2] = sink();
  adapter.submit(chat("hello", 16, false), s2);
  const Outcome whole = await(f2);
  const json a = json::parse(o.result->body);
  const json b = json::parse(whole.result->body);
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
  EXPECT_EQ(a["id"], b["id"]);
  EXPECT_EQ(o.result->usage, whole.result->usage);  // from the include_usage chunk
  EXPECT_EQ(o.result->finish_reason, "length");
}

// No engine reports how long it worked on a request: the adapter gives the wall time of the
// attempt that answered, so that fills are priced with what stages cost. It is never zero and
// never more than the caller waited.
TEST(OpenAiAdapter, EngineTimeIsTheAnsweringAttemptsWallTime) {
  SimBackend backend;
  OpenAiEngine adapter(options_for(backend.url()));
  auto [s, f] = sink();
  const auto sent = std::chrono::steady_clock::now();
  adapter.submit(chat("hello", 16, true), s);
  const Outcome o = await(f);
  const auto waited = std::chrono::steady_clock::now() - sent;
  ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
  EXPECT_GT(o.result->engine_time, Duration::zero());
  EXPECT_LE(o.result->engine_time, waited);
}

// GET /v1/models on the engine: its own list, each entry as the engine gave it; an engine that
// cannot be reached says nothing (nullopt), once.
TEST(OpenAiAdapter, ListsTheEnginesModels) {
  SimBackend backend;
  OpenAiEngine adapter(options_for(backend.url()));
  std::promise<std::optional<json>> listed;
  adapter.list_models([&](std::optional<json> m) { listed.set_value(std::move(m)); });
  auto f = listed.get_future();
  ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
  const auto models = f.get();
  ASSERT_TRUE(models);
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0]["id"], "sim");
  EXPECT_EQ((*models)[0]["owned_by"], "dynrt-sim-engine");

  auto o = options_for("http://127.0.0.1:1");  // nothing listens on port 1
  o.connect_timeout = milliseconds(500);
  OpenAiEngine nowhere(o);
  std::promise<std::optional<json>> none;
  nowhere.list_models([&](std::optional<json> m) { none.set_value(std::move(m)); });
  auto g = none.get_future();
  ASSERT_EQ(g.wait_for(kWait), std::future_status::ready);
  EXPECT_FALSE(g.get());
}

TEST(OpenAiAdapter, CompletionsEndpointToo) {
  SimBackend backend;
  OpenAiEngine adapter(options_for(backend.url()));
  for (const bool stream : {false, true}) {
    EngineRequest r;
    r.endpoint = "/v1/completions";
    r.body = {
        {"model", "sim"}, {"prompt", "Once upon a time"}, {"max_tokens", 8}, {"stream", stream}};
    auto [s, f] = sink();
    adapter.submit(r, s);
    const Outcome o = await(f);
    ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
    const json body = json::parse(o.result->body);
    EXPECT_EQ(body["object"], "text_completion");
    EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty());
  }
}

TEST(OpenAiAdapter, SequentialRequestsReuseOneConnection) {
  SimBackend backend;
  OpenAiOptions o = options_for(backend.url());
  o.scrape_interval = Duration::zero();
  OpenAiEngine adapter(o);
  for (int i = 0; i < 20; ++i) {
    auto [s, f] = sink();
    adapter.submit(chat("again " + std::to_string(i), 4, i % 2 == 0), s);
    ASSERT_TRUE(await(f).result);
  }
  EXPECT_EQ(adapter.connections_opened(), 1u);
}

TEST(OpenAiAdapter, SixtyFourConcurrentStreams) {
  SimBackend backend;
  OpenAiEngine adapter(options_for(backend.url()));
  std::vector<std::future<Outcome>> futures;
  for (int i = 0; i < 64; ++i) {
    auto [s, f] = sink();
    adapter.submit(chat("q" + std::to_string(i), 24, true), s);
    futures.push_back(std::move(f));
  }
  for (auto& f : futures) {
    const Outcome o = await(f);
    ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
    EXPECT_EQ(o.result->usage.completion_tokens, 24);
  }
}

std::string get(const std::string& url) {
  struct Body : HttpHandler {
    std::string text;
    std::promise<std::string> done;
    bool on_data(std::string_view b) override {
      text.append(b);
      return true;
    }
    void on_done(const HttpOutcome&) override { done.set_value(text); }
  };
  CurlLoop loop;
  auto h = std::make_shared<Body>();
  auto f = h->done.get_future();
  HttpCall call;
  call.method = "GET";
  call.url = url;
  loop.start(call, h);
  return f.get();
}

TEST(OpenAiAdapter, CancellationFreesTheEngineSlot) {
  SimBackend backend(/*time_scale=*/1000);  // real time: 3,000 tokens take over a minute
  OpenAiEngine adapter(options_for(backend.url()));
  auto [s, f] = sink();
  auto first = s->first_chunk.get_future();
  const RequestHandle h = adapter.submit(chat("LONG", 3000, true), s);
  ASSERT_EQ(first.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(backend.engine.load().slots_busy, 1);
  EXPECT_NE(get(backend.url() + "/metrics")
                .find("vllm:num_requests_running{engine=\"0\",model_name=\"sim\"} 1"),
            std::string::npos);
  adapter.cancel(h);
  const Outcome o = await(f);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::cancelled);
  backend.engine.drain();  // the server saw the disconnect and cancelled the request
  EXPECT_EQ(backend.engine.load().slots_busy, 0);
  EXPECT_EQ(backend.engine.counters().cancelled, 1u);
  EXPECT_GT(backend.engine.counters().wasted, Duration::zero());
  EXPECT_NE(get(backend.url() + "/metrics")
                .find("vllm:num_requests_running{engine=\"0\",model_name=\"sim\"} 0"),
            std::string::npos);
}

TEST(OpenAiAdapter, LoadComesFromTheEnginesMetrics) {
  SimBackend backend(/*time_scale=*/1000);
  auto o = options_for(backend.url());
  o.concurrency = 40;            // configured: no engine exports it
  o.prefill_ms_per_token = 0.2;  // nor this
  o.batches = 2;
  OpenAiEngine adapter(o);
  EXPECT_FALSE(adapter.load().valid);
  EXPECT_EQ(adapter.load().concurrency, 40);
  EXPECT_EQ(adapter.load().batches, 2);
  auto [s, f] = sink();
  auto first = s->first_chunk.get_future();
  const RequestHandle h = adapter.submit(chat("LONG", 3000, true), s);
  ASSERT_EQ(first.wait_for(kWait), std::future_status::ready);
  // Two scrapes that began after the request was running.
  ASSERT_TRUE(adapter.await_scrapes(adapter.scrapes() + 2, kWait));
  const LoadSnapshot l = adapter.load();
  EXPECT_TRUE(l.valid);
  EXPECT_EQ(l.slots_busy, 1);
  EXPECT_EQ(l.slots_total, 64);
  EXPECT_EQ(l.concurrency, 40);  // kept across scrapes
  EXPECT_DOUBLE_EQ(l.prefill_ms_per_token, 0.2);
  EXPECT_EQ(l.batches, 2);
  EXPECT_EQ(l.queued, 0);
  EXPECT_GT(l.kv_used, 0);
  EXPECT_EQ(l.kv_total, 600'000) << "the pool's size, from vllm:cache_config_info";
  EXPECT_EQ(adapter.flavor(), EngineFlavor::vllm);
  adapter.cancel(h);
  await(f);
}

// -- faults ---------------------------------------------------------------------------------------

Outcome run_against(const std::string& url, bool stream, OpenAiOptions o = {}) {
  o.base_url = url;
  o.scrape_interval = Duration::zero();
  OpenAiEngine adapter(o);
  auto [s, f] = sink();
  adapter.submit(chat("x", 8, stream), s);
  return await(f);
}

TEST(OpenAiFaults, RefusedConnection) {
  const Outcome o = run_against(testing::refused_url(), false);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::refused) << o.error->message;
}

TEST(OpenAiFaults, ConnectTimeout) {
  testing::FullListener full;
  OpenAiOptions o;
  o.connect_timeout = milliseconds(300);
  o.first_byte_timeout = seconds(5);  // should the kernel complete the handshake after all
  const Outcome out = run_against(full.base_url(), false, o);
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->kind, ErrorKind::connect_timeout) << out.error->message;
}

TEST(OpenAiFaults, NoFirstByte) {
  FaultyServer server(FaultyServer::Mode::no_response);
  OpenAiOptions o;
  o.first_byte_timeout = milliseconds(200);
  const Outcome out = run_against(server.base_url(), false, o);
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->kind, ErrorKind::first_byte_timeout) << out.error->message;
}

TEST(OpenAiFaults, TotalDeadline) {
  FaultyServer server(FaultyServer::Mode::no_response);
  OpenAiOptions o;
  o.first_byte_timeout = Duration::zero();
  o.total_timeout = milliseconds(200);
  const Outcome out = run_against(server.base_url(), false, o);
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->kind, ErrorKind::total_timeout) << out.error->message;
}

TEST(OpenAiFaults, StallBetweenChunks) {
  FaultyServer server(FaultyServer::Mode::stream_stall);
  OpenAiOptions o;
  o.idle_timeout = milliseconds(200);
  const Outcome out = run_against(server.base_url(), true, o);
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->kind, ErrorKind::idle_timeout) << out.error->message;
  EXPECT_EQ(out.chunks.size(), 1u);  // what arrived before the stall was passed on
}

TEST(OpenAiFaults, ErrorStatusesKeepTheEnginesStatusAndBody) {
  {
    FaultyServer server(FaultyServer::Mode::status_500);
    const Outcome o = run_against(server.base_url(), true);
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->kind, ErrorKind::http_status);
    EXPECT_EQ(o.error->status, 500);
    EXPECT_NE(o.error->body.find("engine exploded"), std::string::npos);
  }
  {
    FaultyServer server(FaultyServer::Mode::status_429);
    const Outcome o = run_against(server.base_url(), false);
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->status, 429);
    EXPECT_NE(o.error->body.find("slow down"), std::string::npos);
  }
}

TEST(OpenAiFaults, InvalidJson) {
  FaultyServer server(FaultyServer::Mode::invalid_json);
  const Outcome o = run_against(server.base_url(), false);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::malformed);
  FaultyServer chunks(FaultyServer::Mode::bad_chunk);
  const Outcome c = run_against(chunks.base_url(), true);
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->kind, ErrorKind::malformed) << c.error->message;
}

// An answer nested a million levels deep would overflow the stack wherever it is copied or
// written later (a reply, a translation, the library); the adapter refuses it as malformed.
TEST(OpenAiFaults, AnAnswerNestedTooDeepIsMalformed) {
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  FaultyServer whole(FaultyServer::Mode::respond,
                     std::string(testing::kCompletion).insert(1, "\"x\":" + deep + ","));
  const Outcome o = run_against(whole.base_url(), false);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::malformed);
  EXPECT_NE(o.error->message.find("the response nests arrays and objects deeper than 256"),
            std::string::npos)
      << o.error->message;
  FaultyServer chunks(FaultyServer::Mode::respond, R"({"id":"x","choices":)" + deep + "}");
  const Outcome c = run_against(chunks.base_url(), true);
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->kind, ErrorKind::malformed);
  EXPECT_NE(c.error->message.find("a streamed chunk nests arrays and objects deeper than 256"),
            std::string::npos)
      << c.error->message;
}

TEST(OpenAiFaults, StreamWithoutDone) {
  FaultyServer server(FaultyServer::Mode::stream_no_done);
  const Outcome o = run_against(server.base_url(), true);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::truncated);
  EXPECT_EQ(o.chunks.size(), 2u);
}

TEST(OpenAiFaults, ResetMidStream) {
  FaultyServer server(FaultyServer::Mode::stream_reset);
  const Outcome o = run_against(server.base_url(), true);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::truncated) << o.error->message;
}

// -- errors inside a 200 response, and results that did not finish ------------------------------

TEST(OpenAiFaults, AnErrorEventMidStreamEndsTheRequestWithThePayloadAsSent) {
  FaultyServer server(FaultyServer::Mode::stream_error_midway);
  const Outcome o = run_against(server.base_url(), true);
  ASSERT_TRUE(o.error) << "an error event is never a completion";
  EXPECT_EQ(o.error->kind, ErrorKind::engine_error) << o.error->message;
  EXPECT_EQ(o.error->status, 500) << "the error's own code";
  EXPECT_EQ(o.error->body, testing::kErrorEvent) << "exactly as the engine sent it";
  EXPECT_NE(o.error->message.find("the engine failed mid-way"), std::string::npos);
  ASSERT_EQ(o.chunks.size(), 2u) << "the chunks before it, and not the error event";
  for (const auto& c : o.chunks)
    EXPECT_FALSE(json::parse(c).contains("error")) << c;
  EXPECT_EQ(server.requests(), 1) << "the engine ran it: not retried";
}

TEST(OpenAiFaults, AnErrorOnlyStreamAndAnErrorBodyAreEngineErrors) {
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "stream" : "body");
    FaultyServer server(stream ? FaultyServer::Mode::stream_error_only
                               : FaultyServer::Mode::error_object_200);
    const Outcome o = run_against(server.base_url(), stream);
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->kind, ErrorKind::engine_error) << o.error->message;
    EXPECT_EQ(o.error->status, 500);
    EXPECT_EQ(o.error->body, testing::kErrorEvent);
    EXPECT_TRUE(o.chunks.empty());
  }
}

TEST(OpenAiFaults, ErrorObjectsSayTheirStatusAndMessage) {
  EXPECT_TRUE(is_error_object(json::parse(testing::kErrorEvent)));
  EXPECT_TRUE(is_error_object(json::parse(R"({"object":"error","message":"m","code":400})")));
  EXPECT_TRUE(is_error_object(json::parse(R"({"error":"overloaded"})")));
  EXPECT_FALSE(is_error_object(json::parse(R"({"error":null,"choices":[]})")));
  EXPECT_FALSE(is_error_object(json::parse(testing::kCompletion)));
  EXPECT_EQ(reported_error(json::parse(testing::kErrorEvent)).status, 500);
  EXPECT_EQ(reported_error(json::parse(R"({"object":"error","message":"m","code":400})")).status,
            400);
  EXPECT_EQ(reported_error(json::parse(R"({"error":{"message":"m","code":"429"}})")).status, 429);
  // A code that is no HTTP error status says only that the engine failed.
  const auto odd = reported_error(json::parse(R"({"error":{"message":"m","code":"rate_limit"}})"));
  EXPECT_EQ(odd.status, 502);
  EXPECT_EQ(odd.message, "m");
  EXPECT_EQ(reported_error(json::parse(R"({"error":{"code":200}})")).status, 502);
  EXPECT_EQ(reported_error(json::parse(R"({"error":"overloaded"})")).message, "overloaded");
}

TEST(OpenAiFaults, AResponseWithoutFinishReasonIsPassedOnButIncomplete) {
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "stream" : "body");
    FaultyServer server(FaultyServer::Mode::stream_no_finish);
    const Outcome o = run_against(server.base_url(), stream);
    ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
    EXPECT_FALSE(o.result->complete) << "never stored";
    EXPECT_EQ(o.chunks.size(), stream ? 2u : 0u) << "the caller gets what the engine sent";
    if (!stream) {
      EXPECT_EQ(o.result->body, testing::kUnfinishedCompletion);
    }
  }
  SimBackend backend;  // a normal answer is complete, streamed or not
  for (const bool stream : {true, false}) {
    const Outcome o = run_against(backend.url(), stream);
    ASSERT_TRUE(o.result);
    EXPECT_TRUE(o.result->complete) << o.result->body;
  }
}

TEST(OpenAiFaults, RetryAfterIsKeptAsSent) {
  for (const auto mode : {FaultyServer::Mode::status_429, FaultyServer::Mode::status_503}) {
    FaultyServer server(mode);
    server.set_retry_after("7");  // beyond the retry cap: the caller gets it at once
    const Outcome o = run_against(server.base_url(), false);
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->retry_after, "7");
  }
  FaultyServer plain(FaultyServer::Mode::status_500);
  EXPECT_EQ(run_against(plain.base_url(), false).error->retry_after, "");
}

TEST(OpenAiAssembly, StreamedToolCallsAreAssembledIntoTheMessage) {
  FaultyServer server(FaultyServer::Mode::stream_tool_calls);
  const Outcome o = run_against(server.base_url(), true);
  ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
  EXPECT_TRUE(o.result->complete) << o.result->body;
  EXPECT_EQ(o.result->finish_reason, "tool_calls");
  EXPECT_EQ(o.result->usage.completion_tokens, 12);
  const json body = json::parse(o.result->body);
  const json whole = json::parse(testing::kToolCallCompletion);
  EXPECT_EQ(body["choices"], whole["choices"]) << "the streamed answer is the whole answer";
  EXPECT_EQ(body["usage"], whole["usage"]);
  EXPECT_EQ(body["id"], whole["id"]);
  EXPECT_EQ(body["object"], "chat.completion");
}

json assemble(const std::vector<std::string>& chunks, bool chat, std::string* why = nullptr) {
  StreamAssembler a(chat);
  for (const auto& c : chunks)
    a.add(json::parse(c));
  if (why) *why = a.why_incomplete();
  return json::parse(a.body());
}

std::string chunk_of(const json& choices) {
  return json{{"id", "c"},
              {"object", "chat.completion.chunk"},
              {"created", 1},
              {"model", "m"},
              {"choices", choices}}
      .dump();
}

TEST(OpenAiAssembly, EveryChoiceIsAssembledByItsIndex) {
  // n = 2, interleaved, with reasoning, a refusal and vLLM's stop_reason.
  const std::vector<std::string> chunks = {
      chunk_of({{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}},
                {{"index", 1}, {"delta", {{"role", "assistant"}, {"content", ""}}}}}),
      chunk_of({{{"index", 1}, {"delta", {{"reasoning_content", "think "}}}}}),
      chunk_of({{{"index", 0}, {"delta", {{"content", "one "}}}, {"logprobs", nullptr}}}),
      chunk_of({{{"index", 1}, {"delta", {{"reasoning_content", "hard"}, {"content", "two"}}}}}),
      chunk_of({{{"index", 0}, {"delta", {{"content", "more"}}}}}),
      chunk_of({{{"index", 1},
                 {"delta", json::object()},
                 {"finish_reason", "length"},
                 {"stop_reason", nullptr}}}),
      chunk_of({{{"index", 0},
                 {"delta", {{"refusal", "no"}}},
                 {"finish_reason", "stop"},
                 {"stop_reason", 7}}}),
  };
  std::string why;
  const json body = assemble(chunks, true, &why);
  EXPECT_EQ(why, "");
  ASSERT_EQ(body["choices"].size(), 2u);
  const json& a = body["choices"][0];
  EXPECT_EQ(a["message"]["content"], "one more");
  EXPECT_EQ(a["message"]["refusal"], "no");
  EXPECT_EQ(a["finish_reason"], "stop");
  EXPECT_EQ(a["stop_reason"], 7);
  const json& b = body["choices"][1];
  EXPECT_EQ(b["index"], 1);
  EXPECT_EQ(b["message"]["content"], "two");
  EXPECT_EQ(b["message"]["reasoning_content"], "think hard");
  EXPECT_EQ(b["finish_reason"], "length");
  EXPECT_TRUE(b["stop_reason"].is_null());
}

TEST(OpenAiAssembly, WhatItCannotHoldMakesTheResultIncomplete) {
  const auto why = [](std::vector<std::string> chunks, bool chat = true) {
    std::string w;
    assemble(chunks, chat, &w);
    return w;
  };
  const json finish = {{"index", 0}, {"delta", json::object()}, {"finish_reason", "stop"}};
  EXPECT_EQ(why({chunk_of(json::array({finish}))}), "");
  // Logprobs, an unknown delta field, an unknown choice field with a value: not stored.
  EXPECT_NE(why({chunk_of({{{"index", 0},
                            {"delta", {{"content", "x"}}},
                            {"logprobs", {{"content", json::array()}}}}}),
                 chunk_of(json::array({finish}))}),
            "");
  EXPECT_NE(why({chunk_of({{{"index", 0}, {"delta", {{"audio", {{"id", "a"}}}}}}}),
                 chunk_of(json::array({finish}))}),
            "");
  EXPECT_NE(why({chunk_of({{{"index", 0}, {"delta", json::object()}, {"token_ids", {1, 2}}}}),
                 chunk_of(json::array({finish}))}),
            "");
  // ... but null ones say nothing, nor do timings and padding.
  EXPECT_EQ(why({chunk_of(json::array({{{"index", 0}, {"delta", {{"obfuscation", "x1"}}}}})),
                 json{{"choices", json::array({finish})},
                      {"timings", {{"predicted_ms", 3.5}}},
                      {"obfuscation", "zz"}}
                     .dump()}),
            "");
  EXPECT_EQ(why({chunk_of({{{"index", 0}, {"delta", {{"audio", nullptr}}}, {"extra", nullptr}}}),
                 chunk_of(json::array({finish}))}),
            "");
  // A choice that never finished; one choice of two that never finished; no choice at all.
  EXPECT_NE(why({chunk_of({{{"index", 0}, {"delta", {{"content", "x"}}}}})}), "");
  EXPECT_NE(why({chunk_of({finish, {{"index", 1}, {"delta", {{"content", "x"}}}}})}), "");
  EXPECT_NE(why({}), "");
  // A tool call that never said its name.
  EXPECT_NE(
      why({chunk_of(
          {{{"index", 0},
            {"delta", {{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "{}"}}}}}}}},
            {"finish_reason", "tool_calls"}}})}),
      "");
  // Completions: text and its finish.
  const json text =
      assemble({chunk_of({{{"index", 0}, {"text", "Once "}}}),
                chunk_of({{{"index", 0}, {"text", "upon"}, {"finish_reason", "length"}}})},
               false);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "Once upon");
}

TEST(Completion, OnlyANormalCompletionIsNormal) {
  EXPECT_FALSE(abnormal_completion("/v1/chat/completions", testing::kCompletion));
  EXPECT_FALSE(abnormal_completion("/v1/chat/completions", testing::kToolCallCompletion));
  for (const char* body :
       {"not json", "[]", testing::kErrorEvent, testing::kUnfinishedCompletion,
        R"({"object":"error","message":"m"})", R"({"choices":[]})", R"({"id":"x"})",
        R"({"choices":[{"index":0,"finish_reason":"stop"}]})",
        R"({"choices":[{"index":0,"message":{"content":"a"},"finish_reason":""}]})"}) {
    EXPECT_TRUE(abnormal_completion("/v1/chat/completions", body)) << body;
  }
  EXPECT_FALSE(abnormal_completion("/v1/completions",
                                   R"({"choices":[{"text":"a","finish_reason":"stop"}]})"));
  EXPECT_TRUE(abnormal_completion("/v1/completions", testing::kCompletion))
      << "a chat answer is not a text completion";
  EXPECT_TRUE(abnormal_completion("/v1/embeddings", testing::kCompletion));
}

TEST(OpenAiFaults, SglangCancellationAlsoPostsAbortRequestWithTheRid) {
  FaultyServer server(FaultyServer::Mode::no_response);
  OpenAiOptions o;
  o.base_url = server.base_url();
  o.scrape_interval = Duration::zero();
  o.flavor = EngineFlavor::sglang;
  OpenAiEngine adapter(o);
  auto [s, f] = sink();
  EngineRequest r = chat("x", 8, true);
  r.id = "req-17";
  const RequestHandle h = adapter.submit(r, s);
  ASSERT_TRUE(server.await_requests(1, kWait));
  adapter.cancel(h);
  const Outcome out = await(f);
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->kind, ErrorKind::cancelled);
  ASSERT_TRUE(server.await_requests(2, kWait));
  const auto seen = server.recorded();
  EXPECT_EQ(json::parse(seen[0].body)["rid"], "req-17");  // added to the request for SGLang
  EXPECT_EQ(seen[1].head.rfind("POST /abort_request ", 0), 0u) << seen[1].head;
  EXPECT_EQ(json::parse(seen[1].body), (json{{"rid", "req-17"}}));
}

TEST(OpenAiFaults, OtherFlavoursAreNotSentARid) {
  FaultyServer server(FaultyServer::Mode::no_response);
  OpenAiOptions o;
  o.base_url = server.base_url();
  o.scrape_interval = Duration::zero();
  o.flavor = EngineFlavor::vllm;
  OpenAiEngine adapter(o);
  auto [s, f] = sink();
  const RequestHandle h = adapter.submit(chat("x", 8, true), s);
  ASSERT_TRUE(server.await_requests(1, kWait));
  adapter.cancel(h);
  await(f);
  EXPECT_FALSE(json::parse(server.recorded()[0].body).contains("rid"));
}

// -- retries and the circuit breaker -----------------------------------------------------------

OpenAiOptions fast_options(const std::string& url) {
  OpenAiOptions o;
  o.base_url = url;
  o.scrape_interval = Duration::zero();
  o.first_byte_timeout = seconds(10);  // a safety net: no fault here stalls
  return o;
}

EngineRequest fill(const std::string& content) {
  EngineRequest r = chat(content, 8, false);
  r.kind = RequestKind::fill;
  return r;
}

Outcome submit_and_wait(OpenAiEngine& adapter, EngineRequest r) {
  auto [s, f] = sink();
  adapter.submit(std::move(r), s);
  return await(f);
}

// Waits (bounded) for an event the engine reports through resilience().
template <class Pred>
bool until(const OpenAiEngine& adapter, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!pred(adapter.resilience())) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(OpenAiRetries, FaultsBeforeTheFirstByteAreRetriedThenTheRequestSucceeds) {
  for (const bool stream : {false, true}) {
    FaultyServer server(FaultyServer::Mode::ok);
    server.set_retry_after("0");
    server.script("", {FaultyServer::Mode::status_503, FaultyServer::Mode::status_429});
    OpenAiEngine adapter(fast_options(server.base_url()));
    const Outcome o = submit_and_wait(adapter, chat("x", 8, stream));
    ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
    EXPECT_EQ(server.requests(), 3) << "two faults, then the answer";
    EXPECT_EQ(adapter.resilience().retry.retries, 2u);
    EXPECT_EQ(adapter.resilience().attempts, 3u);
    EXPECT_EQ(adapter.resilience().retry.in_flight, 0);
    EXPECT_EQ(adapter.resilience().retry.retrying, 0);
    if (stream) {
      EXPECT_EQ(o.chunks.size(), 2u) << "only the successful attempt's chunks";
    } else {
      EXPECT_EQ(o.result->body, kCompletion);
    }
  }
}

TEST(OpenAiRetries, A502IsRetriedAndTheLastErrorIsTheEngines) {
  FaultyServer server(FaultyServer::Mode::status_502);
  OpenAiEngine adapter(fast_options(server.base_url()));
  const Outcome o = submit_and_wait(adapter, chat("x", 8, false));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::http_status);
  EXPECT_EQ(o.error->status, 502);
  EXPECT_NE(o.error->body.find("upstream unreachable"), std::string::npos);
  EXPECT_EQ(server.requests(), 3) << "max_attempts, first one included";
}

TEST(OpenAiRetries, RefusedConnectionsAreRetried) {
  OpenAiEngine adapter(fast_options(testing::refused_url()));
  const Outcome o = submit_and_wait(adapter, chat("x", 8, false));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::refused);
  EXPECT_EQ(adapter.resilience().attempts, 3u);
}

TEST(OpenAiRetries, WhatMayHaveRunIsNotRetried) {
  struct Case {
    FaultyServer::Mode mode;
    bool stream;
    ErrorKind kind;
  };
  for (const Case c : {Case{FaultyServer::Mode::status_500, false, ErrorKind::http_status},
                       Case{FaultyServer::Mode::invalid_json, false, ErrorKind::malformed},
                       Case{FaultyServer::Mode::body_truncated, false, ErrorKind::truncated},
                       Case{FaultyServer::Mode::stream_no_done, true, ErrorKind::truncated},
                       Case{FaultyServer::Mode::stream_reset, true, ErrorKind::truncated}}) {
    FaultyServer server(c.mode);
    OpenAiEngine adapter(fast_options(server.base_url()));
    const Outcome o = submit_and_wait(adapter, chat("x", 8, c.stream));
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->kind, c.kind) << o.error->message;
    EXPECT_EQ(server.requests(), 1) << to_string(c.kind);
    EXPECT_EQ(adapter.resilience().retry.retries, 0u);
  }
  // A first-byte timeout: the engine may be running it still.
  FaultyServer silent(FaultyServer::Mode::no_response);
  OpenAiOptions o = fast_options(silent.base_url());
  o.first_byte_timeout = milliseconds(200);
  OpenAiEngine adapter(o);
  const Outcome out = submit_and_wait(adapter, chat("x", 8, false));
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->kind, ErrorKind::first_byte_timeout);
  EXPECT_EQ(adapter.resilience().attempts, 1u);
}

TEST(OpenAiRetries, NoRetryOnceAChunkReachedTheSink) {
  FaultyServer server(FaultyServer::Mode::ok);
  server.script("", {FaultyServer::Mode::stream_reset});
  OpenAiEngine adapter(fast_options(server.base_url()));
  const Outcome o = submit_and_wait(adapter, chat("x", 8, true));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::truncated);
  EXPECT_EQ(o.chunks.size(), 1u);
  EXPECT_EQ(server.requests(), 1) << "the next attempt would have succeeded: not made";
}

TEST(OpenAiRetries, FillsAreTriedOnce) {
  FaultyServer server(FaultyServer::Mode::ok);
  server.set_retry_after("0");
  server.script("", {FaultyServer::Mode::status_503});
  OpenAiEngine adapter(fast_options(server.base_url()));
  const Outcome o = submit_and_wait(adapter, fill("x"));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status, 503);
  EXPECT_EQ(server.requests(), 1);
  OpenAiEngine refused(fast_options(testing::refused_url()));
  ASSERT_TRUE(submit_and_wait(refused, fill("x")).error);
  EXPECT_EQ(refused.resilience().attempts, 1u);
}

TEST(OpenAiRetries, ARetryAfterBeyondTheCapGoesStraightToTheCaller) {
  FaultyServer server(FaultyServer::Mode::status_429);  // Retry-After: 2; the cap is 1 s
  OpenAiEngine adapter(fast_options(server.base_url()));
  const Outcome o = submit_and_wait(adapter, chat("x", 8, false));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status, 429);
  EXPECT_EQ(server.requests(), 1);
}

TEST(OpenAiRetries, CancelledOrStoppedWhileWaitingToRetry) {
  FaultyServer server(FaultyServer::Mode::status_503);
  server.set_retry_after("1");  // a one-second wait before the retry
  {
    OpenAiEngine adapter(fast_options(server.base_url()));
    auto [s, f] = sink();
    const RequestHandle h = adapter.submit(chat("x", 8, false), s);
    ASSERT_TRUE(until(adapter, [](const ResilienceSnapshot& r) { return r.retry.retries == 1; }));
    adapter.cancel(h);
    const Outcome o = await(f);
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->kind, ErrorKind::cancelled);
    EXPECT_EQ(adapter.resilience().retry.in_flight, 0);
  }
  EXPECT_EQ(server.requests(), 1) << "a cancelled request is not retried";
  auto [s, f] = sink();
  {
    OpenAiEngine adapter(fast_options(server.base_url()));
    adapter.submit(chat("x", 8, false), s);
    ASSERT_TRUE(until(adapter, [](const ResilienceSnapshot& r) { return r.retry.retries == 1; }));
  }  // the engine goes while the request waits: its sink still gets an answer
  const Outcome o = await(f);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::cancelled);
}

TEST(OpenAiBreaker, FillsFailFastWithoutNetworkIoThenAProbeClosesTheCircuit) {
  FaultyServer server(FaultyServer::Mode::ok);
  server.script("", {FaultyServer::Mode::status_500, FaultyServer::Mode::status_500,
                     FaultyServer::Mode::status_500, FaultyServer::Mode::status_500});
  auto clock = std::make_shared<ManualClock>();
  OpenAiOptions o = fast_options(server.base_url());
  o.clock = clock;  // breaker: fills stop after 3 consecutive failures, 5 s cooldown
  OpenAiEngine adapter(o);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(submit_and_wait(adapter, fill("x")).error->status, 500);
  EXPECT_EQ(adapter.resilience().fills, CircuitState::open);
  EXPECT_TRUE(adapter.load().fills_blocked);
  const Outcome refused = submit_and_wait(adapter, fill("x"));
  ASSERT_TRUE(refused.error);
  EXPECT_EQ(refused.error->kind, ErrorKind::rejected);
  EXPECT_NE(refused.error->message.find("circuit open"), std::string::npos);
  EXPECT_EQ(server.requests(), 3) << "no network I/O for a refused fill";
  EXPECT_EQ(adapter.resilience().breaker.fills_refused, 1u);
  // Canonical requests still go to the engine (and get its error).
  EXPECT_EQ(submit_and_wait(adapter, chat("x", 8, false)).error->status, 500);
  EXPECT_EQ(server.requests(), 4);
  clock->advance(seconds(5));
  EXPECT_EQ(adapter.resilience().fills, CircuitState::half_open);
  EXPECT_TRUE(submit_and_wait(adapter, fill("x")).result) << "the probe went through";
  EXPECT_EQ(adapter.resilience().fills, CircuitState::closed);
  EXPECT_FALSE(adapter.load().fills_blocked);
  EXPECT_TRUE(submit_and_wait(adapter, fill("x")).result);
  EXPECT_EQ(server.requests(), 6);
}

TEST(OpenAiBreaker, WhenEnabledCanonicalRequestsGetA503WithoutNetworkIo) {
  FaultyServer server(FaultyServer::Mode::status_500);
  auto clock = std::make_shared<ManualClock>();
  OpenAiOptions o = fast_options(server.base_url());
  o.clock = clock;
  o.breaker.canonical_failures = 2;
  OpenAiEngine adapter(o);
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(submit_and_wait(adapter, chat("x", 8, false)).error->status, 500);
  EXPECT_EQ(adapter.resilience().canonical, CircuitState::open);
  const Outcome out = submit_and_wait(adapter, chat("x", 8, true));
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->kind, ErrorKind::http_status);
  EXPECT_EQ(out.error->status, 503);
  EXPECT_EQ(json::parse(out.error->body)["error"]["type"], "service_unavailable");
  EXPECT_EQ(submit_and_wait(adapter, fill("x")).error->kind, ErrorKind::rejected);
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(adapter.resilience().breaker.canonical_refused, 1u);
}

// -- the simulated engine's HTTP surface ------------------------------------------------------

struct Fetched {
  int status = 0;
  std::string body;
};

Fetched fetch(const std::string& method, const std::string& url, const std::string& body = {}) {
  struct Handler : HttpHandler {
    Fetched out;
    std::promise<Fetched> done;
    void on_status(int status) override { out.status = status; }
    bool on_data(std::string_view b) override {
      out.body.append(b);
      return true;
    }
    void on_done(const HttpOutcome&) override { done.set_value(out); }
  };
  CurlLoop loop;
  auto h = std::make_shared<Handler>();
  auto f = h->done.get_future();
  HttpCall call;
  call.method = method;
  call.url = url;
  call.body = body;
  call.headers = {"Content-Type: application/json"};
  loop.start(call, h);
  return f.get();
}

TEST(SimServer, AnswersTheOpenAiSurfaceAndRejectsWhatItCannotServe) {
  SimBackend backend;
  const std::string url = backend.url();
  EXPECT_EQ(fetch("GET", url + "/health").status, 200);
  const Fetched models = fetch("GET", url + "/v1/models");
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "sim");
  const Fetched missing = fetch("GET", url + "/v2/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], 404);
  EXPECT_EQ(fetch("GET", url + "/v1/chat/completions").status, 405);
  const Fetched bad = fetch("POST", url + "/v1/chat/completions", "{not json");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["error"]["type"], "invalid_request_error");
  const Fetched no_messages = fetch("POST", url + "/v1/chat/completions", R"({"model":"sim"})");
  EXPECT_EQ(no_messages.status, 400) << no_messages.body;
  EXPECT_TRUE(json::parse(no_messages.body).contains("error"));
  EXPECT_EQ(backend.engine.counters().completed, 0u);  // none of it reached the engine
}

// -- the real binary --------------------------------------------------------------------------

TEST(DynrtSimEngine, ServesTheAdapterFromItsOwnProcess) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const char* argv[] = {DYNRT_SIM_ENGINE_PATH, "--port", "0", "--time-scale", "0", nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, const_cast<char**>(argv), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  char line[256] = {0};
  ASSERT_NE(fgets(line, sizeof line, f), nullptr);  // "dynrt-sim-engine listening on http://..."
  const std::string text(line);
  const auto at = text.find("http://");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string url = text.substr(at, text.find_last_not_of("\r\n") + 1 - at);
  {
    OpenAiEngine adapter(options_for(url));
    auto [s, fut] = sink();
    adapter.submit(chat("from another process", 12, true), s);
    const Outcome o = await(fut);
    ASSERT_TRUE(o.result) << (o.error ? o.error->message : "");
    EXPECT_EQ(o.result->usage.completion_tokens, 12);
    EXPECT_NE(get(url + "/health"), "x");
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  fclose(f);
}

}  // namespace
}  // namespace dynrt::engines
