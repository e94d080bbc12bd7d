// Engine load from Prometheus metrics: a parser for the text exposition format and the
// mapping from vLLM, SGLang and llama.cpp server metrics to a LoadSnapshot.
//
// vLLM: vllm:num_requests_running, vllm:num_requests_waiting, and the KV-cache usage fraction
// vllm:kv_cache_usage_perc (or vllm:gpu_cache_usage_perc before v0.12). SGLang (with
// --enable-metrics): sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage (or
// sglang:num_used_tokens over sglang:max_total_num_tokens). llama.cpp server (with --metrics):
// llamacpp:requests_processing and llamacpp:requests_deferred; it exports no KV usage. The
// token counters (LoadSnapshot::token_gaps, token_gap_s, prompt_tokens): vLLM's
// vllm:inter_token_latency_seconds histogram (vllm:time_per_output_token_seconds before it was
// renamed) and vllm:prompt_tokens_total; SGLang's sglang:inter_token_latency_seconds (or
// sglang:time_per_output_token_seconds) and sglang:prompt_tokens_total; llama.cpp's
// llamacpp:tokens_predicted_total, llamacpp:tokens_predicted_seconds_total and
// llamacpp:prompt_tokens_total.
// Series with several label sets (engines, ranks) are summed; KV fractions are averaged.
// None of the three exports its decode-slot capacity, so it comes from configuration (vLLM's
// --max-num-seqs). Pure.
#pragma once

#include "engines/engine.hpp"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::engines {

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the text format; malformed lines are skipped and counted.
std::vector<MetricSample> parse_prometheus(std::string_view text, std::size_t* skipped = nullptr);

enum class EngineFlavor { automatic, vllm, sglang, llamacpp, generic };

std::string_view to_string(EngineFlavor f);
// The flavor whose metric names appear in `samples`, or generic.
EngineFlavor detect_flavor(const std::vector<MetricSample>& samples);

// The load the samples describe; valid is false when they hold none of the flavor's gauges.
// KV: SGLang's tokens; vLLM's usage share, turned into tokens when its `vllm:cache_config_info`
// says how large the pool is (else kv_total is 1 and kv_used the share).
LoadSnapshot load_from_metrics(const std::vector<MetricSample>& samples, EngineFlavor flavor,
                               int slots_total);

}  // namespace dynrt::engines
