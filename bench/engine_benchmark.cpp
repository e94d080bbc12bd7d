// Engine benchmarks. Two measurements, printed as Markdown tables:
//
//   sim      The simulated engine's scheduling work on one core: a seeded open-loop workload
//            (Poisson arrivals, lognormal prompt and output lengths, a share streamed) run
//            through SimModel under simulated time, as fast as the CPU allows. Figure:
//            simulated requests completed per second of wall time. The same workload is then
//            run through SimEngine (its thread, at time scale 0) to show the cost of the
//            engine's locking and callbacks on top.
//   adapter  The openai adapter on loopback against dynrt-sim-engine at time scale 0 (the
//            engine answers at once, so what is measured is the HTTP path: the adapter, libcurl,
//            the kernel's loopback, the server). One request at a time (streamed and not), then
//            64 streams kept in flight. Figures: per-request latency p50/p99 in µs,
//            requests/s, and the client process's CPU time per request (getrusage), which is
//            the adapter's own cost because the server is another process.
//
// Usage: engine_benchmark [sim|adapter|all] [--requests N] [--seed S] [--server PATH]
#include "engines/openai/engine.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/model.hpp"

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <vector>

extern char** environ;

namespace {

using namespace dynrt;
using namespace dynrt::engines;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string what = "all";
  int requests = 0;  // 0: each part's default
  std::uint64_t seed = 1;
  std::string server = DYNRT_SIM_ENGINE_PATH;
};

// -- sim: scheduling throughput -------------------------------------------------------------------

struct Arrival {
  sim::SimTime at;
  EngineRequest request;
};

std::vector<Arrival> workload(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(200.0);  // 200 requests/simulated s
  std::lognormal_distribution<double> prompt_words(std::log(400), 0.8);
  std::lognormal_distribution<double> output(std::log(120), 0.6);
  std::bernoulli_distribution streamed(0.5);
  std::vector<Arrival> out;
  out.reserve(static_cast<std::size_t>(n));
  double t = 0;
  for (int i = 0; i < n; ++i) {
    t += gap(rng);
    const int words = std::clamp(static_cast<int>(prompt_words(rng)), 5, 6000);
    std::string prompt = "request " + std::to_string(i) + ":";
    for (int w = 0; w < words; ++w)
      prompt += " w" + std::to_string(w % 97);
    EngineRequest r;
    r.body = {{"model", "sim"},
              {"messages", json::array({{{"role", "user"}, {"content", std::move(prompt)}}})},
              {"max_tokens", std::clamp(static_cast<int>(output(rng)), 1, 2048)}};
    if (streamed(rng)) r.body["stream"] = true;
    r.kind = i % 3 == 0 ? RequestKind::fill : RequestKind::canonical;
    r.priority = r.kind == RequestKind::fill ? 10 : 0;
    out.push_back(
        {std::chrono::duration_cast<Duration>(std::chrono::duration<double>(t)), std::move(r)});
  }
  return out;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void bench_sim(const Args& args) {
  const int n = args.requests > 0 ? args.requests : 20'000;
  const auto arrivals = workload(n, args.seed);
  std::printf("## sim: scheduling work (%d requests, seed %llu)\n\n", n,
              static_cast<unsigned long long>(args.seed));
  std::printf("| driver | wall s | simulated s | requests/s (wall) | decode steps | chunks |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  {
    sim::SimModel model;
    std::vector<sim::SimEvent> events;
    std::uint64_t chunks = 0;
    const auto start = Clock::now();
    RequestHandle h = 1;
    for (const auto& a : arrivals) {
      model.advance(a.at, events);
      for (const auto& e : events)
        chunks += e.type == sim::SimEvent::Type::chunk;
      events.clear();
      model.submit(h++, a.request, a.at);
    }
    while (const auto next = model.next_event()) {
      model.advance(*next, events);
      for (const auto& e : events)
        chunks += e.type == sim::SimEvent::Type::chunk;
      events.clear();
    }
    const double wall = seconds_since(start);
    const auto& c = model.counters();
    std::printf("| SimModel | %.3f | %.1f | %.0f | %llu | %llu |\n", wall,
                std::chrono::duration<double>(model.now()).count(),
                static_cast<double>(c.completed) / wall, static_cast<unsigned long long>(c.steps),
                static_cast<unsigned long long>(chunks));
    if (c.completed != static_cast<std::uint64_t>(n)) {
      std::printf("\n(only %llu of %d completed)\n", static_cast<unsigned long long>(c.completed),
                  n);
    }
  }
  {
    // The engine thread at time scale 0, fed by this thread as fast as it submits.
    struct Count : ResponseSink {
      std::atomic<std::uint64_t>* done;
      std::atomic<std::uint64_t>* chunks;
      void on_chunk(std::string_view) override { ++*chunks; }
      void on_complete(EngineResult) override { ++*done; }
      void on_error(EngineError) override { ++*done; }
    };
    std::atomic<std::uint64_t> done{0}, chunks{0};
    sim::SimEngine engine({}, {}, sim::SimEngineOptions{0, "sim"});
    const auto start = Clock::now();
    for (const auto& a : arrivals) {
      auto sink = std::make_shared<Count>();
      sink->done = &done;
      sink->chunks = &chunks;
      engine.submit(a.request, sink);
    }
    engine.drain();
    const double wall = seconds_since(start);
    std::printf("| SimEngine, time scale 0 | %.3f | %.1f | %.0f | %llu | %llu |\n\n", wall,
                std::chrono::duration<double>(engine.simulated_now()).count(),
                static_cast<double>(done.load()) / wall,
                static_cast<unsigned long long>(engine.counters().steps),
                static_cast<unsigned long long>(chunks.load()));
  }
}

// -- adapter: overhead on loopback ----------------------------------------------------------------

struct Server {
  pid_t pid = 0;
  std::string url;
  explicit Server(const std::string& path) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const char* argv[] = {path.c_str(), "--port",  "0",   "--time-scale",
                          "0",          "--slots", "256", nullptr};
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc != 0) throw std::runtime_error("cannot start " + path + ": " + std::strerror(rc));
    FILE* f = fdopen(out[0], "r");
    char line[256] = {0};
    if (fgets(line, sizeof line, f) == nullptr) throw std::runtime_error(path + " printed nothing");
    fclose(f);
    const std::string text(line);
    const auto at = text.find("http://");
    if (at == std::string::npos) throw std::runtime_error("unexpected: " + text);
    url = text.substr(at, text.find_last_not_of("\r\n") + 1 - at);
  }
  ~Server() {
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
  }
};

// Completions arrive on the adapter's thread; the main thread waits for them and submits more.
struct Completions {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::pair<int, bool>> done;  // (slot, ok)
};

struct Timed : ResponseSink {
  Completions* into;
  int slot;
  void on_chunk(std::string_view) override {}
  void on_complete(EngineResult) override { finish(true); }
  void on_error(EngineError e) override {
    std::fprintf(stderr, "error: %s\n", e.message.c_str());
    finish(false);
  }
  void finish(bool ok) {
    {
      std::lock_guard lock(into->mutex);
      into->done.emplace_back(slot, ok);
    }
    into->cv.notify_one();
  }
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

void run_adapter(OpenAiEngine& adapter, const char* label, int n, int concurrency, bool stream,
                 int max_tokens) {
  Completions c;
  std::vector<Clock::time_point> started(static_cast<std::size_t>(concurrency));
  std::vector<double> latency_us;
  latency_us.reserve(static_cast<std::size_t>(n));
  int submitted = 0, failed = 0;
  auto submit = [&](int slot) {
    EngineRequest r;
    r.body = {{"model", "sim"},
              {"messages",
               json::array({{{"role", "user"},
                             {"content", "benchmark request " + std::to_string(submitted)}}})},
              {"max_tokens", max_tokens}};
    if (stream) {
      r.body["stream"] = true;
      r.body["stream_options"] = {{"include_usage", true}};
    }
    auto sink = std::make_shared<Timed>();
    sink->into = &c;
    sink->slot = slot;
    started[static_cast<std::size_t>(slot)] = Clock::now();
    ++submitted;
    adapter.submit(std::move(r), sink);
  };
  const double cpu0 = cpu_seconds();
  const auto start = Clock::now();
  for (int s = 0; s < concurrency && submitted < n; ++s)
    submit(s);
  int finished = 0;
  while (finished < submitted) {
    std::unique_lock lock(c.mutex);
    c.cv.wait(lock, [&] { return !c.done.empty(); });
    auto batch = std::move(c.done);
    c.done.clear();
    lock.unlock();
    for (const auto& [slot, ok] : batch) {
      const auto end = Clock::now();
      latency_us.push_back(
          std::chrono::duration<double, std::micro>(end - started[static_cast<std::size_t>(slot)])
              .count());
      failed += !ok;
      ++finished;
      if (submitted < n) submit(slot);
    }
  }
  const double wall = seconds_since(start);
  const double cpu = cpu_seconds() - cpu0;
  std::printf("| %s | %d | %d | %.0f | %.0f | %.0f | %.1f | %d |\n", label, concurrency, n,
              percentile(latency_us, 0.50), percentile(latency_us, 0.99), n / wall, cpu / n * 1e6,
              failed);
}

void bench_adapter(const Args& args) {
  const int n = args.requests > 0 ? args.requests : 5'000;
  Server server(args.server);
  OpenAiOptions o;
  o.base_url = server.url;
  o.scrape_interval = Duration::zero();  // measure requests, not scrapes
  o.max_connections = 128;
  OpenAiEngine adapter(o);
  std::printf("## adapter: openai on loopback against dynrt-sim-engine, time scale 0\n\n");
  std::printf(
      "| run | concurrent | requests | p50 µs | p99 µs | requests/s | client CPU µs/request | "
      "failed |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  run_adapter(adapter, "warm-up, discard", 200, 8, true, 16);
  run_adapter(adapter, "non-streamed, 16 tokens", n, 1, false, 16);
  run_adapter(adapter, "streamed, 16 tokens", n, 1, true, 16);
  run_adapter(adapter, "streamed, 16 tokens", n * 4, 64, true, 16);
  run_adapter(adapter, "streamed, 128 tokens", n * 4, 64, true, 128);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "engine_benchmark: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "sim" || a == "adapter" || a == "all") {
      args.what = a;
    } else if (a == "--requests") {
      args.requests = std::stoi(value());
    } else if (a == "--seed") {
      args.seed = std::stoull(value());
    } else if (a == "--server") {
      args.server = value();
    } else {
      std::fprintf(stderr,
                   "usage: engine_benchmark [sim|adapter|all] [--requests N] [--seed S] "
                   "[--server PATH]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  try {
    if (args.what != "adapter") bench_sim(args);
    if (args.what != "sim") bench_adapter(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_benchmark: %s\n", e.what());
    return 1;
  }
  return 0;
}
