// What the actor graph costs and buys, on the embedded simulated engine:
//   passthrough  latency added by dynrt::Runtime to an untagged call (time scale 0: the engine
//                answers at once), against the same engine called directly
//   hits         latency and throughput of demands served from the library (C1 hits), each a
//                new workflow run, with run journals (`dynrt explain`) and without
//   routing      wall time of Routing runs at time scale 10, floor against full dynrt
//   shared       two runtimes sharing one library through Redis (REDIS: redis://HOST:PORT):
//                the latency of a hit on a result the other replica computed (from Redis)
//                against a local hit, by whether the result read records (one round trip
//                each) or not; shared-tier hits per second with 4 callers; and the engine time
//                Sub-Agent runs cost on two replicas sharing one library against two that do
//                not (reuse only: fills off, so that the comparison is exact per seed)
// Usage: runtime_benchmark [passthrough|hits|routing|all] [N]
//        runtime_benchmark shared N REDIS. Figures: docs/benchmarks.md.
#include "actors/runtime.hpp"
#include "bench/cell.hpp"
#include "bench/driver.hpp"
#include "bench/workloads.hpp"
#include "dsl/lint.hpp"
#include "engines/sim/engine.hpp"
#include "engines/tools/corpus.hpp"
#include "store/shared_tier.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace dynrt;
using nlohmann::json;
using Wall = std::chrono::steady_clock;

namespace {

double us(Wall::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void print_figures(const char* what, std::vector<double> v, double seconds) {
  std::sort(v.begin(), v.end());
  const auto pct = [&](double p) { return v[static_cast<std::size_t>(p * (v.size() - 1))]; };
  std::printf("%-34s n=%zu p50 %.1f us  p99 %.1f us  %.0f calls/s\n", what, v.size(), pct(0.5),
              pct(0.99), static_cast<double>(v.size()) / seconds);
}

json body(int i) {
  return {{"model", "m"},
          {"max_tokens", 8},
          {"messages", json::array({{{"role", "user"}, {"content", "hi " + std::to_string(i)}}})}};
}

struct DirectSink : engines::ResponseSink {
  std::promise<void> done;
  void on_chunk(std::string_view) override {}
  void on_complete(engines::EngineResult) override { done.set_value(); }
  void on_error(engines::EngineError) override { done.set_value(); }
};

void passthrough(int n) {
  engines::sim::SimEngineOptions eo;
  eo.time_scale = 0;
  auto engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{},
                                                          engines::sim::Script{}, eo);
  std::vector<double> direct, through;
  auto t0 = Wall::now();
  for (int i = 0; i < n; ++i) {
    auto sink = std::make_shared<DirectSink>();
    auto f = sink->done.get_future();
    engines::EngineRequest r;
    r.body = body(i);
    const auto s = Wall::now();
    engine->submit(std::move(r), sink);
    f.get();
    direct.push_back(us(Wall::now() - s));
  }
  print_figures("engine called directly", direct,
                std::chrono::duration<double>(Wall::now() - t0).count());
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", engine, {}});
  auto created = Runtime::create(cfg);
  auto rt = std::move(created.value());
  t0 = Wall::now();
  for (int i = 0; i < n; ++i) {
    const auto s = Wall::now();
    rt->complete({"/v1/chat/completions", body(i), {}}).get();
    through.push_back(us(Wall::now() - s));
  }
  print_figures("through dynrt::Runtime (untagged)", through,
                std::chrono::duration<double>(Wall::now() - t0).count());
}

struct Rig {
  std::shared_ptr<engines::sim::SimEngine> engine;
  std::unique_ptr<Runtime> rt;
  bench::Workload w;
  Rig(const dsl::TemplateGraph& g, std::size_t runs, double time_scale, bool on,
      bool journals = true) {
    w = bench::make_workload(g, {1, runs, 1.0});
    engines::sim::SimEngineOptions eo;
    eo.time_scale = time_scale;
    engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, w.script, eo);
    auto corpus = *engines::Corpus::from_json(w.corpus);
    for (const auto& [name, key] : w.tools)
      corpus->add_tool(name, {engines::Corpus::Kind::lookup, key});
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", engine, {}});
    cfg.tools = corpus;
    cfg.template_paths = {"templates"};
    cfg.reuse = cfg.fills = on;
    if (!journals) cfg.explain_runs = 0;
    auto created = Runtime::create(cfg);
    rt = std::move(created.value());
  }
};

const dsl::TemplateGraph& graph(const dsl::LintReport& report, const std::string& name) {
  for (const auto* g : report.graphs())
    if (g->workflow == name) return *g;
  std::fprintf(stderr, "no template %s (run from the repository root)\n", name.c_str());
  std::exit(2);
}

void hits(const dsl::LintReport& report, int n, bool journals) {
  const auto& g = graph(report, "subagent");
  Rig rig(g, 1, 0, true, journals);
  const auto& run = rig.w.runs[0];
  if (!bench::drive(*rig.rt, g, run).ok()) std::exit(1);  // fills the library
  // The research tool call of that run, demanded again and again by new runs.
  const json args = {{"collection", run.picks[0]}, {"entity", run.entity}};
  for (int threads : {1, 4}) {
    std::vector<std::vector<double>> lat(static_cast<std::size_t>(threads));
    const auto t0 = Wall::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int i = 0; i < n / threads; ++i) {
          const auto s = Wall::now();
          auto r = rig.rt
                       ->tool("kb_search", args,
                              {"subagent", "hit-" + std::to_string(t) + "-" + std::to_string(i),
                               "research"})
                       .get();
          if (r.served != Served::cache) std::exit(3);
          lat[static_cast<std::size_t>(t)].push_back(us(Wall::now() - s));
        }
      });
    for (auto& t : pool)
      t.join();
    std::vector<double> all;
    for (auto& v : lat)
      all.insert(all.end(), v.begin(), v.end());
    const std::string what = "library hits, " + std::to_string(threads) + " caller(s)" +
                             (journals ? "" : ", no journals");
    print_figures(what.c_str(), all, std::chrono::duration<double>(Wall::now() - t0).count());
  }
}

void routing(const dsl::LintReport& report, int n) {
  const auto& g = graph(report, "routing");
  for (bool on : {false, true}) {
    Rig rig(g, static_cast<std::size_t>(n), 10, on);
    std::vector<double> ms;
    for (const auto& run : rig.w.runs) {
      const auto s = Wall::now();
      if (!bench::drive(*rig.rt, g, run).ok()) std::exit(1);
      ms.push_back(std::chrono::duration<double, std::milli>(Wall::now() - s).count());
    }
    double mean = 0;
    for (double m : ms)
      mean += m;
    mean /= static_cast<double>(ms.size());
    const auto st = rig.rt->stats();
    std::printf("routing, %-5s n=%d  mean run %.1f ms (%.2f simulated s)  served by fill %llu\n",
                on ? "full" : "floor", n, mean, mean / 10,
                static_cast<unsigned long long>(st.served_fill));
  }
}

// -- shared -----------------------------------------------------------------------------------

struct Replica {
  std::shared_ptr<engines::sim::SimEngine> engine;
  std::shared_ptr<store::SharedTier> tier;
  std::unique_ptr<Runtime> rt;
};

// A runtime on its own engine (time scale 0), reuse on and fills off, with the shared tier at
// `library` under `prefix` (none when empty).
Replica replica(const bench::Workload& w, const std::string& library, const std::string& prefix) {
  Replica r;
  engines::sim::SimEngineOptions eo;
  eo.time_scale = 0;
  r.engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, w.script, eo);
  auto corpus = *engines::Corpus::from_json(w.corpus);
  for (const auto& [name, key] : w.tools)
    corpus->add_tool(name, {engines::Corpus::Kind::lookup, key});
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", r.engine, {}});
  cfg.tools = corpus;
  cfg.template_paths = {"templates"};
  cfg.reuse = true;
  cfg.fills = false;
  if (!library.empty()) {
    store::TierConfig tc;
    tc.address = *store::RedisAddress::parse(library, nullptr);
    tc.prefix = prefix;
    r.tier = std::make_shared<store::SharedTier>(std::move(tc));
    cfg.shared_library = r.tier;
    for (int i = 0; i < 500 && !r.tier->stats().connected; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!r.tier->stats().connected) {
      std::fprintf(stderr, "cannot reach %s\n", library.c_str());
      std::exit(2);
    }
  }
  r.rt = std::move(Runtime::create(cfg).value());
  return r;
}

// Results are written through in the background once answered: waits until the tier is quiet.
void settle(const store::SharedTier& tier) {
  auto last = tier.stats().puts + tier.stats().puts_refused;
  for (int quiet = 0; quiet < 5;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto now = tier.stats().puts + tier.stats().puts_refused;
    quiet = now == last ? quiet + 1 : 0;
    last = now;
  }
}

// The run under another workflow id: a new run on any replica, with the same calls.
bench::Run renamed(bench::Run run, const std::string& tag) {
  run.workflow_id += "-" + tag;
  return run;
}

void shared(const dsl::LintReport& report, int n, const std::string& library) {
  const auto& g = graph(report, "subagent");
  const std::string prefix = "dynrt-bench:" + std::to_string(::getpid()) + ":";
  // Every run its own entity: each result is computed once, on A.
  const auto distinct = [&](std::uint64_t seed) {
    bench::WorkloadOptions wo;
    wo.seed = seed;
    wo.runs = static_cast<std::size_t>(n);
    wo.subagent_entities = 50 * wo.runs;  // few runs share an entity
    return bench::make_workload(g, wo);
  };
  // Latency: results computed on A, then asked for on B twice (from Redis, then local).
  {
    const auto w = distinct(1);
    auto a = replica(w, library, prefix + "lat:");
    auto b = replica(w, library, prefix + "lat:");
    for (const auto& run : w.runs)
      if (!bench::drive(*a.rt, g, run).ok()) std::exit(1);
    settle(*a.tier);
    // plan reads no record; research reads one, and summarize and synthesize are built on it.
    const auto reads = [](const std::string& stage) { return stage != "plan"; };
    for (const char* pass : {"from Redis", "local"}) {
      std::vector<double> plain, reading;
      std::size_t not_cache = 0;
      const auto t0 = Wall::now();
      for (const auto& run : w.runs) {
        const auto r = bench::drive(*b.rt, g, renamed(run, pass));
        if (!r.ok()) std::exit(1);
        for (const auto& step : r.steps) {
          if (step.reply.served != Served::cache)
            ++not_cache;  // synthesize: not reusable
          else
            (reads(step.stage) ? reading : plain).push_back(us(step.latency));
        }
      }
      const double secs = std::chrono::duration<double>(Wall::now() - t0).count();
      std::printf("hit %-10s  (%zu calls of a stage never reused, not counted)\n", pass, not_cache);
      print_figures("  result that read no record", plain, secs);
      print_figures("  result that read records", reading, secs);
    }
    const auto st = b.rt->stats();
    std::printf("replica B: shared hits %llu, checks failed %llu\n",
                static_cast<unsigned long long>(st.shared.imported),
                static_cast<unsigned long long>(st.shared.checks_failed));
  }
  // Throughput: 4 callers on a third replica, each call a research result A computed (it read
  // a record: every hit is one round trip that fetches and checks it).
  {
    const auto w = distinct(2);
    auto a = replica(w, library, prefix + "tput:");
    for (const auto& run : w.runs)
      if (!bench::drive(*a.rt, g, run).ok()) std::exit(1);
    settle(*a.tier);
    auto c = replica(w, library, prefix + "tput:");
    std::vector<std::vector<double>> lat(4);
    std::atomic<int> misses{0};
    const auto t0 = Wall::now();
    std::vector<std::thread> callers;
    for (std::size_t t = 0; t < 4; ++t)
      callers.emplace_back([&, t] {
        for (std::size_t i = t; i < w.runs.size(); i += 4) {
          const auto& run = w.runs[i];
          const json args = {{"collection", run.picks[0]}, {"entity", run.entity}};
          const auto s = Wall::now();
          const auto r =
              c.rt->tool("kb_search", args, {"subagent", run.workflow_id + "-c", "research"}).get();
          lat[t].push_back(us(Wall::now() - s));
          if (r.served != Served::cache) ++misses;
        }
      });
    for (auto& t : callers)
      t.join();
    std::vector<double> all;
    for (auto& v : lat)
      all.insert(all.end(), v.begin(), v.end());
    print_figures("shared-tier hits, 4 callers", all,
                  std::chrono::duration<double>(Wall::now() - t0).count());
    std::printf("  of %zu calls: %llu shared hits, %d not from the library\n", all.size(),
                static_cast<unsigned long long>(c.rt->stats().shared.imported), misses.load());
  }
  // Engine work: Sub-Agent runs alternating between two replicas (each run on one), with and
  // without the shared library; one replica for reference.
  std::printf(
      "Sub-Agent, %d runs (the bench's workload: half repeat a popular request), "
      "engine busy s, mean of 3 seeds:\n",
      n);
  for (const char* arm : {"two independent", "two sharing", "one replica"}) {
    const std::string name = arm;
    double busy = 0, served_cache = 0, calls = 0, shared_hits = 0;
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      const auto w =
          bench::detail::bench_workload(g, seed, static_cast<std::size_t>(n), 1.0, 0.5, false);
      const bool sharing = name == "two sharing";
      const std::string pre = prefix + "work:" + std::to_string(seed) + ":";
      std::vector<Replica> rs;
      rs.push_back(replica(w, sharing ? library : "", pre));
      if (name != "one replica") rs.push_back(replica(w, sharing ? library : "", pre));
      for (std::size_t i = 0; i < w.runs.size(); ++i) {
        auto& r = rs[i % rs.size()];
        if (!bench::drive(*r.rt, g, w.runs[i]).ok()) std::exit(1);
        if (sharing) settle(*r.tier);  // as a run's results reach Redis before the next one
      }
      for (auto& r : rs) {
        r.engine->drain();
        busy += std::chrono::duration<double>(r.engine->counters().busy).count();
        const auto st = r.rt->stats();
        served_cache += static_cast<double>(st.served_cache);
        calls += static_cast<double>(st.served_cache + st.served_engine + st.served_fill);
        shared_hits += static_cast<double>(st.shared.imported);
      }
    }
    std::printf("  %-16s engine %.1f s  served from the library %.1f%%  shared hits %.0f\n", arm,
                busy / 3, 100 * served_cache / calls, shared_hits / 3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  const int n = argc > 2 ? std::max(10, std::atoi(argv[2])) : 0;
  const auto report = dsl::lint_paths({"templates"});
  if (what == "shared") {
    if (argc < 4) {
      std::fprintf(stderr, "usage: runtime_benchmark shared N redis://HOST:PORT\n");
      return 2;
    }
    shared(report, n, argv[3]);
    return 0;
  }
  if (what == "passthrough" || what == "all") passthrough(n ? n : 5000);
  if (what == "hits" || what == "all") {
    hits(report, n ? n : 20000, true);
    hits(report, n ? n : 20000, false);  // what a run's journal costs (RuntimeConfig::explain_runs)
  }
  if (what == "routing" || what == "all") routing(report, n ? n : 20);
  return 0;
}
