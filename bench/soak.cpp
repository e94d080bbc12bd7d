// soak: creates many distinct workflow runs through `dynrt serve` as fast as it can, lets them
// expire, and records what that costs the process (bench/soak.sh runs it against
// dynrt-sim-engine; docs/benchmarks.md has the figures).
//
// Threads, each on one keep-alive connection (plain blocking Beast clients: the client is not
// what is measured):
//   - `--connections` burst threads send tagged Routing router calls, each with a workflow id
//     of its own, until `--runs` runs exist (queries from a pool of `--queries`, so the library
//     holds at most that many router results);
//   - a probe sends one tagged call every 100 ms for the whole soak (an exact repeat of one
//     run's router call, answered from the library): its latency is what a harness feels
//     while the burst and the expiry happen;
//   - a monitor scrapes /metrics every second (timing each scrape) and reads the server's
//     VmRSS from /proc/PID/status.
// Phases: warm-up (RSS before), burst, then waiting until the runs have expired
// (dynrt_workflows_live back to at most the probe's run), then `--after` seconds more (RSS
// after). With `--no-expiry` it stops after the burst (bench/soak.sh then stops the server
// under load). The last line is `RESULT key=value ...`; a JSON report goes to `--json`.
#include "bench/routing_requests.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  int pid = 0;  // dynrt serve's, for VmRSS
  int connections = 16;
  std::uint64_t runs = 100'000;
  int queries = 1000;
  double after_s = 30;
  double expiry_timeout_s = 600;
  bool no_expiry = false;
  std::string model = "qwen3-32b";
  std::string json_path;
};

std::string router_body(const std::string& model, int query) {
  return json{{"model", model},
              {"temperature", 0},
              {"max_tokens", 512},
              {"messages",
               {{{"role", "system"}, {"content", dynrt::bench::routing::kRouterSystem}},
                {{"role", "user"}, {"content", dynrt::bench::routing::query(query)}}}}}
      .dump();
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// One keep-alive connection; reconnects after an error.
class Client {
 public:
  explicit Client(const Options& o) : o_(o) {}

  // The status, or 0 when the exchange failed (then the connection is dropped).
  int send(http::verb verb, const std::string& target, const std::string& body,
           const std::vector<std::pair<std::string, std::string>>& headers, std::string* out) {
    beast::error_code ec;
    if (!stream_) {
      stream_.emplace(ioc_);
      tcp::resolver resolver(ioc_);
      stream_->connect(resolver.resolve(o_.host, std::to_string(o_.port), ec), ec);
      if (ec) return drop();
      stream_->socket().set_option(tcp::no_delay(true), ec);
    }
    http::request<http::string_body> req(verb, target, 11);
    req.set(http::field::host, o_.host);
    for (const auto& [k, v] : headers)
      req.set(k, v);
    if (verb == http::verb::post) req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(*stream_, req, ec);
    if (ec) return drop();
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(*stream_, buffer, res, ec);
    if (ec) return drop();
    if (out) *out = std::move(res.body());
    if (!res.keep_alive()) stream_.reset();
    return res.result_int();
  }

 private:
  int drop() {
    stream_.reset();
    return 0;
  }
  const Options& o_;
  net::io_context ioc_;
  std::optional<beast::tcp_stream> stream_;
};

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
  std::size_t n = 0;
};
Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * v.size()))];
  };
  p.p50 = at(0.5);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}

double metric(const std::string& text, const std::string& name) {
  double sum = 0;
  std::size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    const char next = pos + name.size() < text.size() ? text[pos + name.size()] : '\0';
    pos += name.size();
    if (!line_start || (next != ' ' && next != '{')) continue;
    const auto space = text.find(' ', pos);
    if (space == std::string::npos) break;
    sum += std::strtod(text.c_str() + space + 1, nullptr);
  }
  return sum;
}

long rss_kb(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

struct Soak {
  Options o;
  Clock::time_point t0 = Clock::now();
  std::atomic<std::uint64_t> created{0}, failed{0};
  std::atomic<bool> stop_probe{false}, stop_monitor{false};
  std::mutex mutex;
  std::vector<double> probe_ms;
  std::vector<double> scrape_ms;
  std::uint64_t probe_failed = 0;
  struct Sample {
    double t_s;
    long rss_kb;
    double live, entries, bytes, fills_in_flight;
  };
  std::vector<Sample> samples;
  std::string last_metrics;

  double now_s() const { return ms_since(t0) / 1000; }

  void burst_thread(int index) {
    Client c(o);
    const std::vector<std::pair<std::string, std::string>> tags_base = {
        {"X-DynRT-Workflow", "routing"}, {"X-DynRT-Stage", "router"}};
    for (;;) {
      const std::uint64_t i = created.fetch_add(1);
      if (i >= o.runs) {
        created.fetch_sub(1);
        return;
      }
      auto tags = tags_base;
      tags.emplace_back("X-DynRT-Workflow-Id",
                        "soak-" + std::to_string(index) + "-" + std::to_string(i));
      const int q = static_cast<int>(i % static_cast<std::uint64_t>(o.queries));
      if (c.send(http::verb::post, "/v1/chat/completions", router_body(o.model, q), tags,
                 nullptr) != 200)
        ++failed;
    }
  }

  void probe_thread() {
    Client c(o);
    const std::vector<std::pair<std::string, std::string>> tags = {
        {"X-DynRT-Workflow", "routing"},
        {"X-DynRT-Workflow-Id", "soak-probe"},
        {"X-DynRT-Stage", "router"}};
    const std::string body = router_body(o.model, 0);
    auto next = Clock::now();
    while (!stop_probe) {
      const auto start = Clock::now();
      const int status = c.send(http::verb::post, "/v1/chat/completions", body, tags, nullptr);
      const double ms = ms_since(start);
      {
        std::lock_guard lock(mutex);
        probe_ms.push_back(ms);
        if (status != 200) ++probe_failed;
      }
      next += std::chrono::milliseconds(100);
      std::this_thread::sleep_until(next);  // the probe's pace, not a wait for the server
    }
  }

  void monitor_thread() {
    Client c(o);
    auto next = Clock::now();
    while (!stop_monitor) {
      std::string text;
      const auto start = Clock::now();
      const int status = c.send(http::verb::get, "/metrics", "", {}, &text);
      const double ms = ms_since(start);
      Sample s{now_s(), o.pid > 0 ? rss_kb(o.pid) : -1, -1, -1, -1, -1};
      if (status == 200) {
        s.live = metric(text, "dynrt_workflows_live");
        s.entries = metric(text, "dynrt_csl_entries");
        s.bytes = metric(text, "dynrt_csl_bytes");
        s.fills_in_flight = metric(text, "dynrt_fills_in_flight");
      }
      {
        std::lock_guard lock(mutex);
        scrape_ms.push_back(ms);
        samples.push_back(s);
        if (status == 200) last_metrics = std::move(text);
      }
      next += std::chrono::seconds(1);
      std::this_thread::sleep_until(next);
    }
  }

  Sample latest() {
    std::lock_guard lock(mutex);
    return samples.empty() ? Sample{} : samples.back();
  }
};

}  // namespace

int main(int argc, char** argv) {
  Soak s;
  Options& o = s.o;
  CLI::App app{
      "Creates many workflow runs through dynrt serve, lets them expire, and reports "
      "memory, latency and scrape times"};
  app.add_option("--host", o.host);
  app.add_option("--port", o.port)->required();
  app.add_option("--pid", o.pid, "dynrt serve's process id (for VmRSS)");
  app.add_option("-c,--connections", o.connections, "burst connections")->capture_default_str();
  app.add_option("-n,--runs", o.runs, "workflow runs to create")->capture_default_str();
  app.add_option("--queries", o.queries, "distinct router queries")->capture_default_str();
  app.add_option("--after", o.after_s, "seconds to keep watching once the runs have expired")
      ->capture_default_str();
  app.add_option("--expiry-timeout", o.expiry_timeout_s, "give up waiting for expiry after this")
      ->capture_default_str();
  app.add_flag("--no-expiry", o.no_expiry, "stop after the burst");
  app.add_option("--model", o.model);
  app.add_option("--json", o.json_path, "write the report here");
  CLI11_PARSE(app, argc, argv);

  std::thread monitor([&] { s.monitor_thread(); });
  // Warm-up: the probe's run exists and its router result is in the library.
  {
    Client c(o);
    for (int i = 0; i < 20; ++i)
      c.send(http::verb::post, "/v1/chat/completions", router_body(o.model, 0),
             {{"X-DynRT-Workflow", "routing"},
              {"X-DynRT-Workflow-Id", "soak-probe"},
              {"X-DynRT-Stage", "router"}},
             nullptr);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two RSS samples at rest
  const auto before = s.latest();
  std::thread prober([&] { s.probe_thread(); });

  const double burst_start = s.now_s();
  std::printf("soak: burst of %llu runs on %d connections\n",
              static_cast<unsigned long long>(o.runs), o.connections);
  std::fflush(stdout);
  {
    std::vector<std::thread> burst;
    for (int i = 0; i < o.connections; ++i)
      burst.emplace_back([&s, i] { s.burst_thread(i); });
    for (auto& t : burst)
      t.join();
  }
  const double burst_end = s.now_s();
  std::printf("soak: burst done: %llu runs in %.1f s (%.0f runs/s), %llu failed\n",
              static_cast<unsigned long long>(s.created.load()), burst_end - burst_start,
              static_cast<double>(s.created.load()) / std::max(1e-9, burst_end - burst_start),
              static_cast<unsigned long long>(s.failed.load()));
  std::fflush(stdout);

  double expired_at = -1;
  if (!o.no_expiry) {
    // Until the runs have expired: at most the probe's run is left.
    while (s.now_s() - burst_end < o.expiry_timeout_s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const auto l = s.latest();
      if (l.t_s > burst_end && l.live >= 0 && l.live <= 1) {
        expired_at = l.t_s;
        break;
      }
    }
    std::printf("soak: runs expired %.1f s after the burst\n",
                expired_at < 0 ? -1.0 : expired_at - burst_end);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.after_s));
  }
  const auto after = s.latest();
  s.stop_probe = true;
  prober.join();
  s.stop_monitor = true;
  monitor.join();

  long peak_kb = 0;
  double peak_live = 0;
  for (const auto& x : s.samples) {
    peak_kb = std::max(peak_kb, x.rss_kb);
    peak_live = std::max(peak_live, x.live);
  }
  const auto probe = percentiles(s.probe_ms);
  const auto scrape = percentiles(s.scrape_ms);
  // The library's own size when the runs are gone: its result bytes plus its metadata (about
  // 160 bytes an entry, docs/benchmarks.md "Metadata per entry").
  const double library_kb = (after.bytes + 160 * after.entries) / 1024;
  const double bound_kb = 1.2 * (static_cast<double>(before.rss_kb) + library_kb);
  json report = {
      {"runs", s.created.load()},
      {"failed", s.failed.load()},
      {"burst_s", burst_end - burst_start},
      {"runs_per_s",
       static_cast<double>(s.created.load()) / std::max(1e-9, burst_end - burst_start)},
      {"expired_after_s", expired_at < 0 ? -1.0 : expired_at - burst_end},
      {"rss_before_kb", before.rss_kb},
      {"rss_peak_kb", peak_kb},
      {"rss_after_kb", after.rss_kb},
      {"library_entries", after.entries},
      {"library_bytes", after.bytes},
      {"rss_after_bound_kb", bound_kb},
      {"peak_live_runs", peak_live},
      {"probe",
       {{"n", probe.n},
        {"p50_ms", probe.p50},
        {"p99_ms", probe.p99},
        {"max_ms", probe.max},
        {"failed", s.probe_failed}}},
      {"scrape",
       {{"n", scrape.n}, {"p50_ms", scrape.p50}, {"p99_ms", scrape.p99}, {"max_ms", scrape.max}}},
      {"samples", json::array()},
  };
  for (const auto& x : s.samples)
    report["samples"].push_back({x.t_s, x.rss_kb, x.live, x.entries, x.fills_in_flight});
  if (!o.json_path.empty()) std::ofstream(o.json_path) << report.dump(1) << "\n";

  std::printf(
      "soak: RSS before %.1f MB, peak %.1f MB, after %.1f MB (bound %.1f MB: 1.2 x "
      "(before + library %.1f MB))\n",
      before.rss_kb / 1024.0, peak_kb / 1024.0, after.rss_kb / 1024.0, bound_kb / 1024,
      library_kb / 1024);
  std::printf(
      "soak: tagged probe every 100 ms: p50 %.1f ms, p99 %.1f ms, max %.1f ms (%zu calls, "
      "%llu failed)\n",
      probe.p50, probe.p99, probe.max, probe.n, static_cast<unsigned long long>(s.probe_failed));
  std::printf("soak: /metrics scrape: p50 %.1f ms, p99 %.1f ms, max %.1f ms (%zu scrapes)\n",
              scrape.p50, scrape.p99, scrape.max, scrape.n);
  std::printf(
      "RESULT runs=%llu failed=%llu runs_per_s=%.0f rss_before_kb=%ld rss_peak_kb=%ld "
      "rss_after_kb=%ld rss_bound_kb=%.0f probe_p99_ms=%.1f probe_max_ms=%.1f "
      "probe_failed=%llu scrape_p99_ms=%.1f scrape_max_ms=%.1f expired_after_s=%.1f\n",
      static_cast<unsigned long long>(s.created.load()),
      static_cast<unsigned long long>(s.failed.load()),
      static_cast<double>(s.created.load()) / std::max(1e-9, burst_end - burst_start),
      before.rss_kb, peak_kb, after.rss_kb, bound_kb, probe.p99, probe.max,
      static_cast<unsigned long long>(s.probe_failed), scrape.p99, scrape.max,
      expired_at < 0 ? -1.0 : expired_at - burst_end);
  return s.failed.load() == 0 && s.probe_failed == 0 ? 0 : 1;
}
