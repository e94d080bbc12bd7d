// serve_load: holds C concurrent streaming chat completions against `dynrt serve` for D seconds
// (the load test; bench/serve_load.sh runs it against dynrt-sim-engine).
//
// One thread and one Boost.Asio io_context, never a thread per connection. Each of the C
// keep-alive connections sends a streamed POST /v1/chat/completions, reads the SSE stream to
// [DONE], validates it and at once sends its next request; a connection the server closes is
// reopened. The mix, seeded per connection: Routing runs tagged as a harness tags them (the
// router, then the handler the router named, with exactly the bodies templates/routing.yaml
// renders; queries come from a finite pool, so exact repeats are served from the library or a
// fill), and untagged pass-through calls. A response counts as completed when it has status
// 200, content type text/event-stream, every `data:` payload is a JSON object without an
// `error` up to `[DONE]` and nothing after it, the assembled content is not empty, the router
// names its query's handler, and the text is byte-identical to the first answer to the same
// request (value equivalence under load). Anything else is a failure of one kind.
//
// Reports requests, failures by kind, in-flight requests held (min and mean of a sample every
// 100 ms once every connection has sent its first request, until D), throughput, and TTFT and
// total latency percentiles by how each answer was served (X-DynRT-Served). The last line is
// `RESULT key=value ...` for scripts. Exit status 0 only with no failure and every connection
// up. Usage: serve_load --port P [--connections C] [--seconds D] [--seed S] ...
#include "bench/routing_requests.hpp"
#include "cli/number_checks.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <unordered_map>
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
  int connections = 100;
  double seconds = 10;
  std::uint64_t seed = 1;
  double tagged = 0.8;  // share of runs that are tagged Routing runs
  int queries = 300;    // distinct Routing queries
  int prompts = 200;    // distinct untagged prompts
  double timeout_s = 120;
  std::string model = "qwen3-32b";
  std::string json_path;
};

using dynrt::bench::routing::handler_system;
using dynrt::bench::routing::kHandlers;
using dynrt::bench::routing::kRouterSystem;
using dynrt::bench::routing::kTopics;
using dynrt::bench::routing::query;

enum class Failure { connect, status, malformed, stream_error, content, connection, timeout };
constexpr std::array<const char*, 7> kFailureNames = {
    "connect", "status", "malformed", "stream_error", "content", "connection", "timeout"};

struct Sample {
  double ttft_ms;
  double total_ms;
};

struct Load {
  Options o;
  net::io_context ioc;
  tcp::endpoint endpoint;
  Clock::time_point start, end;
  std::regex handler_re{R"(HANDLER:\s*(weather|calendar|email))"};

  int in_flight = 0;
  int started = 0;  // connections that have sent their first request
  std::optional<Clock::time_point> all_started;
  std::vector<int> held;  // in-flight samples once all started, until `end`

  std::uint64_t completed = 0, completed_in_window = 0;
  std::array<std::uint64_t, 7> failures{};
  std::vector<std::string> examples;  // the first few failure messages
  std::map<std::string, std::vector<Sample>> by_served;
  std::map<std::string, std::uint64_t> by_stage;
  std::unordered_map<std::string, std::string> answers;  // request key -> first text

  void fail(Failure f, std::string what) {
    ++failures[static_cast<std::size_t>(f)];
    if (examples.size() < 8)
      examples.push_back(kFailureNames[static_cast<std::size_t>(f)] + (": " + what));
  }
  std::uint64_t failed() const {
    std::uint64_t n = 0;
    for (const auto f : failures)
      n += f;
    return n;
  }
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(Load& load, int index)
      : load_(load),
        index_(index),
        socket_(load.ioc),
        timer_(load.ioc),
        rng_(load.o.seed * 1'000'003 + static_cast<std::uint64_t>(index)) {}

  void start() { connect(); }

 private:
  enum class Stage { router, handle, plain };

  void connect() {
    socket_ = tcp::socket(load_.ioc);
    buffer_.clear();
    socket_.async_connect(load_.endpoint, [self = shared_from_this()](beast::error_code ec) {
      if (ec) {
        self->load_.fail(Failure::connect, ec.message());
        return self->retry();
      }
      self->socket_.set_option(tcp::no_delay(true), ec);
      self->next();
    });
  }

  // After a failure: a fresh connection, shortly (a refused connect must not spin).
  void retry() {
    beast::error_code ignored;
    socket_.close(ignored);
    stage_ = Stage::plain;
    routing_ = false;
    if (Clock::now() >= load_.end) return done();
    timer_.expires_after(std::chrono::milliseconds(100));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->connect();
    });
  }

  void done() {
    beast::error_code ignored;
    socket_.close(ignored);
  }

  // The next request: the handler of the Routing run in progress, or a new run.
  void next() {
    if (Clock::now() >= load_.end) return done();
    const Options& o = load_.o;
    json body = {{"model", o.model}, {"stream", true}};
    std::string tags;
    if (routing_) {
      stage_ = Stage::handle;
      body["temperature"] = 0;
      body["max_tokens"] = 256;
      body["messages"] = {{{"role", "system"}, {"content", handler_system(handler_)}},
                          {{"role", "user"}, {"content", query(query_)}}};
      key_ = "handle:" + handler_ + ":" + std::to_string(query_);
      tags = "X-DynRT-Stage: handle\r\n";
      routing_ = false;
    } else if (std::uniform_real_distribution<double>(0, 1)(rng_) < o.tagged) {
      stage_ = Stage::router;
      query_ = std::uniform_int_distribution<int>(0, o.queries - 1)(rng_);
      run_id_ = "load-" + std::to_string(o.seed) + "-" + std::to_string(index_) + "-" +
                std::to_string(++runs_);
      body["temperature"] = 0;
      body["max_tokens"] = 512;
      body["messages"] = {{{"role", "system"}, {"content", kRouterSystem}},
                          {{"role", "user"}, {"content", query(query_)}}};
      key_ = "router:" + std::to_string(query_);
      tags = "X-DynRT-Stage: router\r\n";
    } else {
      stage_ = Stage::plain;
      const int k = std::uniform_int_distribution<int>(0, o.prompts - 1)(rng_);
      body["max_tokens"] = 32 + (k * 37) % 160;
      body["messages"] = {{{"role", "user"},
                           {"content", "Untagged prompt " + std::to_string(k) + ": tell me about " +
                                           kTopics[static_cast<std::size_t>(k) % 8]}}};
      key_ = "plain:" + std::to_string(k);
    }
    if (std::uniform_int_distribution<int>(0, 1)(rng_) == 1)
      body["stream_options"] = {{"include_usage", true}};
    if (stage_ != Stage::plain)
      tags = "X-DynRT-Workflow: routing\r\nX-DynRT-Workflow-Id: " + run_id_ + "\r\n" + tags;
    const std::string text = body.dump();
    request_ = "POST /v1/chat/completions HTTP/1.1\r\nHost: " + o.host +
               "\r\nContent-Type: application/json\r\n" + tags +
               "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;

    sent_ = Clock::now();
    first_.reset();
    content_.clear();
    served_ = "engine";
    line_.clear();
    consumed_ = 0;
    status_ = 0;
    header_seen_ = saw_done_ = broken_ = timed_out_ = false;
    parser_.emplace();
    parser_->body_limit(std::size_t{64} << 20);
    if (!counted_) {
      counted_ = true;
      if (++load_.started == load_.o.connections) load_.all_started = Clock::now();
    }
    ++load_.in_flight;
    timer_.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s)));
    timer_.async_wait([self = shared_from_this(), gen = ++gen_](beast::error_code ec) {
      if (ec || gen != self->gen_) return;  // an expiry queued before the answer came
      self->timed_out_ = true;
      beast::error_code ignored;
      self->socket_.close(ignored);
    });
    net::async_write(socket_, net::buffer(request_),
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec) return self->on_read(ec);
                       self->read();
                     });
  }

  void read() {
    http::async_read_some(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      if (timed_out_)
        return failed(Failure::timeout,
                      "no complete answer within " + std::to_string(load_.o.timeout_s) + " s");
      return failed(Failure::connection, (header_seen_ ? "mid-response: " : "") + ec.message());
    }
    if (parser_->is_header_done() && !header_seen_) {
      header_seen_ = true;
      const auto& h = parser_->get();
      status_ = h.result_int();
      if (const auto it = h.find("X-DynRT-Served"); it != h.end())
        served_ = std::string(it->value());
      if (status_ == 200 && h[http::field::content_type] != "text/event-stream") {
        broken_ = true;
        problem_ = {Failure::malformed,
                    "content type " + std::string(h[http::field::content_type])};
      }
    }
    if (status_ == 200 && !broken_) consume();
    if (parser_->is_done()) return finish();
    read();
  }

  // The body bytes not seen yet, line by line.
  void consume() {
    const std::string& body = parser_->get().body();
    for (; consumed_ < body.size(); ++consumed_) {
      const char c = body[consumed_];
      if (c != '\n') {
        line_.push_back(c);
        continue;
      }
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (!broken_) event_line(line_);
      line_.clear();
    }
  }

  void event_line(const std::string& line) {
    if (line.rfind("data:", 0) != 0) return;  // blank separators, comments, other fields
    std::string_view payload(line);
    payload.remove_prefix(5);
    if (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
    if (saw_done_) return broken(Failure::malformed, "data after [DONE]");
    if (payload == "[DONE]") {
      saw_done_ = true;
      return;
    }
    const json chunk = json::parse(payload, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object())
      return broken(Failure::malformed,
                    "data is not a JSON object: " + std::string(payload.substr(0, 80)));
    if (chunk.contains("error"))
      return broken(Failure::stream_error, std::string(payload.substr(0, 200)));
    const auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;  // usage
    const auto& choice = (*choices)[0];
    if (!choice.contains("delta") || !choice["delta"].is_object())
      return broken(Failure::malformed, "a chunk without a delta");
    const auto& delta = choice["delta"];
    if (const auto c = delta.find("content"); c != delta.end() && c->is_string()) {
      if (!first_ && !c->get_ref<const std::string&>().empty()) first_ = Clock::now();
      content_ += c->get_ref<const std::string&>();
    }
  }

  void broken(Failure f, std::string what) {
    broken_ = true;
    problem_ = {f, std::move(what)};
  }

  void finish() {
    if (status_ != 200)
      return failed(Failure::status,
                    std::to_string(status_) + " " + parser_->get().body().substr(0, 200));
    if (!line_.empty() && !broken_) event_line(line_);
    if (broken_) return failed(problem_.first, problem_.second);
    if (!saw_done_) return failed(Failure::malformed, "the stream ended without [DONE]");
    if (content_.empty()) return failed(Failure::malformed, "no content");
    if (stage_ == Stage::router) {
      std::string last;
      for (std::sregex_iterator it(content_.begin(), content_.end(), load_.handler_re), e; it != e;
           ++it)
        last = (*it)[1];
      const std::string want = kHandlers[static_cast<std::size_t>(query_) % 3];
      if (last != want)
        return failed(Failure::content, "router named \"" + last + "\", want " + want);
      handler_ = last;
      routing_ = true;
    }
    auto [it, fresh] = load_.answers.try_emplace(key_, content_);
    if (!fresh && it->second != content_)
      return failed(Failure::content, key_ + " answered differently than before (" + served_ + ")");

    ++gen_;
    timer_.cancel();
    --load_.in_flight;
    ++load_.completed;
    if (Clock::now() <= load_.end) ++load_.completed_in_window;
    const double total = ms_since(sent_);
    const double ttft =
        std::chrono::duration<double, std::milli>(first_.value_or(Clock::now()) - sent_).count();
    load_.by_served[served_].push_back({ttft, total});
    load_.by_stage[stage_ == Stage::router   ? "router"
                   : stage_ == Stage::handle ? "handle"
                                             : "untagged"]++;
    if (!parser_->keep_alive()) {
      beast::error_code ignored;
      socket_.close(ignored);
      return connect();
    }
    next();
  }

  void failed(Failure f, std::string what) {
    ++gen_;
    timer_.cancel();
    --load_.in_flight;
    load_.fail(f, std::move(what));
    retry();
  }

  Load& load_;
  const int index_;
  tcp::socket socket_;
  net::steady_timer timer_;
  std::mt19937_64 rng_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::string request_;
  Stage stage_ = Stage::plain;
  bool routing_ = false;  // a router answered: its handler is next
  std::string handler_;
  int query_ = 0;
  std::string run_id_;
  std::uint64_t runs_ = 0;
  std::string key_;
  bool counted_ = false;
  std::uint64_t gen_ = 0;  // which request the timer is for

  Clock::time_point sent_;
  std::optional<Clock::time_point> first_;
  std::string content_, served_, line_;
  std::size_t consumed_ = 0;
  unsigned status_ = 0;
  bool header_seen_ = false, saw_done_ = false, broken_ = false, timed_out_ = false;
  std::pair<Failure, std::string> problem_{Failure::malformed, ""};
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

void sample(Load& load, net::steady_timer& timer) {
  timer.expires_after(std::chrono::milliseconds(100));
  timer.async_wait([&load, &timer](beast::error_code ec) {
    if (ec || Clock::now() >= load.end) return;
    if (load.all_started) load.held.push_back(load.in_flight);
    sample(load, timer);
  });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"serve_load: C concurrent streaming chat completions against dynrt serve",
               "serve_load"};
  app.add_option("--host", o.host, "Server address")->capture_default_str();
  app.add_option("--port", o.port, "Server port")->required();
  app.add_option("-c,--connections", o.connections, "Concurrent streams")
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  app.add_option("-d,--seconds", o.seconds, "How long to keep sending")
      ->check(dynrt::cli_checks::positive_finite())
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the request mix")
      ->check(dynrt::cli_checks::unsigned_integer())
      ->capture_default_str();
  app.add_option("--tagged", o.tagged, "Share of runs that are tagged Routing runs")
      ->check(dynrt::cli_checks::finite_range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--queries", o.queries, "Distinct Routing queries (fewer: more exact repeats)")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--prompts", o.prompts, "Distinct untagged prompts")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "Seconds one request may take before it fails")
      ->check(dynrt::cli_checks::positive_finite())
      ->capture_default_str();
  app.add_option("--model", o.model, "The model field of every request")->capture_default_str();
  app.add_option("--json", o.json_path, "Also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  Load load;
  load.o = o;
  beast::error_code ec;
  load.endpoint = tcp::endpoint(net::ip::make_address(o.host, ec), o.port);
  if (ec) {
    std::fprintf(stderr, "serve_load: --host %s is not an IP address\n", o.host.c_str());
    return 2;
  }
  load.start = Clock::now();
  load.end = load.start +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  for (int i = 0; i < o.connections; ++i)
    std::make_shared<Conn>(load, i)->start();
  net::steady_timer sampler(load.ioc);
  sample(load, sampler);
  load.ioc.run();
  const double wall = ms_since(load.start) / 1000;

  int held_min = 0;
  double held_mean = 0;
  if (!load.held.empty()) {
    held_min = *std::min_element(load.held.begin(), load.held.end());
    for (const int h : load.held)
      held_mean += h;
    held_mean /= static_cast<double>(load.held.size());
  }
  const double rate = static_cast<double>(load.completed_in_window) / o.seconds;
  std::printf("| measure | value |\n| --- | --- |\n");
  std::printf("| connections | %d (%d sent a request) |\n", o.connections, load.started);
  std::printf("| duration | %.0f s sending, %.1f s with the drain |\n", o.seconds, wall);
  std::printf("| requests completed | %llu (%llu within the %.0f s) |\n",
              static_cast<unsigned long long>(load.completed),
              static_cast<unsigned long long>(load.completed_in_window), o.seconds);
  for (const auto& [stage, n] : load.by_stage)
    std::printf("| - %s | %llu |\n", stage.c_str(), static_cast<unsigned long long>(n));
  std::printf("| failures | %llu", static_cast<unsigned long long>(load.failed()));
  for (std::size_t i = 0; i < load.failures.size(); ++i)
    if (load.failures[i] > 0)
      std::printf(" %s=%llu", kFailureNames[i], static_cast<unsigned long long>(load.failures[i]));
  std::printf(" |\n| in flight held (min / mean of %zu samples) | %d / %.1f |\n", load.held.size(),
              held_min, held_mean);
  std::printf("| throughput | %.1f requests/s |\n\n", rate);

  std::printf(
      "| served | requests | TTFT p50 | p90 | p99 | total p50 | p90 | p99 | max |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  json latency = json::object();
  auto row = [&](const std::string& name, const std::vector<Sample>& samples) {
    std::vector<double> t, d;
    for (const auto& s : samples) {
      t.push_back(s.ttft_ms);
      d.push_back(s.total_ms);
    }
    const double t50 = percentile(t, .5), t90 = percentile(t, .9), t99 = percentile(t, .99);
    const double d50 = percentile(d, .5), d90 = percentile(d, .9), d99 = percentile(d, .99);
    const double dmax = d.empty() ? 0 : *std::max_element(d.begin(), d.end());
    std::printf(
        "| %s | %zu | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n",
        name.c_str(), samples.size(), t50, t90, t99, d50, d90, d99, dmax);
    latency[name] = {{"requests", samples.size()},
                     {"ttft_ms", {t50, t90, t99}},
                     {"total_ms", {d50, d90, d99, dmax}}};
  };
  std::vector<Sample> all;
  for (const auto& [served, samples] : load.by_served) {
    row(served, samples);
    all.insert(all.end(), samples.begin(), samples.end());
  }
  row("all", all);
  for (const auto& e : load.examples)
    std::printf("failure: %s\n", e.c_str());

  const bool ok = load.failed() == 0 && load.started == o.connections && load.completed > 0;
  std::printf(
      "RESULT ok=%d connections=%d started=%d completed=%llu failures=%llu held_min=%d "
      "held_mean=%.1f rate=%.1f ttft_p50_ms=%.0f total_p50_ms=%.0f total_p99_ms=%.0f\n",
      ok ? 1 : 0, o.connections, load.started, static_cast<unsigned long long>(load.completed),
      static_cast<unsigned long long>(load.failed()), held_min, held_mean, rate,
      latency["all"]["ttft_ms"][0].get<double>(), latency["all"]["total_ms"][0].get<double>(),
      latency["all"]["total_ms"][2].get<double>());
  if (!o.json_path.empty()) {
    json failures = json::object();
    for (std::size_t i = 0; i < load.failures.size(); ++i)
      failures[kFailureNames[i]] = load.failures[i];
    std::ofstream(o.json_path)
        << json{{"connections", o.connections}, {"seconds", o.seconds},
                {"completed", load.completed},  {"completed_in_window", load.completed_in_window},
                {"by_stage", load.by_stage},    {"failures", failures},
                {"held_min", held_min},         {"held_mean", held_mean},
                {"throughput", rate},           {"latency", latency}}
               .dump(2)
        << "\n";
  }
  return ok ? 0 : 1;
}
