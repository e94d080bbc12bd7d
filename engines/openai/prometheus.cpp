#include "engines/openai/prometheus.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

namespace dynrt::engines {

namespace {

bool name_char(char c, bool first) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
  return alpha || (!first && c >= '0' && c <= '9');
}

std::optional<double> parse_value(std::string_view v) {
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (v == "+Inf" || v == "Inf") return std::numeric_limits<double>::infinity();
  if (v == "-Inf") return -std::numeric_limits<double>::infinity();
  const std::string s(v);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return std::nullopt;
  return d;
}

// One sample line; nullopt if malformed.
std::optional<MetricSample> parse_line(std::string_view line) {
  MetricSample m;
  std::size_t i = 0;
  while (i < line.size() && name_char(line[i], i == 0))
    ++i;
  if (i == 0) return std::nullopt;
  m.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ','))
        ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const std::size_t k = i;
      while (i < line.size() && name_char(line[i], i == k))
        ++i;
      if (i == k || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"')
        return std::nullopt;
      const std::string key(line.substr(k, i - k));
      i += 2;
      std::string value;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          value.push_back(line[i] == 'n' ? '\n' : line[i]);
        } else {
          value.push_back(line[i]);
        }
        ++i;
      }
      if (i >= line.size()) return std::nullopt;
      ++i;  // closing quote
      m.labels.emplace(key, std::move(value));
    }
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
    ++i;
  std::size_t j = i;
  while (j < line.size() && line[j] != ' ' && line[j] != '\t')
    ++j;
  const auto v = parse_value(line.substr(i, j - i));
  if (!v) return std::nullopt;
  m.value = *v;
  return m;  // an optional timestamp after the value is ignored
}

struct Gauge {
  double sum = 0;
  int count = 0;
  bool found() const { return count > 0; }
  double mean() const { return count > 0 ? sum / count : 0; }
};

Gauge gauge(const std::vector<MetricSample>& samples, std::string_view name) {
  Gauge g;
  for (const auto& s : samples) {
    if (s.name == name && std::isfinite(s.value)) {
      g.sum += s.value;
      ++g.count;
    }
  }
  return g;
}

// A label's value as a positive number; vLLM writes "None" for what it has not sized.
std::optional<double> count_label(const MetricSample& s, const std::string& label) {
  const auto it = s.labels.find(label);
  if (it == s.labels.end()) return std::nullopt;
  const auto v = parse_value(it->second);
  if (!v || !(*v > 0) || !std::isfinite(*v)) return std::nullopt;
  return v;
}

// vLLM's KV pool in tokens, from the labels of its `vllm:cache_config_info` info gauge (one
// per engine core): `kv_cache_size_tokens` where it has it, else `num_gpu_blocks` times
// `block_size`. 0 when no engine reports one.
double vllm_kv_tokens(const std::vector<MetricSample>& samples) {
  double total = 0;
  for (const auto& s : samples) {
    if (s.name != "vllm:cache_config_info") continue;
    if (const auto tokens = count_label(s, "kv_cache_size_tokens")) {
      total += *tokens;
    } else if (const auto blocks = count_label(s, "num_gpu_blocks")) {
      if (const auto size = count_label(s, "block_size")) total += *blocks * *size;
    }
  }
  return total;
}

}  // namespace

std::vector<MetricSample> parse_prometheus(std::string_view text, std::size_t* skipped) {
  std::vector<MetricSample> out;
  std::size_t bad = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ')
      line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    if (auto m = parse_line(line)) {
      out.push_back(std::move(*m));
    } else {
      ++bad;
    }
  }
  if (skipped) *skipped = bad;
  return out;
}

std::string_view to_string(EngineFlavor f) {
  switch (f) {
    case EngineFlavor::automatic:
      return "auto";
    case EngineFlavor::vllm:
      return "vllm";
    case EngineFlavor::sglang:
      return "sglang";
    case EngineFlavor::llamacpp:
      return "llamacpp";
    case EngineFlavor::generic:
      return "generic";
  }
  return "generic";
}

EngineFlavor detect_flavor(const std::vector<MetricSample>& samples) {
  for (const auto& s : samples) {
    if (s.name.starts_with("vllm:")) return EngineFlavor::vllm;
    if (s.name.starts_with("sglang:")) return EngineFlavor::sglang;
    if (s.name.starts_with("llamacpp:")) return EngineFlavor::llamacpp;
  }
  return EngineFlavor::generic;
}

namespace {

// The token counters of a histogram of inter-token gaps (its _count and _sum), the first of
// `names` the samples have, summed over label sets; and the prompt tokens counter.
void token_pace(const std::vector<MetricSample>& samples,
                std::initializer_list<std::string_view> names, std::string_view prompt,
                LoadSnapshot& s) {
  for (const std::string_view name : names) {
    const Gauge count = gauge(samples, std::string(name) + "_count");
    const Gauge sum = gauge(samples, std::string(name) + "_sum");
    if (!count.found() || !sum.found()) continue;
    s.token_gaps = count.sum;
    s.token_gap_s = sum.sum;
    break;
  }
  s.prompt_tokens = gauge(samples, prompt).sum;
}

}  // namespace

LoadSnapshot load_from_metrics(const std::vector<MetricSample>& samples, EngineFlavor flavor,
                               int slots_total) {
  if (flavor == EngineFlavor::automatic) flavor = detect_flavor(samples);
  LoadSnapshot s;
  s.slots_total = slots_total;
  Gauge running;
  Gauge waiting;
  switch (flavor) {
    case EngineFlavor::vllm: {
      running = gauge(samples, "vllm:num_requests_running");
      waiting = gauge(samples, "vllm:num_requests_waiting");
      Gauge kv = gauge(samples, "vllm:kv_cache_usage_perc");
      if (!kv.found()) kv = gauge(samples, "vllm:gpu_cache_usage_perc");  // before v0.12
      if (kv.found()) {
        // A share of the pool; in tokens when the engine says how large its pool is.
        const double tokens = vllm_kv_tokens(samples);
        s.kv_total = tokens > 0 ? tokens : 1;
        s.kv_used = kv.mean() * s.kv_total;
      }
      token_pace(samples,
                 {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
                 "vllm:prompt_tokens_total", s);
      s.decode_steps = gauge(samples, "vllm:iteration_tokens_total_count").sum;
      break;
    }
    case EngineFlavor::sglang: {
      running = gauge(samples, "sglang:num_running_reqs");
      waiting = gauge(samples, "sglang:num_queue_reqs");
      const Gauge used = gauge(samples, "sglang:num_used_tokens");
      const Gauge max = gauge(samples, "sglang:max_total_num_tokens");
      const Gauge usage = gauge(samples, "sglang:token_usage");
      if (used.found() && max.found() && max.sum > 0) {
        s.kv_used = used.sum;
        s.kv_total = max.sum;
      } else if (usage.found()) {
        s.kv_used = usage.mean();
        s.kv_total = 1;
      }
      token_pace(samples,
                 {"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"},
                 "sglang:prompt_tokens_total", s);
      break;
    }
    case EngineFlavor::llamacpp:
      running = gauge(samples, "llamacpp:requests_processing");
      waiting = gauge(samples, "llamacpp:requests_deferred");
      // Its counters of predicted tokens and the seconds they took are the gaps and their sum.
      s.token_gaps = gauge(samples, "llamacpp:tokens_predicted_total").sum;
      s.token_gap_s = gauge(samples, "llamacpp:tokens_predicted_seconds_total").sum;
      s.prompt_tokens = gauge(samples, "llamacpp:prompt_tokens_total").sum;
      break;
    case EngineFlavor::automatic:
    case EngineFlavor::generic:
      break;
  }
  if (!running.found() && !waiting.found()) return s;
  s.slots_busy = static_cast<int>(std::lround(running.sum));
  s.queued = static_cast<int>(std::lround(waiting.sum));
  s.valid = true;
  return s;
}

}  // namespace dynrt::engines
