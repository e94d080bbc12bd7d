// The wire formats the openai adapter reads: server-sent events and Prometheus metrics.
#include "engines/openai/prometheus.hpp"
#include "engines/openai/sse.hpp"

#include <gtest/gtest.h>

namespace dynrt::engines {
namespace {

std::vector<std::string> feed_all(const std::vector<std::string>& pieces, SseParser& p) {
  std::vector<std::string> events;
  for (const auto& piece : pieces)
    p.feed(piece, events);
  return events;
}

TEST(Sse, EventsEndAtBlankLinesWhateverTheLineEndings) {
  SseParser p;
  const auto events = feed_all({"data: {\"a\":1}\n\n", "data: two\r\n\r\n", "data: three\r\r",
                                "data:four\n\n", ": a comment\n\n", "event: x\ndata: five\n\n"},
                               p);
  EXPECT_EQ(events, (std::vector<std::string>{"{\"a\":1}", "two", "three", "four", "five"}));
  EXPECT_FALSE(p.has_partial_event());
}

TEST(Sse, SplitAnywhereIncludingInsideCrLf) {
  const std::string stream =
      "data: first\r\n\r\ndata: sec\r\ndata: ond\r\n\r\ndata: [DONE]\r\n\r\n";
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    const auto events = feed_all({stream.substr(0, cut), stream.substr(cut)}, p);
    EXPECT_EQ(events, (std::vector<std::string>{"first", "sec\nond", "[DONE]"})) << cut;
  }
  SseParser bytewise;
  std::vector<std::string> pieces;
  for (const char c : stream)
    pieces.emplace_back(1, c);
  EXPECT_EQ(feed_all(pieces, bytewise).size(), 3u);
}

TEST(Sse, AnEventCutOffByTheEndIsPartial) {
  SseParser p;
  std::vector<std::string> events;
  p.feed("data: {\"cut", events);
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(p.has_partial_event());
}

TEST(Prometheus, ParsesSamplesLabelsAndSpecialValues) {
  std::size_t skipped = 0;
  const auto s = parse_prometheus(
      "# HELP vllm:num_requests_running Number of requests.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"q\\\"wen\"} 3.0\n"
      "plain 4 1700000000000\n"
      "nan_metric NaN\n"
      "inf_metric +Inf\r\n"
      "broken{label=\"x 1\n"
      "also broken\n",
      &skipped);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].name, "vllm:num_requests_running");
  EXPECT_EQ(s[0].labels.at("model_name"), "q\"wen");
  EXPECT_EQ(s[0].value, 3.0);
  EXPECT_EQ(s[1].value, 4.0);
  EXPECT_TRUE(std::isnan(s[2].value));
  EXPECT_TRUE(std::isinf(s[3].value));
  EXPECT_EQ(skipped, 2u);
}

TEST(Prometheus, VllmLoadSumsEnginesAndReadsEitherKvName) {
  const auto now = parse_prometheus(
      "vllm:num_requests_running{engine=\"0\"} 3\nvllm:num_requests_running{engine=\"1\"} 2\n"
      "vllm:num_requests_waiting{engine=\"0\"} 7\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"1\"} 0.3\n");
  EXPECT_EQ(detect_flavor(now), EngineFlavor::vllm);
  const LoadSnapshot l = load_from_metrics(now, EngineFlavor::automatic, 256);
  EXPECT_TRUE(l.valid);
  EXPECT_EQ(l.slots_busy, 5);
  EXPECT_EQ(l.slots_total, 256);
  EXPECT_EQ(l.queued, 7);
  EXPECT_NEAR(l.kv_occupancy(), 0.4, 1e-12);
  const auto old =
      parse_prometheus("vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.25\n");
  EXPECT_NEAR(load_from_metrics(old, EngineFlavor::vllm, 8).kv_occupancy(), 0.25, 1e-12);
}

// vLLM exports only a share of its KV pool; its cache_config_info gives the pool's size, so
// the share becomes tokens (summed over engine cores), as the pricing of a fill's KV needs.
TEST(Prometheus, VllmKvPoolFromItsCacheConfigInfo) {
  const auto two = parse_prometheus(
      "vllm:num_requests_running{engine=\"0\"} 3\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.3\n"
      "vllm:cache_config_info{engine=\"0\",block_size=\"16\",num_gpu_blocks=\"661\","
      "kv_cache_size_tokens=\"10576\"} 1\n"
      "vllm:cache_config_info{engine=\"1\",block_size=\"16\",num_gpu_blocks=\"661\"} 1\n");
  const LoadSnapshot l = load_from_metrics(two, EngineFlavor::vllm, 256);
  EXPECT_EQ(l.kv_total, 10576 + 661 * 16);
  EXPECT_NEAR(l.kv_occupancy(), 0.4, 1e-12);
  // Before profiling, vLLM writes None: the share stands alone.
  const auto unsized = parse_prometheus(
      "vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.25\n"
      "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1\n");
  const LoadSnapshot u = load_from_metrics(unsized, EngineFlavor::vllm, 8);
  EXPECT_EQ(u.kv_total, 1);
  EXPECT_NEAR(u.kv_used, 0.25, 1e-12);
}

// The token counters: vLLM's inter-token latency histogram (or its name before the rename), its
// prompt tokens and its engine steps; llama.cpp's predicted tokens and their seconds. Summed over
// engine cores.
TEST(Prometheus, TokenGapCountersOfEachFlavor) {
  const auto v = parse_prometheus(
      "vllm:num_requests_running{engine=\"0\"} 3\n"
      "vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"0.05\"} 90\n"
      "vllm:inter_token_latency_seconds_count{engine=\"0\"} 100\n"
      "vllm:inter_token_latency_seconds_sum{engine=\"0\"} 4.5\n"
      "vllm:inter_token_latency_seconds_count{engine=\"1\"} 50\n"
      "vllm:inter_token_latency_seconds_sum{engine=\"1\"} 2.5\n"
      "vllm:prompt_tokens_total{engine=\"0\"} 7000\n"
      "vllm:iteration_tokens_total_count{engine=\"0\"} 40\n");
  const LoadSnapshot l = load_from_metrics(v, EngineFlavor::vllm, 256);
  EXPECT_EQ(l.token_gaps, 150);
  EXPECT_DOUBLE_EQ(l.token_gap_s, 7.0);
  EXPECT_EQ(l.prompt_tokens, 7000);
  EXPECT_EQ(l.decode_steps, 40);
  EXPECT_EQ(l.lone_token_ms, 0);  // no engine exports it: configuration gives it
  const auto old = parse_prometheus(
      "vllm:num_requests_running 1\nvllm:time_per_output_token_seconds_count 10\n"
      "vllm:time_per_output_token_seconds_sum 0.3\n");
  EXPECT_EQ(load_from_metrics(old, EngineFlavor::vllm, 8).token_gaps, 10);
  const auto ll = parse_prometheus(
      "llamacpp:requests_processing 1\nllamacpp:tokens_predicted_total 200\n"
      "llamacpp:tokens_predicted_seconds_total 4\nllamacpp:prompt_tokens_total 900\n");
  const LoadSnapshot c = load_from_metrics(ll, EngineFlavor::llamacpp, 4);
  EXPECT_EQ(c.token_gaps, 200);
  EXPECT_EQ(c.token_gap_s, 4);
  EXPECT_EQ(c.prompt_tokens, 900);
  // Without the counters, nothing is read.
  const LoadSnapshot none =
      load_from_metrics(parse_prometheus("vllm:num_requests_running 1\n"), EngineFlavor::vllm, 8);
  EXPECT_EQ(none.token_gaps, 0);
  EXPECT_EQ(none.token_gap_s, 0);
}

TEST(Prometheus, SglangAndLlamaCpp) {
  const auto sg = parse_prometheus(
      "sglang:num_running_reqs{tp_rank=\"0\"} 4\nsglang:num_queue_reqs 1\n"
      "sglang:num_used_tokens 3000\nsglang:max_total_num_tokens 10000\nsglang:token_usage 0.3\n");
  EXPECT_EQ(detect_flavor(sg), EngineFlavor::sglang);
  const LoadSnapshot s = load_from_metrics(sg, EngineFlavor::automatic, 32);
  EXPECT_EQ(s.slots_busy, 4);
  EXPECT_EQ(s.queued, 1);
  EXPECT_EQ(s.kv_used, 3000);
  EXPECT_EQ(s.kv_total, 10000);
  const auto ll =
      parse_prometheus("llamacpp:requests_processing 2\nllamacpp:requests_deferred 5\n");
  const LoadSnapshot l = load_from_metrics(ll, EngineFlavor::automatic, 4);
  EXPECT_EQ(detect_flavor(ll), EngineFlavor::llamacpp);
  EXPECT_EQ(l.slots_busy, 2);
  EXPECT_EQ(l.queued, 5);
  EXPECT_EQ(l.kv_total, 0);  // llama.cpp exports no KV usage
  EXPECT_FALSE(load_from_metrics(parse_prometheus("up 1\n"), EngineFlavor::automatic, 4).valid);
}

}  // namespace
}  // namespace dynrt::engines
