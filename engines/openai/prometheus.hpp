// Engine load from Prometheus metrics: a parser for the text exposition format and the
// mapping from vLLM, SGLang and llama.cpp server metrics to a LoadSnapshot.
//
// vLLM: vllm:num_requests_running, vllm:num_requests_waiting, and the KV-cache usage fraction
// vllm:kv_cache_usage_perc (or vllm:gpu_cache_usage_perc before v0.12). SGLang (with
// --enable-metrics): sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage (or
// sglang:num_used_tokens over sglang:max_total_num_tokens). llama.cpp server (with --metrics):
// llamacpp:requests_processing and llamacpp:requests_deferred; it exports no KV usage.
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
